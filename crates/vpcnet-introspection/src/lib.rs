//! The agent's introspection API: what `vpcnet-agent` serves on `INTROSPECTION_BIND_ADDRESS`
//! (default `127.0.0.1:61679`, the VPC CNI's introspection port) and `vpcnet inspect` reads.
//! One declaration of each path and document for both sides: the agent serializes these
//! types, the CLI deserializes them.
//!
//! Every document is JSON. Addresses and CIDRs are strings (`"10.0.0.5"`, `"10.0.0.0/24"`),
//! times are milliseconds since the Unix epoch. Readers tolerate missing fields (defaults) and
//! ignore unknown ones, so an older `vpcnet` can read a newer agent.
//!
//! A new document: a struct here (Serialize, Deserialize, Default, `#[serde(default)]`), a
//! path constant, a route in `vpcnet-agent/src/introspection.rs`, a view in
//! `vpcnet-cli/src/inspect.rs` (its table in `inspect/tables.rs`).

use serde::{Deserialize, Serialize};

#[cfg(feature = "client")]
pub mod client;
mod datapath;
pub mod text;

pub use datapath::{DatapathDoc, Finding, PodCheck, Repair, DATAPATH};
pub use vpcnet_ipam::{Action, PoolSummary, PrefixFallback};

/// `GET /healthz`: `200 ok` once the pool has been filled, `503 starting` before, `503
/// failed: ...` once an essential task stopped, `503 datapath: ...` while the datapath audit
/// finds a problem that cuts every pod off and cannot repair it (text).
pub const HEALTHZ: &str = "/healthz";
/// `GET /v1/enis`: [`EnisDoc`].
pub const ENIS: &str = "/v1/enis";
/// `GET /v1/pods`: [`Pods`].
pub const PODS: &str = "/v1/pods";
/// `GET /v1/env-settings`: [`EnvSettings`].
pub const ENV_SETTINGS: &str = "/v1/env-settings";
/// `GET /v1/apiserver`: [`ApiServerDoc`].
pub const APISERVER: &str = "/v1/apiserver";
/// `GET /v1/eniconfig`: [`EniConfigDoc`].
pub const ENICONFIG: &str = "/v1/eniconfig";

/// `/v1/enis`: the node's ENIs with every address, assignment and cooldown, the pool counts,
/// the EC2 actions the pool wants next, and the reconciler's last EC2 error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnisDoc {
    /// EC2 instance ID (IMDS `instance-id`).
    pub instance_id: String,
    /// EC2 instance type (IMDS `instance-type`), e.g. `m5.large`.
    pub instance_type: String,
    /// Pool counts at the time of the answer.
    pub summary: PoolSummary,
    /// The EC2 actions the warm-pool decision asks for now (empty when on target).
    pub plan: Vec<Action>,
    /// Assignments whose address EC2 no longer lists on the node.
    pub orphaned: Vec<Orphaned>,
    /// Attached ENIs the agent manages.
    pub enis: Vec<Eni>,
    /// The reconciler's last EC2 error; `None` after a successful pass.
    pub last_error: Option<String>,
    /// How the pool gets its addresses: `ec2` (the agent provisions ENIs and addresses),
    /// `disabled` (`DISABLE_NETWORK_RESOURCE_PROVISIONING`: only what is attached, EC2
    /// described) or `imds-only` (`ENABLE_IMDS_ONLY_MODE`: only what IMDS lists, no EC2
    /// call). Empty from agents that predate it.
    pub provisioning: String,
}

/// An assignment whose address EC2 no longer lists (kept until its pod is deleted, never
/// handed out again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Orphaned {
    /// CNI container ID.
    pub container_id: String,
    /// CNI interface name (`CNI_IFNAME`).
    pub if_name: String,
    /// The address.
    pub ip: String,
}

/// One attached ENI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Eni {
    /// `eni-...`.
    pub id: String,
    /// MAC address, lower case.
    pub mac: String,
    /// Attachment device index (0 = the primary ENI); also its route table number.
    pub device_number: u32,
    /// Attachment network card index.
    pub network_card: u32,
    pub subnet_id: String,
    /// The subnet's IPv4 CIDR.
    pub subnet_cidr: String,
    /// The instance's primary ENI.
    pub primary: bool,
    /// The ENI's primary private IPv4 address (never handed to a pod).
    pub primary_ip: String,
    /// A DeleteEni is in flight: nothing new is placed on it.
    pub deleting: bool,
    /// Its network interface vanished from the node (netlink or the datapath audit): nothing
    /// is handed out from it until the interface is back or EC2 no longer lists it.
    pub interface_gone: bool,
    /// Delegated /28 prefixes (prefix delegation).
    pub prefixes: Vec<String>,
    /// Every pod-usable address: secondary addresses, then each /32 of each prefix.
    pub addresses: Vec<Address>,
}

/// One pod-usable address of an ENI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Address {
    pub ip: String,
    /// When the address (or its prefix) joined the pool.
    pub added_at_ms: u64,
    /// The pod holding it, if any.
    pub assigned: Option<Assigned>,
    /// When it was last released, while the pool remembers it (cooling or cooled).
    pub released_at_ms: Option<u64>,
    /// Still in its `IP_COOLDOWN_PERIOD`: not assignable.
    pub cooling: bool,
    /// `released_at_ms` + the cooldown period.
    pub cooldown_ends_at_ms: Option<u64>,
}

/// The pod an address is assigned to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Assigned {
    /// CNI container ID.
    pub container_id: String,
    /// CNI interface name.
    pub if_name: String,
    /// Kubernetes namespace (`K8S_POD_NAMESPACE`; empty when the runtime gave none).
    pub namespace: String,
    /// Kubernetes pod name (`K8S_POD_NAME`).
    pub name: String,
    pub assigned_at_ms: u64,
}

/// `/v1/pods`: every assignment.
pub type Pods = Vec<Pod>;

/// One assignment of `/v1/pods`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pod {
    /// CNI container ID.
    pub container_id: String,
    /// CNI interface name.
    pub if_name: String,
    pub namespace: String,
    pub name: String,
    pub ip: String,
    /// ENI holding the address when it was assigned.
    pub eni_id: String,
    pub assigned_at_ms: u64,
}

/// `/v1/env-settings`: the effective value of every configuration variable, by name (unset
/// optional values are empty strings), as the VPC CNI reports them.
pub type EnvSettings = std::collections::BTreeMap<String, String>;

/// Where the agent's Kubernetes API client is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiState {
    /// No API server configured (neither `CLUSTER_ENDPOINT` nor `KUBERNETES_SERVICE_HOST`).
    #[default]
    Disabled,
    /// The configuration is unusable (e.g. a malformed `CLUSTER_ENDPOINT`); see `last_error`.
    Misconfigured,
    /// Trying to reach the API server (with backoff).
    Connecting,
    /// The API server answered the last check.
    Connected,
}

/// The agent's check of its Node's pod capacity against the addresses it can ever get.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeCapacity {
    /// The agent's Node (`MY_NODE_NAME`).
    pub name: String,
    /// Its `status.capacity.pods` (kubelet `maxPods`), a count of pods.
    pub capacity_pods: u32,
    /// Pods the node's ENIs can give addresses to, + 2 host-network pods (the max-pods
    /// formula without the recommended cap).
    pub supported_pods: u32,
    /// `capacity_pods > supported_pods`: a Warning Event was sent to the Node.
    pub exceeded: bool,
}

/// `/v1/apiserver`: the agent's Kubernetes API client. IPAM never depends on it; this shows
/// which endpoint it uses and whether it reached it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApiServerDoc {
    /// Where the client is.
    pub state: ApiState,
    /// The API server URL used (`https://host:port`).
    pub endpoint: Option<String>,
    /// Where the endpoint came from: `CLUSTER_ENDPOINT` or `kubernetes Service`.
    pub source: Option<String>,
    /// Since when it is connected, ms since the Unix epoch.
    pub connected_since_ms: Option<u64>,
    /// Milliseconds from the agent's start to its first successful connection.
    pub first_connected_after_ms: Option<u64>,
    /// Connection attempts so far.
    pub attempts: u64,
    /// The last error (connecting, or a later check), with its cause chain.
    pub last_error: Option<String>,
    /// When the last error happened, ms since the Unix epoch.
    pub last_error_ms: Option<u64>,
    /// The API server's version (`gitVersion`), once connected.
    pub server_version: Option<String>,
    /// The Node check, once the Node was read.
    pub node: Option<NodeCapacity>,
}

/// Where the node's ENIConfig (custom networking) is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EniConfigState {
    /// Custom networking is off (`AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG` unset or false).
    #[default]
    Disabled,
    /// Custom networking is on and the ENIConfig is not known yet: the Kubernetes API was not
    /// reached, or the first list of the Node and the ENIConfigs has not completed.
    Waiting,
    /// A valid ENIConfig is chosen: new ENIs go to its subnet with its security groups.
    Resolved,
    /// No valid ENIConfig: none selected, the selected one is missing or invalid. No ENI is
    /// created until this is fixed; `reason` and `message` say why and what to do.
    Unresolved,
}

/// `/v1/eniconfig`: the node's ENIConfig under custom networking (the VPC CNI's
/// `AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG`), as the agent's watch of its Node and the
/// ENIConfigs resolves it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EniConfigDoc {
    /// Where the choice is.
    pub state: EniConfigState,
    /// The agent's Node (`MY_NODE_NAME`).
    pub node: Option<String>,
    /// The chosen ENIConfig's name (also while it is missing or invalid, when known).
    pub name: Option<String>,
    /// How it was chosen: `annotation <key>`, `label <key>` or `default`.
    pub selected_by: Option<String>,
    /// Its `spec.subnet` (subnet ID), when resolved.
    pub subnet: Option<String>,
    /// Its `spec.securityGroups` (security group IDs), when resolved.
    pub security_groups: Vec<String>,
    /// Why it is not resolved, CamelCase (also the reason of the Node condition and Event):
    /// `APIUnavailable`, `NodeNotFound`, `InvalidSelection`, `ENIConfigNotFound`,
    /// `InvalidENIConfig`, `WatchFailed`; with state `Resolved`, `ENIConfigRejected` when EC2
    /// refused the ENIConfig's subnet or security groups for the last new ENI.
    pub reason: Option<String>,
    /// What is wrong and how to fix it.
    pub message: Option<String>,
    /// Since when the state holds, ms since the Unix epoch.
    pub since_ms: Option<u64>,
    /// How long the node waited without a valid ENIConfig before the last resolution, in ms
    /// (from the agent's start or the loss of the previous one).
    pub last_wait_ms: Option<u64>,
}
