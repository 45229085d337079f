//! Everything `run` needs, already parsed and validated. Built from the environment
//! ([`crate::config::Config`], the VPC CNI's variable names) by [`options_from_config`], or
//! directly by tests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use vpcnet_ec2::{CallSettings, StaticCredentials};

use crate::config::{BindAddress, Config, RandomizeSnat};

/// Default checkpoint path.
pub const DEFAULT_CHECKPOINT: &str = "/var/run/vpcnet/ipam.json";
/// Default conflist path.
pub const DEFAULT_CONFLIST: &str = "/etc/cni/net.d/10-vpcnet.conflist";
/// Description prefix of the ENIs the agent creates (how leaked ones are found).
pub const ENI_DESCRIPTION_PREFIX: &str = "vpcnet-cni: ";
/// Tag keys the agent puts on ENIs it creates (the VPC CNI's).
pub const TAG_INSTANCE_ID: &str = "node.k8s.amazonaws.com/instance_id";
pub const TAG_CLUSTER_NAME: &str = "cluster.k8s.amazonaws.com/name";
pub const TAG_CREATED_AT: &str = "node.k8s.amazonaws.com/createdAt";
/// ENIs carrying this tag (any value but "false") are never touched (the VPC CNI's).
pub const TAG_NO_MANAGE: &str = "node.k8s.amazonaws.com/no_manage";

/// Warm-pool targets (the instance limits come from the instance type at start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    /// WARM_ENI_TARGET (default 1).
    pub warm_eni_target: u32,
    /// WARM_IP_TARGET.
    pub warm_ip_target: Option<u32>,
    /// MINIMUM_IP_TARGET.
    pub minimum_ip_target: Option<u32>,
    /// WARM_PREFIX_TARGET (default 1).
    pub warm_prefix_target: u32,
    /// ENABLE_PREFIX_DELEGATION.
    pub prefix_delegation: bool,
    /// MAX_ENI.
    pub max_eni: Option<u32>,
    /// ENABLE_MULTI_NIC: manage the ENIs of every network card, not card 0 alone.
    pub multi_nic: bool,
}

impl Default for Targets {
    fn default() -> Self {
        Targets {
            warm_eni_target: 1,
            warm_ip_target: None,
            minimum_ip_target: None,
            warm_prefix_target: 1,
            prefix_delegation: false,
            max_eni: None,
            multi_nic: false,
        }
    }
}

/// Agent settings: values only. What the agent talks to (cloud, node network, checkpoint
/// store) is handed in beside them as [`crate::AgentDeps`].
#[derive(Debug, Clone, PartialEq)]
pub struct AgentOptions {
    pub targets: Targets,
    /// Cooldown of a released address before reuse (IP_COOLDOWN_PERIOD, default 30 s).
    pub cooldown: Duration,
    /// How long an ADD that finds no free address waits for the pool to grow before it
    /// fails with UNAVAILABLE (VPCNET_ADD_IP_WAIT, default 5 s; zero = fail at once).
    pub add_ip_wait: Duration,
    /// How long an address must stay free before it is returned to EC2 as surplus.
    pub surplus_hold: Duration,
    /// With prefix delegation, the first wait before prefixes are asked for again after a
    /// fragmented subnet refused one (VPCNET_PREFIX_RETRY, default 2 min).
    pub prefix_retry: Duration,
    /// Period of the periodic pass (datapath audit, node setup, IMDS drift check, plan incl.
    /// freeing surplus; VPCNET_RECONCILE_INTERVAL, default 30 s). It describes in EC2 only
    /// when IMDS disagrees with the pool or `ec2_reconcile_interval` has passed.
    pub reconcile_interval: Duration,
    /// Longest time between two EC2 describes of the instance's ENIs while IMDS agrees with
    /// the pool (VPCNET_EC2_RECONCILE_INTERVAL, default 1 h).
    pub ec2_reconcile_interval: Duration,
    /// gRPC Unix socket (default /var/run/vpcnet/agent.sock), created with mode 0660.
    pub socket_path: PathBuf,
    /// Checkpoint file (default /var/run/vpcnet/ipam.json), mode 0600.
    pub checkpoint_path: PathBuf,
    /// The VPC CNI's checkpoint (VPCNET_VPC_CNI_CHECKPOINT, default
    /// /var/run/aws-node/ipam.json), imported at start when `checkpoint_path` has none
    /// ([`crate::vpc_cni_checkpoint`]); `None` = never import.
    pub vpc_cni_checkpoint: Option<PathBuf>,
    /// The container runtime's CNI cache directory (VPCNET_CNI_CACHE_DIR, default
    /// /var/lib/cni): evidence of running pods at start ([`crate::recovery`]); `None` = not
    /// consulted.
    pub cni_cache_dir: Option<PathBuf>,
    /// Introspection bind address (default 127.0.0.1:61679); `None` = DISABLE_INTROSPECTION.
    pub introspection_addr: Option<SocketAddr>,
    /// Metrics bind address (default 0.0.0.0:61678); `None` = DISABLE_METRICS.
    pub metrics_addr: Option<SocketAddr>,
    /// Introspection on a Unix socket instead (INTROSPECTION_BIND_ADDRESS=unix:/path).
    pub introspection_socket: Option<PathBuf>,
    /// Metrics on a Unix socket instead (VPCNET_METRICS_BIND_ADDRESS=unix:/path).
    pub metrics_socket: Option<PathBuf>,
    /// Conflist to write once the pool can serve; `None` = do not write one.
    pub conflist_path: Option<PathBuf>,
    /// Conflist contents (socket path is filled from `socket_path`).
    pub conflist: vpcnet_cni_config::ConflistSettings,
    /// CLUSTER_NAME, tagged on created ENIs.
    pub cluster_name: String,
    /// AWS_VPC_K8S_CNI_EXTERNALSNAT: no SNAT (and no SNAT connmark) on the node.
    pub external_snat: bool,
    /// AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS: destinations never SNATed, besides the VPC CIDRs.
    pub exclude_snat_cidrs: Vec<ipnet::Ipv4Net>,
    /// AWS_VPC_K8S_CNI_RANDOMIZESNAT (default `prng`, nft `fully-random`).
    pub randomize_snat: vpcnet_datapath::firewall::RandomizeSnat,
    /// AWS_VPC_CNI_NODE_PORT_SUPPORT (default true): connmark so replies to traffic that
    /// arrived on the primary ENI leave by it; loose rp_filter on it.
    pub node_port_support: bool,
    /// AWS_VPC_ENI_MTU (default 9001).
    pub mtu: u32,
    /// POD_MTU: the pod interfaces' MTU in the conflist; `None` = `mtu`.
    pub pod_mtu: Option<u32>,
    /// ENABLE_SUBNET_DISCOVERY (without custom networking): new ENIs go to the subnet of the
    /// node's VPC and zone with the most free addresses among the node's and those tagged
    /// `kubernetes.io/role/cni` ([`crate::reconciler::subnet_discovery`]). Off by default
    /// here (tests); on by default from the environment, as in the VPC CNI.
    pub subnet_discovery: bool,
    /// Security groups for new ENIs; empty = the primary ENI's (from IMDS).
    pub security_groups: Vec<String>,
    /// Subnet for new ENIs; `None` = the primary ENI's.
    pub subnet_id: Option<String>,
    /// IMDS endpoint (`AWS_EC2_METADATA_SERVICE_ENDPOINT`); `None` = 169.254.169.254.
    pub imds_endpoint: Option<String>,
    /// EC2 endpoint (`AWS_ENDPOINT_URL_EC2`); `None` = the SDK's resolution.
    pub ec2_endpoint: Option<String>,
    /// Region; `None` = IMDS `placement/region`.
    pub region: Option<String>,
    /// Explicit credentials (tests, lab); `None` = the SDK chain.
    pub credentials: Option<StaticCredentials>,
    /// Deadlines, retries and client-side rate limits of EC2 calls.
    pub ec2_calls: CallSettings,
    /// Environment shown by /v1/env-settings (name → value).
    pub env_settings: Vec<(String, String)>,
    /// ADDITIONAL_ENI_TAGS: extra tags on created ENIs.
    pub additional_eni_tags: std::collections::BTreeMap<String, String>,
    /// Delete this instance's detached ENIs (leaks) soon after start and then every
    /// `leaked_eni_sweep_interval`; DISABLE_LEAKED_ENI_CLEANUP turns it off.
    pub sweep_leaked_enis: bool,
    /// The first sweep comes at a random time within this much of the start (the
    /// configuration's: [`crate::reconciler::FIRST_SWEEP_SPREAD`], capped by the interval), so
    /// a fleet booting together does not spend the account's describe burst on it. Zero (the
    /// default of these options, which tests use): at start.
    pub leaked_eni_first_sweep_spread: Duration,
    /// Period of the leaked-ENI sweep (VPCNET_LEAKED_ENI_SWEEP_INTERVAL, default 1 h), each
    /// wait stretched by a random 0–10 %.
    pub leaked_eni_sweep_interval: Duration,
    /// ENIs younger than this (by their `node.k8s.amazonaws.com/createdAt` tag) are never
    /// swept: they may be between create and attach in this or a previous agent. 5 minutes,
    /// the VPC CNI's `eniDeleteCooldownTime`.
    pub leaked_eni_min_age: Duration,
    /// How long after assignment a pod's missing datapath can get its address reclaimed
    /// (VPCNET_POD_RECLAIM_GRACE, default 60 s): longer than the plugin's worst ADD between
    /// receiving the address and building the route and veth.
    pub pod_reclaim_grace: Duration,
    /// Period of the pod-datapath check behind the reclaim (a route and link dump; default
    /// 5 s). An address is freed only after two consecutive checks miss its pod.
    pub pod_reclaim_interval: Duration,
    /// The Kubernetes API client's endpoint and credentials (`CLUSTER_ENDPOINT`, the pod's
    /// `KUBERNETES_SERVICE_HOST`/`_PORT` and service account, `MY_NODE_NAME`); by default none
    /// (the client stays disabled).
    pub api: crate::kubernetes::ApiSettings,
    /// How long EC2 work in flight may go on after the stop signal (SIGTERM) before it is
    /// dropped (VPCNET_SHUTDOWN_TIMEOUT, default 5 s; well under a pod's 30 s grace). An ENI
    /// created but not yet attached when its work is dropped is left detached with its tags
    /// (instance ID, `createdAt`), and the leaked-ENI sweep deletes it once it is old enough.
    pub shutdown_timeout: Duration,
    /// AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG: `Some` = custom networking, with the Node
    /// annotation and label keys that choose the ENIConfig (`ENI_CONFIG_ANNOTATION_DEF`,
    /// `ENI_CONFIG_LABEL_DEF`); the agent watches its Node and the ENIConfigs.
    pub custom_networking: Option<crate::kubernetes::eniconfig::SelectionKeys>,
    /// ANNOTATE_POD_IP: annotate each pod `vpc.amazonaws.com/pod-ips` with its address at ADD
    /// (cleared at DEL) through the Kubernetes API ([`crate::kubernetes::pod_ips`]).
    pub annotate_pod_ip: bool,
    /// VPCNET_ENABLE_NETWORK_POLICY with NETWORK_POLICY_ENFORCING_MODE: `Some(mode)` = the
    /// agent enforces NetworkPolicy ([`crate::network_policy`]); `None` = off (the table is
    /// removed at start).
    pub network_policy: Option<vpcnet_policy::Mode>,
    /// VPCNET_POLICY_EVENT_LOGS with VPCNET_POLICY_EVENT_LOG_FILE: where the policy event log
    /// is written (`stdout`, `stderr` or a file), with network policy on; `None` = no events
    /// ([`crate::network_policy::events`]).
    pub policy_event_log: Option<String>,
    /// VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent: the AWS node agent enforces
    /// NetworkPolicy ([`crate::grpc::node_agent`]); `None` = it is not used.
    pub node_agent: Option<NodeAgent>,
    /// AWS_MANAGE_ENIS_NON_SCHEDULABLE: `false` pauses pool growth and ENI deletion while the
    /// Node is cordoned ([`crate::kubernetes::node_watch`]); `true` (and the default of these
    /// options, for tests) manages ENIs whatever the Node's state.
    pub manage_enis_non_schedulable: bool,
    /// DISABLE_NETWORK_RESOURCE_PROVISIONING / ENABLE_IMDS_ONLY_MODE: whether the agent
    /// provisions ENIs and addresses, and whether it calls EC2 at all
    /// ([`crate::provisioning`]).
    pub provisioning: crate::provisioning::Provisioning,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            targets: Targets::default(),
            cooldown: Duration::from_millis(vpcnet_ipam::DEFAULT_COOLDOWN_MS),
            surplus_hold: Duration::from_millis(vpcnet_ipam::DEFAULT_COOLDOWN_MS),
            prefix_retry: Duration::from_millis(vpcnet_ipam::DEFAULT_PREFIX_RETRY_MS),
            reconcile_interval: Duration::from_secs(30),
            ec2_reconcile_interval: Duration::from_secs(3600),
            add_ip_wait: Duration::from_secs(5),
            socket_path: PathBuf::from(vpcnet_proto::DEFAULT_SOCKET),
            checkpoint_path: PathBuf::from(DEFAULT_CHECKPOINT),
            vpc_cni_checkpoint: None,
            cni_cache_dir: None,
            introspection_addr: Some(SocketAddr::from(([127, 0, 0, 1], 61679))),
            metrics_addr: Some(SocketAddr::from(([0, 0, 0, 0], 61678))),
            introspection_socket: None,
            metrics_socket: None,
            conflist_path: Some(PathBuf::from(DEFAULT_CONFLIST)),
            conflist: vpcnet_cni_config::ConflistSettings::default(),
            cluster_name: String::new(),
            external_snat: false,
            exclude_snat_cidrs: Vec::new(),
            randomize_snat: vpcnet_datapath::firewall::RandomizeSnat::Prng,
            node_port_support: true,
            mtu: 9001,
            pod_mtu: None,
            subnet_discovery: false,
            security_groups: Vec::new(),
            subnet_id: None,
            imds_endpoint: None,
            ec2_endpoint: None,
            region: None,
            credentials: None,
            ec2_calls: CallSettings::default(),
            env_settings: Vec::new(),
            additional_eni_tags: Default::default(),
            sweep_leaked_enis: true,
            leaked_eni_first_sweep_spread: Duration::ZERO,
            leaked_eni_sweep_interval: Duration::from_secs(3600),
            leaked_eni_min_age: Duration::from_secs(300),
            pod_reclaim_grace: Duration::from_secs(60),
            pod_reclaim_interval: Duration::from_secs(5),
            custom_networking: None,
            api: crate::kubernetes::ApiSettings {
                service_account_dir: PathBuf::from(crate::kubernetes::client::SERVICE_ACCOUNT_DIR),
                ..Default::default()
            },
            shutdown_timeout: Duration::from_secs(5),
            annotate_pod_ip: false,
            network_policy: None,
            policy_event_log: None,
            node_agent: None,
            manage_enis_non_schedulable: true,
            provisioning: Default::default(),
        }
    }
}

/// Options from the environment configuration (`config.rs`).
pub fn options_from_config(c: &Config) -> anyhow::Result<AgentOptions> {
    let provisioning = crate::provisioning::Provisioning::from_settings(
        c.disable_network_resource_provisioning,
        c.enable_imds_only_mode,
    );
    let tcp = |b: &BindAddress| match b {
        BindAddress::Tcp(a) => Some(*a),
        BindAddress::Unix(_) => None,
    };
    let unix = |b: &BindAddress| match b {
        BindAddress::Tcp(_) => None,
        BindAddress::Unix(p) => Some(p.clone()),
    };
    let conflist = vpcnet_cni_config::ConflistSettings {
        veth_prefix: c.veth_prefix.clone(),
        plugin_log_file: c.plugin_log_file.clone(),
        plugin_log_level: c.plugin_log_level.clone(),
        bandwidth: c.enable_bandwidth_plugin,
        disable_pod_v6: c.disable_pod_v6,
        ..Default::default()
    };
    Ok(AgentOptions {
        targets: Targets {
            warm_eni_target: c.warm_eni_target,
            warm_ip_target: c.warm_ip_target,
            minimum_ip_target: c.minimum_ip_target,
            warm_prefix_target: c.warm_prefix_target.unwrap_or(1),
            prefix_delegation: c.enable_prefix_delegation,
            max_eni: c.max_eni,
            multi_nic: c.enable_multi_nic,
        },
        cooldown: c.ip_cooldown(),
        reconcile_interval: c.reconcile_interval(),
        ec2_reconcile_interval: Duration::from_secs(c.ec2_reconcile_interval_secs),
        add_ip_wait: c.add_ip_wait(),
        prefix_retry: Duration::from_secs(c.prefix_retry_secs),
        socket_path: c.agent_socket.clone(),
        checkpoint_path: c.checkpoint_path.clone(),
        vpc_cni_checkpoint: Some(c.vpc_cni_checkpoint.clone()),
        cni_cache_dir: Some(c.cni_cache_dir.clone()),
        introspection_addr: (!c.disable_introspection)
            .then(|| tcp(&c.introspection_bind_address))
            .flatten(),
        introspection_socket: (!c.disable_introspection)
            .then(|| unix(&c.introspection_bind_address))
            .flatten(),
        metrics_addr: (!c.disable_metrics)
            .then(|| tcp(&c.metrics_bind_address))
            .flatten(),
        metrics_socket: (!c.disable_metrics)
            .then(|| unix(&c.metrics_bind_address))
            .flatten(),
        conflist_path: Some(c.cni_conflist.clone()),
        conflist,
        cluster_name: c.cluster_name.clone(),
        external_snat: c.external_snat,
        exclude_snat_cidrs: c.exclude_snat_cidrs.clone(),
        randomize_snat: match c.randomize_snat {
            RandomizeSnat::None => vpcnet_datapath::firewall::RandomizeSnat::None,
            RandomizeSnat::Hashrandom => vpcnet_datapath::firewall::RandomizeSnat::Hashrandom,
            RandomizeSnat::Prng => vpcnet_datapath::firewall::RandomizeSnat::Prng,
        },
        node_port_support: c.node_port_support,
        mtu: c.eni_mtu,
        pod_mtu: c.pod_mtu,
        subnet_discovery: c.enable_subnet_discovery,
        ec2_endpoint: c.ec2.endpoint.clone(),
        imds_endpoint: std::env::var("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            .ok()
            .filter(|s| !s.is_empty()),
        ec2_calls: c.ec2_call_settings(),
        env_settings: c
            .env_settings()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        additional_eni_tags: c.additional_eni_tags.clone(),
        // Without provisioning the agent deletes nothing, leaked ENIs included (as the VPC CNI).
        sweep_leaked_enis: !c.disable_leaked_eni_cleanup && provisioning.provisions(),
        leaked_eni_sweep_interval: Duration::from_secs(c.leaked_eni_sweep_interval_secs),
        leaked_eni_first_sweep_spread: crate::reconciler::FIRST_SWEEP_SPREAD
            .min(Duration::from_secs(c.leaked_eni_sweep_interval_secs)),
        pod_reclaim_grace: Duration::from_secs(c.pod_reclaim_grace_secs),
        shutdown_timeout: Duration::from_secs(c.shutdown_timeout_secs),
        api: crate::kubernetes::ApiSettings {
            cluster_endpoint: Some(c.cluster_endpoint.clone()).filter(|v| !v.is_empty()),
            // Set by kubelet in every pod (not operator settings, so not declared in config).
            service_host: std::env::var("KUBERNETES_SERVICE_HOST").ok(),
            service_port: std::env::var("KUBERNETES_SERVICE_PORT").ok(),
            service_account_dir: PathBuf::from(crate::kubernetes::client::SERVICE_ACCOUNT_DIR),
            node_name: Some(c.my_node_name.clone()).filter(|v| !v.is_empty()),
        },
        custom_networking: c.custom_network_cfg.then(|| {
            crate::kubernetes::eniconfig::SelectionKeys {
                annotation: c.eni_config_annotation_def.clone(),
                label: c.eni_config_label_def.clone(),
            }
        }),
        annotate_pod_ip: c.annotate_pod_ip,
        network_policy: c
            .enable_network_policy
            .then_some(match c.network_policy_enforcing_mode {
                crate::config::PolicyMode::Standard => vpcnet_policy::Mode::Standard,
                crate::config::PolicyMode::Strict => vpcnet_policy::Mode::Strict,
            }),
        policy_event_log: (c.enable_network_policy && c.policy_event_logs)
            .then(|| c.policy_event_log_file.clone()),
        node_agent: (c.network_policy_agent == crate::config::PolicyAgent::AwsEksNodeagent).then(
            || NodeAgent {
                mode: c.network_policy_enforcing_mode.to_string(),
                ipamd_socket: c.ipamd_socket.clone(),
            },
        ),
        manage_enis_non_schedulable: c.manage_enis_non_schedulable,
        provisioning,
        ..AgentOptions::default()
    })
}

/// The AWS node agent's contract (VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAgent {
    /// NETWORK_POLICY_ENFORCING_MODE as the node agent accepts it: `standard` or `strict`
    /// (`none` is sent as `standard`: the node agent refuses `none`).
    pub mode: String,
    /// Where `GetNetworkPolicyConfigs` is served (VPCNET_IPAMD_SOCKET).
    pub ipamd_socket: PathBuf,
}
