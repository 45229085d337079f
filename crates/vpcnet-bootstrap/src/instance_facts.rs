//! The record of what bootstrap learned about the instance and node ([`InstanceFacts`]):
//! gathered by [`crate::facts::gather`], read by the pure renderer.

use std::net::IpAddr;

use crate::kubelet_unit::UnitChoice;
use crate::max_pods::ResolvedMaxPods;
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
    /// EC2 `PrivateDnsName`, read when the external cloud provider names the node by it.
    pub private_dns_name: Option<String>,
    /// IMDS `services/domain` (e.g. `amazonaws.com`), else the region's partition domain.
    pub services_domain: String,
    /// A BPF file system is mounted at /sys/fs/bpf (read only with `--mount-bpf-fs`).
    pub bpffs_mounted: bool,
    /// Max pods from the instance type (table, EC2, or the 110 fallback).
    pub max_pods: ResolvedMaxPods,
    /// CPUs online (for kube-reserved CPU).
    pub vcpus: u32,
    pub kubelet_version: KubeletVersion,
    /// Addresses of the API server host (local clusters on Outposts only).
    pub apiserver_ips: Vec<IpAddr>,
    /// Current contents of /etc/hosts under the root (local clusters on Outposts only).
    pub existing_hosts: Option<String>,
    /// The kubelet unit to install or keep ([`crate::kubelet_unit::choose`] over the node's
    /// unit files).
    pub kubelet_unit: UnitChoice,
    /// A `sandbox-image.service` is installed (or comes with the AMI's unit).
    pub sandbox_image_service: bool,
    /// `ecr-credential-provider` at [`crate::credential_provider::BIN_PATH`].
    pub credential_provider_binary: bool,
    /// The text of [`crate::credential_provider::CONFIG_PATH`], if present.
    pub credential_provider_config: Option<String>,
}
