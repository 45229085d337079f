//! A compiled [`Ruleset`] evaluated one packet at a time, as the datapath would: the local
//! pod's direction, then any allow whose peer and port matches hold (sets looked up by name).
//! Also the ruleset's structural invariants.

use std::collections::BTreeSet;

use vpcnet_policy::{Direction, PeerMatch, PeerSet, PortMatch, Ruleset};

use super::{Packet, Way};

/// Whether the ruleset lets `packet` reach (ingress) or leave (egress) the pod behind
/// `interface`. Panics if the interface or a named set is missing.
pub fn allowed(rs: &Ruleset, interface: &str, way: Way, packet: Packet) -> bool {
    let rules = &rs.pods[interface];
    let direction = match way {
        Way::Ingress => &rules.ingress,
        Way::Egress => &rules.egress,
    };
    let allows = match direction {
        Direction::Open => return true,
        Direction::Isolated(allows) => allows,
    };
    allows.iter().any(|allow| {
        let peer_ok = match &allow.peer {
            PeerMatch::Any => true,
            PeerMatch::Set(name) => match &rs.sets[name] {
                PeerSet::Addrs(ranges) => ranges.iter().any(|r| r.contains(packet.peer)),
                PeerSet::AddrPorts(_) => panic!("{name} is not an address set"),
            },
            PeerMatch::AddrPorts(name) => match &rs.sets[name] {
                PeerSet::AddrPorts(elements) => {
                    elements.contains(&(packet.peer, packet.protocol, packet.port))
                }
                PeerSet::Addrs(_) => panic!("{name} is not an address-port set"),
            },
        };
        let ports_ok = match allow.ports {
            PortMatch::Any => true,
            PortMatch::Protocol(p) => p == packet.protocol,
            PortMatch::Ports {
                protocol,
                first,
                last,
            } => protocol == packet.protocol && first <= packet.port && packet.port <= last,
        };
        peer_ok && ports_ok
    })
}

/// The ruleset's invariants; the first one broken.
pub fn check(rs: &Ruleset) -> Result<(), String> {
    let mut named = BTreeSet::new();
    for (interface, rules) in &rs.pods {
        for direction in [&rules.ingress, &rules.egress] {
            let Direction::Isolated(allows) = direction else {
                continue;
            };
            if !allows.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!("{interface}: allows not sorted or duplicated"));
            }
            for allow in allows {
                match &allow.peer {
                    PeerMatch::Any => {}
                    PeerMatch::Set(name) => {
                        if !matches!(rs.sets.get(name), Some(PeerSet::Addrs(_))) {
                            return Err(format!("{interface}: no address set {name}"));
                        }
                        named.insert(name.clone());
                    }
                    PeerMatch::AddrPorts(name) => {
                        if !matches!(rs.sets.get(name), Some(PeerSet::AddrPorts(_))) {
                            return Err(format!("{interface}: no address-port set {name}"));
                        }
                        if allow.ports != PortMatch::Any {
                            return Err(format!("{interface}: {name} with a port match"));
                        }
                        named.insert(name.clone());
                    }
                }
                if let PortMatch::Ports { first, last, .. } = allow.ports {
                    if first > last {
                        return Err(format!("{interface}: empty port range"));
                    }
                }
            }
        }
    }
    for (name, set) in &rs.sets {
        if !named.contains(name) {
            return Err(format!("set {name} is named by no allow"));
        }
        let name_ok = name.len() <= 31
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !name_ok {
            return Err(format!("bad set name {name:?}"));
        }
        match set {
            PeerSet::Addrs(ranges) => {
                let normal = ranges.iter().all(|r| r.first <= r.last)
                    && ranges.windows(2).all(|w| {
                        u64::from(u32::from(w[0].last)) + 1 < u64::from(u32::from(w[1].first))
                    });
                if !normal {
                    return Err(format!("set {name}: ranges not in normal form: {ranges:?}"));
                }
            }
            PeerSet::AddrPorts(elements) => {
                if !elements.windows(2).all(|w| w[0] < w[1]) {
                    return Err(format!("set {name}: not sorted or duplicated"));
                }
            }
        }
    }
    Ok(())
}
