//! The NetworkPolicy semantics evaluated directly on the [`World`], one packet at a time,
//! written without the crate's selector, range or compiler code.
//!
//! A pod is isolated in a direction iff a policy of its namespace selects it and has that
//! direction; then a packet is allowed iff some rule of such a policy allows it: a peer of
//! the rule matches (none given: every peer) and a port entry matches (none given: every
//! port). Pod selectors never match host-network pods. A named port is the local pod's
//! container port for ingress and the destination pod's for egress. Strict mode: a pod no
//! policy selects denies everything. A pod missing from the world denies everything.

use std::net::Ipv4Addr;

use vpcnet_policy::{
    LabelSelector, Mode, Peer, Pod, Policy, PortRef, Protocol, Requirement, Rule, World,
};

use super::{Packet, Way};

/// Whether `packet` may reach (ingress) or leave (egress) the pod `namespace/name`.
fn allowed(
    world: &World,
    mode: Mode,
    namespace: &str,
    name: &str,
    way: Way,
    packet: Packet,
) -> bool {
    let Some(pod) = world.pod(namespace, name) else {
        return false;
    };
    let selecting: Vec<&Policy> = world
        .policies()
        .filter(|p| p.namespace == pod.namespace && selects(&p.pod_selector, &pod.labels))
        .collect();
    if selecting.is_empty() {
        return mode == Mode::Standard;
    }
    let mut isolated = false;
    for policy in selecting {
        let rules = match way {
            Way::Ingress => &policy.ingress,
            Way::Egress => &policy.egress,
        };
        let Some(rules) = rules else { continue };
        isolated = true;
        if rules
            .iter()
            .any(|rule| rule_allows(world, policy, rule, way, pod, packet))
        {
            return true;
        }
    }
    !isolated
}

/// `allowed` for ingress: `src` to `dst_pod`.
pub fn allowed_ingress(
    world: &World,
    mode: Mode,
    dst_pod: (&str, &str),
    src: Ipv4Addr,
    protocol: Protocol,
    port: u16,
) -> bool {
    let packet = Packet {
        peer: src,
        protocol,
        port,
    };
    allowed(world, mode, dst_pod.0, dst_pod.1, Way::Ingress, packet)
}

/// `allowed` for egress: `src_pod` to `dst`.
pub fn allowed_egress(
    world: &World,
    mode: Mode,
    src_pod: (&str, &str),
    dst: Ipv4Addr,
    protocol: Protocol,
    port: u16,
) -> bool {
    let packet = Packet {
        peer: dst,
        protocol,
        port,
    };
    allowed(world, mode, src_pod.0, src_pod.1, Way::Egress, packet)
}

fn rule_allows(
    world: &World,
    policy: &Policy,
    rule: &Rule,
    way: Way,
    local: &Pod,
    packet: Packet,
) -> bool {
    if rule.ports.is_empty() {
        return peer_matches(world, policy, rule, packet.peer);
    }
    rule.ports.iter().any(|spec| {
        if spec.protocol != packet.protocol {
            return false;
        }
        match &spec.port {
            None => peer_matches(world, policy, rule, packet.peer),
            Some(PortRef::Number(first)) => {
                let last = spec.end_port.unwrap_or(*first);
                *first <= packet.port
                    && packet.port <= last
                    && peer_matches(world, policy, rule, packet.peer)
            }
            Some(PortRef::Name(name)) => match way {
                Way::Ingress => {
                    has_port(local, name, packet.protocol, packet.port)
                        && peer_matches(world, policy, rule, packet.peer)
                }
                Way::Egress => {
                    let destination = |q: &Pod| {
                        !q.host_network
                            && q.ips.contains(&packet.peer)
                            && has_port(q, name, packet.protocol, packet.port)
                    };
                    if rule.peers.is_empty() {
                        world.pods().any(destination)
                    } else {
                        rule.peers.iter().any(|peer| match peer {
                            Peer::Pods { namespaces, pods } => world.pods().any(|q| {
                                destination(q) && picks(world, policy, namespaces, pods, q)
                            }),
                            Peer::IpBlock { .. } => false,
                        })
                    }
                }
            },
        }
    })
}

fn has_port(pod: &Pod, name: &str, protocol: Protocol, port: u16) -> bool {
    pod.ports
        .iter()
        .any(|p| p.name == name && p.protocol == protocol && p.port == port)
}

fn peer_matches(world: &World, policy: &Policy, rule: &Rule, addr: Ipv4Addr) -> bool {
    if rule.peers.is_empty() {
        return true;
    }
    rule.peers.iter().any(|peer| match peer {
        Peer::Pods { namespaces, pods } => world.pods().any(|q| {
            !q.host_network && q.ips.contains(&addr) && picks(world, policy, namespaces, pods, q)
        }),
        Peer::IpBlock { cidr, except } => {
            in_net(cidr.addr(), cidr.prefix_len(), addr)
                && !except
                    .iter()
                    .any(|e| in_net(e.addr(), e.prefix_len(), addr))
        }
    })
}

/// Whether a selector peer picks pod `q` (host network aside).
fn picks(
    world: &World,
    policy: &Policy,
    namespaces: &Option<LabelSelector>,
    pods: &Option<LabelSelector>,
    q: &Pod,
) -> bool {
    let namespace_ok = match namespaces {
        None => q.namespace == policy.namespace,
        Some(s) => world
            .namespace(&q.namespace)
            .is_some_and(|ns| selects(s, &ns.labels)),
    };
    namespace_ok && pods.as_ref().is_none_or(|s| selects(s, &q.labels))
}

fn in_net(net: Ipv4Addr, prefix_len: u8, addr: Ipv4Addr) -> bool {
    let mask = if prefix_len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix_len))
    };
    u32::from(net) & mask == u32::from(addr) & mask
}

fn selects(s: &LabelSelector, labels: &vpcnet_policy::model::Labels) -> bool {
    for (k, v) in &s.match_labels {
        if labels.get(k) != Some(v) {
            return false;
        }
    }
    for r in &s.match_expressions {
        let ok = match r {
            Requirement::In { key, values } => match labels.get(key) {
                Some(v) => values.contains(v),
                None => false,
            },
            Requirement::NotIn { key, values } => match labels.get(key) {
                Some(v) => !values.contains(v),
                None => true,
            },
            Requirement::Exists { key } => labels.contains_key(key),
            Requirement::DoesNotExist { key } => !labels.contains_key(key),
        };
        if !ok {
            return false;
        }
    }
    true
}
