//! The command line, compatible with the EKS AMI's `bootstrap.sh` flags.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// `vpcnet-bootstrap [options] <cluster-name>`: configures and starts the kubelet of an EKS
/// worker node (kubelet config JSON, CA, kubeconfig, kubelet unit and drop-ins, containerd
/// config, bpffs), as the EKS AMI's bootstrap.sh does.
///
/// Flags keep the names of the EKS AMI's bootstrap.sh so existing user data carries over.
/// Values from the command line win over the same setting in `--config`. Boolean flags take a
/// value as bootstrap.sh's do (`--use-max-pods false`): `true` is true, anything else false.
#[derive(Debug, Clone, Default, Parser)]
#[command(name = "vpcnet-bootstrap", version, about, long_about = None)]
pub struct BootstrapArgs {
    /// Cluster name (for the kubeconfig's `aws eks get-token --cluster-name`).
    #[arg(value_name = "CLUSTER_NAME")]
    pub cluster_name: Option<String>,

    /// API server endpoint, an https:// URL (bootstrap.sh `--apiserver-endpoint`). Without it
    /// or `--b64-cluster-ca`, EKS DescribeCluster supplies both (and the service CIDR, IP family
    /// and, on Outposts, the cluster ID).
    #[arg(long)]
    pub apiserver_endpoint: Option<String>,

    /// Cluster CA certificate, base64-encoded PEM (bootstrap.sh `--b64-cluster-ca`).
    #[arg(long)]
    pub b64_cluster_ca: Option<String>,

    /// Attempts after the first for EKS DescribeCluster (bootstrap.sh
    /// `--aws-api-retry-attempts`); waits double from `--retry-delay-ms`, at most 10 s.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub aws_api_retry_attempts: u32,

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
    pub use_max_pods: Option<String>,

    /// Extra kubelet flags, written to 30-kubelet-extra-args.conf; kubelet gets them split as
    /// a shell would (quotes group words).
    #[arg(long, allow_hyphen_values = true)]
    pub kubelet_extra_args: Option<String>,

    /// Local cluster on AWS Outposts (true|false): external cloud provider, bootstrap
    /// kubeconfig with the cluster ID and /etc/hosts entries for the API server. Default:
    /// what DescribeCluster says (an Outpost ARN), else false.
    #[arg(long, value_name = "BOOL")]
    pub enable_local_outpost: Option<String>,

    /// Cluster ID (required with `--enable-local-outpost true`).
    #[arg(long)]
    pub cluster_id: Option<String>,

    /// Container runtime; only `containerd` is supported (kubelet lost dockershim in 1.24).
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

    /// Sandbox (pause) image for containerd and kubelet, e.g. `registry.local/pause:3.10`;
    /// without a tag `--pause-container-version` is added. Default: the EKS pause image in the
    /// instance's region and partition, as the EKS AMI picks it.
    #[arg(long, env = "PAUSE_CONTAINER_IMAGE", value_name = "IMAGE")]
    pub pause_container_image: Option<String>,

    /// AWS account of the ECR registry the pause image comes from (default: the region's EKS account).
    #[arg(long, value_name = "ACCOUNT")]
    pub pause_container_account: Option<String>,

    /// Tag of the pause image.
    #[arg(long, default_value = "3.5", value_name = "TAG")]
    pub pause_container_version: String,

    /// containerd configuration (TOML, version 2 or 3) installed as /etc/containerd/config.toml
    /// instead of vpcnet's; `SANDBOX_IMAGE` in it becomes the pause image. Checked before
    /// anything is written.
    #[arg(long, value_name = "FILE", allow_hyphen_values = true)]
    pub containerd_config_file: Option<PathBuf>,

    /// Mount the BPF file system at /sys/fs/bpf through a systemd mount unit, unless one is
    /// mounted already (true|false, default true).
    #[arg(long, value_name = "BOOL")]
    pub mount_bpf_fs: Option<String>,

    /// NodeConfig (YAML, `node.eks.aws/v1alpha1` shape): a file, or `imds` for the EC2 user
    /// data (MIME multi-part: every `application/node.eks.aws` part, merged in order).
    #[arg(long, value_name = "FILE|imds")]
    pub config: Option<String>,

    /// Directory the node's file system is rooted at (files go to ROOT/etc/..., ROOT/var/...).
    #[arg(long, default_value = "/", value_name = "DIR")]
    pub root: PathBuf,

    /// Print the files and the systemctl commands instead of writing and running them. Still
    /// reads IMDS (and EC2 for max pods and the private DNS name): off EC2, point
    /// AWS_EC2_METADATA_SERVICE_ENDPOINT at a reachable IMDS (e.g. the lab's) and
    /// AWS_ENDPOINT_URL_EC2 or AWS_EC2_ENDPOINT at EC2.
    #[arg(long)]
    pub dry_run: bool,

    /// Write the files but run no system command (no systemctl, no bpffs mount): for images
    /// prepared ahead of boot, and for the lab, which starts kubelet itself.
    #[arg(long)]
    pub files_only: bool,

    /// Seconds to wait for IMDS to answer at boot (it may refuse connections at first);
    /// a progress line on stderr per retry.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub imds_timeout: f64,

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

    /// First retry delay in milliseconds (doubles per attempt, at most 10 s), for IMDS, EC2
    /// and EKS waits alike.
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

/// bootstrap.sh flags about docker and local disks. Accepted so existing user data still
/// runs; each one given produces a warning.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct IgnoredArgs {
    #[arg(long, hide = true, allow_hyphen_values = true)]
    pub docker_config_json: Option<String>,
    #[arg(long, hide = true)]
    pub enable_docker_bridge: Option<String>,
    #[arg(long, hide = true)]
    pub local_disks: Option<String>,
}

impl IgnoredArgs {
    /// Names of the ignored flags that were given.
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("--docker-config-json", self.docker_config_json.is_some()),
            (
                "--enable-docker-bridge",
                self.enable_docker_bridge.is_some(),
            ),
            ("--local-disks", self.local_disks.is_some()),
        ]
        .into_iter()
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
