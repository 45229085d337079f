//! Prometheus metrics of the agent, under the VPC CNI's metric names where a counterpart
//! exists (`awscni_*`, as published by amazon-vpc-cni-k8s's ipamd on `:61678/metrics`), and
//! `vpcnet_*` names for additions.
//!
//! Each metric is declared once in the `metrics!` block below: field, type and labels,
//! exposed name, help text, meaning (its doc comment) and, for the metrics the rest of the
//! agent sets, the name and shape of its setter. Registration, the setters and the tables of
//! `docs/metrics.md` come from that declaration; a test checks the page against the registry. A new
//! metric is one more entry, then `UPDATE_DOCS=1 cargo test -p vpcnet-agent docs_are_current`.
//!
//! Encoding is OpenMetrics text ([`CONTENT_TYPE`]). Two deliberate deviations keep the VPC
//! CNI's series names intact for existing dashboards and alerts:
//! - its counters (`awscni_*_count`, `awscni_force_removed_*`,
//!   `awscni_no_available_ip_addresses`) are exposed with OpenMetrics type `unknown`, so the
//!   sample names carry no `_total` suffix;
//! - its summary `awscni_aws_api_latency_ms` is a histogram here: `_sum` and `_count` keep their
//!   names, `_bucket` replaces the quantiles.

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use vpcnet_ec2::{Action, Ec2Error, Ec2Observer};

/// HTTP `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

mod kinds;
pub use kinds::{Declared, Labelled, MetricDeclaration, PlainCounter};

/// The setter a declaration asks for: `set` (gauge = n), `inc` (counter + 1), `add`
/// (counter + n), `inc_label` (one labelled counter + 1), `replace` (a one-label gauge family
/// replaced by the given series, so vanished label values disappear); none for `[]`.
macro_rules! setter {
    ([] $field:ident, $(#[$doc:meta])*) => {};
    ([set $setter:ident] $field:ident, $(#[$doc:meta])*) => {
        $(#[$doc])*
        pub fn $setter(&self, n: u64) {
            self.$field.set(n as i64);
        }
    };
    ([inc $setter:ident] $field:ident, $(#[$doc:meta])*) => {
        $(#[$doc])*
        pub fn $setter(&self) {
            self.$field.inc();
        }
    };
    ([add $setter:ident] $field:ident, $(#[$doc:meta])*) => {
        $(#[$doc])*
        pub fn $setter(&self, n: u64) {
            self.$field.inc_by(n);
        }
    };
    ([inc_label $setter:ident] $field:ident, $(#[$doc:meta])*) => {
        $(#[$doc])*
        pub fn $setter(&self, label: &str) {
            self.$field.with_series([label], |c| c.inc());
        }
    };
    ([replace $setter:ident] $field:ident, $(#[$doc:meta])*) => {
        $(#[$doc])*
        pub fn $setter<'a>(&self, series: impl IntoIterator<Item = (&'a str, u64)>) {
            self.$field.clear();
            for (label, n) in series {
                self.$field.with_series([label], |g| g.set(n as i64));
            }
        }
    };
}

/// Declares the registry struct: `["section"]` headers (the id of a docs/metrics.md table; they
/// may repeat, entries keep registration order), then per metric
/// `/// meaning` + `field: Type = initial value, "exposed_name", "help" [=> op setter];`.
macro_rules! metrics {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                [$section:literal]
                $(
                    $(#[doc = $doc:literal])*
                    $field:ident: $ty:ty = $init:expr, $metric:literal, $help:literal
                        $(=> $op:ident $setter:ident)?;
                )*
            )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            registry: Registry,
            $($(
                #[doc = concat!("`", $metric, "`:")]
                $(#[doc = $doc])*
                $field: $ty,
            )*)*
        }

        impl $name {
            /// A registry with every metric registered (families appear once they have a
            /// series).
            pub fn new() -> Self {
                let mut registry = Registry::default();
                $($(
                    let $field: $ty = $init;
                    Declared::register(&$field, &mut registry, $metric, $help);
                )*)*
                $name { registry, $($($field,)*)* }
            }

            /// Every metric, in registration order.
            pub fn declarations(&self) -> Vec<MetricDeclaration> {
                vec![$($(
                    MetricDeclaration {
                        name: $metric,
                        help: $help,
                        section: $section,
                        doc: concat!($($doc, "\n"),*),
                        doc_type: Declared::doc_type(&self.$field),
                        labels: Declared::label_names(&self.$field).to_vec(),
                    },
                )*)*]
            }

            $($(
                setter!(
                    [$($op $setter)?] $field,
                    #[doc = concat!("`", $metric, "`:")]
                    $(#[doc = $doc])*
                );
            )*)*
        }
    };
}

fn api_latency_histogram() -> Histogram {
    // 5 ms .. ~41 s
    Histogram::new(exponential_buckets(5.0, 2.0, 14))
}

fn action_latency_histogram() -> Histogram {
    // 0.25 ms .. ~33 s
    Histogram::new(exponential_buckets(0.25, 2.0, 18))
}

fn watch_apply_histogram() -> Histogram {
    // 1 ms .. ~16 s
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn ms(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

metrics! {
    /// The agent's metrics registry. Share it as `Arc<Metrics>`; pass the same `Arc` to
    /// [`vpcnet_ec2::Ec2::connect`] as the [`Ec2Observer`].
    #[derive(Debug)]
    pub struct Metrics {
        ["ipamd"]
        /// Errors inside ipamd, by function.
        ipamd_error_count: Labelled<PlainCounter, 1> = Labelled::new(["fn"]),
            "awscni_ipamd_error_count", "The number of errors encountered in ipamd"
            => inc_label inc_ipamd_error;
        /// ipamd actions (e.g. `increaseIPPool`, `decreaseIPPool`) running now.
        ipamd_action_inprogress: Labelled<Gauge, 1> = Labelled::new(["fn"]),
            "awscni_ipamd_action_inprogress", "The number of ipamd actions in progress";
        ["pool"]
        /// ENIs the node may hold: the instance type's limit, capped by `MAX_ENI`.
        eni_max: Gauge = Gauge::default(),
            "awscni_eni_max", "The maximum number of ENIs that can be attached to the instance"
            => set set_eni_max;
        /// Pod addresses the node may hold at its ENI limit.
        ip_max: Gauge = Gauge::default(),
            "awscni_ip_max",
            "The maximum number of IP addresses that can be allocated to the instance"
            => set set_ip_max;
        ["ipamd"]
        /// Reconcile passes against EC2, by kind.
        reconcile_count: Labelled<PlainCounter, 1> = Labelled::new(["fn"]),
            "awscni_reconcile_count",
            "The number of times ipamd reconciled ENIs and IP addresses with EC2"
            => inc_label inc_reconcile;
        /// `DescribeNetworkInterfaces` of the instance by periodic or forced passes, by reason:
        /// `drift` (IMDS disagreed with the pool), `unsettled` (an EC2 outcome was unknown),
        /// `interval` (`VPCNET_EC2_RECONCILE_INTERVAL` passed), `imds_error` (IMDS unreadable).
        /// An idle node with IMDS in agreement adds nothing.
        ec2_describe_count: Labelled<PlainCounter, 1> = Labelled::new(["reason"]),
            "vpcnet_ec2_describe_count",
            "The number of EC2 describes of the instance's ENIs by the reconciler, by reason"
            => inc_label inc_ec2_describe;
        ["requests"]
        /// AddNetwork requests received.
        add_ip_req_count: PlainCounter = PlainCounter::default(),
            "awscni_add_ip_req_count", "The number of add IP address requests"
            => inc inc_add_ip_req;
        /// DelNetwork requests received, by reason (e.g. `PodDeleted`).
        del_ip_req_count: Labelled<PlainCounter, 1> = Labelled::new(["reason"]),
            "awscni_del_ip_req_count", "The number of delete IP address requests"
            => inc_label inc_del_ip_req;
        ["ec2"]
        /// Request latency in milliseconds (5 ms … 41 s buckets); `error` is `true` or
        /// `false`, `status` is `200` or the error code.
        aws_api_latency_ms: Labelled<Histogram, 3> =
            Labelled::with(["api", "error", "status"], api_latency_histogram),
            "awscni_aws_api_latency_ms", "AWS API request latency in ms";
        /// Failed requests by EC2 error code (e.g. `RequestLimitExceeded`,
        /// `AttachmentLimitExceeded`; `Timeout`, `Transport` for non-answers).
        aws_api_error_count: Labelled<PlainCounter, 2> = Labelled::new(["api", "error"]),
            "awscni_aws_api_error_count",
            "The number of times an AWS API request returned an error";
        /// Requests sent to EC2.
        ec2api_req_count: Labelled<PlainCounter, 1> = Labelled::new(["fn"]),
            "awscni_ec2api_req_count", "The number of requests made to EC2 APIs";
        /// Requests EC2 answered with an error, or that failed in transport or timed out.
        ec2api_error_count: Labelled<PlainCounter, 1> = Labelled::new(["fn"]),
            "awscni_ec2api_error_count", "The number of failed EC2 API requests";
        ["pool"]
        /// ENIs attached and managed, the primary included.
        eni_allocated: Gauge = Gauge::default(),
            "awscni_eni_allocated", "The number of ENIs allocated"
            => set set_eni_allocated;
        /// Pod IPv4 addresses held on the node's ENIs (free, assigned and cooling down; /28
        /// prefixes count 16).
        total_ip_addresses: Gauge = Gauge::default(),
            "awscni_total_ip_addresses", "The total number of IP addresses"
            => set set_total_ip_addresses;
        /// Addresses assigned to pods.
        assigned_ip_addresses: Gauge = Gauge::default(),
            "awscni_assigned_ip_addresses", "The number of IP addresses assigned to pods"
            => set set_assigned_ip_addresses;
        ["ipamd"]
        /// ENIs removed while pods still had addresses on them (EC2 said they were gone).
        force_removed_enis: PlainCounter = PlainCounter::default(),
            "awscni_force_removed_enis",
            "The number of ENIs force removed while they had assigned pods"
            => add inc_force_removed_enis;
        /// Assigned addresses removed because EC2 no longer listed them.
        force_removed_ips: PlainCounter = PlainCounter::default(),
            "awscni_force_removed_ips",
            "The number of IPs force removed while they had assigned pods"
            => add inc_force_removed_ips;
        ["pool"]
        /// /28 prefixes held (prefix delegation).
        total_ipv4_prefixes: Gauge = Gauge::default(),
            "awscni_total_ipv4_prefixes", "The total number of IPv4 prefixes"
            => set set_total_ipv4_prefixes;
        /// Assigned addresses per secondary /32 or /28 prefix.
        assigned_ip_per_cidr: Labelled<Gauge, 1> = Labelled::new(["cidr"]),
            "awscni_assigned_ip_per_cidr", "The number of IP addresses assigned per CIDR"
            => replace set_assigned_ip_per_cidr;
        ["requests"]
        /// AddNetwork requests that failed for lack of a free address.
        no_available_ip_addresses: PlainCounter = PlainCounter::default(),
            "awscni_no_available_ip_addresses",
            "The number of pod IP assignments that failed for lack of a free IP address"
            => inc inc_no_available_ip;
        ["pool"]
        /// Assigned addresses per ENI.
        assigned_ip_per_eni: Labelled<Gauge, 1> = Labelled::new(["eni"]),
            "awscni_assigned_ip_per_eni", "The number of assigned IP addresses per ENI"
            => replace set_assigned_ip_per_eni;
        /// Released addresses still in their `IP_COOLDOWN_PERIOD`; not assignable.
        cooldown_ip_addresses: Gauge = Gauge::default(),
            "vpcnet_cooldown_ip_addresses",
            "The number of released IP addresses still in their cooldown period"
            => set set_cooldown_ip_addresses;
        ["ipamd"]
        /// Duration of ipamd actions in milliseconds (0.25 ms … 33 s buckets).
        ipamd_action_latency_ms: Labelled<Histogram, 1> =
            Labelled::with(["fn"], action_latency_histogram),
            "vpcnet_ipamd_action_latency_ms", "Latency of ipamd actions in ms";
        ["ec2"]
        /// Calls delayed by the agent's own token bucket (`VPCNET_EC2_*_BUCKET_SIZE`,
        /// `*_REFILL_RATE`) before being sent.
        ec2_ratelimited_count: Labelled<PlainCounter, 1> = Labelled::new(["fn"]),
            "vpcnet_ec2_ratelimited_count",
            "The number of EC2 calls delayed by the client-side token bucket";
        /// Calls that still failed after every retry (what the agent acted on).
        ec2_call_error_count: Labelled<PlainCounter, 2> = Labelled::new(["api", "error"]),
            "vpcnet_ec2_call_error_count", "The number of EC2 calls that failed after retries";
        ["kubernetes"]
        /// 1 while the Kubernetes API client reaches the API server (`CLUSTER_ENDPOINT` or the
        /// `kubernetes` Service), else 0. IPAM never depends on it.
        apiserver_connected: Gauge = Gauge::default(),
            "vpcnet_apiserver_connected",
            "Whether the agent's Kubernetes API client is connected (1) or not (0)"
            => set set_apiserver_connected;
        /// Connection attempts of the Kubernetes API client (with backoff, 0.5 s to 10 s).
        apiserver_connect_attempts: PlainCounter = PlainCounter::default(),
            "vpcnet_apiserver_connect_attempts",
            "The number of attempts to connect to the Kubernetes API server"
            => inc inc_apiserver_connect_attempts;
        /// 1 when the Node's `capacity.pods` (kubelet `maxPods`) exceeds the pods the node's
        /// ENIs can give addresses to: pods beyond that stay ContainerCreating. A Warning Event
        /// on the Node names the fix.
        max_pods_exceeds_pod_ips: Gauge = Gauge::default(),
            "vpcnet_max_pods_exceeds_pod_ips",
            "Whether kubelet maxPods exceeds the pod IPs the node can get (1) or not (0)"
            => set set_max_pods_exceeds_pod_ips;
        /// With custom networking (`AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true`): 1 while the
        /// node's ENIConfig is resolved and valid, 0 while it is missing, invalid or not known
        /// yet (no ENI is created then; `/v1/eniconfig` and the Node condition
        /// `vpcnet.io/ENIConfigResolved` say why). Always 0 without custom networking.
        eniconfig_resolved: Gauge = Gauge::default(),
            "vpcnet_eniconfig_resolved",
            "Whether the node's ENIConfig is resolved (1) or not (0) under custom networking"
            => set set_eniconfig_resolved;
        /// 1 while the Node is unschedulable (taint `node.kubernetes.io/unschedulable`) and
        /// `AWS_MANAGE_ENIS_NON_SCHEDULABLE` is false: the pool neither grows nor deletes
        /// ENIs. 0 otherwise, and always 0 without the Kubernetes API.
        eni_management_paused: Gauge = Gauge::default(),
            "vpcnet_eni_management_paused",
            "Whether ENI management is paused because the Node is unschedulable (1) or not (0)"
            => set set_eni_management_paused;
        /// How the pool gets its addresses, one series set to 1: `mode="ec2"` (the agent
        /// provisions ENIs and addresses), `"disabled"` (`DISABLE_NETWORK_RESOURCE_PROVISIONING`:
        /// only what is attached) or `"imds-only"` (`ENABLE_IMDS_ONLY_MODE`: only what IMDS
        /// lists, no EC2 call). Set at start.
        provisioning_mode: Labelled<Gauge, 1> = Labelled::new(["mode"]),
            "vpcnet_provisioning_mode",
            "How the pool gets its addresses (the series with value 1): ec2, disabled or imds-only"
            => replace set_provisioning_mode;
        /// 1 while prefix delegation falls back to secondary /32 addresses because a prefix
        /// request found no free aligned /28 in the subnet (`InsufficientCidrBlocks`), from
        /// the first refusal until a prefix is assigned again; the Node condition
        /// `vpcnet.io/PrefixBlocksAvailable` says the same. Always 0 without prefix delegation.
        prefix_fallback: Gauge = Gauge::default(),
            "vpcnet_prefix_fallback",
            "Whether prefix delegation falls back to secondary IPs for want of a free /28 (1) or not (0)"
            => set set_prefix_fallback;
        /// Restarts of the Kubernetes watches after an error, by resource (`Node`,
        /// `ENIConfig`; with network policy `NetworkPolicy`, `Pod`, `Namespace`). A quiet watch is not restarted: the server ends it at its own timeout
        /// and it resumes from the last resourceVersion without counting here.
        k8s_watch_restarts: Labelled<PlainCounter, 1> = Labelled::new(["resource"]),
            "vpcnet_k8s_watch_restarts",
            "The number of Kubernetes watch restarts after an error, by resource"
            => inc_label inc_k8s_watch_restart;
        /// Seconds from a watch event's arrival to the ENIConfig choice it changes being
        /// published to the reconciler (1 ms … 16 s buckets), by resource.
        k8s_watch_event_apply_seconds: Labelled<Histogram, 1> =
            Labelled::with(["resource"], watch_apply_histogram),
            "vpcnet_k8s_watch_event_apply_seconds",
            "Seconds from a watch event to its change applied, by resource";
        ["checkpoint"]
        /// Starts that found the checkpoint unusable, by reason: `lost` (no file while the
        /// node's ENIs hold addresses), `corrupt` (unreadable; moved aside), `inconsistent`
        /// (valid JSON that contradicts itself). Addresses are then held on evidence or cool
        /// down (see [checkpoint recovery](agent.md#checkpoint-recovery)).
        checkpoint_recoveries: Labelled<PlainCounter, 1> = Labelled::new(["reason"]),
            "vpcnet_checkpoint_recoveries",
            "The number of starts that rebuilt the pool without a usable checkpoint, by reason"
            => inc_label inc_checkpoint_recovery;
        /// Addresses held at start for running pods the checkpoint did not list, by evidence:
        /// `cni_cache` (the runtime's CNI result cache), `route` (a host /32 route), `rule`
        /// (rule 512 to the address).
        evidence_holds: Labelled<PlainCounter, 1> = Labelled::new(["evidence"]),
            "vpcnet_evidence_holds",
            "The number of addresses held at start on evidence of a running pod, by evidence"
            => inc_label inc_evidence_hold;
        ["datapath"]
        /// Datapath audit passes (one per periodic reconcile pass with the node datapath on).
        datapath_audit_count: PlainCounter = PlainCounter::default(),
            "vpcnet_datapath_audit_count", "The number of datapath audit passes"
            => inc inc_datapath_audit;
        /// Datapath repairs by kind: `pod_route`, `rule_to_pod`, `rule_from_pod`, `host_veth`,
        /// `host_veth_mac`, `ip_forward`, `rp_filter`, `eni_table`, `firewall_table`.
        datapath_repair_count: Labelled<PlainCounter, 1> = Labelled::new(["kind"]),
            "vpcnet_datapath_repair_count",
            "The number of datapath problems the audit repaired, by kind"
            => inc_label inc_datapath_repair;
        /// Problems the last audit pass found and could not repair, by kind (a missing host
        /// veth, an ENI without interface, a repair that failed); a kind disappears once fixed.
        datapath_unrepaired: Labelled<Gauge, 1> = Labelled::new(["kind"]),
            "vpcnet_datapath_unrepaired",
            "The number of datapath problems the last audit pass could not repair, by kind"
            => replace set_datapath_unrepaired;
        /// Secondary ENIs whose interface disappeared (netlink `RTM_DELLINK`): each stops
        /// serving addresses at once and triggers a describe.
        eni_interface_gone_count: PlainCounter = PlainCounter::default(),
            "vpcnet_eni_interface_gone_count",
            "The number of secondary ENI interfaces that disappeared from the node"
            => inc inc_eni_interface_gone;
        ["conntrack"]
        /// Connection-tracking entries of released pod addresses deleted from the node (at the
        /// release and again when the cooldown ends), so a new pod given the address does not
        /// inherit the old pod's flows.
        conntrack_flushed_entries: PlainCounter = PlainCounter::default(),
            "vpcnet_conntrack_flushed_entries",
            "The number of conntrack entries of released pod IPs deleted from the node"
            => add add_conntrack_flushed_entries;
        /// Conntrack flushes that failed (the kernel refused or did not answer); the addresses
        /// of a failed flush at the end of their cooldown are not handed out until a retry
        /// succeeds.
        conntrack_flush_failures: PlainCounter = PlainCounter::default(),
            "vpcnet_conntrack_flush_failures",
            "The number of failed conntrack flushes of released pod IPs"
            => inc inc_conntrack_flush_failure;
        /// Released addresses whose cooldown is over but whose conntrack entries are not yet
        /// known to be gone: not assignable. Stays above 0 only while flushes fail.
        conntrack_held_ip_addresses: Gauge = Gauge::default(),
            "vpcnet_conntrack_held_ip_addresses",
            "The number of cooled-down IPs held back until their conntrack entries are deleted"
            => set set_conntrack_held_ip_addresses;
        ["network-policy"]
        /// Seconds to compile and program the node's network policy rules (0.25 ms … 33 s
        /// buckets, in milliseconds), by trigger: `ADD` (before the ADD is answered), `DEL`,
        /// `API change` (a NetworkPolicy, Pod or Namespace changed), `repair` (the table lost
        /// chains outside the agent and was replaced whole).
        network_policy_program_ms: Labelled<Histogram, 1> =
            Labelled::with(["trigger"], action_latency_histogram),
            "vpcnet_network_policy_program_ms",
            "Milliseconds to compile and program the node's network policy rules, by trigger";
        /// Programs of the node's rules that failed (nft refused); the next one replaces the
        /// whole table.
        network_policy_program_errors: PlainCounter = PlainCounter::default(),
            "vpcnet_network_policy_program_errors",
            "The number of failed programs of the node's network policy rules"
            => inc inc_policy_program_error;
        /// Local pods with an address (each has an entry in the rules when isolated).
        network_policy_local_pods: Gauge = Gauge::default(),
            "vpcnet_network_policy_local_pods",
            "The number of local pods the network policy rules cover"
            => set set_policy_local_pods;
        /// Local pods isolated in at least one direction.
        network_policy_isolated_pods: Gauge = Gauge::default(),
            "vpcnet_network_policy_isolated_pods",
            "The number of local pods isolated by network policy in at least one direction"
            => set set_policy_isolated_pods;
        /// Allow rules programmed, summed over local pods and directions.
        network_policy_allow_rules: Gauge = Gauge::default(),
            "vpcnet_network_policy_allow_rules",
            "The number of network policy allow rules programmed on the node"
            => set set_policy_allow_rules;
        /// Packets the node's allow rules let through, by allowing policy (`namespace/name`),
        /// both directions: the rules' nftables counters, read every 15 s; a pod's counters
        /// restart when its rules are reprogrammed.
        network_policy_allowed_packets: Labelled<Gauge, 1> = Labelled::new(["policy"]),
            "vpcnet_network_policy_allowed_packets",
            "Packets the node's network policy allow rules let through, by policy"
            => replace set_policy_allowed_packets;
        /// Packets the node's rules dropped (new connections no policy allows), by direction
        /// (`ingress`, `egress`), read as the allowed ones.
        network_policy_denied_packets: Labelled<Gauge, 1> = Labelled::new(["direction"]),
            "vpcnet_network_policy_denied_packets",
            "Packets the node's network policy rules dropped, by direction"
            => replace set_policy_denied_packets;
        /// Objects in the agent's model of the cluster, by kind (`namespaces`, `pods`,
        /// `policies`): every Namespace, Pod and NetworkPolicy the watches have read, each
        /// reduced to what the rules need; updated at each program of the rules. Follows the
        /// cluster's size: a model that keeps growing while the cluster does not is a leak.
        network_policy_cluster_objects: Labelled<Gauge, 1> = Labelled::new(["kind"]),
            "vpcnet_network_policy_cluster_objects",
            "Objects in the agent's network policy model of the cluster, by kind"
            => replace set_policy_cluster_objects;
        /// Lines written to the policy event log (`VPCNET_POLICY_EVENT_LOGS=true`), by verdict
        /// (`ACCEPT`, `DENY`).
        network_policy_events_written: Labelled<PlainCounter, 1> = Labelled::new(["verdict"]),
            "vpcnet_network_policy_events_written",
            "Policy event log lines written, by verdict"
            => inc_label inc_policy_events_written;
        /// Policy events lost before the agent read them: the kernel's NFLOG messages dropped
        /// because the agent's socket buffer was full (gaps in their sequence numbers). Packets
        /// past the log rules' rate limit are not logged and not counted here.
        network_policy_events_lost: PlainCounter = PlainCounter::default(),
            "vpcnet_network_policy_events_lost",
            "Policy events the kernel dropped before the agent read them"
            => add add_policy_events_lost;
        /// Policy event log lines that could not be written (the file's error is in the
        /// agent's log).
        network_policy_events_write_errors: PlainCounter = PlainCounter::default(),
            "vpcnet_network_policy_events_write_errors",
            "Policy event log lines that could not be written"
            => inc inc_policy_events_write_error;
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The registry in OpenMetrics text format (serve with [`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Track ipamd action `fn_` (e.g. `increaseIPPool`): `awscni_ipamd_action_inprogress{fn}`
    /// is raised until the returned guard drops, and the duration lands in
    /// `vpcnet_ipamd_action_latency_ms{fn}`.
    pub fn action(&self, fn_: &str) -> ActionTimer<'_> {
        self.ipamd_action_inprogress.with_series([fn_], |g| g.inc());
        ActionTimer {
            metrics: self,
            fn_: fn_.to_string(),
            started: Instant::now(),
        }
    }

    /// The tables of `docs/metrics.md`, by section id.
    pub fn doc_tables(&self) -> BTreeMap<&'static str, String> {
        let rows = self.declarations().into_iter().map(|d| {
            let labels = if d.labels.is_empty() {
                "–".to_string()
            } else {
                let quoted: Vec<String> = d.labels.iter().map(|l| format!("`{l}`")).collect();
                quoted.join(", ")
            };
            let cells = vec![
                format!("`{}`", d.name),
                d.doc_type.to_string(),
                labels,
                crate::docs::one_line(d.doc),
            ];
            (d.section, cells)
        });
        crate::docs::tables(&["name", "type", "labels", "meaning"], rows)
    }
}

/// Guard returned by [`Metrics::action`].
#[must_use = "the action is measured until the guard drops"]
pub struct ActionTimer<'a> {
    metrics: &'a Metrics,
    fn_: String,
    started: Instant,
}

impl Drop for ActionTimer<'_> {
    fn drop(&mut self) {
        let m = self.metrics;
        m.ipamd_action_inprogress
            .with_series([&self.fn_], |g| g.dec());
        m.ipamd_action_latency_ms
            .with_series([&self.fn_], |h| h.observe(ms(self.started.elapsed())));
    }
}

impl Ec2Observer for Metrics {
    /// Per HTTP attempt: `awscni_ec2api_req_count{fn}`, `awscni_aws_api_latency_ms{api,error,
    /// status}` (status `200` on success, else the EC2 error code), and on error
    /// `awscni_ec2api_error_count{fn}` and `awscni_aws_api_error_count{api,error}`.
    fn on_attempt(&self, action: Action, latency: Duration, error: Option<&Ec2Error>) {
        let api = action.as_str();
        self.ec2api_req_count.with_series([api], |c| c.inc());
        let (error_flag, status) = match error {
            None => ("false", "200"),
            Some(e) => ("true", e.code()),
        };
        self.aws_api_latency_ms
            .with_series([api, error_flag, status], |h| h.observe(ms(latency)));
        if let Some(e) = error {
            self.ec2api_error_count.with_series([api], |c| c.inc());
            self.aws_api_error_count
                .with_series([api, e.code()], |c| c.inc());
        }
    }

    /// Per logical call that failed after retries: `vpcnet_ec2_call_error_count{api,error}`.
    fn on_call(&self, action: Action, _latency: Duration, error: Option<&Ec2Error>) {
        if let Some(e) = error {
            self.ec2_call_error_count
                .with_series([action.as_str(), e.code()], |c| c.inc());
        }
    }

    /// `vpcnet_ec2_ratelimited_count{fn}`.
    fn on_rate_limited(&self, action: Action, _waited: Duration) {
        self.ec2_ratelimited_count
            .with_series([action.as_str()], |c| c.inc());
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod declaration_tests;

impl Metrics {
    /// Records `d` from a watch event of `resource` to its change applied.
    pub fn observe_watch_apply(&self, resource: &str, d: Duration) {
        self.k8s_watch_event_apply_seconds
            .with_series([resource], |h| h.observe(d.as_secs_f64()));
    }
}

impl Metrics {
    /// Records one program of the network policy rules.
    pub fn observe_policy_program(&self, trigger: &str, d: Duration) {
        self.network_policy_program_ms
            .with_series([trigger], |h| h.observe(ms(d)));
    }

    /// The network policy gauges after a program.
    pub fn set_policy_state(&self, local: u64, isolated: u64, allows: u64) {
        self.set_policy_local_pods(local);
        self.set_policy_isolated_pods(isolated);
        self.set_policy_allow_rules(allows);
    }
}
