//! The compiler: [`World`] + the node's local pods + [`Mode`] → [`Ruleset`].
//!
//! Per local pod and direction: the policies of its namespace whose `podSelector` matches it
//! and that have that direction isolate it; the union of their rules is what it allows. Each
//! rule becomes [`Allow`]s, one per `ports` entry (or one for every port): the rule's peers are
//! one shared address set named after the policy and rule ([`peer_sets`]), so every pod a
//! policy selects names the same set. Named ports are resolved against the local pod for
//! ingress and against each destination pod for egress (an address-protocol-port set).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::model::{Pod, Policy, PortRef, PortSpec, Protocol, Rule};
use crate::ruleset::{Allow, Direction, PeerMatch, PeerSet, PodRules, PortMatch, Ruleset};
use crate::world::World;

mod peer_sets;

use peer_sets::Way;

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
///
/// A local pod missing from `world` (its labels unknown) denies everything both ways until
/// it appears: fail closed. Its labels and named ports come from `world`, never from
/// `local`.
pub fn compile(world: &World, local: &[LocalPod], mode: Mode) -> Ruleset {
    let mut compiler = Compiler {
        world,
        sets: BTreeMap::new(),
    };
    let mut pods = BTreeMap::new();
    for lp in local {
        let rules = match world.pod(&lp.namespace, &lp.name) {
            Some(pod) => compiler.pod_rules(pod, mode),
            None => PodRules {
                pod: format!("{}/{}", lp.namespace, lp.name),
                ingress: Direction::Isolated(vec![]),
                egress: Direction::Isolated(vec![]),
            },
        };
        pods.insert(lp.interface.clone(), rules);
    }
    Ruleset {
        sets: compiler.sets,
        pods,
    }
}

struct Compiler<'w> {
    world: &'w World,
    /// The sets some [`Allow`] names so far.
    sets: BTreeMap<String, PeerSet>,
}

impl Compiler<'_> {
    fn pod_rules(&mut self, pod: &Pod, mode: Mode) -> PodRules {
        let world = self.world;
        let selecting: Vec<&Policy> = world
            .policies_in(&pod.namespace)
            .filter(|p| p.pod_selector.matches(&pod.labels))
            .collect();
        let (ingress, egress) = if mode == Mode::Strict && selecting.is_empty() {
            (Direction::Isolated(vec![]), Direction::Isolated(vec![]))
        } else {
            (
                self.direction(pod, &selecting, Way::Ingress),
                self.direction(pod, &selecting, Way::Egress),
            )
        };
        PodRules {
            pod: format!("{}/{}", pod.namespace, pod.name),
            ingress,
            egress,
        }
    }

    fn direction(&mut self, pod: &Pod, selecting: &[&Policy], way: Way) -> Direction {
        let mut isolated = false;
        let mut allows = Vec::new();
        for policy in selecting {
            let Some(rules) = way.rules(policy) else {
                continue;
            };
            isolated = true;
            for (index, rule) in rules.iter().enumerate() {
                self.rule(pod, policy, way, index, rule, &mut allows);
            }
        }
        if !isolated {
            return Direction::Open;
        }
        allows.sort();
        allows.dedup();
        Direction::Isolated(allows)
    }

    /// The allows of one rule for one local pod.
    fn rule(
        &mut self,
        pod: &Pod,
        policy: &Policy,
        way: Way,
        index: usize,
        rule: &Rule,
        out: &mut Vec<Allow>,
    ) {
        // Port matches that go with the rule's peers, and egress named-port sets (which
        // carry their own peers).
        let mut ports = Vec::new();
        let mut named_sets = Vec::new();
        if rule.ports.is_empty() {
            ports.push(PortMatch::Any);
        }
        for (port_index, spec) in rule.ports.iter().enumerate() {
            match &spec.port {
                None => ports.push(PortMatch::Protocol(spec.protocol)),
                Some(PortRef::Number(first)) => {
                    ports.extend(numbered(spec.protocol, *first, spec.end_port));
                }
                Some(PortRef::Name(name)) => match way {
                    Way::Ingress => ports.extend(resolve(pod, name, spec)),
                    Way::Egress => {
                        named_sets
                            .push(self.named_port_set(policy, index, port_index, rule, name, spec));
                    }
                },
            }
        }
        let id = format!("{}/{}", policy.namespace, policy.name);
        if !ports.is_empty() {
            let peer = self.peers(policy, way, index, rule);
            out.extend(ports.into_iter().map(|ports| Allow {
                policy: id.clone(),
                peer: peer.clone(),
                ports,
            }));
        }
        out.extend(named_sets.into_iter().map(|set| Allow {
            policy: id.clone(),
            peer: PeerMatch::AddrPorts(set),
            ports: PortMatch::Any,
        }));
    }

    /// The rule's peer match, its set added on first use.
    fn peers(&mut self, policy: &Policy, way: Way, index: usize, rule: &Rule) -> PeerMatch {
        if rule.peers.is_empty() {
            return PeerMatch::Any;
        }
        let name = peer_sets::addrs_name(policy, way, index);
        if !self.sets.contains_key(&name) {
            let addrs = peer_sets::addrs(self.world, policy, rule);
            self.sets.insert(name.clone(), PeerSet::Addrs(addrs));
        }
        PeerMatch::Set(name)
    }

    /// The set of an egress rule's named port, added on first use; its name.
    fn named_port_set(
        &mut self,
        policy: &Policy,
        index: usize,
        port_index: usize,
        rule: &Rule,
        port_name: &str,
        spec: &PortSpec,
    ) -> String {
        let name = peer_sets::addr_ports_name(policy, index, port_index);
        if !self.sets.contains_key(&name) {
            let elements =
                peer_sets::addr_ports(self.world, policy, rule, port_name, spec.protocol);
            self.sets.insert(name.clone(), PeerSet::AddrPorts(elements));
        }
        name
    }
}

/// `port` or `port..=end_port`; `None` for an empty range (matches nothing).
fn numbered(protocol: Protocol, first: u16, end_port: Option<u16>) -> Option<PortMatch> {
    let last = end_port.unwrap_or(first);
    (first <= last).then_some(PortMatch::Ports {
        protocol,
        first,
        last,
    })
}

/// An ingress named port against the local pod's container ports (name and protocol); none
/// if it has no such port.
fn resolve<'a>(
    pod: &'a Pod,
    name: &'a str,
    spec: &'a PortSpec,
) -> impl Iterator<Item = PortMatch> + 'a {
    pod.ports
        .iter()
        .filter(move |p| p.name == name && p.protocol == spec.protocol)
        .map(|p| PortMatch::Ports {
            protocol: p.protocol,
            first: p.port,
            last: p.port,
        })
}

#[cfg(test)]
mod tests;
