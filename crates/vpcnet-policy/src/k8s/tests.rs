//! The conversion of real k8s-openapi objects, built from JSON as the API server sends them.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::*;
use crate::test_support::{labels, sel};

fn np(spec: Value) -> Converted<Policy> {
    let object = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"namespace": "shop", "name": "web"},
        "spec": spec,
    });
    policy(&serde_json::from_value(object).unwrap())
}

/// The policy of a spec that must convert without warnings.
fn clean(spec: Value) -> Policy {
    let c = np(spec);
    assert_eq!(c.warnings, Vec::<String>::new());
    c.value
}

fn net(s: &str) -> Ipv4Net {
    s.parse().unwrap()
}

fn tcp(port: u16) -> PortSpec {
    PortSpec {
        protocol: Protocol::Tcp,
        port: Some(PortRef::Number(port)),
        end_port: None,
    }
}

fn assert_warned(c: &Converted<Policy>, parts: &[&str]) {
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("shop/web") && parts.iter().all(|p| w.contains(p))),
        "no warning with {parts:?} in {:#?}",
        c.warnings
    );
}

#[test]
fn namespace_needs_a_name_and_gets_its_name_label() {
    let ns: core::Namespace = serde_json::from_value(json!({
        "metadata": {"name": "shop", "labels": {"team": "a"}}
    }))
    .unwrap();
    assert_eq!(
        namespace(&ns),
        Some(Namespace {
            name: "shop".into(),
            labels: labels(&[("team", "a"), (NAMESPACE_NAME_LABEL, "shop")]),
        })
    );
    let unnamed: core::Namespace = serde_json::from_value(json!({"metadata": {}})).unwrap();
    assert_eq!(namespace(&unnamed), None);
}

#[test]
fn pod_fields() {
    let p: core::Pod = serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": "web-1", "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {"name": "web", "ports": [
                    {"name": "http", "containerPort": 8080},
                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                    {"containerPort": 9000},
                    {"name": "weird", "containerPort": 1, "protocol": "ICMP"},
                ]},
                {"name": "metrics", "ports": [
                    {"name": "metrics", "containerPort": 9100, "protocol": "TCP"},
                    {"name": "http", "containerPort": 8080},
                ]},
            ],
            "initContainers": [
                {"name": "setup", "ports": [{"name": "setup", "containerPort": 1234}]},
                {"name": "proxy", "restartPolicy": "Always", "ports": [
                    {"name": "proxy", "containerPort": 15001, "protocol": "SCTP"},
                ]},
            ],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.9",
            "podIPs": [{"ip": "fd00::9"}, {"ip": "10.0.0.7"}],
        },
    }))
    .unwrap();
    let named = |name: &str, protocol, port| NamedPort {
        name: name.into(),
        protocol,
        port,
    };
    assert_eq!(
        pod(&p),
        Some(Pod {
            namespace: "shop".into(),
            name: "web-1".into(),
            labels: labels(&[("app", "web")]),
            ips: vec!["10.0.0.7".parse().unwrap()],
            host_network: false,
            ports: vec![
                named("dns", Protocol::Udp, 53),
                named("http", Protocol::Tcp, 8080),
                named("metrics", Protocol::Tcp, 9100),
                named("proxy", Protocol::Sctp, 15001),
            ],
        })
    );
}

#[test]
fn pod_addresses() {
    let with_status = |status: Value, host_network: bool| {
        let p: core::Pod = serde_json::from_value(json!({
            "metadata": {"namespace": "shop", "name": "p"},
            "spec": {"containers": [], "hostNetwork": host_network},
            "status": status,
        }))
        .unwrap();
        pod(&p).unwrap()
    };
    let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
    // podIP when podIPs is absent or empty.
    assert_eq!(
        with_status(json!({"podIP": "10.0.0.1"}), false).ips,
        [ip("10.0.0.1")]
    );
    assert_eq!(
        with_status(json!({"podIP": "10.0.0.1", "podIPs": []}), false).ips,
        [ip("10.0.0.1")]
    );
    // IPv6 only: no address here.
    assert!(with_status(
        json!({"podIP": "fd00::1", "podIPs": [{"ip": "fd00::1"}]}),
        false
    )
    .ips
    .is_empty());
    // Finished pods hold no address.
    for phase in ["Succeeded", "Failed"] {
        assert!(
            with_status(json!({"phase": phase, "podIP": "10.0.0.1"}), false)
                .ips
                .is_empty()
        );
    }
    assert!(with_status(json!({}), false).ips.is_empty());
    let host = with_status(json!({"podIP": "192.168.0.1"}), true);
    assert!(host.host_network);
    assert_eq!(host.ips, [ip("192.168.0.1")]);

    // Before kubelet reports an address: the ADD's vpc.amazonaws.com/pod-ips annotation;
    // the status wins once there, and an emptied annotation (DEL) gives none.
    let annotated = |value: &str, status: Value| {
        let p: core::Pod = serde_json::from_value(json!({
            "metadata": {"namespace": "shop", "name": "p",
                         "annotations": {POD_IPS_ANNOTATION: value}},
            "spec": {"containers": []},
            "status": status,
        }))
        .unwrap();
        pod(&p).unwrap().ips
    };
    assert_eq!(annotated("10.0.0.5", json!({})), [ip("10.0.0.5")]);
    assert_eq!(
        annotated("10.0.0.5", json!({"podIP": "10.0.0.6"})),
        [ip("10.0.0.6")]
    );
    assert!(annotated("", json!({})).is_empty());
    assert!(annotated("10.0.0.5", json!({"phase": "Failed"})).is_empty());

    let nameless: core::Pod =
        serde_json::from_value(json!({"metadata": {"namespace": "shop"}})).unwrap();
    assert_eq!(pod(&nameless), None);
    let no_namespace: core::Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
    assert_eq!(pod(&no_namespace), None);
}

#[test]
fn policy_types_default_to_ingress_only_without_egress_rules() {
    let p = clean(json!({"podSelector": {}}));
    assert_eq!(p.ingress, Some(vec![]));
    assert_eq!(p.egress, None);
    assert_eq!(p.pod_selector, LabelSelector::default());
    assert_eq!((p.namespace.as_str(), p.name.as_str()), ("shop", "web"));

    let p = clean(json!({"podSelector": {}, "policyTypes": [], "egress": []}));
    assert_eq!(p.ingress, Some(vec![]));
    assert_eq!(p.egress, None);

    // The ingress rules alone do not add Egress.
    let p = clean(json!({"podSelector": {}, "ingress": [{}]}));
    assert_eq!(p.ingress, Some(vec![Rule::default()]));
    assert_eq!(p.egress, None);
}

#[test]
fn policy_types_default_adds_egress_with_egress_rules() {
    let p = clean(json!({"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]}));
    assert_eq!(p.ingress, Some(vec![]));
    assert_eq!(
        p.egress,
        Some(vec![Rule {
            peers: vec![],
            ports: vec![tcp(53)]
        }])
    );
}

#[test]
fn policy_types_given_are_exactly_the_directions() {
    let p = clean(json!({
        "podSelector": {},
        "policyTypes": ["Egress"],
        "ingress": [{}],
    }));
    assert_eq!(
        p.ingress, None,
        "rules of an unlisted direction are ignored"
    );
    assert_eq!(
        p.egress,
        Some(vec![]),
        "a listed direction without rules denies all"
    );

    let p = clean(json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}));
    assert_eq!(p.ingress, Some(vec![]));
    assert_eq!(p.egress, Some(vec![]));

    let p = clean(json!({"podSelector": {}, "policyTypes": ["Ingress"], "egress": [{}]}));
    assert_eq!(p.ingress, Some(vec![]));
    assert_eq!(p.egress, None);
}

#[test]
fn unknown_policy_type_is_ignored_with_a_warning() {
    let c = np(json!({"podSelector": {}, "policyTypes": ["Egress", "Sideways"]}));
    assert_warned(&c, &["spec.policyTypes[1]", "Sideways"]);
    assert_eq!(c.value.ingress, None);
    assert_eq!(c.value.egress, Some(vec![]));
}

#[test]
fn missing_spec_or_pod_selector() {
    let object = json!({"metadata": {"namespace": "shop", "name": "web"}});
    let c = policy(&serde_json::from_value(object).unwrap());
    assert!(c.warnings.is_empty());
    assert_eq!(c.value.ingress, Some(vec![]));
    assert_eq!(c.value.egress, None);
    assert_eq!(c.value.pod_selector, LabelSelector::default());

    let c = policy(&serde_json::from_value(json!({"metadata": {}})).unwrap());
    assert!(c.warnings.iter().any(|w| w.contains("metadata.namespace")));
    assert!(c.warnings.iter().any(|w| w.contains("metadata.name")));
}

#[test]
fn selectors_convert_every_operator() {
    let p = clean(json!({
        "podSelector": {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "stage"]},
                {"key": "tier", "operator": "NotIn", "values": ["db"]},
                {"key": "owner", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []},
            ],
        },
    }));
    let set = |vs: &[&str]| vs.iter().map(|v| v.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        p.pod_selector,
        LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![
                Requirement::In {
                    key: "env".into(),
                    values: set(&["prod", "stage"])
                },
                Requirement::NotIn {
                    key: "tier".into(),
                    values: set(&["db"])
                },
                Requirement::Exists {
                    key: "owner".into()
                },
                Requirement::DoesNotExist {
                    key: "legacy".into()
                },
            ],
        }
    );
}

#[test]
fn broken_pod_selector_isolates_and_allows_nothing() {
    let c = np(json!({
        "podSelector": {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "env", "operator": "Near", "values": ["x"]}],
        },
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{}],
        "egress": [{}],
    }));
    assert_warned(&c, &["spec.podSelector", "Near"]);
    assert_eq!(c.value.pod_selector, sel(&[("app", "web")]));
    assert_eq!(c.value.ingress, Some(vec![]));
    assert_eq!(c.value.egress, Some(vec![]));
}

#[test]
fn peers_of_each_kind() {
    let p = clean(json!({
        "podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [
            {"podSelector": {"matchLabels": {"app": "client"}}},
            {"namespaceSelector": {"matchLabels": {"team": "a"}}},
            {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "probe"}}},
            {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}},
            {"ipBlock": {"cidr": "172.16.0.5/12"}},
        ]}],
    }));
    assert_eq!(p.pod_selector, sel(&[("app", "web")]));
    assert_eq!(
        p.ingress.unwrap(),
        [Rule {
            peers: vec![
                Peer::Pods {
                    namespaces: None,
                    pods: Some(sel(&[("app", "client")]))
                },
                Peer::Pods {
                    namespaces: Some(sel(&[("team", "a")])),
                    pods: None
                },
                Peer::Pods {
                    namespaces: Some(LabelSelector::default()),
                    pods: Some(sel(&[("app", "probe")]))
                },
                Peer::IpBlock {
                    cidr: net("10.0.0.0/16"),
                    except: vec![net("10.0.1.0/24")]
                },
                Peer::IpBlock {
                    cidr: net("172.16.0.0/12"),
                    except: vec![]
                },
            ],
            ports: vec![],
        }]
    );
}

#[test]
fn ipv6_blocks_are_dropped_silently_without_widening() {
    let p = clean(json!({
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [
            {"to": [{"ipBlock": {"cidr": "fd00::/8"}}, {"ipBlock": {"cidr": "10.0.0.0/8"}}]},
            {"to": [{"ipBlock": {"cidr": "::/0", "except": ["fd00::/8"]}}], "ports": [{"port": 443}]},
            {"to": [], "ports": [{"port": 80}]},
        ],
    }));
    assert_eq!(
        p.egress.unwrap(),
        [
            Rule {
                peers: vec![Peer::IpBlock {
                    cidr: net("10.0.0.0/8"),
                    except: vec![]
                }],
                ports: vec![],
            },
            // The IPv6-only rule is gone, not turned into "to everyone"; the explicitly
            // empty `to` stays "to everyone".
            Rule {
                peers: vec![],
                ports: vec![tcp(80)]
            },
        ]
    );
}

#[test]
fn invalid_peers_are_dropped_fail_closed() {
    let c = np(json!({
        "podSelector": {},
        "ingress": [
            {"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}, {"podSelector": {}}]},
            {"from": [{"ipBlock": {"cidr": "nonsense"}}], "ports": [{"port": 80}]},
            {"from": [{}]},
            {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]},
            {"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "bogus"]}}]},
            {"from": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
        ],
    }));
    assert_warned(&c, &["spec.ingress[0].from[0].ipBlock.cidr", "10.0.0.0/33"]);
    assert_warned(&c, &["spec.ingress[1].from[0].ipBlock.cidr", "nonsense"]);
    assert_warned(&c, &["spec.ingress[1]", "rule dropped"]);
    assert_warned(&c, &["spec.ingress[2].from[0]", "none of"]);
    assert_warned(&c, &["spec.ingress[3].from[0]", "ipBlock together"]);
    assert_warned(&c, &["spec.ingress[4].from[0].ipBlock.except[1]", "bogus"]);
    assert_warned(&c, &["spec.ingress[5].from[0].podSelector", "needs values"]);
    // Only the first rule keeps a peer; every other rule lost all its peers and is gone.
    assert_eq!(
        c.value.ingress.unwrap(),
        [Rule {
            peers: vec![Peer::Pods {
                namespaces: None,
                pods: Some(LabelSelector::default())
            }],
            ports: vec![],
        }]
    );
}

#[test]
fn excepts_not_inside_the_cidr_are_kept_with_a_warning() {
    let c = np(json!({
        "podSelector": {},
        "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": [
            "192.168.0.0/16", "10.0.0.0/8", "10.0.0.0/16", "fd00::/8",
        ]}}]}],
    }));
    assert_warned(&c, &["except[0]", "excepts nothing"]);
    assert_warned(&c, &["except[1]", "whole block"]);
    assert_warned(&c, &["except[2]", "whole block"]);
    assert_warned(&c, &["except[3]", "IPv6"]);
    assert_eq!(
        c.value.ingress.unwrap()[0].peers,
        [Peer::IpBlock {
            cidr: net("10.0.0.0/16"),
            except: vec![net("192.168.0.0/16"), net("10.0.0.0/8"), net("10.0.0.0/16")]
        }]
    );
}

#[test]
fn ports_default_and_convert() {
    let p = clean(json!({
        "podSelector": {},
        "ingress": [{"ports": [
            {"port": 80},
            {"protocol": "UDP", "port": "dns"},
            {"protocol": "SCTP"},
            {"port": 30000, "endPort": 32767},
            {"port": 8080, "endPort": 8080},
        ]}],
    }));
    assert_eq!(
        p.ingress.unwrap()[0].ports,
        [
            tcp(80),
            PortSpec {
                protocol: Protocol::Udp,
                port: Some(PortRef::Name("dns".into())),
                end_port: None
            },
            PortSpec {
                protocol: Protocol::Sctp,
                port: None,
                end_port: None
            },
            PortSpec {
                protocol: Protocol::Tcp,
                port: Some(PortRef::Number(30000)),
                end_port: Some(32767)
            },
            PortSpec {
                protocol: Protocol::Tcp,
                port: Some(PortRef::Number(8080)),
                end_port: Some(8080)
            },
        ]
    );
}

#[test]
fn invalid_ports_are_dropped_fail_closed() {
    let c = np(json!({
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [
            {"ports": [{"protocol": "ICMP", "port": 1}, {"port": 443}]},
            {"ports": [{"port": "http", "endPort": 90}]},
            {"ports": [{"port": 90, "endPort": 80}]},
            {"ports": [{"endPort": 80}]},
            {"ports": [{"port": 0}, {"port": 70000}, {"port": ""}]},
            {"ports": [{"port": 80, "endPort": 65536}]},
        ],
    }));
    assert_warned(&c, &["spec.egress[0].ports[0].protocol", "ICMP"]);
    assert_warned(
        &c,
        &["spec.egress[1].ports[0].endPort", "without a numeric port"],
    );
    assert_warned(&c, &["spec.egress[1]", "rule dropped"]);
    assert_warned(&c, &["spec.egress[2].ports[0].endPort", "below port 90"]);
    assert_warned(
        &c,
        &["spec.egress[3].ports[0].endPort", "without a numeric port"],
    );
    assert_warned(&c, &["spec.egress[4].ports[0].port", "0 is not"]);
    assert_warned(&c, &["spec.egress[4].ports[1].port", "70000"]);
    assert_warned(&c, &["spec.egress[4].ports[2].port", "empty"]);
    assert_warned(&c, &["spec.egress[5].ports[0].endPort", "65536"]);
    // The first rule keeps its valid port; every other rule lost all its ports and is gone
    // (never widened to "every port").
    assert_eq!(
        c.value.egress.unwrap(),
        [Rule {
            peers: vec![],
            ports: vec![tcp(443)]
        }]
    );
}
