//! Which targets a target group should hold, from plain views of EndpointSlice endpoints, their
//! pods and their nodes (no Kubernetes or AWS types, no I/O).
//!
//! An endpoint is **wanted** (must be registered) when it has an IPv4 address, its pod is not
//! terminating (no deletion timestamp, EndpointSlice `terminating` not true), and either
//! - it is `ready`, or
//! - its pod carries this binding's readiness gate and all its containers are ready: the gate
//!   holds the pod not-ready until the load balancer reports the target healthy, so the target
//!   must be registered first (aws-load-balancer-controller's rule for gated pods).
//!
//! An endpoint is **kept** (left registered if it already is, never newly registered) when it is
//! not ready only because its node stopped reporting: the node's `Ready` condition is `Unknown`
//! and the pod is not terminating. A node that loses contact with the API server turns all its
//! pods not-ready although their containers may still serve; deregistering them all could empty
//! the target group (fail-open, as ELBv2 itself fails open when every target is unhealthy).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

/// A target: IPv4 address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetKey {
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// A node's `Ready` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeReady {
    True,
    False,
    /// The node controller set `Unknown`: kubelet stopped posting status.
    Unknown,
}

/// The pod behind an endpoint, as far as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodView {
    /// `namespace/name`.
    pub name: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The `ContainersReady` condition is True.
    pub containers_ready: bool,
    /// `spec.readinessGates` holds this binding's condition type.
    pub has_gate: bool,
}

/// One endpoint of an EndpointSlice (one address; `addressType: IPv4` slices only).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndpointView {
    /// The endpoint's first address; None when it is not an IPv4 address.
    pub ip: Option<Ipv4Addr>,
    /// `conditions.ready` (None = unknown, which the EndpointSlice API says to read as ready).
    pub ready: Option<bool>,
    /// `conditions.terminating`.
    pub terminating: Option<bool>,
    /// `nodeName`.
    pub node: Option<String>,
    /// The pod of `targetRef` when it is in the cache.
    pub pod: Option<PodView>,
}

/// What [`desired`] decides for one target group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Desired {
    /// Targets that must be registered.
    pub wanted: BTreeSet<TargetKey>,
    /// Targets that stay registered if they are, but are not registered anew (fail-open).
    pub keep: BTreeSet<TargetKey>,
}

impl Desired {
    /// Adds another binding's decision for the same target group.
    pub fn merge(&mut self, other: Desired) {
        self.wanted.extend(other.wanted);
        self.keep.extend(other.keep);
        let wanted = &self.wanted;
        self.keep.retain(|k| !wanted.contains(k));
    }
}

/// The decision for one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Wanted,
    Keep,
    Unwanted,
}

/// Decides for one endpoint (module docs).
pub fn verdict(e: &EndpointView, nodes: &BTreeMap<String, NodeReady>) -> Verdict {
    if e.ip.is_none() {
        return Verdict::Unwanted;
    }
    let deleting = e.terminating == Some(true) || e.pod.as_ref().is_some_and(|p| p.deleting);
    if deleting {
        return Verdict::Unwanted;
    }
    if e.ready.unwrap_or(true) {
        return Verdict::Wanted;
    }
    if e.pod
        .as_ref()
        .is_some_and(|p| p.has_gate && p.containers_ready)
    {
        return Verdict::Wanted;
    }
    let node_unknown = e
        .node
        .as_ref()
        .and_then(|n| nodes.get(n))
        .is_some_and(|r| *r == NodeReady::Unknown);
    if node_unknown {
        Verdict::Keep
    } else {
        Verdict::Unwanted
    }
}

/// The desired targets of one binding: every endpoint's address on `port` per [`verdict`]. An
/// address that appears twice (two slices during an update) takes its best verdict.
pub fn desired(
    endpoints: &[EndpointView],
    port: u16,
    nodes: &BTreeMap<String, NodeReady>,
) -> Desired {
    let mut d = Desired::default();
    for e in endpoints {
        let Some(ip) = e.ip else { continue };
        let key = TargetKey { ip, port };
        match verdict(e, nodes) {
            Verdict::Wanted => {
                d.keep.remove(&key);
                d.wanted.insert(key);
            }
            Verdict::Keep if !d.wanted.contains(&key) => {
                d.keep.insert(key);
            }
            _ => {}
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(ip: u8, ready: bool) -> EndpointView {
        EndpointView {
            ip: Some(Ipv4Addr::new(10, 0, 1, ip)),
            ready: Some(ready),
            terminating: Some(false),
            node: Some("n1".into()),
            pod: Some(PodView {
                name: format!("default/p{ip}"),
                ..Default::default()
            }),
        }
    }

    fn nodes(r: NodeReady) -> BTreeMap<String, NodeReady> {
        [("n1".to_string(), r)].into()
    }

    #[test]
    fn ready_endpoints_are_wanted_terminating_and_addressless_are_not() {
        let n = nodes(NodeReady::True);
        assert_eq!(verdict(&ep(1, true), &n), Verdict::Wanted);
        assert_eq!(verdict(&ep(1, false), &n), Verdict::Unwanted);
        let mut t = ep(1, true);
        t.terminating = Some(true);
        assert_eq!(verdict(&t, &n), Verdict::Unwanted);
        // The pod's deletion timestamp is seen before the EndpointSlice says terminating.
        let mut d = ep(1, true);
        d.pod.as_mut().unwrap().deleting = true;
        assert_eq!(verdict(&d, &n), Verdict::Unwanted);
        let mut none = ep(1, true);
        none.ip = None;
        assert_eq!(verdict(&none, &n), Verdict::Unwanted);
        // ready unset reads as ready (EndpointSlice API).
        let mut u = ep(1, true);
        u.ready = None;
        assert_eq!(verdict(&u, &n), Verdict::Wanted);
    }

    #[test]
    fn a_gated_pod_is_registered_once_its_containers_are_ready() {
        let n = nodes(NodeReady::True);
        let mut g = ep(1, false);
        g.pod.as_mut().unwrap().has_gate = true;
        assert_eq!(verdict(&g, &n), Verdict::Unwanted, "containers not ready");
        g.pod.as_mut().unwrap().containers_ready = true;
        assert_eq!(verdict(&g, &n), Verdict::Wanted);
        g.pod.as_mut().unwrap().deleting = true;
        assert_eq!(verdict(&g, &n), Verdict::Unwanted);
    }

    #[test]
    fn not_ready_on_an_unknown_node_is_kept_not_added() {
        let d = desired(&[ep(1, false), ep(2, true)], 80, &nodes(NodeReady::Unknown));
        let k = |i| TargetKey {
            ip: Ipv4Addr::new(10, 0, 1, i),
            port: 80,
        };
        assert_eq!(d.wanted, [k(2)].into());
        assert_eq!(d.keep, [k(1)].into());
        let d = desired(&[ep(1, false)], 80, &nodes(NodeReady::False));
        assert!(d.keep.is_empty() && d.wanted.is_empty());
        // An address listed twice takes its best verdict.
        let d = desired(&[ep(1, false), ep(1, true)], 80, &nodes(NodeReady::Unknown));
        assert_eq!((d.wanted.len(), d.keep.len()), (1, 0));
    }
}
