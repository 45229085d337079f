//! The compiler: [`World`] + the node's local pods + [`Mode`] → [`Ruleset`].

use std::net::Ipv4Addr;

use crate::ruleset::Ruleset;
use crate::world::World;

/// `NETWORK_POLICY_ENFORCING_MODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// A pod no policy selects (in a direction) is open in that direction.
    #[default]
    Standard,
    /// A pod no policy selects at all denies everything both ways; once any policy selects
    /// it, the Kubernetes semantics apply.
    Strict,
}

/// A pod on this node with its network set up (or being set up by an ADD).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LocalPod {
    pub namespace: String,
    pub name: String,
    /// Host-side interface (the VPC CNI's veth name).
    pub interface: String,
    pub ip: Ipv4Addr,
}

/// Compiles the node's state. Deterministic.
pub fn compile(world: &World, local: &[LocalPod], mode: Mode) -> Ruleset {
    let _ = (world, local, mode);
    unimplemented!("helper")
}
