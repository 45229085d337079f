//! What the agreement test needs: a reference evaluator of the NetworkPolicy semantics over
//! the [`vpcnet_policy::World`], an evaluator over a compiled [`vpcnet_policy::Ruleset`], and
//! generators of small worlds.

pub mod evaluate;
pub mod generate;
pub mod reference;

use std::net::Ipv4Addr;

use vpcnet_policy::Protocol;

/// Which way a packet goes, seen from the local pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// To the pod: `peer` is the source.
    Ingress,
    /// From the pod: `peer` is the destination.
    Egress,
}

/// A packet's peer address and destination port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Packet {
    pub peer: Ipv4Addr,
    pub protocol: Protocol,
    pub port: u16,
}
