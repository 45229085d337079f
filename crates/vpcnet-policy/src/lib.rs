//! Pure NetworkPolicy core (issue 27): Kubernetes `networking.k8s.io/v1` NetworkPolicy
//! semantics compiled into what a node enforces. No I/O and no clock: the agent feeds it the
//! objects it watches and applies what comes out.
//!
//! Shape:
//! - [`model`]: the cluster as the compiler needs it — [`Namespace`]s with labels, [`Pod`]s
//!   with labels, IPv4 addresses and named container ports, and [`Policy`]s with their rules.
//!   [`k8s`] converts the API objects (defaulting `policyTypes` as the API server does).
//! - [`selector`]: label selectors (`matchLabels`, `matchExpressions`).
//! - [`World`]: the model's current state, changed one object at a time.
//! - [`compile()`]: the [`World`], the node's local pods and the [`Mode`] in, a [`Ruleset`] out:
//!   per local pod (keyed by its host-side interface) whether each direction is open or
//!   isolated and, if isolated, the allow rules; the peer address sets those rules name,
//!   shared by every pod a policy selects.
//! - [`ruleset`]: that output, pure data the datapath renders into nftables.

pub mod k8s;
pub mod model;
pub mod ruleset;
pub mod selector;

mod compile;
mod ranges;
mod world;

#[cfg(test)]
mod test_support;

pub use compile::{compile, LocalPod, Mode};
pub use model::{
    LabelSelector, NamedPort, Namespace, Peer, Pod, Policy, PortRef, PortSpec, Protocol,
    Requirement, Rule,
};
pub use ruleset::{AddrRange, Allow, Direction, PeerMatch, PeerSet, PodRules, PortMatch, Ruleset};
pub use world::World;
