//! Hand-written cases of the compiler; `tests/agreement.rs` checks it against a reference
//! evaluator on generated worlds.

use std::net::Ipv4Addr;

use sha1::{Digest, Sha1};

use super::*;
use crate::model::{LabelSelector, NamedPort, Namespace, Peer, Pod, Policy, Rule};
use crate::ruleset::AddrRange;
use crate::test_support::{labels, sel};

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn pod(ns: &str, name: &str, l: &[(&str, &str)], ips: &[&str]) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        labels: labels(l),
        ips: ips.iter().map(|s| ip(s)).collect(),
        host_network: false,
        ports: vec![],
    }
}

fn with_port(mut p: Pod, name: &str, protocol: Protocol, port: u16) -> Pod {
    p.ports.push(NamedPort {
        name: name.into(),
        protocol,
        port,
    });
    p
}

fn namespace(name: &str, l: &[(&str, &str)]) -> Namespace {
    Namespace {
        name: name.into(),
        labels: labels(l),
    }
}

fn policy(ns: &str, name: &str, selector: LabelSelector) -> Policy {
    Policy {
        namespace: ns.into(),
        name: name.into(),
        pod_selector: selector,
        ingress: None,
        egress: None,
    }
}

fn local(p: &Pod) -> LocalPod {
    LocalPod {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        interface: format!("eni{}", p.name),
        ip: p.ips.first().copied().unwrap_or(Ipv4Addr::UNSPECIFIED),
    }
}

fn own_pods(s: LabelSelector) -> Peer {
    Peer::Pods {
        namespaces: None,
        pods: Some(s),
    }
}

fn tcp(first: u16, last: u16) -> PortMatch {
    PortMatch::Ports {
        protocol: Protocol::Tcp,
        first,
        last,
    }
}

fn number(protocol: Protocol, port: u16, end_port: Option<u16>) -> PortSpec {
    PortSpec {
        protocol,
        port: Some(PortRef::Number(port)),
        end_port,
    }
}

fn named(protocol: Protocol, name: &str) -> PortSpec {
    PortSpec {
        protocol,
        port: Some(PortRef::Name(name.into())),
        end_port: None,
    }
}

fn sha_name(prefix: &str, key: &str) -> String {
    format!(
        "{prefix}{}",
        &hex::encode(Sha1::digest(key.as_bytes()))[..12]
    )
}

fn range(first: &str, last: &str) -> AddrRange {
    AddrRange::new(ip(first), ip(last))
}

fn isolated(d: &Direction) -> &[Allow] {
    match d {
        Direction::Isolated(allows) => allows,
        Direction::Open => panic!("not isolated"),
    }
}

/// A world of namespace `shop` with a web pod and a client pod.
fn shop() -> (World, Pod, Pod) {
    let mut w = World::new();
    w.upsert_namespace(namespace("shop", &[("team", "a")]));
    let web = pod("shop", "web", &[("app", "web")], &["10.0.0.1"]);
    let client = pod("shop", "client", &[("app", "client")], &["10.0.0.2"]);
    w.upsert_pod(web.clone());
    w.upsert_pod(client.clone());
    (w, web, client)
}

#[test]
fn unselected_pods_are_open_in_standard_mode_and_closed_in_strict() {
    let (w, web, client) = shop();
    let local = [local(&web), local(&client)];
    let rs = compile(&w, &local, Mode::Standard);
    assert_eq!(rs.sets.len(), 0);
    for lp in &local {
        let rules = &rs.pods[&lp.interface];
        assert_eq!(rules.pod, format!("shop/{}", lp.name));
        assert_eq!(rules.ingress, Direction::Open);
        assert_eq!(rules.egress, Direction::Open);
    }
    let rs = compile(&w, &local, Mode::Strict);
    for lp in &local {
        assert_eq!(rs.pods[&lp.interface].ingress, Direction::Isolated(vec![]));
        assert_eq!(rs.pods[&lp.interface].egress, Direction::Isolated(vec![]));
    }
}

#[test]
fn a_pod_missing_from_the_world_fails_closed() {
    let (w, _, _) = shop();
    let ghost = LocalPod {
        namespace: "shop".into(),
        name: "ghost".into(),
        interface: "eniabc".into(),
        ip: ip("10.0.0.9"),
    };
    for mode in [Mode::Standard, Mode::Strict] {
        let rs = compile(&w, std::slice::from_ref(&ghost), mode);
        assert_eq!(
            rs.pods["eniabc"],
            PodRules {
                pod: "shop/ghost".into(),
                ingress: Direction::Isolated(vec![]),
                egress: Direction::Isolated(vec![]),
            }
        );
    }
}

#[test]
fn a_selected_pod_follows_the_policy_types_in_both_modes() {
    let (mut w, web, client) = shop();
    let mut p = policy("shop", "deny-in", sel(&[("app", "web")]));
    p.ingress = Some(vec![]);
    w.upsert_policy(p);
    // A policy elsewhere selects nothing here.
    let mut other = policy("other", "deny-all", LabelSelector::default());
    other.ingress = Some(vec![]);
    other.egress = Some(vec![]);
    w.upsert_policy(other);
    for mode in [Mode::Standard, Mode::Strict] {
        let rs = compile(&w, &[local(&web), local(&client)], mode);
        let web_rules = &rs.pods["eniweb"];
        assert_eq!(web_rules.ingress, Direction::Isolated(vec![]));
        assert_eq!(web_rules.egress, Direction::Open, "{mode:?}");
        let expected = match mode {
            Mode::Standard => Direction::Open,
            Mode::Strict => Direction::Isolated(vec![]),
        };
        assert_eq!(rs.pods["eniclient"].ingress, expected);
    }
}

#[test]
fn peer_sets_are_named_after_policy_and_rule_and_shared() {
    let (mut w, web, client) = shop();
    let web2 = pod("shop", "web2", &[("app", "web")], &["10.0.0.3"]);
    w.upsert_pod(web2.clone());
    let mut p = policy("shop", "from-client", sel(&[("app", "web")]));
    p.ingress = Some(vec![
        Rule {
            peers: vec![own_pods(sel(&[("app", "client")]))],
            ports: vec![],
        },
        Rule {
            peers: vec![],
            ports: vec![number(Protocol::Tcp, 80, None)],
        },
    ]);
    w.upsert_policy(p);
    let rs = compile(
        &w,
        &[local(&web), local(&web2), local(&client)],
        Mode::Standard,
    );
    let set = sha_name("p_", "shop/from-client/ingress/0");
    let expected = vec![
        Allow {
            policy: "shop/from-client".into(),
            peer: PeerMatch::Any,
            ports: tcp(80, 80),
        },
        Allow {
            policy: "shop/from-client".into(),
            peer: PeerMatch::Set(set.clone()),
            ports: PortMatch::Any,
        },
    ];
    assert_eq!(
        rs.pods["eniweb"].ingress,
        Direction::Isolated(expected.clone())
    );
    assert_eq!(rs.pods["eniweb2"].ingress, Direction::Isolated(expected));
    assert_eq!(rs.pods["eniclient"].ingress, Direction::Open);
    assert_eq!(rs.sets.len(), 1);
    assert_eq!(
        rs.sets[&set],
        PeerSet::Addrs(vec![range("10.0.0.2", "10.0.0.2")])
    );
    assert!(
        set.len() == 14
            && set
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    );
}

#[test]
fn peer_set_contents() {
    let mut w = World::new();
    w.upsert_namespace(namespace("a", &[("team", "x")]));
    w.upsert_namespace(namespace("b", &[("team", "x")]));
    w.upsert_namespace(namespace("c", &[("team", "y")]));
    // Namespace d has pods but no Namespace object: no namespace selector picks it.
    let target = pod("a", "target", &[("app", "t")], &["10.0.0.1"]);
    w.upsert_pod(target.clone());
    w.upsert_pod(pod("a", "db", &[("app", "db")], &["10.0.1.5", "10.0.1.6"]));
    w.upsert_pod(pod("b", "db", &[("app", "db")], &["10.0.1.7"]));
    w.upsert_pod(pod("c", "db", &[("app", "db")], &["10.0.2.1"]));
    w.upsert_pod(pod("d", "db", &[("app", "db")], &["10.0.3.1"]));
    let mut host = pod("b", "host", &[("app", "db")], &["192.168.0.1"]);
    host.host_network = true;
    w.upsert_pod(host);
    w.upsert_pod(pod("b", "pending", &[("app", "db")], &[]));
    let mut p = policy("a", "p", LabelSelector::default());
    p.egress = Some(vec![
        // Own namespace only.
        Rule {
            peers: vec![own_pods(sel(&[("app", "db")]))],
            ports: vec![],
        },
        // Namespaces labelled x, pods labelled db, and an ipBlock touching them.
        Rule {
            peers: vec![
                Peer::Pods {
                    namespaces: Some(sel(&[("team", "x")])),
                    pods: Some(sel(&[("app", "db")])),
                },
                Peer::IpBlock {
                    cidr: "10.0.1.8/29".parse().unwrap(),
                    except: vec!["10.0.1.12/30".parse().unwrap()],
                },
            ],
            ports: vec![],
        },
        // Every pod of namespaces labelled y.
        Rule {
            peers: vec![Peer::Pods {
                namespaces: Some(sel(&[("team", "y")])),
                pods: None,
            }],
            ports: vec![],
        },
        // Nothing matches: the set is still there, empty.
        Rule {
            peers: vec![Peer::Pods {
                namespaces: Some(sel(&[("team", "none")])),
                pods: None,
            }],
            ports: vec![],
        },
    ]);
    w.upsert_policy(p);
    let rs = compile(&w, &[local(&target)], Mode::Standard);
    let set = |rule: usize| &rs.sets[&sha_name("p_", &format!("a/p/egress/{rule}"))];
    assert_eq!(*set(0), PeerSet::Addrs(vec![range("10.0.1.5", "10.0.1.6")]));
    assert_eq!(
        *set(1),
        PeerSet::Addrs(vec![range("10.0.1.5", "10.0.1.11")])
    );
    assert_eq!(*set(2), PeerSet::Addrs(vec![range("10.0.2.1", "10.0.2.1")]));
    assert_eq!(*set(3), PeerSet::Addrs(vec![]));
    assert_eq!(isolated(&rs.pods["enitarget"].egress).len(), 4);
}

#[test]
fn port_forms() {
    let (mut w, web, _) = shop();
    let mut p = policy("shop", "ports", sel(&[("app", "web")]));
    p.ingress = Some(vec![Rule {
        peers: vec![],
        ports: vec![
            PortSpec {
                protocol: Protocol::Udp,
                port: None,
                end_port: None,
            },
            number(Protocol::Tcp, 8000, Some(8080)),
            number(Protocol::Sctp, 9, None),
            // An empty range matches nothing.
            number(Protocol::Tcp, 90, Some(80)),
            // A duplicate collapses.
            number(Protocol::Tcp, 8000, Some(8080)),
        ],
    }]);
    w.upsert_policy(p);
    let rs = compile(&w, &[local(&web)], Mode::Standard);
    let ports: Vec<_> = isolated(&rs.pods["eniweb"].ingress)
        .iter()
        .map(|a| (a.peer.clone(), a.ports.clone()))
        .collect();
    assert_eq!(
        ports,
        [
            (PeerMatch::Any, PortMatch::Protocol(Protocol::Udp)),
            (PeerMatch::Any, tcp(8000, 8080)),
            (
                PeerMatch::Any,
                PortMatch::Ports {
                    protocol: Protocol::Sctp,
                    first: 9,
                    last: 9
                }
            ),
        ]
    );
}

#[test]
fn ingress_named_ports_resolve_against_each_local_pod() {
    let (mut w, _, client) = shop();
    let web_a = with_port(
        with_port(
            pod("shop", "a", &[("app", "web")], &["10.0.0.5"]),
            "http",
            Protocol::Tcp,
            8080,
        ),
        "http",
        Protocol::Udp,
        53,
    );
    let web_b = with_port(
        pod("shop", "b", &[("app", "web")], &["10.0.0.6"]),
        "http",
        Protocol::Tcp,
        9090,
    );
    let web_c = with_port(
        pod("shop", "c", &[("app", "web")], &["10.0.0.7"]),
        "http",
        Protocol::Udp,
        80,
    );
    for p in [&web_a, &web_b, &web_c] {
        w.upsert_pod(p.clone());
    }
    let mut p = policy("shop", "http", sel(&[("app", "web")]));
    p.ingress = Some(vec![Rule {
        peers: vec![own_pods(sel(&[("app", "client")]))],
        ports: vec![named(Protocol::Tcp, "http")],
    }]);
    w.upsert_policy(p);
    let set = sha_name("p_", "shop/http/ingress/0");
    let allow = |port| Allow {
        policy: "shop/http".into(),
        peer: PeerMatch::Set(set.clone()),
        ports: tcp(port, port),
    };
    let rs = compile(
        &w,
        &[local(&web_a), local(&web_b), local(&web_c), local(&client)],
        Mode::Standard,
    );
    assert_eq!(
        rs.pods["enia"].ingress,
        Direction::Isolated(vec![allow(8080)])
    );
    assert_eq!(
        rs.pods["enib"].ingress,
        Direction::Isolated(vec![allow(9090)])
    );
    // c has "http" only as UDP: nothing allowed.
    assert_eq!(rs.pods["enic"].ingress, Direction::Isolated(vec![]));
    assert!(rs.sets.contains_key(&set));

    // With only c local, no allow names the set, so it is not there.
    let rs = compile(&w, &[local(&web_c)], Mode::Standard);
    assert_eq!(rs.pods["enic"].ingress, Direction::Isolated(vec![]));
    assert!(rs.sets.is_empty());
}

#[test]
fn egress_named_ports_resolve_per_destination_pod() {
    let mut w = World::new();
    w.upsert_namespace(namespace("a", &[]));
    w.upsert_namespace(namespace("b", &[]));
    let src = pod("a", "src", &[("app", "src")], &["10.0.0.1"]);
    w.upsert_pod(src.clone());
    w.upsert_pod(with_port(
        pod("a", "dns1", &[("app", "dns")], &["10.0.0.2", "10.0.0.3"]),
        "dns",
        Protocol::Udp,
        53,
    ));
    w.upsert_pod(with_port(
        pod("a", "dns2", &[("app", "dns")], &["10.0.0.4"]),
        "dns",
        Protocol::Udp,
        5353,
    ));
    w.upsert_pod(with_port(
        pod("a", "dnstcp", &[("app", "dns")], &["10.0.0.5"]),
        "dns",
        Protocol::Tcp,
        53,
    ));
    w.upsert_pod(with_port(
        pod("b", "dns3", &[("app", "dns")], &["10.0.1.1"]),
        "dns",
        Protocol::Udp,
        53,
    ));
    let mut host = with_port(
        pod("b", "hostdns", &[("app", "dns")], &["192.168.0.1"]),
        "dns",
        Protocol::Udp,
        53,
    );
    host.host_network = true;
    w.upsert_pod(host);

    let mut p = policy("a", "dns", sel(&[("app", "src")]));
    p.egress = Some(vec![
        Rule {
            peers: vec![
                own_pods(sel(&[("app", "dns")])),
                Peer::IpBlock {
                    cidr: "0.0.0.0/0".parse().unwrap(),
                    except: vec![],
                },
            ],
            ports: vec![
                number(Protocol::Tcp, 443, None),
                named(Protocol::Udp, "dns"),
            ],
        },
        Rule {
            peers: vec![],
            ports: vec![named(Protocol::Udp, "dns")],
        },
        Rule {
            peers: vec![Peer::IpBlock {
                cidr: "10.0.0.0/8".parse().unwrap(),
                except: vec![],
            }],
            ports: vec![named(Protocol::Udp, "dns")],
        },
    ]);
    w.upsert_policy(p);
    let rs = compile(&w, &[local(&src)], Mode::Standard);
    let n = |rule: usize, port: usize| sha_name("n_", &format!("a/dns/egress/{rule}/{port}"));
    let u = |a: &str, port: u16| (ip(a), Protocol::Udp, port);
    assert_eq!(
        rs.sets[&n(0, 1)],
        PeerSet::AddrPorts(vec![
            u("10.0.0.2", 53),
            u("10.0.0.3", 53),
            u("10.0.0.4", 5353)
        ])
    );
    assert_eq!(
        rs.sets[&n(1, 0)],
        PeerSet::AddrPorts(vec![
            u("10.0.0.2", 53),
            u("10.0.0.3", 53),
            u("10.0.0.4", 5353),
            u("10.0.1.1", 53)
        ])
    );
    // ipBlocks name no pod.
    assert_eq!(rs.sets[&n(2, 0)], PeerSet::AddrPorts(vec![]));
    let p0 = sha_name("p_", "a/dns/egress/0");
    assert_eq!(
        rs.sets[&p0],
        PeerSet::Addrs(vec![range("0.0.0.0", "255.255.255.255")])
    );
    // The rule with only named ports has no address set.
    assert_eq!(rs.sets.len(), 4);
    let allow = |peer, ports| Allow {
        policy: "a/dns".into(),
        peer,
        ports,
    };
    let mut expected = vec![
        allow(PeerMatch::Set(p0), tcp(443, 443)),
        allow(PeerMatch::AddrPorts(n(0, 1)), PortMatch::Any),
        allow(PeerMatch::AddrPorts(n(1, 0)), PortMatch::Any),
        allow(PeerMatch::AddrPorts(n(2, 0)), PortMatch::Any),
    ];
    expected.sort();
    assert_eq!(rs.pods["enisrc"].egress, Direction::Isolated(expected));
    assert_eq!(rs.pods["enisrc"].ingress, Direction::Open);
}

#[test]
fn allows_of_several_policies_are_unioned_sorted_and_deduplicated() {
    let (mut w, web, _) = shop();
    for name in ["z", "a"] {
        let mut p = policy("shop", name, LabelSelector::default());
        p.ingress = Some(vec![
            Rule {
                peers: vec![],
                ports: vec![number(Protocol::Tcp, 80, None)],
            },
            Rule {
                peers: vec![],
                ports: vec![number(Protocol::Tcp, 80, None)],
            },
        ]);
        w.upsert_policy(p);
    }
    let rs = compile(&w, &[local(&web)], Mode::Standard);
    let allows = isolated(&rs.pods["eniweb"].ingress);
    let policies: Vec<_> = allows.iter().map(|a| a.policy.as_str()).collect();
    assert_eq!(policies, ["shop/a", "shop/z"]);
}

#[test]
fn compiling_is_deterministic_and_order_free() {
    let (mut w, web, client) = shop();
    let mut p = policy("shop", "p", LabelSelector::default());
    p.ingress = Some(vec![Rule {
        peers: vec![own_pods(LabelSelector::default())],
        ports: vec![number(Protocol::Tcp, 80, None)],
    }]);
    p.egress = Some(vec![Rule {
        peers: vec![own_pods(sel(&[("app", "web")]))],
        ports: vec![named(Protocol::Tcp, "http")],
    }]);
    w.upsert_policy(p);
    let a = compile(&w, &[local(&web), local(&client)], Mode::Standard);
    let b = compile(&w, &[local(&client), local(&web)], Mode::Standard);
    assert_eq!(a, b);
    assert_eq!(
        a,
        compile(&w, &[local(&web), local(&client)], Mode::Standard)
    );
}
