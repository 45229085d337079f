//! Small random worlds for the agreement test: 2–3 labelled namespaces (and pods in a
//! namespace that has no object), up to 8 pods sharing a small address pool (one may be
//! host-network), up to 5 policies with random selectors, peers, ipBlocks with excepts,
//! numbered, ranged and named ports and policy types; the node's local pods and packets.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use proptest::collection::{btree_map, btree_set, vec};
use proptest::prelude::*;
use proptest::sample::select;
use vpcnet_policy::model::Labels;
use vpcnet_policy::{
    LabelSelector, LocalPod, NamedPort, Namespace, Peer, Pod, Policy, PortRef, PortSpec, Protocol,
    Requirement, Rule, World,
};

use super::Packet;

/// Namespaces pods and policies may be in; only the first two or three exist as objects.
const NAMESPACES: [&str; 4] = ["a", "b", "c", "d"];
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
const NODE_IP: &str = "192.168.0.1";
/// Pod addresses: few, so pods share them and packets hit them.
const POD_IPS: [&str; 7] = [
    "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.1.1",
];
const OTHER_IPS: [&str; 10] = [
    "0.0.0.0",
    "10.0.0.0",
    "10.0.0.7",
    "10.0.0.255",
    "10.0.1.0",
    "8.8.8.8",
    "127.255.255.255",
    "128.0.0.0",
    "255.255.255.255",
    NODE_IP,
];
const CIDRS: [&str; 8] = [
    "10.0.0.0/24",
    "10.0.0.0/29",
    "10.0.0.4/30",
    "10.0.0.2/32",
    "0.0.0.0/0",
    "192.168.0.0/16",
    "128.0.0.0/1",
    "255.255.255.255/32",
];
const EXCEPTS: [&str; 9] = [
    "10.0.0.0/30",
    "10.0.0.4/31",
    "10.0.0.1/32",
    "10.0.0.0/8",
    "10.0.0.0/24",
    "192.168.0.1/32",
    "0.0.0.0/1",
    "128.0.0.0/1",
    "255.255.255.254/31",
];
const PORT_NAMES: [&str; 4] = ["http", "dns", "metrics", "nope"];
const PORTS: [u16; 9] = [1, 53, 80, 81, 5353, 8080, 9090, 9100, 65535];

/// A generated case.
#[derive(Debug, Clone)]
pub struct Case {
    pub world: World,
    pub local: Vec<LocalPod>,
    pub packets: Vec<Packet>,
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn net(s: &str) -> Ipv4Net {
    s.parse().unwrap()
}

fn value() -> impl Strategy<Value = String> {
    select(vec!["x", "y", "z"]).prop_map(String::from)
}

fn labels(keys: &'static [&'static str]) -> impl Strategy<Value = Labels> {
    btree_map(select(keys).prop_map(String::from), value(), 0..=keys.len())
}

fn protocol() -> impl Strategy<Value = Protocol> {
    prop_oneof![
        3 => Just(Protocol::Tcp),
        2 => Just(Protocol::Udp),
        1 => Just(Protocol::Sctp),
    ]
}

fn requirement(keys: &'static [&'static str]) -> impl Strategy<Value = Requirement> {
    let key = select(keys).prop_map(String::from);
    let values = || {
        btree_set(
            select(vec!["x", "y", "z", "a", "b"]).prop_map(String::from),
            0..3,
        )
    };
    prop_oneof![
        (key.clone(), values()).prop_map(|(key, values)| Requirement::In { key, values }),
        (key.clone(), values()).prop_map(|(key, values)| Requirement::NotIn { key, values }),
        key.clone().prop_map(|key| Requirement::Exists { key }),
        key.prop_map(|key| Requirement::DoesNotExist { key }),
    ]
}

fn selector(keys: &'static [&'static str]) -> impl Strategy<Value = LabelSelector> {
    prop_oneof![
        2 => Just(LabelSelector::default()),
        3 => (btree_map(select(keys).prop_map(String::from), value(), 0..=1), vec(requirement(keys), 0..=2))
            .prop_map(|(match_labels, match_expressions)| LabelSelector { match_labels, match_expressions }),
    ]
}

const POD_KEYS: &[&str] = &["app", "role"];
const NAMESPACE_KEYS: &[&str] = &["team", "env", NAMESPACE_NAME_LABEL];

fn peer() -> impl Strategy<Value = Peer> {
    prop_oneof![
        3 => (
            proptest::option::of(selector(NAMESPACE_KEYS)),
            proptest::option::of(selector(POD_KEYS)),
        )
            .prop_map(|(namespaces, pods)| Peer::Pods { namespaces, pods }),
        2 => (select(&CIDRS[..]), vec(select(&EXCEPTS[..]), 0..=2)).prop_map(|(cidr, except)| {
            Peer::IpBlock {
                cidr: net(cidr),
                except: except.into_iter().map(net).collect(),
            }
        }),
    ]
}

fn port_spec() -> impl Strategy<Value = PortSpec> {
    let port = prop_oneof![
        1 => Just((None, None)),
        3 => (select(&PORTS[..]), proptest::option::weighted(0.4, select(vec![80u16, 90, 8080, 9100, 65535])))
            .prop_map(|(p, end)| (Some(PortRef::Number(p)), end)),
        3 => select(&PORT_NAMES[..]).prop_map(|n| (Some(PortRef::Name(n.into())), None)),
    ];
    (protocol(), port).prop_map(|(protocol, (port, end_port))| PortSpec {
        protocol,
        port,
        end_port,
    })
}

fn rule() -> impl Strategy<Value = Rule> {
    let peers = prop_oneof![1 => Just(vec![]), 3 => vec(peer(), 1..=3)];
    let ports = prop_oneof![1 => Just(vec![]), 2 => vec(port_spec(), 1..=2)];
    (peers, ports).prop_map(|(peers, ports)| Rule { peers, ports })
}

fn rules() -> impl Strategy<Value = Option<Vec<Rule>>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(vec![])),
        3 => vec(rule(), 1..=2).prop_map(Some),
    ]
}

fn policy() -> impl Strategy<
    Value = (
        &'static str,
        LabelSelector,
        Option<Vec<Rule>>,
        Option<Vec<Rule>>,
    ),
> {
    (
        select(&NAMESPACES[..]),
        selector(POD_KEYS),
        rules(),
        rules(),
    )
}

fn named_port() -> impl Strategy<Value = NamedPort> {
    (
        select(&PORT_NAMES[..3]),
        protocol(),
        select(vec![53u16, 80, 5353, 8080, 9090]),
    )
        .prop_map(|(name, protocol, port)| NamedPort {
            name: name.into(),
            protocol,
            port,
        })
}

fn pod() -> impl Strategy<
    Value = (
        &'static str,
        Labels,
        Vec<&'static str>,
        bool,
        Vec<NamedPort>,
    ),
> {
    (
        select(&NAMESPACES[..]),
        labels(POD_KEYS),
        vec(select(&POD_IPS[..]), 0..=2),
        proptest::bool::weighted(0.15),
        vec(named_port(), 0..=2),
    )
}

fn packet() -> impl Strategy<Value = Packet> {
    let addrs: Vec<&str> = POD_IPS.iter().chain(OTHER_IPS.iter()).copied().collect();
    (select(addrs), protocol(), select(&PORTS[..])).prop_map(|(peer, protocol, port)| Packet {
        peer: ip(peer),
        protocol,
        port,
    })
}

/// A whole case.
pub fn case() -> impl Strategy<Value = Case> {
    let namespaces = (2usize..=3, vec(labels(&["team", "env"]), 3));
    (
        namespaces,
        vec(pod(), 1..=8),
        vec(policy(), 0..=5),
        vec(packet(), 1..=12),
    )
        .prop_map(
            |((n_namespaces, ns_labels), pods, policies, random_packets)| {
                let mut world = World::new();
                for (name, mut labels) in NAMESPACES.iter().zip(ns_labels).take(n_namespaces) {
                    labels.insert(NAMESPACE_NAME_LABEL.into(), name.to_string());
                    world.upsert_namespace(Namespace {
                        name: name.to_string(),
                        labels,
                    });
                }
                let mut local = Vec::new();
                for (i, (namespace, labels, ips, host_network, ports)) in
                    pods.into_iter().enumerate()
                {
                    let mut ips: Vec<Ipv4Addr> = ips.into_iter().map(ip).collect();
                    ips.dedup();
                    if host_network {
                        ips = vec![ip(NODE_IP)];
                    }
                    let pod = Pod {
                        namespace: namespace.into(),
                        name: format!("p{i}"),
                        labels,
                        ips,
                        host_network,
                        ports,
                    };
                    if !pod.host_network {
                        local.push(LocalPod {
                            namespace: pod.namespace.clone(),
                            name: pod.name.clone(),
                            interface: format!("eni{namespace}{i}"),
                            ip: pod.ips.first().copied().unwrap_or(Ipv4Addr::UNSPECIFIED),
                        });
                    }
                    world.upsert_pod(pod);
                }
                // A local pod the world does not know yet.
                local.push(LocalPod {
                    namespace: "a".into(),
                    name: "ghost".into(),
                    interface: "enighost".into(),
                    ip: ip("10.0.0.9"),
                });
                for (i, (namespace, pod_selector, ingress, egress)) in
                    policies.into_iter().enumerate()
                {
                    world.upsert_policy(Policy {
                        namespace: namespace.into(),
                        name: format!("n{i}"),
                        pod_selector,
                        ingress,
                        egress,
                    });
                }
                // Random packets, and one to every pod address on every named and every
                // generated port, so rules are hit and missed at their edges.
                let mut packets: BTreeSet<Packet> = random_packets.into_iter().collect();
                for pod in world.pods() {
                    for &peer in &pod.ips {
                        for p in &pod.ports {
                            packets.insert(Packet {
                                peer,
                                protocol: p.protocol,
                                port: p.port,
                            });
                        }
                        packets.insert(Packet {
                            peer,
                            protocol: Protocol::Tcp,
                            port: 80,
                        });
                    }
                }
                Case {
                    world,
                    local,
                    packets: packets.into_iter().collect(),
                }
            },
        )
}
