//! vpcnet-bootstrap: start-up of an EKS worker node at boot.
//!
//! A drop-in for the EKS AMI's `bootstrap.sh` (same flags) that also reads a nodeadm-shaped
//! NodeConfig (a file, or the EC2 user data with `--config imds`). It writes, under a root
//! directory:
//! - `/etc/kubernetes/kubelet/kubelet-config.json`: cluster DNS, max pods, kube-reserved,
//!   evictionHard, providerID, logging verbosity, TLS cipher suites, feature gates;
//! - `/etc/kubernetes/pki/ca.crt` and `/var/lib/kubelet/kubeconfig` (on a local cluster on
//!   Outposts `/var/lib/kubelet/bootstrap-kubeconfig` with the cluster ID instead);
//! - the kubelet unit ([`kubelet_unit`]): the EKS AMI's where the node has one (AL2: its
//!   `/etc/eks/containerd/kubelet-containerd.service` and `sandbox-image.service` copied to
//!   `/etc/systemd/system/` as bootstrap.sh does; AL2023: kept as installed), else vpcnet's own
//!   ([`kubelet_unit::vpcnet_unit`]); the report and `--dry-run` say which and why;
//! - vpcnet's settings where that unit reads them: drop-ins in `kubelet.service.d/`
//!   (`10-kubelet-args.conf`: `KUBELET_ARGS` with node IP, pause image, node name, cloud
//!   provider; `20-kubelet-cloud-provider.conf`: `KUBELET_CLOUD_PROVIDER`, for units that read
//!   it; `30-kubelet-extra-args.conf`: `KUBELET_EXTRA_ARGS`), or on AL2023 nodeadm's
//!   `/etc/eks/kubelet/environment` (`NODEADM_KUBELET_ARGS`);
//! - `/etc/eks/image-credential-provider/config.json` when `ecr-credential-provider` is on the
//!   node and no config is ([`credential_provider`]);
//! - `/etc/containerd/config.toml` (vpcnet's, or `--containerd-config-file`);
//! - `/etc/systemd/system/sys-fs-bpf.mount` when bpffs is not mounted;
//! - on Outposts, `/etc/hosts` entries for the API server;
//!
//! then starts the node as bootstrap.sh does ([`startup`]: daemon-reload, bpffs, containerd,
//! enable and start kubelet), unless `--dry-run` (print everything) or `--files-only`.
//!
//! Shape: [`Settings::new`] validates input (pure); [`cluster`] completes the cluster with EKS
//! DescribeCluster if needed; [`facts::gather`] reads IMDS, EC2 and the host; [`render::render`]
//! turns all of it into files (pure); [`output`] writes or prints them; [`startup`] runs the
//! start-up steps through a [`startup::System`].
//!
//! # For the lab: kubelet's command line
//!
//! [`systemd::kubelet_command_line`]`(root, `[`systemd::Unit::Installed`]`)` expands the kubelet
//! unit and the drop-ins written under `root` exactly as systemd would (`Environment=`,
//! `EnvironmentFile=`, `$VAR` split into words vs `${VAR}` kept as one), giving kubelet's argv
//! (node paths, `argv[0]` = `/usr/bin/kubelet`). A host without systemd runs bootstrap with
//! `--files-only` (or calls [`run`] with a [`startup::RecordingSystem`]) and then starts kubelet
//! with that argv.

pub mod args;
pub mod cloud;
pub mod cluster;
pub mod cluster_dns;
pub mod containerd;
pub mod credential_provider;
pub mod error;
pub mod facts;
pub mod hosts;
pub mod instance_facts;
pub mod kubelet_config;
pub mod kubelet_unit;
pub mod max_pods;
pub mod max_pods_expr;
pub mod node_config;
pub mod node_files;
pub mod output;
pub mod render;
pub mod reserved;
pub mod retry;
pub mod settings;
pub mod startup;
pub mod systemd;
pub mod user_data;
pub mod version;

use std::io::Write;
use std::time::Duration;

pub use args::BootstrapArgs;
pub use error::BootstrapError;
pub use node_files::NodeFile;
pub use render::Plan;
pub use settings::Settings;

use cloud::{Ec2, Eks, Imds};
use cluster::ClusterInfo;
use facts::Host;
use node_config::NodeConfig;
use retry::{retry, Attempt, Budget};
use settings::ContainerdFile;
use startup::System;

/// The adapters a run talks to: IMDS, EC2, EKS, the host (files, CPUs, kubelet binary, DNS)
/// and the system (systemctl).
pub struct Adapters<'a, I, E, K, H, S> {
    pub imds: &'a I,
    pub ec2: &'a E,
    pub eks: &'a K,
    pub host: &'a H,
    pub system: &'a S,
}

/// Where `--config` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A NodeConfig file (`PATH` or `file://PATH`).
    File(String),
    /// The EC2 user data (`imds` or nodeadm's `imds://user-data`).
    UserData,
}

impl ConfigSource {
    /// The source `--config` names, if given.
    pub fn of(args: &BootstrapArgs) -> Option<ConfigSource> {
        let c = args.config.as_deref()?;
        Some(match c {
            "imds" | "imds://user-data" => ConfigSource::UserData,
            other => ConfigSource::File(other.strip_prefix("file://").unwrap_or(other).into()),
        })
    }
}

/// Reads the NodeConfig named by `--config`; `imds` is the EC2 user data.
///
/// Errors: [`BootstrapError::NodeConfig`] when unreadable or invalid.
pub async fn load_node_config(
    args: &BootstrapArgs,
    imds: &impl Imds,
) -> Result<Option<NodeConfig>, BootstrapError> {
    match ConfigSource::of(args) {
        None => Ok(None),
        Some(ConfigSource::File(path)) => load_node_config_file(&path).map(Some),
        Some(ConfigSource::UserData) => {
            let text = imds
                .user_data()
                .await
                .map_err(|e| BootstrapError::NodeConfig {
                    path: "EC2 user data".into(),
                    problem: if e.message.contains("utf-8") || e.message.contains("UTF-8") {
                        user_data::not_text().to_string()
                    } else {
                        e.to_string()
                    },
                })?
                .ok_or_else(|| BootstrapError::NodeConfig {
                    path: "EC2 user data".into(),
                    problem: "the instance has no user data (IMDS answered 404). Fix: launch it with the NodeConfig as user data, or pass --config FILE".into(),
                })?;
            user_data::node_config(&text).map(Some)
        }
    }
}

fn load_node_config_file(path: &str) -> Result<NodeConfig, BootstrapError> {
    let text = std::fs::read_to_string(path).map_err(|e| BootstrapError::NodeConfig {
        path: path.into(),
        problem: format!(
            "cannot read: {e}. Fix: pass --config with a readable NodeConfig YAML file (or imds for the user data)"
        ),
    })?;
    user_data::node_config_from(path, &text)
}

/// Reads `--containerd-config-file`, if given (checked by [`Settings::new`]).
pub fn load_containerd_file(
    args: &BootstrapArgs,
) -> Result<Option<ContainerdFile>, BootstrapError> {
    let Some(path) = &args.containerd_config_file else {
        return Ok(None);
    };
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        BootstrapError::invalid(
            "--containerd-config-file",
            &label,
            format!("cannot read: {e}"),
            "pass a readable containerd config.toml, or leave the flag out to use vpcnet's",
        )
    })?;
    Ok(Some(ContainerdFile { path: label, text }))
}

/// Checks the input that needs no cloud (flags, a NodeConfig file, the containerd file), so
/// bad input fails before IMDS is contacted. With `--config imds` the NodeConfig is checked
/// once read.
pub fn check_input(args: &BootstrapArgs) -> Result<(), BootstrapError> {
    let nc = match ConfigSource::of(args) {
        Some(ConfigSource::UserData) => return Ok(()),
        Some(ConfigSource::File(p)) => Some(load_node_config_file(&p)?),
        None => None,
    };
    Settings::new(args, nc.as_ref(), load_containerd_file(args)?).map(|_| ())
}

/// Budget of one wait from the flags: `seconds` in total, the shared first delay.
fn budget(args: &BootstrapArgs, seconds: f64, max_attempts: Option<u32>) -> Budget {
    Budget {
        total: Duration::from_secs_f64(seconds),
        max_attempts,
        first_delay: Duration::from_millis(args.retry_delay_ms),
    }
}

/// Budget for waiting for IMDS at boot (`--imds-timeout`).
pub fn imds_budget(args: &BootstrapArgs) -> Budget {
    budget(args, args.imds_timeout, None)
}

/// EKS DescribeCluster for `name`, retried (`--aws-api-retry-attempts`) while EKS is
/// unreachable, throttling, failing, or the cluster has no endpoint or CA yet.
///
/// Errors ([`BootstrapError::Eks`]): an unknown cluster or a denial at once; a FAILED or
/// DELETING cluster; after the attempts, the last cause.
pub async fn describe_cluster(
    eks: &impl Eks,
    name: &str,
    budget: Budget,
) -> Result<ClusterInfo, BootstrapError> {
    /// Why an attempt did not give a usable cluster: EKS's error code, if any, and the text.
    struct Cause(Option<String>, String);
    impl std::fmt::Display for Cause {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.1)
        }
    }
    let r = retry(
        budget,
        &format!("waiting for EKS DescribeCluster {name}"),
        |d| Cause(None, format!("no answer within {:.1} s", d.as_secs_f64())),
        move || async move {
            match eks.describe_cluster(name).await {
                Ok(c) if matches!(c.status.as_str(), "FAILED" | "DELETING") => {
                    Attempt::Stop(Cause(None, format!("the cluster is {}", c.status)))
                }
                Ok(c) if c.endpoint.is_none() || c.certificate_authority.is_none() => {
                    Attempt::Retry(Cause(
                        None,
                        format!("the cluster is {} and has no endpoint or CA yet", c.status),
                    ))
                }
                Ok(c) => Attempt::Done(c),
                Err(e) if e.is_transient() => Attempt::Retry(Cause(e.code.clone(), e.to_string())),
                Err(e) => Attempt::Stop(Cause(e.code.clone(), e.to_string())),
            }
        },
    )
    .await;
    r.map_err(|g| {
        let Cause(code, cause) = g.last;
        let fix = match code.as_deref() {
            Some("ResourceNotFoundException") => format!("check the cluster name {name:?} and that the node runs in the cluster's region"),
            Some("AccessDeniedException" | "UnauthorizedOperation" | "AccessDenied") => "grant the node's IAM role eks:DescribeCluster, or pass --apiserver-endpoint and --b64-cluster-ca".into(),
            _ => "check AWS_ENDPOINT_URL_EKS / AWS_ENDPOINT_URL, the region and connectivity to EKS, or pass --apiserver-endpoint and --b64-cluster-ca".into(),
        };
        BootstrapError::Eks {
            action: format!("DescribeCluster {name}"),
            problem: format!("{cause} ({} attempts in {:.1} s)", g.attempts, g.seconds),
            fix,
        }
    })
}

/// Validates the input, completes the cluster (DescribeCluster) and gathers facts, without
/// writing: the plan a run would apply.
pub async fn plan<I: Imds, E: Ec2, K: Eks, H: Host, S: System>(
    args: &BootstrapArgs,
    a: &Adapters<'_, I, E, K, H, S>,
) -> Result<Plan, BootstrapError> {
    let nc = load_node_config(args, a.imds).await?;
    let settings = Settings::new(args, nc.as_ref(), load_containerd_file(args)?)?;
    let described = if settings.cluster.needs_lookup() {
        let attempts = budget(args, 600.0, Some(args.aws_api_retry_attempts + 1));
        Some(describe_cluster(a.eks, &settings.cluster_name, attempts).await?)
    } else {
        None
    };
    let (cluster, warnings) = settings.cluster.resolve(described.as_ref())?;
    let private_dns = budget(args, args.private_dns_timeout, args.private_dns_attempts);
    let facts = facts::gather(
        &settings,
        &cluster,
        a.imds,
        a.ec2,
        a.host,
        args.vcpus,
        private_dns,
    )
    .await?;
    Ok(render::render(&settings, &cluster, &facts, warnings))
}

/// A whole run: plan, write under `args.root` (or print with `--dry-run`) to `out`, then the
/// start-up steps (not with `--dry-run` or `--files-only`). Warnings go to `warn`. Nothing is
/// written unless every check and read succeeded.
pub async fn run<I: Imds, E: Ec2, K: Eks, H: Host, S: System>(
    args: &BootstrapArgs,
    a: &Adapters<'_, I, E, K, H, S>,
    out: &mut impl Write,
    warn: &mut impl Write,
) -> anyhow::Result<Plan> {
    let plan = plan(args, a).await?;
    for w in &plan.warnings {
        writeln!(warn, "warning: {w}")?;
    }
    let opts = startup::StartupOptions {
        mount_bpffs: plan.mount_bpffs,
        sandbox_image: plan.sandbox_image_service,
    };
    if args.dry_run {
        writeln!(out, "### kubelet unit: {}", plan.kubelet_unit)?;
        output::print_dry_run(&plan.files, out)?;
        if !args.files_only {
            let changes = output::preview(&args.root, &plan.files)?;
            for step in startup::steps(&changes, opts) {
                writeln!(out, "### would run: {step}")?;
            }
        }
    } else {
        let changes = output::apply(&args.root, &plan.files)?;
        for (path, change) in &changes {
            writeln!(
                out,
                "{:<9} {}",
                change.as_str(),
                node_files::under_root(&args.root, path).display()
            )?;
        }
        if !args.files_only {
            for step in startup::steps(&changes, opts) {
                a.system.run(&step)?;
                writeln!(out, "{:<9} {step}", "ran")?;
            }
        }
    }
    writeln!(
        warn,
        "vpcnet-bootstrap: max pods {} ({}), cloud provider {}\nvpcnet-bootstrap: kubelet unit: {}",
        plan.max_pods, plan.max_pods_origin, plan.cloud_provider, plan.kubelet_unit
    )?;
    Ok(plan)
}
