//! What [`crate::compile()`] produces and the datapath renders: pure data, ordered so that two
//! compilations of the same inputs are equal and diffable.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::model::Protocol;

/// The node's whole policy state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruleset {
    /// Peer sets by name (`[a-z0-9_]`, at most 31 bytes), shared by every pod whose rules
    /// name them. Only sets some pod's rules name are present.
    pub sets: BTreeMap<String, PeerSet>,
    /// Per local pod, by its host-side interface name (e.g. `eni1a2b3c4d5e6`).
    pub pods: BTreeMap<String, PodRules>,
}

/// The elements of a peer set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerSet {
    /// IPv4 addresses as disjoint, sorted, non-adjacent inclusive ranges (an nftables
    /// interval set of `ipv4_addr`).
    Addrs(Vec<AddrRange>),
    /// Address, protocol and port of peer pods (an egress rule's named port resolved per
    /// destination pod; an nftables set of `ipv4_addr . inet_proto . inet_service`). Sorted,
    /// no duplicates.
    AddrPorts(Vec<(Ipv4Addr, Protocol, u16)>),
}

/// An inclusive range of IPv4 addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AddrRange {
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
}

/// One local pod's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRules {
    /// `namespace/name`, for logs and introspection.
    pub pod: String,
    pub ingress: Direction,
    pub egress: Direction,
}

/// One direction of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Direction {
    /// Not isolated: everything allowed.
    Open,
    /// Isolated: only what one of the rules allows (none: deny all). Replies of allowed
    /// connections and the pod's own node are always allowed (the datapath's job).
    Isolated(Vec<Allow>),
}

/// One allow rule: a peer match AND a port match.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Allow {
    /// The policy that allows it, `namespace/name` (counters and logs).
    pub policy: String,
    pub peer: PeerMatch,
    pub ports: PortMatch,
}

/// Which peers: for ingress the source address, for egress the destination.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerMatch {
    Any,
    /// An address in the named [`PeerSet::Addrs`] set.
    Set(String),
    /// Address, protocol and destination port in the named [`PeerSet::AddrPorts`] set (then
    /// `ports` is [`PortMatch::Any`]).
    AddrPorts(String),
}

/// Which destination ports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PortMatch {
    Any,
    /// Every port of one protocol.
    Protocol(Protocol),
    /// `first..=last` of one protocol.
    Ports {
        protocol: Protocol,
        first: u16,
        last: u16,
    },
}
