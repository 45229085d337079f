//! The peer sets of rules: their names and contents. Both depend on the policy, the rule and
//! the world only, never on the local pod, so every pod a policy selects shares them.
//!
//! Names are `p_` (addresses) or `n_` (address, protocol and port of an egress named port)
//! and the first 12 hex digits of the SHA-1 of `namespace/name/ingress|egress/<rule index>`
//! (`/<port index>` added for named ports): 14 bytes of `[a-z0-9_]`, within nftables' limit.

use std::net::Ipv4Addr;

use sha1::{Digest, Sha1};

use crate::model::{LabelSelector, Peer, Pod, Policy, Protocol, Rule};
use crate::ranges;
use crate::ruleset::AddrRange;
use crate::world::World;

/// A direction of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Ingress,
    Egress,
}

impl Way {
    fn as_str(self) -> &'static str {
        match self {
            Way::Ingress => "ingress",
            Way::Egress => "egress",
        }
    }

    /// The policy's rules in this direction; `None` if it does not isolate in it.
    pub fn rules(self, policy: &Policy) -> Option<&[Rule]> {
        match self {
            Way::Ingress => policy.ingress.as_deref(),
            Way::Egress => policy.egress.as_deref(),
        }
    }
}

fn hashed(prefix: &str, key: &str) -> String {
    let digest = hex::encode(Sha1::digest(key.as_bytes()));
    format!("{prefix}{}", &digest[..12])
}

/// The name of a rule's address set.
pub fn addrs_name(policy: &Policy, way: Way, rule: usize) -> String {
    let key = format!(
        "{}/{}/{}/{rule}",
        policy.namespace,
        policy.name,
        way.as_str()
    );
    hashed("p_", &key)
}

/// The name of an egress rule's named-port set.
pub fn addr_ports_name(policy: &Policy, rule: usize, port: usize) -> String {
    let key = format!("{}/{}/egress/{rule}/{port}", policy.namespace, policy.name);
    hashed("n_", &key)
}

/// The addresses a rule's peers match: the addresses of the pods its selectors pick and its
/// ipBlocks, in normal form. Empty if they match nothing.
pub fn addrs(world: &World, policy: &Policy, rule: &Rule) -> Vec<AddrRange> {
    let mut blocks = Vec::new();
    let mut ips = Vec::new();
    for peer in &rule.peers {
        match peer {
            Peer::Pods { namespaces, pods } => ips.extend(
                selected(world, policy, namespaces.as_ref(), pods.as_ref())
                    .flat_map(|p| p.ips.iter().copied()),
            ),
            Peer::IpBlock { cidr, except } => blocks.extend(ranges::block(*cidr, except)),
        }
    }
    ranges::normalize(blocks.into_iter().chain(ranges::from_addrs(ips)))
}

/// Address, protocol and port of every destination an egress rule's named port resolves
/// to: the pods its selectors pick (every pod when it has no peers; ipBlocks name no pod)
/// that have a container port of that name and protocol. Sorted, no duplicates.
pub fn addr_ports(
    world: &World,
    policy: &Policy,
    rule: &Rule,
    port_name: &str,
    protocol: Protocol,
) -> Vec<(Ipv4Addr, Protocol, u16)> {
    let pods: Vec<&Pod> = if rule.peers.is_empty() {
        world.pods().filter(|p| !p.host_network).collect()
    } else {
        rule.peers
            .iter()
            .flat_map(|peer| match peer {
                Peer::Pods { namespaces, pods } => {
                    selected(world, policy, namespaces.as_ref(), pods.as_ref()).collect()
                }
                Peer::IpBlock { .. } => Vec::new(),
            })
            .collect()
    };
    let mut elements: Vec<(Ipv4Addr, Protocol, u16)> = pods
        .into_iter()
        .flat_map(|pod| {
            pod.ports
                .iter()
                .filter(|p| p.name == port_name && p.protocol == protocol)
                .flat_map(|p| pod.ips.iter().map(|ip| (*ip, p.protocol, p.port)))
        })
        .collect();
    elements.sort();
    elements.dedup();
    elements
}

/// The pods a `podSelector`/`namespaceSelector` peer picks: in the policy's namespace
/// (`namespaces: None`) or in every existing namespace the namespace selector matches, with
/// labels the pod selector matches (`None`: all). Host-network pods are never picked.
fn selected<'w>(
    world: &'w World,
    policy: &'w Policy,
    namespaces: Option<&'w LabelSelector>,
    pods: Option<&'w LabelSelector>,
) -> impl Iterator<Item = &'w Pod> + 'w {
    let in_namespaces: Box<dyn Iterator<Item = &'w Pod> + 'w> = match namespaces {
        None => Box::new(world.pods_in(&policy.namespace)),
        Some(sel) => Box::new(
            world
                .namespaces()
                .filter(move |ns| sel.matches(&ns.labels))
                .flat_map(move |ns| world.pods_in(&ns.name)),
        ),
    };
    in_namespaces.filter(move |p| !p.host_network && pods.is_none_or(|s| s.matches(&p.labels)))
}
