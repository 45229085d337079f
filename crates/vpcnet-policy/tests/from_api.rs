//! From API objects to a ruleset: the path the agent takes, on the documentation's usual
//! example (a database reachable from one namespace's frontends on its named port).

use serde_json::json;
use vpcnet_policy::{
    compile, k8s, Allow, Direction, LocalPod, Mode, PeerMatch, PeerSet, PortMatch, Protocol, World,
};

#[test]
fn api_objects_compile_into_rules() {
    let mut world = World::new();
    for ns in [
        json!({"metadata": {"name": "db", "labels": {"team": "data"}}}),
        json!({"metadata": {"name": "web", "labels": {"team": "front"}}}),
    ] {
        let ns = k8s::namespace(&serde_json::from_value(ns).unwrap()).unwrap();
        assert!(world.upsert_namespace(ns));
    }
    for pod in [
        json!({
            "metadata": {"namespace": "db", "name": "pg-0", "labels": {"app": "pg"}},
            "spec": {"containers": [{"name": "pg", "ports": [{"name": "sql", "containerPort": 5432}]}]},
            "status": {"podIPs": [{"ip": "10.0.5.10"}]},
        }),
        json!({
            "metadata": {"namespace": "web", "name": "front-0", "labels": {"app": "front"}},
            "spec": {"containers": [{"name": "front"}]},
            "status": {"podIP": "10.0.6.20"},
        }),
        json!({
            "metadata": {"namespace": "web", "name": "front-1", "labels": {"app": "front"}},
            "spec": {"containers": [{"name": "front"}]},
            "status": {"podIP": "10.0.6.21"},
        }),
    ] {
        let pod = k8s::pod(&serde_json::from_value(pod).unwrap()).unwrap();
        assert!(world.upsert_pod(pod));
    }
    let policy = k8s::policy(
        &serde_json::from_value(json!({
            "metadata": {"namespace": "db", "name": "pg-from-front"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "pg"}},
                "ingress": [{
                    "from": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "web"}},
                        "podSelector": {"matchLabels": {"app": "front"}},
                    }],
                    "ports": [{"port": "sql"}],
                }],
            },
        }))
        .unwrap(),
    );
    assert!(policy.warnings.is_empty(), "{:?}", policy.warnings);
    assert!(world.upsert_policy(policy.value));
    assert_eq!(world.counts(), (2, 3, 1));

    let local = [LocalPod {
        namespace: "db".into(),
        name: "pg-0".into(),
        interface: "eni0123456789a".into(),
        ip: "10.0.5.10".parse().unwrap(),
    }];
    let rs = compile(&world, &local, Mode::Standard);
    let rules = &rs.pods["eni0123456789a"];
    assert_eq!(rules.pod, "db/pg-0");
    assert_eq!(rules.egress, Direction::Open);
    let Direction::Isolated(allows) = &rules.ingress else {
        panic!("not isolated: {rules:?}");
    };
    let [Allow {
        policy,
        peer: PeerMatch::Set(set),
        ports,
    }] = allows.as_slice()
    else {
        panic!("{allows:?}");
    };
    assert_eq!(policy, "db/pg-from-front");
    assert_eq!(
        *ports,
        PortMatch::Ports {
            protocol: Protocol::Tcp,
            first: 5432,
            last: 5432
        }
    );
    let PeerSet::Addrs(ranges) = &rs.sets[set] else {
        panic!("{:?}", rs.sets);
    };
    let ranges: Vec<_> = ranges
        .iter()
        .map(|r| (r.first.to_string(), r.last.to_string()))
        .collect();
    assert_eq!(ranges, [("10.0.6.20".to_string(), "10.0.6.21".to_string())]);
}
