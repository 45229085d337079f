//! `/v1/datapath`: the periodic datapath audit (self-healing) of the node: what the last pass
//! found per pod and for the node's prerequisites, what it repaired, and what is still wrong.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `GET /v1/datapath`: [`DatapathDoc`].
pub const DATAPATH: &str = "/v1/datapath";

/// `/v1/datapath`: the last pass of the datapath audit. Before the first pass (or with the
/// node datapath off, `VPCNET_NODE_DATAPATH=false`) `passes` is 0 and the lists are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DatapathDoc {
    /// Audit passes so far (one per periodic reconcile pass).
    pub passes: u64,
    /// When the last pass ended, ms since the Unix epoch.
    pub checked_at_ms: Option<u64>,
    /// Why the last pass could not check (e.g. a netlink dump failed); its findings are those
    /// of the pass before.
    pub last_error: Option<String>,
    /// Node prerequisites that differed at the last pass (forwarding, rp_filter, ENI
    /// interfaces and tables, the nftables table); empty = all as vpcnet sets them.
    pub node: Vec<Finding>,
    /// Pods checked at the last pass (assignments older than `VPCNET_POD_RECLAIM_GRACE`), each
    /// with what differed; a pod without findings is healthy.
    pub pods: Vec<PodCheck>,
    /// Findings of the last pass that are still wrong.
    pub unrepaired: u32,
    /// Set when an unrepaired problem cuts every pod off (IPv4 forwarding off): `/healthz`
    /// answers 503 with this text.
    pub not_ready: Option<String>,
    /// Repairs since the agent started, by kind (`pod_route`, `rule_to_pod`, ...).
    pub repairs: BTreeMap<String, u64>,
    /// The most recent repair.
    pub last_repair: Option<Repair>,
}

/// One difference between what vpcnet programmed and the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Finding {
    /// `pod_route`, `rule_to_pod`, `rule_from_pod`, `host_veth`, `host_veth_mac`,
    /// `ip_forward`, `rp_filter`, `eni_interface`, `eni_table` or `firewall_table`.
    pub kind: String,
    /// The object: an interface, `10.0.1.5/32`, `table 2`, a sysctl.
    pub object: String,
    /// What was wrong.
    pub problem: String,
    /// Repaired by this pass.
    pub repaired: bool,
    /// Why it is still wrong (the repair's error, or why none is attempted).
    pub error: Option<String>,
}

/// One pod's check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodCheck {
    /// CNI container ID.
    pub container_id: String,
    pub namespace: String,
    pub name: String,
    pub ip: String,
    /// The host veth the pod's route goes through.
    pub host_veth: String,
    /// Its table for traffic from the pod (0 = main, primary ENI).
    pub route_table: u32,
    /// Empty = healthy.
    pub findings: Vec<Finding>,
}

/// A repair the audit made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Repair {
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    pub kind: String,
    pub object: String,
    /// What was wrong.
    pub problem: String,
}
