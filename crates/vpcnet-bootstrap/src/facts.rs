//! Instance facts: what bootstrap learns from IMDS, EC2 and the node itself before rendering.
//! [`gather`] is the only place that does I/O on the way in.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cloud::{Ec2, Imds};
use crate::error::BootstrapError;
use crate::max_pods::{self, ResolvedMaxPods};
use crate::settings::{IpFamily, Settings};
use crate::version::KubeletVersion;

/// Facts about this instance and node, gathered from IMDS, EC2 and the host.
#[derive(Debug, Clone)]
pub struct InstanceFacts {
    /// IMDS `instance-type`, e.g. `m5.large` (IMDS paths below are under `/latest/meta-data/`).
    pub instance_type: String,
    /// IMDS `instance-id`.
    pub instance_id: String,
    /// IMDS `placement/availability-zone`.
    pub availability_zone: String,
    /// IMDS `placement/region`.
    pub region: String,
    /// MAC of the primary ENI (IMDS `mac`).
    pub mac: String,
    /// Node IP: first of `macs/<primary mac>/local-ipv4s` (IPv4) or `.../ipv6s` (IPv6).
    pub node_ip: IpAddr,
    /// `macs/<primary mac>/vpc-ipv4-cidr-blocks`, one CIDR per entry.
    pub vpc_ipv4_cidrs: Vec<String>,
    /// EC2 `PrivateDnsName`, read when the external cloud provider is used.
    pub private_dns_name: Option<String>,
    /// Max pods from the instance type (table, EC2, or the 110 fallback).
    pub max_pods: ResolvedMaxPods,
    /// CPUs online (for kube-reserved CPU).
    pub vcpus: u32,
    pub kubelet_version: KubeletVersion,
    /// Addresses of the API server host (local clusters on Outposts only).
    pub apiserver_ips: Vec<IpAddr>,
    /// Current contents of /etc/hosts under the root (local clusters on Outposts only).
    pub existing_hosts: Option<String>,
}

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
}

/// `path` (absolute on the node) placed under `root`.
pub fn under_root(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// Budget for reading the EC2 private DNS name.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Total time for all attempts and waits (`--private-dns-timeout`).
    pub budget: Duration,
    /// Cap on the number of DescribeInstances calls; `None`: only the budget bounds them.
    pub max_attempts: Option<u32>,
    /// First delay; doubles per attempt up to 10 s.
    pub first_delay: Duration,
}

/// Gathers the facts a run needs. `vcpus` overrides the host CPU count.
///
/// Errors: a required IMDS item missing or failing, the kubelet version unknown, the private
/// DNS name still empty after the retries, the API server host unresolvable (Outposts).
pub async fn gather(
    settings: &Settings,
    imds: &impl Imds,
    ec2: &impl Ec2,
    host: &impl Host,
    vcpus: Option<u32>,
    retry: Retry,
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
    let node_ip_path = match settings.ip_family {
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
        problem: format!("{first:?} is not an IP address{}", if settings.ip_family == IpFamily::Ipv6 {
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

    let override_hint = "pass --kubelet-extra-args '--max-pods=N' with --use-max-pods false (N from `vpcnet max-pods TYPE`)";
    let max_pods = max_pods::resolve(
        &instance_type,
        settings.max_pods.calculator_options(),
        ec2,
        override_hint,
    )
    .await;

    let private_dns_name = if crate::render::uses_external_provider(settings, kubelet_version) {
        Some(private_dns_name(ec2, &instance_id, retry).await?)
    } else {
        None
    };

    let (apiserver_ips, existing_hosts) = if settings.outpost_cluster_id.is_some() {
        (
            host.lookup_host(&settings.apiserver_host).await?,
            host.read_file("/etc/hosts")?,
        )
    } else {
        (Vec::new(), None)
    };

    Ok(InstanceFacts {
        instance_type,
        instance_id,
        availability_zone,
        region,
        mac,
        node_ip,
        vpc_ipv4_cidrs,
        private_dns_name,
        max_pods,
        vcpus,
        kubelet_version,
        apiserver_ips,
        existing_hosts,
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
enum Last {
    /// EC2 answered with an empty PrivateDnsName.
    Empty,
    /// EC2 could not be reached or did not answer (transport error, timeout, 5xx, throttling).
    Unreachable(String),
}

/// EC2 `PrivateDnsName` of the instance, retried while empty, unreachable or throttled, within
/// `retry.budget` in total (each call under the client's own short deadline). A progress line
/// goes to the log (warn, shown by default) before each wait.
///
/// Errors ([`BootstrapError::Ec2`]): an EC2 4xx such as UnauthorizedOperation at once;
/// after the budget, "could not be reached" or "stayed empty" after what the last attempt showed.
async fn private_dns_name(
    ec2: &impl Ec2,
    instance_id: &str,
    retry: Retry,
) -> Result<String, BootstrapError> {
    const ACTION: &str = "DescribeInstances";
    let started = tokio::time::Instant::now();
    let deadline = started + retry.budget;
    let mut delay = retry.first_delay;
    let mut last = Last::Unreachable("no attempt made".into());
    let mut attempt = 0u32;
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let out_of_budget = remaining.is_zero() && attempt > 0;
        if out_of_budget || retry.max_attempts.is_some_and(|m| attempt >= m.max(1)) {
            break;
        }
        attempt += 1;
        // A zero budget still makes one attempt, under the client's own deadline.
        let limit = if remaining.is_zero() {
            Duration::from_secs(10)
        } else {
            remaining
        };
        last = match tokio::time::timeout(limit, ec2.private_dns_name(instance_id)).await {
            Ok(Ok(name)) if !name.trim().is_empty() => return Ok(name.trim().to_string()),
            Ok(Ok(_)) => Last::Empty,
            Ok(Err(e)) if is_transient(e.code.as_deref()) => Last::Unreachable(e.to_string()),
            Ok(Err(e)) => {
                let denied = matches!(
                    e.code.as_deref(),
                    Some("UnauthorizedOperation" | "AccessDenied" | "AccessDeniedException")
                );
                return Err(BootstrapError::Ec2 {
                    action: ACTION.into(),
                    problem: e.to_string(),
                    fix: if denied {
                        "grant the node's IAM role the permission ec2:DescribeInstances; kubelet's node name under the external cloud provider must equal the EC2 PrivateDnsName".into()
                    } else {
                        "check the AWS credentials and region the node uses for EC2".into()
                    },
                });
            }
            Err(_) => Last::Unreachable(format!(
                "no answer within the remaining {:.1} s of the budget",
                limit.as_secs_f64()
            )),
        };
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        if remaining.is_zero() || retry.max_attempts.is_some_and(|m| attempt >= m.max(1)) {
            break;
        }
        let wait = delay.min(remaining);
        let why = match &last {
            Last::Empty => "EC2 answered with an empty PrivateDnsName".to_string(),
            Last::Unreachable(e) => e.clone(),
        };
        tracing::warn!(
            "waiting for EC2 to report the private DNS name of {instance_id}: attempt {attempt}, retrying in {:.1}s ({why})",
            wait.as_secs_f64()
        );
        tokio::time::sleep(wait).await;
        delay = (delay * 2).min(Duration::from_secs(10));
    }
    let spent = started.elapsed().as_secs_f64();
    Err(match last {
        Last::Empty => BootstrapError::Ec2 {
            action: ACTION.into(),
            problem: format!("EC2 answered but the PrivateDnsName of {instance_id} stayed empty ({attempt} attempts in {spent:.1} s)"),
            fix: "check that the VPC has DNS hostnames enabled (enableDnsHostnames), then rerun; --private-dns-timeout gives EC2 longer".into(),
        },
        Last::Unreachable(e) => BootstrapError::Ec2 {
            action: ACTION.into(),
            problem: format!("EC2 could not be reached or did not answer for the PrivateDnsName of {instance_id} ({attempt} attempts in {spent:.1} s; last error: {e})"),
            fix: "check AWS_ENDPOINT_URL_EC2 / AWS_EC2_ENDPOINT, the region, the credentials and connectivity to EC2".into(),
        },
    })
}

/// Errors worth another attempt: no EC2 code (transport, timeout), throttling, 5xx codes, and
/// an instance EC2 does not list yet (eventual consistency right after launch).
fn is_transient(code: Option<&str>) -> bool {
    matches!(
        code,
        None | Some(
            "RequestLimitExceeded"
                | "Throttling"
                | "ThrottlingException"
                | "InternalError"
                | "InternalFailure"
                | "ServiceUnavailable"
                | "Unavailable"
                | "InvalidInstanceID.NotFound"
        )
    )
}
