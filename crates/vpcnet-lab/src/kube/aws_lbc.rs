//! aws-load-balancer-controller, unmodified (built from its Go module by
//! `scripts/build-aws-lbc.sh`), as the lab's peer of `vpcnet-targets`: run like
//! [`super::targets`] runs ours, as a recorded lab process in the VPC namespace with the admin
//! kubeconfig, pointed at the lab cloud (`--aws-api-endpoints` for EC2 and ELBv2,
//! `--aws-region`, `--aws-vpc-id`, static credentials), so it serves the same
//! `TargetGroupBinding`s (`elbv2.k8s.aws/v1beta1`) through the same emulated ELBv2.
//!
//! What it needs besides: its own CRDs that its Ingress controller watches (IngressClassParams,
//! ALBTargetControlConfig; installed from the build's `crds/` directory next to `bin/`), and a
//! serving certificate in `--webhook-cert-dir` (its webhook server starts even when no webhook
//! configuration points at it; the pods of [`super::targets::gated_httpd_manifest`] list the
//! readiness gate themselves, so its pod-mutating webhook is not needed).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use vpcnet_cni_harness::build_cache;

use crate::cloud::aws_env;
use crate::lab::Lab;
use crate::procs::ProcRecord;
use crate::spawn::Place;

use super::control_plane::CLUSTER_NAME;
use super::pki;

/// The controller's binary name in the build's `bin/` directory.
pub const BINARY: &str = "aws-load-balancer-controller";

/// Environment variable naming the directory of [`BINARY`] (what `scripts/build-aws-lbc.sh`
/// prints last).
pub const BIN_DIR_ENV: &str = "VPCNET_AWS_LBC_BIN_DIR";

/// Root of `scripts/build-aws-lbc.sh`'s cache (`$VPCNET_CACHE/aws-lbc/<key>/bin`).
pub fn cache_root() -> PathBuf {
    build_cache::root("aws-lbc")
}

/// The directory holding [`BINARY`]: `explicit`, else `$VPCNET_AWS_LBC_BIN_DIR`, else the
/// newest complete build under [`cache_root`] (a `<key>/complete` marker next to `<key>/bin`).
/// Errors: nothing built, or the directory lacks the binary; both say to run
/// `scripts/build-aws-lbc.sh`.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf> {
    let dir = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(BIN_DIR_ENV).map(PathBuf::from))
        .or_else(|| build_cache::newest_complete(&cache_root()));
    let Some(dir) = dir else {
        bail!(
            "aws-load-balancer-controller is not built: run scripts/build-aws-lbc.sh (builds it \
             from lab/aws-load-balancer-controller/go.mod, once per machine) or set {BIN_DIR_ENV}"
        );
    };
    if !dir.join(BINARY).is_file() {
        bail!(
            "{} lacks {BINARY}: run scripts/build-aws-lbc.sh and use the directory it prints",
            dir.display()
        );
    }
    Ok(dir)
}

/// The controller's CRD manifests that the build copied from its module (`<bin>/../crds`).
pub fn crd_files(bin_dir: &Path) -> Result<Vec<PathBuf>> {
    let dir = bin_dir
        .parent()
        .context("the aws-load-balancer-controller bin directory has no parent")?
        .join("crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| {
            format!(
                "{} missing: rebuild with scripts/build-aws-lbc.sh",
                dir.display()
            )
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    Ok(files)
}

/// How to run aws-load-balancer-controller in the lab.
#[derive(Debug, Clone)]
pub struct AwsLbcOptions {
    /// Role name in the lab state (its log is `logs/<role>.log`).
    pub role: String,
    /// Directory of [`BINARY`] ([`locate`]).
    pub bin_dir: PathBuf,
    /// `--health-probe-bind-addr` port on 127.0.0.1 (its default, 61779, is also
    /// vpcnet-targets' port).
    pub health_port: u16,
    /// `--metrics-bind-addr` port on 127.0.0.1.
    pub metrics_port: u16,
    /// `--webhook-bind-port`.
    pub webhook_port: u16,
    /// Access key ID it signs with (the request log records it, so its calls can be told from
    /// the lab's own); the lab's key when `None`.
    pub access_key: Option<String>,
    /// More arguments.
    pub extra_args: Vec<String>,
}

impl AwsLbcOptions {
    /// Defaults for the binary in `bin_dir`: role `aws-load-balancer-controller`, ports 61789
    /// (health), 61790 (metrics), 61791 (webhook), the lab's access key.
    pub fn new(bin_dir: PathBuf) -> Self {
        AwsLbcOptions {
            role: "aws-load-balancer-controller".into(),
            bin_dir,
            health_port: 61789,
            metrics_port: 61790,
            webhook_port: 61791,
            access_key: None,
            extra_args: vec![],
        }
    }
}

/// aws-load-balancer-controller in the lab ([`Lab::aws_lbc`]).
#[derive(Debug, Clone, Copy)]
pub struct AwsLbc<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// The aws-load-balancer-controller of the lab.
    pub fn aws_lbc(&self) -> AwsLbc<'_> {
        AwsLbc { lab: self }
    }
}

impl AwsLbc<'_> {
    /// Installs the controller's own CRDs ([`crd_files`]) and waits until they are
    /// established. The TargetGroupBinding CRD is the lab's
    /// ([`crate::kube::targets::TargetsController::install_crd`]).
    pub fn install_crds(&self, bin_dir: &Path) -> Result<()> {
        let k = self.lab.kube().kubectl()?;
        for f in crd_files(bin_dir)? {
            let text =
                std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
            k.apply(&text)
                .with_context(|| format!("applying {}", f.display()))?;
        }
        k.run(&[
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/ingressclassparams.elbv2.k8s.aws",
        ])?;
        Ok(())
    }

    /// Starts aws-load-balancer-controller as a recorded lab process in the VPC namespace:
    /// admin kubeconfig, cluster name [`CLUSTER_NAME`], the lab's region and VPC, EC2 and
    /// ELBv2 endpoints of the lab cloud, leader election on (Lease in `kube-system`), a
    /// self-signed webhook certificate written to `<lab>/aws-lbc/<role>/`.
    pub fn start(&self, o: &AwsLbcOptions) -> Result<ProcRecord> {
        let s = self.lab.state()?;
        let vpc = s
            .namespaces
            .first()
            .cloned()
            .context("the lab has no VPC namespace")?;
        let cp = self.lab.kube().control_plane()?;
        let ep = self.lab.cloud().endpoint()?;
        let vpc_id = self.lab.lbs().ready()?.vpc_id;
        let cert_dir = self.lab.dir.join("aws-lbc").join(o.role.replace(' ', "-"));
        let ca = pki::Ca::new()?;
        let serving = ca.server(
            "aws-load-balancer-webhook-service.kube-system.svc",
            &[
                "aws-load-balancer-webhook-service.kube-system.svc",
                "localhost",
            ],
            &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        )?;
        pki::write_file(&cert_dir.join("tls.crt"), &serving.cert_pem, 0o644)?;
        pki::write_file(&cert_dir.join("tls.key"), &serving.key_pem, 0o600)?;
        let mut c = Command::new(o.bin_dir.join(BINARY));
        c.args([
            format!("--kubeconfig={}", cp.admin_kubeconfig.display()),
            format!("--cluster-name={CLUSTER_NAME}"),
            format!("--aws-region={}", crate::daemon::REGION),
            format!("--aws-vpc-id={vpc_id}"),
            format!("--aws-api-endpoints=ec2={ep},elasticloadbalancing={ep}"),
            format!("--webhook-cert-dir={}", cert_dir.display()),
            format!("--webhook-bind-port={}", o.webhook_port),
            format!("--health-probe-bind-addr=127.0.0.1:{}", o.health_port),
            format!("--metrics-bind-addr=127.0.0.1:{}", o.metrics_port),
            "--enable-leader-election=true".into(),
            "--leader-election-namespace=kube-system".into(),
        ]);
        c.args(&o.extra_args);
        c.envs(aws_env(&ep));
        if let Some(key) = &o.access_key {
            c.env("AWS_ACCESS_KEY_ID", key);
        }
        self.lab.processes().start(&o.role, c, &Place::netns(&vpc))
    }

    /// Waits (`timeout`) until the controller leads and its TargetGroupBinding controller
    /// started its workers (its log, `logs/<role>.log`).
    pub fn wait_started(&self, role: &str, timeout: Duration) -> Result<()> {
        let log = self.lab.processes().log(role);
        crate::wait::wait_for(
            &format!("{role} to start its TargetGroupBinding workers"),
            timeout,
            || {
                Ok(std::fs::read_to_string(&log)
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.contains("Starting workers") && l.contains("targetGroupBinding"))
                    .then_some(()))
            },
        )
        .with_context(|| format!("{}:\n{}", log.display(), crate::wait::log_tail(&log)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_wants_the_binary_and_names_the_build_script() {
        let d = tempfile::tempdir().unwrap();
        let e = locate(Some(d.path())).unwrap_err().to_string();
        assert!(e.contains("scripts/build-aws-lbc.sh"), "{e}");
        std::fs::write(d.path().join(BINARY), b"").unwrap();
        assert_eq!(locate(Some(d.path())).unwrap(), d.path());
    }

    #[test]
    fn the_newest_complete_build_wins() {
        let root = tempfile::tempdir().unwrap();
        for key in ["a", "b", "c"] {
            std::fs::create_dir_all(root.path().join(key).join("bin")).unwrap();
        }
        assert_eq!(
            build_cache::newest_complete(root.path()),
            None,
            "no build is complete"
        );
        std::fs::write(root.path().join("b").join("complete"), b"").unwrap();
        assert_eq!(
            build_cache::newest_complete(root.path()),
            Some(root.path().join("b").join("bin"))
        );
    }
}
