//! Instance facts: what bootstrap learns from IMDS, EC2 and the node itself before rendering.
//! [`gather`] is the only place that does I/O on the way in.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cloud::{CloudError, Ec2, Imds};
use crate::cluster::{Cluster, IpFamily};
use crate::credential_provider;
use crate::error::BootstrapError;
use crate::instance_facts::InstanceFacts;
use crate::kubelet_unit::{self, NodeUnits, UnitChoice};
use crate::max_pods;
use crate::node_files::under_root;
use crate::retry::{retry, Attempt, Budget, GaveUp};
use crate::settings::Settings;
use crate::version::KubeletVersion;

/// The node itself: CPU count, kubelet binary, name resolution, files under the root.
#[allow(async_fn_in_trait)]
pub trait Host {
    /// CPUs this process may run on (as `nproc`).
    fn cpu_count(&self) -> Result<u32, BootstrapError>;
    /// Output of `kubelet --version`.
    fn kubelet_version_output(&self) -> Result<String, BootstrapError>;
    /// Addresses of `host` (as `getent hosts`).
    async fn lookup_host(&self, host: &str) -> Result<Vec<IpAddr>, BootstrapError>;
    /// A file under the root, `None` when absent; `path` is absolute on the node (`/etc/hosts`).
    fn read_file(&self, path: &str) -> Result<Option<String>, BootstrapError>;
    /// Whether a BPF file system is mounted at the root's /sys/fs/bpf.
    fn bpffs_mounted(&self) -> Result<bool, BootstrapError>;
    /// Whether a file (of any content, binaries included) is at `path` under the root.
    fn is_file(&self, path: &str) -> Result<bool, BootstrapError>;
}

/// The real node, with files under `root`.
pub struct RealHost {
    pub root: PathBuf,
}

impl Host for RealHost {
    fn cpu_count(&self) -> Result<u32, BootstrapError> {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .map_err(|e| BootstrapError::Host(format!("cannot count CPUs ({e}); pass --vcpus N")))
    }

    fn kubelet_version_output(&self) -> Result<String, BootstrapError> {
        let out = std::process::Command::new("kubelet").arg("--version").output().map_err(|e| {
            BootstrapError::Host(format!("cannot run `kubelet --version` ({e}); pass --kubelet-version, e.g. --kubelet-version 1.31.2"))
        })?;
        if !out.status.success() {
            return Err(BootstrapError::Host(format!(
                "`kubelet --version` failed ({}); pass --kubelet-version, e.g. --kubelet-version 1.31.2",
                out.status
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn lookup_host(&self, host: &str) -> Result<Vec<IpAddr>, BootstrapError> {
        let mut last = String::new();
        for attempt in 0..6u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            match tokio::net::lookup_host((host, 443)).await {
                Ok(addrs) => {
                    let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
                    ips.sort();
                    ips.dedup();
                    if !ips.is_empty() {
                        return Ok(ips);
                    }
                    last = "no addresses".into();
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(BootstrapError::Host(format!(
            "cannot resolve the API server host {host} ({last}); a local cluster on Outposts needs it in DNS at bootstrap to write /etc/hosts. Fix: check the VPC's DNS resolver, then rerun"
        )))
    }

    fn read_file(&self, path: &str) -> Result<Option<String>, BootstrapError> {
        let p = under_root(&self.root, path);
        match std::fs::read_to_string(&p) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(BootstrapError::Host(format!(
                "cannot read {}: {e}",
                p.display()
            ))),
        }
    }

    fn is_file(&self, path: &str) -> Result<bool, BootstrapError> {
        let p = under_root(&self.root, path);
        match std::fs::metadata(&p) {
            Ok(m) => Ok(m.is_file()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(BootstrapError::Host(format!(
                "cannot look at {}: {e}",
                p.display()
            ))),
        }
    }

    /// From /proc/self/mounts: a `bpf` file system whose mount point is ROOT/sys/fs/bpf.
    fn bpffs_mounted(&self) -> Result<bool, BootstrapError> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").map_err(|e| {
            BootstrapError::Host(format!(
                "cannot read /proc/self/mounts ({e}) to see whether bpffs is mounted; pass --mount-bpf-fs false to skip the mount"
            ))
        })?;
        let want = under_root(&self.root, "/sys/fs/bpf");
        Ok(bpf_mounted_at(&mounts, &want))
    }
}

/// Whether `mounts` (the format of /proc/self/mounts) has a `bpf` file system at `at`.
pub fn bpf_mounted_at(mounts: &str, at: &Path) -> bool {
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 3 && f[2] == "bpf" && Path::new(f[1]) == at
    })
}

/// Waits until IMDS answers (at boot it may refuse connections for a while) and returns the
/// instance's region (`placement/region`). Retries every failure but a 404 within `budget`,
/// with a progress line per retry.
///
/// Errors ([`BootstrapError::Imds`]): the last real cause (e.g. `connection refused`) with the
/// attempts and seconds spent; a 404 at once.
pub async fn await_imds(imds: &impl Imds, budget: Budget) -> Result<String, BootstrapError> {
    const PATH: &str = "placement/region";
    let r = retry(
        budget,
        "waiting for IMDS to answer",
        |d| format!("no answer within {:.1} s", d.as_secs_f64()),
        move || async move {
            match imds.get(PATH).await {
                Ok(Some(v)) if !v.trim().is_empty() => Attempt::Done(v.trim().to_string()),
                Ok(_) => Attempt::Stop("not found (404) or empty".to_string()),
                Err(e) => Attempt::Retry(e.message),
            }
        },
    )
    .await;
    r.map_err(|g: GaveUp<String>| BootstrapError::Imds {
        path: format!("GET /latest/meta-data/{PATH}"),
        problem: if g.stopped {
            g.last
        } else {
            format!(
                "{} ({} attempts in {:.1} s). Fix: run on an EC2 instance (in a container IMDSv2 needs hop limit ≥ 2), set AWS_EC2_METADATA_SERVICE_ENDPOINT to a reachable IMDS, or give IMDS longer with --imds-timeout",
                g.last, g.attempts, g.seconds
            )
        },
    })
}

/// Gathers the facts a run needs for the `cluster` (resolved before: its IP family picks the
/// node IP, Outposts needs the API server's addresses). `vcpus` overrides the host CPU count;
/// `private_dns` bounds the wait for EC2's PrivateDnsName.
///
/// Errors: a required IMDS item missing or failing, the kubelet version unknown, the private
/// DNS name still empty after the retries, the API server host unresolvable (Outposts).
pub async fn gather(
    settings: &Settings,
    cluster: &Cluster,
    imds: &impl Imds,
    ec2: &impl Ec2,
    host: &impl Host,
    vcpus: Option<u32>,
    private_dns: Budget,
) -> Result<InstanceFacts, BootstrapError> {
    let kubelet_version = match settings.kubelet_version {
        Some(v) => v,
        None => {
            let out = host.kubelet_version_output()?;
            KubeletVersion::parse(&out).ok_or_else(|| {
                BootstrapError::Host(format!("cannot read a version in `kubelet --version` output {out:?}; pass --kubelet-version"))
            })?
        }
    };
    let vcpus = match vcpus {
        Some(n) => n,
        None => host.cpu_count()?,
    };

    let instance_type = imds_required(imds, "instance-type").await?;
    let instance_id = imds_required(imds, "instance-id").await?;
    let availability_zone = imds_required(imds, "placement/availability-zone").await?;
    let region = imds_required(imds, "placement/region").await?;
    let mac = imds_required(imds, "mac").await?;
    let mac_path = format!("network/interfaces/macs/{mac}");
    let node_ip_path = match cluster.ip_family {
        IpFamily::Ipv4 => format!("{mac_path}/local-ipv4s"),
        IpFamily::Ipv6 => format!("{mac_path}/ipv6s"),
    };
    let node_ip_text = imds_required(imds, &node_ip_path).await?;
    let first = node_ip_text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    let node_ip: IpAddr = first.parse().map_err(|_| BootstrapError::Imds {
        path: node_ip_path.clone(),
        problem: format!("{first:?} is not an IP address{}", if cluster.ip_family == IpFamily::Ipv6 {
            "; an IPv6 cluster needs an IPv6 address on the primary ENI (subnet with an IPv6 CIDR)"
        } else {
            ""
        }),
    })?;
    let vpc_ipv4_cidrs = imds_required(imds, &format!("{mac_path}/vpc-ipv4-cidr-blocks"))
        .await?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let services_domain = match imds.get("services/domain").await {
        Ok(Some(d)) if !d.trim().is_empty() => d.trim().to_string(),
        _ => crate::containerd::partition_domain(&region).to_string(),
    };

    let override_hint = "pass --kubelet-extra-args '--max-pods=N' with --use-max-pods false (N from `vpcnet max-pods TYPE`)";
    let max_pods = max_pods::resolve(
        &instance_type,
        settings.max_pods.calculator_options(),
        ec2,
        override_hint,
    )
    .await;

    let named_by_dns = crate::cluster::uses_external_provider(cluster, kubelet_version)
        && !settings.instance_id_node_name;
    let private_dns_name = if named_by_dns {
        Some(private_dns_name(ec2, &instance_id, private_dns).await?)
    } else {
        None
    };

    let (apiserver_ips, existing_hosts) = if cluster.outpost_cluster_id.is_some() {
        (
            host.lookup_host(&cluster.apiserver_host).await?,
            host.read_file("/etc/hosts")?,
        )
    } else {
        (Vec::new(), None)
    };
    let bpffs_mounted = settings.mount_bpf_fs && host.bpffs_mounted()?;
    let units = node_units(host)?;
    let kubelet_unit = kubelet_unit::choose(&units)?;
    let sandbox_image_service = units.sandbox_image_installed
        || matches!(
            &kubelet_unit,
            UnitChoice::AmiCopied {
                sandbox_image: Some(_),
                ..
            }
        );

    Ok(InstanceFacts {
        instance_type,
        instance_id,
        availability_zone,
        region,
        mac,
        node_ip,
        vpc_ipv4_cidrs,
        private_dns_name,
        services_domain,
        bpffs_mounted,
        max_pods,
        vcpus,
        kubelet_version,
        apiserver_ips,
        existing_hosts,
        kubelet_unit,
        sandbox_image_service,
        credential_provider_binary: host.is_file(credential_provider::BIN_PATH)?,
        credential_provider_config: host.read_file(credential_provider::CONFIG_PATH)?,
    })
}

/// The kubelet unit files on the node: the AL2 AMI's copies-to-be, the installed
/// `kubelet.service` systemd would load, and whether a `sandbox-image.service` is installed.
pub fn node_units(host: &impl Host) -> Result<NodeUnits, BootstrapError> {
    let mut installed = None;
    let mut sandbox_image_installed = false;
    for dir in crate::systemd::UNIT_DIRS {
        let p = format!("{dir}/kubelet.service");
        if installed.is_none() {
            if let Some(t) = host.read_file(&p)? {
                installed = Some((p, t));
            }
        }
        sandbox_image_installed |= host.is_file(&format!("{dir}/sandbox-image.service"))?;
    }
    Ok(NodeUnits {
        ami_containerd_unit: host.read_file(kubelet_unit::AMI_CONTAINERD_UNIT)?,
        ami_sandbox_image_unit: host.read_file(kubelet_unit::AMI_SANDBOX_IMAGE_UNIT)?,
        installed,
        sandbox_image_installed,
    })
}

async fn imds_required(imds: &impl Imds, path: &str) -> Result<String, BootstrapError> {
    match imds.get(path).await {
        Ok(Some(v)) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        Ok(_) => Err(BootstrapError::Imds { path: path.into(), problem: "not found (404) or empty".into() }),
        Err(e) => Err(BootstrapError::Imds {
            path: format!("GET /latest/meta-data/{path}"),
            problem: format!("{}. Fix: run on an EC2 instance (in a container IMDSv2 needs hop limit ≥ 2), or set AWS_EC2_METADATA_SERVICE_ENDPOINT to a reachable IMDS", e.message),
        }),
    }
}

/// What the last DescribeInstances attempt showed.
#[derive(Debug)]
enum Last {
    /// EC2 answered with an empty PrivateDnsName.
    Empty,
    /// No answer: transport error or timeout.
    Unreachable(String),
    /// EC2 answered with an error worth retrying (throttling, 5xx, instance not listed yet).
    Failing(CloudError),
    /// EC2 refused for good (e.g. UnauthorizedOperation).
    Refused(CloudError),
}

impl std::fmt::Display for Last {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Last::Empty => f.write_str("EC2 answered with an empty PrivateDnsName"),
            Last::Unreachable(e) => f.write_str(e),
            Last::Failing(e) | Last::Refused(e) => write!(f, "{e}"),
        }
    }
}

/// EC2 `PrivateDnsName` of the instance, retried while empty, unreachable, throttled or
/// failing, within `budget` (each call under the remaining budget). A progress line goes to
/// the log (warn, shown by default) before each wait.
///
/// Errors ([`BootstrapError::Ec2`]): an EC2 error such as UnauthorizedOperation at once; after
/// the budget, what the last attempt showed: EC2 could not be reached, answered an error
/// (its code and message), or answered with an empty name.
async fn private_dns_name(
    ec2: &impl Ec2,
    instance_id: &str,
    budget: Budget,
) -> Result<String, BootstrapError> {
    const ACTION: &str = "DescribeInstances";
    let r = retry(
        budget,
        &format!("waiting for EC2 to report the private DNS name of {instance_id}"),
        |d| {
            Last::Unreachable(format!(
                "no answer within the remaining {:.1} s of the budget",
                d.as_secs_f64()
            ))
        },
        move || async move {
            match ec2.private_dns_name(instance_id).await {
                Ok(name) if !name.trim().is_empty() => Attempt::Done(name.trim().to_string()),
                Ok(_) => Attempt::Retry(Last::Empty),
                Err(e) if e.code.is_none() => Attempt::Retry(Last::Unreachable(e.to_string())),
                Err(e) if e.is_transient() => Attempt::Retry(Last::Failing(e)),
                Err(e) => Attempt::Stop(Last::Refused(e)),
            }
        },
    )
    .await;
    let g = match r {
        Ok(name) => return Ok(name),
        Err(g) => g,
    };
    let (n, s) = (g.attempts, g.seconds);
    Err(match g.last {
        Last::Refused(e) => {
            let denied = matches!(
                e.code.as_deref(),
                Some("UnauthorizedOperation" | "AccessDenied" | "AccessDeniedException")
            );
            BootstrapError::Ec2 {
                action: ACTION.into(),
                problem: e.to_string(),
                fix: if denied {
                    "grant the node's IAM role the permission ec2:DescribeInstances; kubelet's node name under the external cloud provider must equal the EC2 PrivateDnsName".into()
                } else {
                    "check the AWS credentials and region the node uses for EC2".into()
                },
            }
        }
        Last::Empty => BootstrapError::Ec2 {
            action: ACTION.into(),
            problem: format!("EC2 answered but the PrivateDnsName of {instance_id} stayed empty ({n} attempts in {s:.1} s)"),
            fix: "check that the VPC has DNS hostnames enabled (enableDnsHostnames), then rerun; --private-dns-timeout gives EC2 longer".into(),
        },
        Last::Failing(e) => BootstrapError::Ec2 {
            action: ACTION.into(),
            problem: format!("EC2 kept answering an error for the PrivateDnsName of {instance_id} ({n} attempts in {s:.1} s; last answer: {})", e.code.as_deref().map_or(e.message.clone(), |c| format!("{c}: {}", e.message))),
            fix: "EC2 is throttling or failing in this region: rerun later, or give it longer with --private-dns-timeout".into(),
        },
        Last::Unreachable(e) => BootstrapError::Ec2 {
            action: ACTION.into(),
            problem: format!("EC2 could not be reached or did not answer for the PrivateDnsName of {instance_id} ({n} attempts in {s:.1} s; last error: {e})"),
            fix: "check AWS_ENDPOINT_URL_EC2 / AWS_EC2_ENDPOINT, the region, the credentials and connectivity to EC2".into(),
        },
    })
}
