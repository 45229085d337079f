//! Agent configuration from environment variables, with the VPC CNI's names, defaults and
//! semantics (amazon-vpc-cni-k8s README, "CNI Configuration Variables"), plus vpcnet's own
//! `VPCNET_*` settings.
//!
//! Each variable is declared once below (field, variable, default, kind, meaning) with
//! `settings!` (`config/declare.rs`): parsing, `/v1/env-settings` ([`Config::env_settings`])
//! and the tables of `docs/configuration.md` come from that declaration. A new setting is one more
//! line in its section, then `UPDATE_DOCS=1 cargo test -p vpcnet-agent docs_are_current`.
//!
//! Parsing is a pure function of a key → value lookup ([`Config::from_lookup`]), so tests never
//! touch the process environment. An empty value counts as unset (Kubernetes manifests often
//! carry `value: ""`). Unlike the VPC CNI, which logs and falls back to the default, invalid
//! values are an error naming each invalid variable, its value and what is accepted, all at
//! once: the agent refuses to start on a typo instead of silently running with a setting the
//! operator did not choose.

mod declare;
mod docs;
mod error;
pub mod kinds;
pub mod vpc_cni;
pub mod vpc_cni_names;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::Ipv4Net;
use serde::Serialize;

use declare::settings;
pub use declare::Declaration;
pub use error::{ConfigError, InvalidSetting};
use kinds::{
    AbsPath, Bind, Cidrs, Flag, Int, Optional, Rate, Tags, Target, Url, AGENT_LOG_FILE, LOG_LEVEL,
    PLUGIN_LOG_FILE, PLUGIN_LOG_LEVEL, POLICY_AGENT, POLICY_MODE, RANDOMIZE_SNAT, TEXT,
    VETH_PREFIX,
};

/// Port randomisation of the SNAT rule (`AWS_VPC_K8S_CNI_RANDOMIZESNAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RandomizeSnat {
    /// Sequential source ports.
    None,
    /// `--random`: hash-based port randomisation.
    Hashrandom,
    /// `--random-fully`: fully random ports (the default).
    Prng,
}

impl fmt::Display for RandomizeSnat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&kinds::Kind::show(&RANDOMIZE_SNAT, self))
    }
}

/// `NETWORK_POLICY_ENFORCING_MODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// A pod no policy selects is open (`standard`; `none` means the same here).
    Standard,
    /// A pod no policy selects denies everything.
    Strict,
}

impl fmt::Display for PolicyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&kinds::Kind::show(&POLICY_MODE, self))
    }
}

/// Who enforces NetworkPolicy (`VPCNET_NETWORK_POLICY_AGENT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyAgent {
    /// vpcnet's own enforcement (`VPCNET_ENABLE_NETWORK_POLICY`).
    Vpcnet,
    /// The AWS node agent beside vpcnet, through the VPC CNI's contract (npa.sock,
    /// ipamd.sock).
    AwsEksNodeagent,
}

impl fmt::Display for PolicyAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&kinds::Kind::show(&POLICY_AGENT, self))
    }
}

/// Where an HTTP endpoint listens: a TCP address or a Unix socket (`unix:/path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindAddress {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for BindAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindAddress::Tcp(a) => write!(f, "{a}"),
            BindAddress::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl Serialize for BindAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Booleans as the VPC CNI reads them (Go's `strconv.ParseBool`).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

settings! {
    /// Client-side EC2 limits and endpoint.
    #[derive(Debug, Clone, PartialEq, Serialize)]
    pub struct Ec2Settings {
        ["ec2"]
        /// EC2 endpoint URL (VPC CNI). When unset the SDK honours `AWS_ENDPOINT_URL_EC2` /
        /// `AWS_ENDPOINT_URL`, then the regional endpoint.
        endpoint: Option<String> = "AWS_EC2_ENDPOINT", "",
            Url { accepted: "a URL such as https://ec2.us-west-2.amazonaws.com" };
        /// Burst of Describe calls the agent allows itself.
        describe_bucket_size: u32 = "VPCNET_EC2_DESCRIBE_BUCKET_SIZE", "100", Int::range(1, 10_000);
        /// Describe calls per second after the burst.
        describe_refill_per_sec: f64 = "VPCNET_EC2_DESCRIBE_REFILL_RATE", "20", Rate;
        /// Burst of mutating calls (create, attach, assign, ...).
        mutating_bucket_size: u32 = "VPCNET_EC2_MUTATING_BUCKET_SIZE", "20", Int::range(1, 10_000);
        /// Mutating calls per second after the burst.
        mutating_refill_per_sec: f64 = "VPCNET_EC2_MUTATING_REFILL_RATE", "5", Rate;
        /// Throttle pacing, the agent's share of a fleet-aware EC2 budget: a throttled answer
        /// (`RequestLimitExceeded`) holds every call of its bucket (Describe or mutating), not
        /// only its own retry, for a wait of half to all of this many milliseconds, doubled
        /// per further throttle and halved back per granted call, up to
        /// `VPCNET_EC2_THROTTLE_PACE_MAX_MS`. `0` turns it off: each call retries on its own
        /// from 500 ms, as before.
        throttle_pace_base_ms: u64 = "VPCNET_EC2_THROTTLE_PACE_BASE_MS", "1000", Int::range(0, 60_000);
        /// Longest throttle hold in milliseconds (at least `VPCNET_EC2_THROTTLE_PACE_BASE_MS`),
        /// capped at half of `VPCNET_EC2_CALL_TIMEOUT` so a held call still has time to be sent.
        throttle_pace_max_ms: u64 = "VPCNET_EC2_THROTTLE_PACE_MAX_MS", "5000", Int::range(1, 600_000);
        /// Deadline of one EC2 call in seconds, token-bucket wait, retries and backoff included.
        call_timeout_secs: u64 = "VPCNET_EC2_CALL_TIMEOUT", "30", Int::range(1, 3_600);
        /// Deadline of one HTTP attempt of an EC2 call in seconds (VPC CNI: its AWS SDK HTTP
        /// client timeout), capped by `VPCNET_EC2_CALL_TIMEOUT`. The VPC CNI silently uses 10
        /// for values below 10; the agent refuses them.
        http_timeout_secs: u64 = "HTTP_TIMEOUT", "10", Int::range(10, 3_600);
    }
}

settings! {
    /// The agent's configuration. Serializes with field names; [`Config::env_settings`] gives
    /// the variable-name view that `/v1/env-settings` serves.
    #[derive(Debug, Clone, PartialEq, Serialize)]
    pub struct Config {
        ["warm-pool"]
        /// Free ENIs (with all their addresses) to keep attached. Ignored when
        /// `WARM_IP_TARGET` or `MINIMUM_IP_TARGET` is set.
        warm_eni_target: u32 = "WARM_ENI_TARGET", "1", Int::at_least(0);
        /// Free addresses to keep.
        warm_ip_target: Option<u32> = "WARM_IP_TARGET", "", Target;
        /// Floor of total addresses on the node (on network card 0 with `ENABLE_MULTI_NIC`).
        /// Unlike the VPC CNI, set alone it keeps growing the pool as pods arrive.
        minimum_ip_target: Option<u32> = "MINIMUM_IP_TARGET", "", Target;
        /// Free /28 prefixes to keep in prefix mode (the agent uses 1 when unset); overridden
        /// by the IP targets.
        warm_prefix_target: Option<u32> = "WARM_PREFIX_TARGET", "", Target;
        /// Assign /28 prefixes instead of secondary IPs (Nitro types).
        enable_prefix_delegation: bool = "ENABLE_PREFIX_DELEGATION", "false", Flag;
        /// Cap on attached ENIs, never above the instance type's limit (per network card with
        /// `ENABLE_MULTI_NIC`).
        max_eni: Option<u32> = "MAX_ENI", "", Target;
        /// Seconds a released address stays unavailable. Persisted across restarts.
        ip_cooldown_period_secs: u64 = "IP_COOLDOWN_PERIOD", "30", Int::range(0, 86_400);
        /// Seconds an ADD that finds no free address waits for the pool to grow (an ENI or
        /// addresses being added) before failing; `0` fails at once, as the VPC CNI does.
        /// Spares a burst of pods beyond the warm pool kubelet's sandbox back-off. Keep it
        /// below the plugin's `agentTimeout` (10 s by default).
        add_ip_wait_secs: u64 = "VPCNET_ADD_IP_WAIT", "5", Int::range(0, 30);
        /// With prefix delegation: seconds after a prefix request found no free aligned /28
        /// in the subnet (`InsufficientCidrBlocks`, a fragmented subnet) before prefixes are
        /// asked for again; meanwhile the node grows with secondary IPs so pods still start.
        /// Each further refusal doubles the wait, up to 16 times this.
        prefix_retry_secs: u64 = "VPCNET_PREFIX_RETRY", "120", Int::range(1, 3600);
        /// Manage ENIs on every network card of the instance type (card 0 alone when false),
        /// each card with its own warm pool: card 0 under the targets above, the others with
        /// one warm and one minimum address, as the VPC CNI keeps them. A pod annotated
        /// `k8s.amazonaws.com/nicConfig: multi-nic-attachment` gets one interface per managed
        /// card (`eth0`, then `mNicIf1`, ... each with an address of its card's ENIs, as the
        /// VPC CNI's multi-homed pods); other pods take card 0's addresses first and another
        /// card's when card 0 has none free. Without it such a pod's ADD fails with a message
        /// naming this setting. Needs the runtime to pass pod annotations to the plugin (the
        /// conflist asks for `io.kubernetes.cri.pod-annotations`; containerd 1.6+ and CRI-O
        /// pass them). See docs/agent.md, "Multiple network cards".
        enable_multi_nic: bool = "ENABLE_MULTI_NIC", "false", Flag;

        ["custom-networking"]
        /// Take subnet and security groups of new ENIs from the node's ENIConfig (watched
        /// through the Kubernetes API); pods get addresses of secondary ENIs only, and no ENI
        /// is created while no valid ENIConfig is resolved.
        custom_network_cfg: bool = "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "false", Flag;
        /// Node annotation naming the ENIConfig (beats the label).
        eni_config_annotation_def: String =
            "ENI_CONFIG_ANNOTATION_DEF", "k8s.amazonaws.com/eniConfig", TEXT;
        /// Node label naming the ENIConfig, e.g. `topology.kubernetes.io/zone`.
        eni_config_label_def: String = "ENI_CONFIG_LABEL_DEF", "k8s.amazonaws.com/eniConfig", TEXT;
        /// Without custom networking, each new ENI goes to the subnet of the node's VPC and
        /// zone with the most free addresses among the node's own subnet (unless tagged
        /// `kubernetes.io/role/cni=0`) and the subnets tagged `kubernetes.io/role/cni` with
        /// another value (and, with `CLUSTER_NAME`, no `kubernetes.io/cluster/*` tag of
        /// another cluster); a full subnet moves on to the next, and an ENI whose subnet is
        /// full is not grown for 2 minutes. One `DescribeSubnets` per new ENI, and one at
        /// start: with the node's subnet tagged `kubernetes.io/role/cni=0`, pods get no
        /// addresses of the primary ENI. `false`: the node's subnet, and no ENI while it is
        /// tagged `kubernetes.io/role/cni=0`. Custom networking ignores it (the ENIConfig's
        /// subnet).
        enable_subnet_discovery: bool = "ENABLE_SUBNET_DISCOVERY", "true", Flag;

        ["datapath"]
        /// An external NAT device does SNAT; no SNAT rule (and no outbound connmark) on the
        /// node. Also reported to the plugin.
        external_snat: bool = "AWS_VPC_K8S_CNI_EXTERNALSNAT", "false", Flag;
        /// IPv4 CIDRs exempt from SNAT (an invalid item is an error, not skipped).
        exclude_snat_cidrs: Vec<Ipv4Net> = "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", "", Cidrs;
        /// SNAT source-port randomisation: `none`, `hashrandom` (`--random`), `prng`
        /// (`--random-fully`).
        randomize_snat: RandomizeSnat = "AWS_VPC_K8S_CNI_RANDOMIZESNAT", "prng", RANDOMIZE_SNAT;
        /// MTU of ENIs and pod interfaces.
        eni_mtu: u32 = "AWS_VPC_ENI_MTU", "9001", Int::range(576, 9001);
        /// MTU of pod interfaces (written into the conflist); unset: `AWS_VPC_ENI_MTU`.
        pod_mtu: Option<u32> = "POD_MTU", "", Optional(Int::range(576, 9001));
        /// Host-side veth name prefix (written into the conflist).
        veth_prefix: String = "AWS_VPC_K8S_CNI_VETHPREFIX", "eni", VETH_PREFIX;
        /// Where the CNI plugin logs (written into the conflist).
        plugin_log_file: String =
            "AWS_VPC_K8S_PLUGIN_LOG_FILE", "/var/log/aws-routed-eni/plugin.log", PLUGIN_LOG_FILE;
        /// The plugin's log level (written into the conflist).
        plugin_log_level: String = "AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "Debug", PLUGIN_LOG_LEVEL;
        /// Chain the reference `bandwidth` plugin after `portmap` in the conflist, with the
        /// capability `bandwidth`, as the VPC CNI does: the runtime passes a pod's
        /// `kubernetes.io/ingress-bandwidth` and `kubernetes.io/egress-bandwidth` annotations to
        /// it, and it shapes the pod's traffic with tc (a token bucket on the host veth for
        /// ingress, on an `ifb` device fed from the host veth for egress). The `bandwidth`
        /// binary must be in the runtime's CNI binary directory. A change applies to pods
        /// created after the agent rewrote the conflist; containerd runs a pod's DEL through
        /// the chain in place then, so turning it off while shaped pods run leaves their `ifb`
        /// devices on the node (drain the node first).
        enable_bandwidth_plugin: bool = "ENABLE_BANDWIDTH_PLUGIN", "false", Flag;
        /// Chain the reference `tuning` plugin last in the conflist, setting
        /// `net.ipv6.conf.all.disable_ipv6`, `net.ipv6.conf.default.disable_ipv6` and
        /// `net.ipv6.conf.lo.disable_ipv6` to `1` in every new pod's network namespace, as the
        /// VPC CNI does (for applications that cannot tolerate IPv6). The `tuning` binary must
        /// be in the runtime's CNI binary directory.
        disable_pod_v6: bool = "DISABLE_POD_V6", "false", Flag;
        /// Replies to traffic that arrived on the primary ENI leave through it (NodePort).
        node_port_support: bool = "AWS_VPC_CNI_NODE_PORT_SUPPORT", "true", Flag;
        /// Program node routes, rules, SNAT and connmark (`false` for emulator-only runs).
        node_datapath: bool = "VPCNET_NODE_DATAPATH", "true", Flag;

        ["network-policy"]
        /// Enforce Kubernetes NetworkPolicy on the node (the VPC CNI's node agent
        /// `--enable-network-policy`, which the chart's `enableNetworkPolicy` sets): the agent
        /// watches NetworkPolicies, Pods and Namespaces and programs each local pod's rules in
        /// the nftables table `inet vpcnet_policy` before the pod's ADD is answered. Needs the
        /// Kubernetes API (`list`/`watch` on those three, `get` on pods) and
        /// `VPCNET_NODE_DATAPATH=true`. `false` removes the table. See
        /// [network policy](network-policy.md).
        enable_network_policy: bool = "VPCNET_ENABLE_NETWORK_POLICY", "false", Flag;
        /// What a pod no policy selects may do: `standard` (or `none`): everything, in the
        /// directions no policy isolates; `strict`: nothing, both ways, until a policy
        /// selects it. Either way a pod's policies are in force before its ADD is answered.
        /// `strict` needs `VPCNET_ENABLE_NETWORK_POLICY=true` or
        /// `VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent`.
        network_policy_enforcing_mode: PolicyMode =
            "NETWORK_POLICY_ENFORCING_MODE", "standard", POLICY_MODE;
        /// Policy event logs, as the VPC CNI's node agent writes them with
        /// `--enable-policy-event-logs` (the chart's `nodeAgent.enablePolicyEventLogs`): one
        /// line per connection a policy allowed and per packet the rules dropped, for isolated
        /// pods, in `VPCNET_POLICY_EVENT_LOG_FILE`. At most 100 lines a second per node
        /// (bursts of 500). Needs `VPCNET_ENABLE_NETWORK_POLICY=true`. See
        /// [network policy](network-policy.md#policy-event-logs).
        policy_event_logs: bool = "VPCNET_POLICY_EVENT_LOGS", "false", Flag;
        /// Where the policy event log is written: `stdout`, `stderr` or an absolute file path,
        /// rotated by size as the node agent rotates its log (past 200 MiB it becomes
        /// `<file>.1`, up to `.8`). The default is the node agent's file, inside the `aws-node`
        /// container where the DaemonSet mounts the node's `/var/log/aws-routed-eni`.
        policy_event_log_file: String = "VPCNET_POLICY_EVENT_LOG_FILE",
            "/host/var/log/aws-routed-eni/network-policy-agent.log", AGENT_LOG_FILE;
        /// Who enforces NetworkPolicy. `vpcnet`: vpcnet itself, when
        /// `VPCNET_ENABLE_NETWORK_POLICY=true`. `aws-eks-nodeagent`: the AWS network policy
        /// agent run beside vpcnet (the VPC CNI chart's `aws-eks-nodeagent` container), through
        /// the VPC CNI's contract: the agent serves `GetNetworkPolicyConfigs` on
        /// `VPCNET_IPAMD_SOCKET` and puts `NETWORK_POLICY_ENFORCING_MODE` in its answers to the
        /// plugin, which calls the node agent on `/var/run/aws-node/npa.sock` in every ADD
        /// (failing the ADD when it fails) and DEL. vpcnet then enforces nothing itself, so
        /// `VPCNET_ENABLE_NETWORK_POLICY=true` is refused with it. See
        /// [network policy](network-policy.md#the-aws-node-agent-instead).
        network_policy_agent: PolicyAgent =
            "VPCNET_NETWORK_POLICY_AGENT", "vpcnet", POLICY_AGENT;
        /// With `VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent`: the gRPC Unix socket (mode
        /// 0660) on which the agent answers the node agent's `GetNetworkPolicyConfigs`, the
        /// VPC CNI ipamd's path, where the node agent looks for it.
        ipamd_socket: PathBuf =
            "VPCNET_IPAMD_SOCKET", "/var/run/aws-node/ipamd.sock", AbsPath;

        ["cluster"]
        /// The API server's `https://` URL, used directly instead of the `kubernetes` Service,
        /// so the agent reaches the API before kube-proxy has programmed anything. Never fatal:
        /// a malformed or unreachable value is logged and shown in `/v1/apiserver`, and IPAM
        /// runs on.
        cluster_endpoint: String = "CLUSTER_ENDPOINT", "", TEXT;
        /// The agent's Node name (the DaemonSet sets it from `spec.nodeName`), for the check of
        /// the Node's pod capacity against the addresses the node can get.
        my_node_name: String = "MY_NODE_NAME", "", TEXT;
        /// Value of the `cluster.k8s.amazonaws.com/name` tag on created ENIs.
        cluster_name: String = "CLUSTER_NAME", "", TEXT;
        /// Extra tags on created ENIs.
        additional_eni_tags: BTreeMap<String, String> = "ADDITIONAL_ENI_TAGS", "{}", Tags;
        /// Skip the sweep of detached ENIs this node created (leaked by a crash between
        /// create and attach, or a delete whose outcome was lost). The first sweep comes at a
        /// random time within 15 minutes of the start (at most the interval), then one every
        /// `VPCNET_LEAKED_ENI_SWEEP_INTERVAL`; it skips ENIs whose
        /// `node.k8s.amazonaws.com/createdAt` tag is less than 5 minutes old (an ENI without
        /// the tag is tagged now and swept later), as the VPC CNI does.
        disable_leaked_eni_cleanup: bool = "DISABLE_LEAKED_ENI_CLEANUP", "false", Flag;
        /// Seconds between leaked-ENI sweeps (one `DescribeNetworkInterfaces` each); every
        /// wait is stretched by a random 0–10 % so a fleet's nodes do not sweep in step. The
        /// VPC CNI sweeps hourly after a random delay of up to 5 minutes, with no setting.
        leaked_eni_sweep_interval_secs: u64 =
            "VPCNET_LEAKED_ENI_SWEEP_INTERVAL", "3600", Int::range(10, 86_400);
        /// The agent's log level (`RUST_LOG` overrides it).
        log_level: String = "AWS_VPC_K8S_CNI_LOGLEVEL", "DEBUG", LOG_LEVEL;
        /// Where the agent logs, as the VPC CNI's ipamd: `stdout` or `stderr` (the pod's log,
        /// `kubectl logs`), or a file, whose directory is created. The default is a path inside
        /// the `aws-node` container, where the DaemonSet mounts the node's
        /// `/var/log/aws-routed-eni`. A file is rotated by size as the VPC CNI rotates it: past
        /// 100 MiB it becomes `<file>.1` (the older ones `.2` to `.5`; the sixth is deleted),
        /// uncompressed (the VPC CNI gzips them and also deletes them after 30 days). A file
        /// that cannot be created or opened stops the agent at start, naming the path and the
        /// error (the VPC CNI runs on without its log). See [agent](agent.md#logging).
        log_file: String =
            "AWS_VPC_K8S_CNI_LOG_FILE", "/host/var/log/aws-routed-eni/ipamd.log", AGENT_LOG_FILE;
        /// After each ADD, annotate the pod `vpc.amazonaws.com/pod-ips` with its address
        /// (e.g. `10.0.1.23`) by a merge patch, before the ADD is answered, as the VPC CNI
        /// does (Calico reads it); DEL sets it to `""` when it still names the released
        /// address. A failed patch fails the ADD (the address is taken back; kubelet retries);
        /// a pod that is gone is not an error. Needs the Kubernetes API and `patch` on `pods`
        /// (see "Kubernetes API" below).
        annotate_pod_ip: bool = "ANNOTATE_POD_IP", "false", Flag;
        /// With `false` (the VPC CNI's default), while the agent's Node is tainted
        /// `node.kubernetes.io/unschedulable:NoSchedule` (cordoned) the pool does not grow:
        /// no ENI is created or attached and no address or prefix assigned, and no ENI is
        /// deleted; surplus addresses are still freed. `true`: ENIs are managed whatever the
        /// Node's state. Needs the Kubernetes API and `MY_NODE_NAME` (the agent watches its
        /// Node); without them the agent manages ENIs as with `true`.
        manage_enis_non_schedulable: bool = "AWS_MANAGE_ENIS_NON_SCHEDULABLE", "false", Flag;
        /// The agent provisions nothing: no ENI is created, attached, tagged or deleted, no
        /// secondary IP or prefix assigned or unassigned, no leaked ENI swept. Pods get the
        /// secondary IPs and prefixes already attached to the node's ENIs (by whoever
        /// provisions them), re-read at every periodic pass (IMDS, then an EC2
        /// `DescribeNetworkInterfaces` when IMDS disagrees with the pool), so addresses
        /// attached later serve pods and removed ones leave the pool once free. The warm
        /// targets and `MAX_ENI` have no effect. An ADD finding every attached address in use
        /// fails (`RESOURCE_EXHAUSTED`) saying so. Refused with custom networking and with
        /// `ADDITIONAL_ENI_TAGS` (both only shape ENIs the agent creates). See
        /// [agent](agent.md#no-provisioning-and-imds-only-mode).
        disable_network_resource_provisioning: bool =
            "DISABLE_NETWORK_RESOURCE_PROVISIONING", "false", Flag;
        /// As `DISABLE_NETWORK_RESOURCE_PROVISIONING=true` (implied), and the agent makes no
        /// EC2 call at all: the ENIs, their addresses and prefixes, subnet CIDRs and device
        /// numbers come from IMDS only. IMDS shows no tags, so an ENI tagged
        /// `node.k8s.amazonaws.com/no_manage=true` is used like any other, the node's subnet is
        /// never found tagged `kubernetes.io/role/cni=0`, and trunk and EFA ENIs cannot be told
        /// apart (ENIs on network cards the agent does not manage are still left alone). The instance type
        /// must be in the built-in limits table.
        enable_imds_only_mode: bool = "ENABLE_IMDS_ONLY_MODE", "false", Flag;

        ["endpoints"]
        /// Turn off the introspection server (VPC CNI).
        disable_introspection: bool = "DISABLE_INTROSPECTION", "false", Flag;
        /// Introspection address (VPC CNI).
        introspection_bind_address: BindAddress =
            "INTROSPECTION_BIND_ADDRESS", "127.0.0.1:61679", Bind;
        /// Turn off the metrics server (VPC CNI).
        disable_metrics: bool = "DISABLE_METRICS", "false", Flag;
        /// Metrics address (the VPC CNI's fixed port, all interfaces). See
        /// [metrics](metrics.md).
        metrics_bind_address: BindAddress = "VPCNET_METRICS_BIND_ADDRESS", ":61678", Bind;
        /// gRPC Unix socket for the CNI plugin (mode 0660).
        agent_socket: PathBuf = "VPCNET_AGENT_SOCKET", "/var/run/vpcnet/agent.sock", AbsPath;
        /// Checkpoint file (mode 0600).
        checkpoint_path: PathBuf = "VPCNET_CHECKPOINT_PATH", "/var/run/vpcnet/ipam.json", AbsPath;
        /// The VPC CNI's checkpoint: imported when the agent starts without a checkpoint of
        /// its own (the in-place swap from the VPC CNI), written by `vpcnet-agent
        /// export-vpc-cni-checkpoint` (the rollback). See
        /// [migration](migration.md).
        vpc_cni_checkpoint: PathBuf =
            "VPCNET_VPC_CNI_CHECKPOINT", "/var/run/aws-node/ipam.json", AbsPath;
        /// The container runtime's CNI cache (libcni's, used by containerd and CRI-O): at
        /// start, when the checkpoint is lost, corrupt or imported, the results cached there
        /// (`results/<network>-<container>-<interface>`) name the running pods' addresses,
        /// which the agent then holds. Read only; a missing directory is no evidence (no VPC
        /// CNI equivalent).
        cni_cache_dir: PathBuf = "VPCNET_CNI_CACHE_DIR", "/var/lib/cni", AbsPath;
        /// Conflist written once the pool can serve.
        cni_conflist: PathBuf =
            "VPCNET_CNI_CONFLIST", "/etc/cni/net.d/10-vpcnet.conflist", AbsPath;
        /// Seconds between periodic pool passes: datapath audit, node setup, freeing surplus,
        /// and the drift check, which reads the attached ENIs and their addresses from IMDS
        /// (local, not throttled) and describes them in EC2 only when IMDS disagrees with the
        /// pool, as the VPC CNI's reconcile does. An idle node makes no EC2 call.
        reconcile_interval_secs: u64 = "VPCNET_RECONCILE_INTERVAL", "30", Int::range(1, 86_400);
        /// Seconds after which a periodic pass describes the instance's ENIs in EC2 even when
        /// IMDS agrees with the pool (what IMDS does not show: tags such as `no_manage`,
        /// attachment IDs). Also forced by an EC2 call whose outcome is unknown, and when IMDS
        /// cannot be read. The VPC CNI has no such safety describe.
        ec2_reconcile_interval_secs: u64 =
            "VPCNET_EC2_RECONCILE_INTERVAL", "3600", Int::range(1, 86_400);
        /// Seconds after assignment before an address whose pod has no datapath on the node
        /// (no /32 route and no host veth, at two consecutive checks 5 s apart) is reclaimed.
        /// Must exceed the plugin's worst ADD from receiving the address to building its
        /// datapath (no VPC CNI equivalent).
        pod_reclaim_grace_secs: u64 = "VPCNET_POD_RECLAIM_GRACE", "60", Int::range(5, 86_400);
        /// Seconds EC2 work in flight (an ENI being created and attached, a release) may go on
        /// after SIGTERM before it is dropped, so the agent exits well within a pod's 30 s
        /// termination grace with its checkpoint written. An ENI created but not yet attached
        /// then is left detached with its tags, and the leaked-ENI sweep deletes it once it is
        /// 5 minutes old (no VPC CNI equivalent).
        shutdown_timeout_secs: u64 = "VPCNET_SHUTDOWN_TIMEOUT", "5", Int::range(1, 25);

        @group ec2: Ec2Settings;
    }
}

impl Config {
    /// The configuration from the process environment.
    pub fn from_process_env() -> Result<Config, ConfigError> {
        Config::from_lookup(&|k| std::env::var(k).ok())
    }

    /// The configuration from a map of variables (tests, `/v1/env-settings` round trips).
    pub fn from_map(vars: &HashMap<String, String>) -> Result<Config, ConfigError> {
        Config::from_lookup(&|k| vars.get(k).cloned())
    }

    /// The configuration from any variable lookup. Pure apart from calling `get`.
    ///
    /// Errors: every invalid variable, as a [`ConfigError`] naming each, its value and the
    /// accepted values.
    /// VPC CNI settings that vpcnet does not implement are checked too ([`vpc_cni`]): a value
    /// asking for behaviour vpcnet lacks is refused, reported with the invalid ones.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let read = Config::read(get);
        let refused = vpc_cni::check_all(get);
        let mut bad = match read {
            Ok(c) => {
                let conflicts = c.conflicts();
                if refused.is_empty() && conflicts.is_empty() {
                    return Ok(c);
                }
                conflicts
            }
            Err(invalid) => invalid,
        }
        .into_iter()
        .chain(refused);
        Err(ConfigError {
            first: bad
                .next()
                .expect("one invalid or refused variable at least"),
            rest: bad.collect(),
        })
    }

    /// The names among `names` (the process environment's) that look like settings of the
    /// VPC CNI or vpcnet but are neither ([`vpc_cni::unknown_variables`]), for a warning.
    pub fn unknown_variables<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        let declared: Vec<&str> = Config::declarations().iter().map(|d| d.var).collect();
        vpc_cni::unknown_variables(names, &declared)
    }

    /// Settings that are each valid but contradict another: refused, naming the variable,
    /// its value, why and what to do, rather than one of them silently doing nothing.
    /// With provisioning disabled (`DISABLE_NETWORK_RESOURCE_PROVISIONING` or
    /// `ENABLE_IMDS_ONLY_MODE`) no ENI is created, so settings that only shape the ENIs the
    /// agent creates (custom networking's subnet and security groups, extra tags) are refused.
    pub fn conflicts(&self) -> Vec<InvalidSetting> {
        let mut out = self.policy_conflicts();
        if self.ec2.throttle_pace_max_ms < self.ec2.throttle_pace_base_ms {
            out.push(InvalidSetting {
                var: "VPCNET_EC2_THROTTLE_PACE_MAX_MS",
                value: self.ec2.throttle_pace_max_ms.to_string(),
                problem: format!(
                    "the longest throttle hold is shorter than the first, \
                     VPCNET_EC2_THROTTLE_PACE_BASE_MS={}",
                    self.ec2.throttle_pace_base_ms
                ),
                accepted: "a value of at least VPCNET_EC2_THROTTLE_PACE_BASE_MS".into(),
                refused: false,
            });
        }
        let off = if self.enable_imds_only_mode {
            "ENABLE_IMDS_ONLY_MODE=true"
        } else if self.disable_network_resource_provisioning {
            "DISABLE_NETWORK_RESOURCE_PROVISIONING=true"
        } else {
            return out;
        };
        if self.custom_network_cfg {
            out.push(InvalidSetting {
                var: "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG",
                value: "true".into(),
                problem: format!(
                    "with {off} the agent creates no ENI, so the ENIConfig's subnet and \
                     security groups would never be used"
                ),
                accepted: format!(
                    "attach the ENIs in the ENIConfig's subnet yourself and remove \
                     AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG, or remove {off}"
                ),
                refused: true,
            });
        }
        if !self.additional_eni_tags.is_empty() {
            out.push(InvalidSetting {
                var: "ADDITIONAL_ENI_TAGS",
                value: serde_json::to_string(&self.additional_eni_tags).unwrap_or_default(),
                problem: format!(
                    "with {off} the agent creates and tags no ENI, so these tags would never \
                     be applied"
                ),
                accepted: format!(
                    "tag the ENIs where they are created and remove ADDITIONAL_ENI_TAGS (or set \
                     it to {{}}), or remove {off}"
                ),
                refused: true,
            });
        }
        out
    }

    /// Network policy settings that contradict another setting.
    fn policy_conflicts(&self) -> Vec<InvalidSetting> {
        let mut out = Vec::new();
        let node_agent = self.network_policy_agent == PolicyAgent::AwsEksNodeagent;
        if node_agent && self.enable_network_policy {
            out.push(InvalidSetting {
                var: "VPCNET_ENABLE_NETWORK_POLICY",
                value: "true".into(),
                problem: "VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent hands NetworkPolicy to \
                          the AWS node agent, and two enforcers on one node would each drop \
                          what the other allows"
                    .into(),
                accepted: "set VPCNET_ENABLE_NETWORK_POLICY=false (the chart's \
                           enableNetworkPolicy=false) to keep the node agent, or remove \
                           VPCNET_NETWORK_POLICY_AGENT to have vpcnet enforce"
                    .into(),
                refused: true,
            });
        }
        if self.network_policy_enforcing_mode == PolicyMode::Strict
            && !self.enable_network_policy
            && !node_agent
        {
            out.push(InvalidSetting {
                var: "NETWORK_POLICY_ENFORCING_MODE",
                value: "strict".into(),
                problem: "strict mode makes every pod no policy selects deny all traffic, which \
                          needs network policy enforcement, and VPCNET_ENABLE_NETWORK_POLICY is \
                          false"
                    .into(),
                accepted: "set VPCNET_ENABLE_NETWORK_POLICY=true (the chart's \
                           enableNetworkPolicy=true), or VPCNET_NETWORK_POLICY_AGENT=\
                           aws-eks-nodeagent with the node agent running, or set \
                           NETWORK_POLICY_ENFORCING_MODE to standard"
                    .into(),
                refused: true,
            });
        }
        if self.policy_event_logs && !self.enable_network_policy {
            out.push(InvalidSetting {
                var: "VPCNET_POLICY_EVENT_LOGS",
                value: "true".into(),
                problem: "policy event logs report the verdicts of network policy enforcement, \
                          and VPCNET_ENABLE_NETWORK_POLICY is false"
                    .into(),
                accepted: "set VPCNET_ENABLE_NETWORK_POLICY=true (the chart's \
                           enableNetworkPolicy=true), or set VPCNET_POLICY_EVENT_LOGS=false \
                           (the chart's nodeAgent.enablePolicyEventLogs=false)"
                    .into(),
                refused: true,
            });
        }
        if self.enable_network_policy && !self.node_datapath {
            out.push(InvalidSetting {
                var: "VPCNET_ENABLE_NETWORK_POLICY",
                value: "true".into(),
                problem: "network policy is enforced in the node's nftables, and \
                          VPCNET_NODE_DATAPATH=false turns the node datapath off"
                    .into(),
                accepted: "remove VPCNET_NODE_DATAPATH=false, or set \
                           VPCNET_ENABLE_NETWORK_POLICY=false"
                    .into(),
                refused: true,
            });
        }
        out
    }

    /// `IP_COOLDOWN_PERIOD` as a duration.
    pub fn ip_cooldown(&self) -> Duration {
        Duration::from_secs(self.ip_cooldown_period_secs)
    }

    /// `VPCNET_ADD_IP_WAIT` as a duration.
    pub fn add_ip_wait(&self) -> Duration {
        Duration::from_secs(self.add_ip_wait_secs)
    }

    /// `VPCNET_RECONCILE_INTERVAL` as a duration.
    pub fn reconcile_interval(&self) -> Duration {
        Duration::from_secs(self.reconcile_interval_secs)
    }

    /// Whether the warm pool is driven by IP targets (`WARM_IP_TARGET` or `MINIMUM_IP_TARGET`
    /// set), which override `WARM_ENI_TARGET` and `WARM_PREFIX_TARGET`.
    pub fn uses_ip_targets(&self) -> bool {
        self.warm_ip_target.is_some() || self.minimum_ip_target.is_some()
    }

    /// The EC2 client's call settings: token buckets, throttle pacing and deadline from [`Ec2Settings`],
    /// retry policy and attempt timeout at their defaults (attempt timeout capped by the call
    /// deadline).
    pub fn ec2_call_settings(&self) -> vpcnet_ec2::CallSettings {
        let defaults = vpcnet_ec2::CallSettings::default();
        let operation_timeout = Duration::from_secs(self.ec2.call_timeout_secs);
        vpcnet_ec2::CallSettings {
            operation_timeout,
            attempt_timeout: Duration::from_secs(self.ec2.http_timeout_secs).min(operation_timeout),
            retry: defaults.retry,
            describe_page_size: defaults.describe_page_size,
            describe_bucket: vpcnet_ec2::BucketConfig {
                capacity: self.ec2.describe_bucket_size,
                refill_per_sec: self.ec2.describe_refill_per_sec,
            },
            mutating_bucket: vpcnet_ec2::BucketConfig {
                capacity: self.ec2.mutating_bucket_size,
                refill_per_sec: self.ec2.mutating_refill_per_sec,
            },
            pace: vpcnet_ec2::PaceConfig {
                base: Duration::from_millis(self.ec2.throttle_pace_base_ms),
                max: Duration::from_millis(self.ec2.throttle_pace_max_ms)
                    .min(operation_timeout / 2),
            },
        }
    }

    /// Effective value of every variable, keyed by variable name, as the VPC CNI's
    /// `/v1/env-settings` reports them (unset optional values are empty strings). Reading
    /// them back with [`Config::from_map`] gives this configuration.
    pub fn env_settings(&self) -> BTreeMap<&'static str, String> {
        let mut out = BTreeMap::new();
        self.show(&mut out);
        out
    }
}

impl Default for Config {
    /// The configuration with no variable set.
    fn default() -> Self {
        Config::from_lookup(&|_| None).expect("defaults are valid")
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod declaration_tests;

#[cfg(test)]
mod provisioning_tests;

#[cfg(test)]
mod cluster_endpoint_tests;
