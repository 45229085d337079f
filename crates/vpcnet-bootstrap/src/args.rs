//! The command line, compatible with the EKS AMI's `bootstrap.sh` flags.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// `vpcnet-bootstrap [options] <cluster-name>`: writes the kubelet configuration of an EKS
/// worker node (kubelet config JSON, CA, kubeconfig, systemd drop-ins).
///
/// Flags keep the names of the EKS AMI's bootstrap.sh so existing user data carries over.
/// Values from the command line win over the same setting in `--config`.
#[derive(Debug, Clone, Default, Parser)]
#[command(name = "vpcnet-bootstrap", version, about, long_about = None)]
pub struct BootstrapArgs {
    /// Cluster name (for the kubeconfig's `aws eks get-token --cluster-name`).
    #[arg(value_name = "CLUSTER_NAME")]
    pub cluster_name: Option<String>,

    /// API server endpoint, an https:// URL (bootstrap.sh `--apiserver-endpoint`).
    #[arg(long)]
    pub apiserver_endpoint: Option<String>,

    /// Cluster CA certificate, base64-encoded PEM (bootstrap.sh `--b64-cluster-ca`).
    #[arg(long)]
    pub b64_cluster_ca: Option<String>,

    /// Cluster DNS service IPs, comma-separated; wins over every derived value.
    #[arg(long)]
    pub dns_cluster_ip: Option<String>,

    /// The cluster's IPv4 service CIDR; cluster DNS becomes its address with last octet 10.
    #[arg(long)]
    pub service_ipv4_cidr: Option<String>,

    /// The cluster's IPv6 service CIDR (implies `--ip-family ipv6`); cluster DNS is its address + `a`.
    #[arg(long)]
    pub service_ipv6_cidr: Option<String>,

    /// Cluster IP family: ipv4 (default) or ipv6.
    #[arg(long)]
    pub ip_family: Option<String>,

    /// Write kubelet `maxPods` computed from the instance type's ENI limits (true|false, default true).
    #[arg(long, value_name = "BOOL")]
    pub use_max_pods: Option<bool>,

    /// Extra kubelet flags, written to 30-kubelet-extra-args.conf (no single quotes).
    #[arg(long, allow_hyphen_values = true)]
    pub kubelet_extra_args: Option<String>,

    /// Local cluster on AWS Outposts (true|false): external cloud provider, bootstrap
    /// kubeconfig with the cluster ID and /etc/hosts entries for the API server.
    #[arg(long, value_name = "BOOL")]
    pub enable_local_outpost: Option<bool>,

    /// Cluster ID (required with `--enable-local-outpost true`).
    #[arg(long)]
    pub cluster_id: Option<String>,

    /// Container runtime; only `containerd` is supported (as for kubelet ≥ 1.24).
    #[arg(long)]
    pub container_runtime: Option<String>,

    /// Max pods with VPC CNI custom networking (pods never use the primary ENI).
    #[arg(long)]
    pub cni_custom_networking_enabled: bool,

    /// Max pods with VPC CNI prefix delegation (/28 prefixes, Nitro only).
    #[arg(long)]
    pub cni_prefix_delegation_enabled: bool,

    /// Max pods using at most N ENIs (the VPC CNI's `MAX_ENI`).
    #[arg(long, value_name = "N")]
    pub cni_max_eni: Option<u32>,

    /// Ceiling applied to the computed max pods: `auto` (none in secondary-IP mode, like
    /// eni-max-pods.txt; the recommended 110/250 with prefix delegation), `recommended`, `none`.
    #[arg(long, value_enum)]
    pub max_pods_cap: Option<MaxPodsCap>,

    /// NodeConfig file (YAML, `node.eks.aws/v1alpha1` shape).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Directory the node's file system is rooted at (files go to ROOT/etc/..., ROOT/var/...).
    #[arg(long, default_value = "/", value_name = "DIR")]
    pub root: PathBuf,

    /// Print the files instead of writing them. Still reads IMDS (and EC2 for max pods and the
    /// private DNS name): off EC2, point AWS_EC2_METADATA_SERVICE_ENDPOINT at a reachable IMDS
    /// (e.g. the lab's) and AWS_ENDPOINT_URL_EC2 or AWS_EC2_ENDPOINT at EC2.
    #[arg(long)]
    pub dry_run: bool,

    /// Kubelet version (e.g. 1.31.2); default: `kubelet --version`.
    #[arg(long)]
    pub kubelet_version: Option<String>,

    /// CPU count for kube-reserved; default: the CPUs this process may run on (as `nproc`).
    #[arg(long)]
    pub vcpus: Option<u32>,

    /// Seconds to wait in total for EC2 to report the instance's PrivateDnsName (kubelet ≥ 1.26,
    /// external cloud provider: it becomes the node name). Retries with backoff, each EC2 call
    /// under a 10 s deadline, a progress line on stderr per retry.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub private_dns_timeout: f64,

    /// Cap on DescribeInstances calls for the PrivateDnsName (default: only the timeout).
    #[arg(long, hide = true)]
    pub private_dns_attempts: Option<u32>,

    /// First retry delay in milliseconds (doubles per attempt, at most 10 s).
    #[arg(long, default_value_t = 1000, hide = true)]
    pub retry_delay_ms: u64,

    /// Accepted for bootstrap.sh compatibility and ignored (with a warning).
    #[command(flatten)]
    pub ignored: IgnoredArgs,
}

/// A positive, finite number of seconds.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds between 0 and 86400 (e.g. 60 or 2.5)"
        )),
    }
}

/// bootstrap.sh flags that concern the AMI rather than kubelet configuration. Accepted so
/// existing user data still runs; each one given produces a warning.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct IgnoredArgs {
    #[arg(long, hide = true)]
    pub aws_api_retry_attempts: Option<String>,
    #[arg(long, hide = true, allow_hyphen_values = true)]
    pub containerd_config_file: Option<String>,
    #[arg(long, hide = true, allow_hyphen_values = true)]
    pub docker_config_json: Option<String>,
    #[arg(long, hide = true)]
    pub enable_docker_bridge: Option<String>,
    #[arg(long, hide = true)]
    pub pause_container_account: Option<String>,
    #[arg(long, hide = true)]
    pub pause_container_version: Option<String>,
    #[arg(long, hide = true)]
    pub mount_bpf_fs: Option<String>,
    #[arg(long, hide = true)]
    pub local_disks: Option<String>,
}

impl IgnoredArgs {
    /// Names of the ignored flags that were given.
    pub fn given(&self) -> Vec<&'static str> {
        let all = [
            (
                "--aws-api-retry-attempts",
                self.aws_api_retry_attempts.is_some(),
            ),
            (
                "--containerd-config-file",
                self.containerd_config_file.is_some(),
            ),
            ("--docker-config-json", self.docker_config_json.is_some()),
            (
                "--enable-docker-bridge",
                self.enable_docker_bridge.is_some(),
            ),
            (
                "--pause-container-account",
                self.pause_container_account.is_some(),
            ),
            (
                "--pause-container-version",
                self.pause_container_version.is_some(),
            ),
            ("--mount-bpf-fs", self.mount_bpf_fs.is_some()),
            ("--local-disks", self.local_disks.is_some()),
        ];
        all.into_iter()
            .filter(|(_, g)| *g)
            .map(|(n, _)| n)
            .collect()
    }
}

/// Ceiling on the computed max pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MaxPodsCap {
    /// No ceiling in secondary-IP mode (the values of eni-max-pods.txt, as bootstrap.sh and
    /// nodeadm write); the recommended ceiling with prefix delegation, whose uncapped values
    /// (thousands of pods) would reserve most of the node's memory as kube-reserved.
    #[default]
    Auto,
    /// 110 for ≤ 30 vCPUs, else 250 (max-pods-calculator.sh without `--show-max-allowed`).
    Recommended,
    /// The ENI formula as is (max-pods-calculator.sh `--show-max-allowed`).
    None,
}
