//! The cluster as the policy compiler sees it. Everything here is already validated and
//! defaulted ([`crate::k8s`] does that for API objects); IPv4 only.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

/// A namespace: its name and labels (including `kubernetes.io/metadata.name`, which the API
/// server sets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    pub name: String,
    pub labels: Labels,
}

/// A pod anywhere in the cluster, as a peer or as a local pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    /// `status.podIPs` (IPv4 ones). Empty until the pod has an address. Host-network pods
    /// have the node's address here but are never selected as peers by pod selectors.
    pub ips: Vec<Ipv4Addr>,
    /// `spec.hostNetwork`.
    pub host_network: bool,
    /// Every container's named `ports` (name, protocol, containerPort).
    pub ports: Vec<NamedPort>,
}

/// A named container port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NamedPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// Transport protocol of a port rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The nftables name (`tcp`, `udp`, `sctp`).
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// A Kubernetes label selector. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub match_labels: Labels,
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    In {
        key: String,
        values: BTreeSet<String>,
    },
    NotIn {
        key: String,
        values: BTreeSet<String>,
    },
    Exists {
        key: String,
    },
    DoesNotExist {
        key: String,
    },
}

/// A NetworkPolicy, defaulted: `ingress` is `Some` iff `policyTypes` includes Ingress (the
/// pods it selects are isolated for ingress), likewise `egress`. `Some(vec![])` isolates and
/// allows nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    /// Selects pods in the policy's own namespace.
    pub pod_selector: LabelSelector,
    pub ingress: Option<Vec<Rule>>,
    pub egress: Option<Vec<Rule>>,
}

/// One ingress or egress rule: traffic matching any of `peers` AND any of `ports` is allowed.
/// An empty `peers` means every peer (the API's missing or empty `from`/`to`); an empty
/// `ports` means every port and protocol.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub peers: Vec<Peer>,
    pub ports: Vec<PortSpec>,
}

/// One `from`/`to` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// `podSelector` and/or `namespaceSelector`. `namespaces: None` is the policy's own
    /// namespace (only `podSelector` given); `pods: None` is every pod of the selected
    /// namespaces (only `namespaceSelector` given). Both given: the AND form.
    Pods {
        namespaces: Option<LabelSelector>,
        pods: Option<LabelSelector>,
    },
    /// `ipBlock`: `cidr` minus every `except`.
    IpBlock { cidr: Ipv4Net, except: Vec<Ipv4Net> },
}

/// One `ports` entry: `protocol` (TCP when absent), `port` (every port when absent),
/// `endPort` (a range `port..=end_port`; only with a numeric port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub protocol: Protocol,
    pub port: Option<PortRef>,
    pub end_port: Option<u16>,
}

/// A port by number or by a container port's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortRef {
    Number(u16),
    Name(String),
}
