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

/// Retry budget for the EC2 private DNS name.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub attempts: u32,
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
            path: path.into(),
            problem: format!("{e}. Fix: run on an EC2 instance with IMDSv2 reachable (hop limit ≥ 2 in containers) or set AWS_EC2_METADATA_SERVICE_ENDPOINT"),
        }),
    }
}

/// EC2 `PrivateDnsName` of the instance, retried while empty or throttled, with a bounded
/// number of attempts.
async fn private_dns_name(
    ec2: &impl Ec2,
    instance_id: &str,
    retry: Retry,
) -> Result<String, BootstrapError> {
    let mut delay = retry.first_delay;
    let attempts = retry.attempts.max(1);
    let mut last = String::new();
    for attempt in 1..=attempts {
        match ec2.private_dns_name(instance_id).await {
            Ok(name) if !name.trim().is_empty() => return Ok(name.trim().to_string()),
            Ok(_) => last = "PrivateDnsName was empty".into(),
            Err(e) => {
                let retryable = matches!(
                    e.code.as_deref(),
                    None | Some(
                        "RequestLimitExceeded"
                            | "Throttling"
                            | "ThrottlingException"
                            | "InternalError"
                            | "Unavailable"
                            | "InvalidInstanceID.NotFound"
                    )
                );
                if !retryable {
                    return Err(BootstrapError::Ec2 {
                        action: "DescribeInstances".into(),
                        problem: e.to_string(),
                        fix: "grant the node's IAM role ec2:DescribeInstances; kubelet's node name under the external cloud provider must equal the EC2 PrivateDnsName".into(),
                    });
                }
                last = e.to_string();
            }
        }
        if attempt < attempts {
            tracing::info!(attempt, %last, "waiting for EC2 PrivateDnsName");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }
    Err(BootstrapError::Ec2 {
        action: "DescribeInstances".into(),
        problem: format!("no PrivateDnsName for {instance_id} after {attempts} attempts ({last})"),
        fix: "rerun vpcnet-bootstrap once EC2 shows the instance's private DNS name; check that the VPC has DNS hostnames enabled".into(),
    })
}
