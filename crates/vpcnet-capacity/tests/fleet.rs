//! The fleet planner on hand-checkable fleets.

use serde_json::json;
use vpcnet_capacity::subnets::PrefixVerdict;
use vpcnet_capacity::{plan, FleetPlan, FleetSpec};

fn spec(v: serde_json::Value) -> FleetSpec {
    serde_json::from_value(v).expect("a fleet spec")
}

fn subnet<'a>(p: &'a FleetPlan, id: &str) -> &'a vpcnet_capacity::fleet::SubnetPlan {
    p.subnets.iter().find(|s| s.id == id).unwrap()
}

#[test]
fn one_subnet_runs_out_where_the_footprints_add_up() {
    // m5.large, defaults, 5 pods: the primary ENI (10 addresses) and a spare ENI (10).
    let p = plan(&spec(json!({
        "subnets": [{"id": "subnet-a", "cidr": "10.0.0.0/24", "zone": "us-east-1a"}],
        "node_groups": [{"name": "web", "instance_type": "m5.large", "count": 10,
                         "pods_per_node": 5, "subnets": ["subnet-a"]}],
    })))
    .unwrap();
    assert_eq!(p.groups[0].per_node.addresses(), 20);
    let a = subnet(&p, "subnet-a");
    assert_eq!((a.available, a.fleet_addresses, a.headroom), (251, 200, 51));
    assert_eq!(a.fleet_enis, 20);
    // 12 nodes take 240 addresses; the 13th finds 11 free: its spare ENI does not fit.
    assert_eq!(a.runs_out_at_nodes, Some(13));
    assert!(p.shortfalls.is_empty());
    assert!(a.prefix_risk.is_none());
}

#[test]
fn a_fleet_larger_than_its_subnet_reports_each_short_node() {
    let p = plan(&spec(json!({
        "subnets": [{"id": "subnet-a", "cidr": "10.0.0.0/24", "zone": "us-east-1a", "available": 45}],
        "node_groups": [{"name": "web", "instance_type": "m5.large", "count": 3,
                         "pods_per_node": 5, "subnets": ["subnet-a"]}],
    })))
    .unwrap();
    // 45 free: two nodes (40), then the third's primary ENI (10) does not fit in 5.
    assert_eq!(p.shortfalls.len(), 1, "{:?}", p.shortfalls);
    assert_eq!(p.shortfalls[0].node, 3);
    assert_eq!(p.shortfalls[0].addresses, 20);
    assert_eq!(subnet(&p, "subnet-a").runs_out_at_nodes, Some(3));
}

#[test]
fn subnet_discovery_puts_new_enis_in_the_freest_tagged_subnet_of_the_zone() {
    let p = plan(&spec(json!({
        "subnets": [
            {"id": "subnet-node", "cidr": "10.0.0.0/24", "zone": "us-east-1a"},
            {"id": "subnet-pods", "cidr": "10.0.16.0/20", "zone": "us-east-1a",
             "tags": {"kubernetes.io/role/cni": "1"}},
            {"id": "subnet-other-zone", "cidr": "10.0.32.0/20", "zone": "us-east-1b",
             "tags": {"kubernetes.io/role/cni": "1"}},
            {"id": "subnet-other-cluster", "cidr": "10.0.48.0/20", "zone": "us-east-1a",
             "tags": {"kubernetes.io/role/cni": "1", "kubernetes.io/cluster/green": "owned"}},
        ],
        "settings": {"CLUSTER_NAME": "blue"},
        "node_groups": [{"name": "web", "instance_type": "m5.large", "count": 4,
                         "pods_per_node": 5, "subnets": ["subnet-node"]}],
    })))
    .unwrap();
    assert_eq!(
        subnet(&p, "subnet-node").fleet_addresses,
        40,
        "primary ENIs only"
    );
    assert_eq!(
        subnet(&p, "subnet-pods").fleet_addresses,
        40,
        "the spare ENIs"
    );
    assert_eq!(subnet(&p, "subnet-other-zone").fleet_addresses, 0);
    assert_eq!(subnet(&p, "subnet-other-cluster").fleet_addresses, 0);
}

#[test]
fn a_node_subnet_tagged_cni_0_serves_no_pod_from_the_primary_eni() {
    let p = plan(&spec(json!({
        "subnets": [
            {"id": "subnet-node", "cidr": "10.0.0.0/24", "zone": "us-east-1a",
             "tags": {"kubernetes.io/role/cni": "0"}},
            {"id": "subnet-pods", "cidr": "10.0.16.0/20", "zone": "us-east-1a",
             "tags": {"kubernetes.io/role/cni": "1"}},
        ],
        "node_groups": [{"name": "web", "instance_type": "m5.large", "count": 1,
                         "pods_per_node": 5, "subnets": ["subnet-node"]}],
    })))
    .unwrap();
    assert_eq!(
        subnet(&p, "subnet-node").fleet_addresses,
        1,
        "the primary address only"
    );
    // 5 pods plus a spare ENI's worth of addresses, on two secondary ENIs.
    assert_eq!(subnet(&p, "subnet-pods").fleet_addresses, 20);
}

#[test]
fn custom_networking_uses_the_zones_eniconfig_subnet() {
    let base = json!({
        "subnets": [
            {"id": "subnet-node-a", "cidr": "10.0.0.0/24", "zone": "us-east-1a"},
            {"id": "subnet-node-b", "cidr": "10.0.1.0/24", "zone": "us-east-1b"},
            {"id": "subnet-pods-a", "cidr": "100.64.0.0/20", "zone": "us-east-1a"},
            {"id": "subnet-pods-b", "cidr": "100.64.16.0/20", "zone": "us-east-1b"},
        ],
        "settings": {"AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG": "true"},
        "eni_configs": {"us-east-1a": "subnet-pods-a", "us-east-1b": "subnet-pods-b"},
        "node_groups": [{"name": "web", "instance_type": "m5.large", "count": 4,
                         "pods_per_node": 5, "subnets": ["subnet-node-a", "subnet-node-b"]}],
    });
    let p = plan(&spec(base.clone())).unwrap();
    assert_eq!(subnet(&p, "subnet-node-a").fleet_addresses, 2);
    assert_eq!(subnet(&p, "subnet-pods-a").fleet_addresses, 40);
    assert_eq!(subnet(&p, "subnet-pods-b").fleet_addresses, 40);

    let mut missing = base;
    missing["eni_configs"] = json!({"us-east-1a": "subnet-pods-a"});
    let e = plan(&spec(missing)).unwrap_err().to_string();
    assert!(e.contains("no subnet for zone us-east-1b"), "{e}");
}

#[test]
fn prefix_mode_reports_the_fragmentation_risk() {
    let p = plan(&spec(json!({
        "subnets": [{"id": "subnet-a", "cidr": "10.0.0.0/24", "zone": "us-east-1a", "available": 200}],
        "settings": {"ENABLE_PREFIX_DELEGATION": true},
        "node_groups": [{"name": "web", "instance_type": "m5.large", "count": 2,
                         "pods_per_node": 20, "subnets": ["subnet-a"]}],
    })))
    .unwrap();
    let a = subnet(&p, "subnet-a");
    let r = a.prefix_risk.as_ref().unwrap();
    // Each node: 3 prefixes (two for 20 pods, one warm) on its primary ENI.
    assert_eq!(r.needed, 6);
    assert_eq!(a.fleet_addresses, 2 * (1 + 3 * 16));
    // 51 addresses in use before, 2 ENI primaries: 53 singles against 14 blocks.
    assert_eq!((r.free_blocks_best, r.free_blocks_worst), (10, 0));
    assert_eq!(r.verdict, PrefixVerdict::AtRisk);
}

#[test]
fn a_scale_out_costs_its_nodes_calls_and_the_buckets_set_its_floor() {
    let p = plan(&spec(json!({
        "subnets": [{"id": "subnet-a", "cidr": "10.0.0.0/16", "zone": "us-east-1a"}],
        "node_groups": [{"name": "web", "instance_type": "m5.large", "count": 10,
                         "pods_per_node": 5, "subnets": ["subnet-a"]}],
        "scale_out": 1000,
    })))
    .unwrap();
    let s = p.scale_out.unwrap();
    let per_node = &p.groups[0].per_node.calls;
    for (action, n) in per_node.iter() {
        assert_eq!(s.calls.get(action), n * 1000, "{action}");
    }
    // The first address of each node: one assign each, 100 at once and 5 a second after.
    assert_eq!(
        s.calls_to_first_address.get("AssignPrivateIpAddresses"),
        1000
    );
    assert_eq!(s.floor_first_address.seconds, 180.0);
    assert!(s.floor_settled.seconds >= s.floor_first_address.seconds);
    assert!(s.shortfalls.is_empty());
}

#[test]
fn groups_interleave_in_proportion() {
    let p = plan(&spec(json!({
        "subnets": [{"id": "subnet-a", "cidr": "10.0.0.0/24", "zone": "us-east-1a", "available": 100}],
        "node_groups": [
            {"name": "small", "instance_type": "m5.large", "count": 3, "pods_per_node": 5, "subnets": ["subnet-a"]},
            {"name": "idle", "instance_type": "m5.large", "count": 3, "pods_per_node": 0, "subnets": ["subnet-a"]},
        ],
    })))
    .unwrap();
    // small takes 20 a node, idle 10: alternating, 6 nodes take 90.
    assert_eq!(subnet(&p, "subnet-a").fleet_addresses, 90);
    assert!(p.shortfalls.is_empty());
}

#[test]
fn bad_input_names_the_field_and_the_fix() {
    let cases = [
        (
            json!({"node_groups": [{"name": "g", "instance_type": "m5.large", "count": 1, "subnets": ["subnet-x"]}]}),
            "no subnets: list the subnets the fleet may use",
        ),
        (
            json!({"subnets": [{"id": "s", "cidr": "10.0.0.0/24", "zone": "z"}], "node_groups": [{"name": "g", "instance_type": "m5.large", "count": 1, "subnets": ["subnet-x"]}]}),
            "subnet subnet-x is not among the subnets",
        ),
        (
            json!({"subnets": [{"id": "s", "cidr": "10.0.0.0/24", "zone": "z"}], "node_groups": [{"name": "g", "instance_type": "m5.huge", "count": 1, "subnets": ["s"]}]}),
            "unknown instance type \"m5.huge\"",
        ),
        (
            json!({"subnets": [{"id": "s", "cidr": "10.0.0.0/24", "zone": "z"}], "node_groups": [{"name": "g", "instance_type": "m5.large", "count": 1, "pods_per_node": 40, "subnets": ["s"]}]}),
            "lower pods_per_node",
        ),
        (
            json!({"subnets": [{"id": "s", "cidr": "10.0.0.0/24", "zone": "z", "available": 300}], "node_groups": [{"name": "g", "instance_type": "m5.large", "count": 1, "subnets": ["s"]}]}),
            "AvailableIpAddressCount",
        ),
        (
            json!({"subnets": [{"id": "s", "cidr": "10.0.0.0/24", "zone": "z"}, {"id": "s", "cidr": "10.0.1.0/24", "zone": "z"}], "node_groups": [{"name": "g", "instance_type": "m5.large", "count": 1, "subnets": ["s"]}]}),
            "listed twice",
        ),
        (
            json!({"subnets": [{"id": "s", "cidr": "10.0.0.0/24", "zone": "z"}], "eni_configs": {"z": "s"}, "node_groups": [{"name": "g", "instance_type": "m5.large", "count": 1, "subnets": ["s"]}]}),
            "set AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG",
        ),
    ];
    let more = [
        (
            json!({"subnets": [{"id": "s", "cidr": "10.0.0.1/24", "zone": "z"}], "node_groups": [{"name": "g", "instance_type": "m5.large", "count": 1, "subnets": ["s"]}]}),
            "has host bits set: write the network, 10.0.0.0/24",
        ),
        (
            json!({"subnets": [{"id": "n", "cidr": "10.0.0.0/24", "zone": "a"}, {"id": "p", "cidr": "10.0.1.0/24", "zone": "b"}],
                "settings": {"AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG": true}, "eni_configs": {"a": "p"},
                "node_groups": [{"name": "g", "instance_type": "m5.large", "count": 1, "subnets": ["n"]}]}),
            "eni_configs: subnet p for zone a is in zone b",
        ),
        (
            json!({"subnets": [{"id": "s", "cidr": "10.0.0.0/24", "zone": "z"}], "node_groups": [{"name": "g", "instance_type": "m5.huge", "count": 1, "subnets": ["s"]}]}),
            "node group g: unknown instance type \"m5.huge\": use",
        ),
    ];
    for (input, want) in cases.into_iter().chain(more) {
        let e = plan(&spec(input.clone())).unwrap_err().to_string();
        assert!(e.contains(want), "{input}: {e}");
    }
}

#[test]
fn an_empty_group_takes_no_share_of_a_scale_out() {
    let p = plan(&spec(json!({
        "subnets": [{"id": "subnet-a", "cidr": "10.0.0.0/20", "zone": "us-east-1a"}],
        "node_groups": [
            {"name": "none", "instance_type": "m5.4xlarge", "count": 0, "pods_per_node": 5, "subnets": ["subnet-a"]},
            {"name": "web", "instance_type": "m5.large", "count": 2, "pods_per_node": 5, "subnets": ["subnet-a"]},
        ],
        "scale_out": 3,
    })))
    .unwrap();
    let s = p.scale_out.as_ref().unwrap();
    let web = &p.groups[1].per_node.calls;
    assert_eq!(s.calls.total(), 3 * web.total());
    assert_eq!(subnet(&p, "subnet-a").fleet_addresses, 40);
}

#[test]
fn max_pods_is_kubelets_as_bootstrap_sets_it_unless_the_group_says() {
    let group = |extra: serde_json::Value| {
        let mut g =
            json!({"name": "g", "instance_type": "c5.4xlarge", "count": 1, "subnets": ["s"]});
        g.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec(
            json!({"subnets": [{"id": "s", "cidr": "10.0.0.0/20", "zone": "z"}], "node_groups": [g]}),
        )
    };
    // c5.4xlarge: 8 ENIs × 30 addresses: 8 × 29 + 2 = 234, uncapped in secondary-IP mode.
    let p = plan(&group(json!({}))).unwrap();
    assert_eq!(
        (p.groups[0].max_pods, p.groups[0].pods_per_node),
        (234, 232)
    );
    assert!(plan(&group(json!({"pods_per_node": 200}))).is_ok());
    let p = plan(&group(json!({"max_pods": 110}))).unwrap();
    assert_eq!(
        (p.groups[0].max_pods, p.groups[0].pods_per_node),
        (110, 108)
    );
    let e = plan(&group(json!({"max_pods": 110, "pods_per_node": 200})))
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than kubelet's max pods 110"), "{e}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the fleet: no subnet gives more than it has, headroom is what is left,
        /// and a subnet that runs out within the fleet leaves a short node behind.
        #[test]
        fn the_books_balance(
            free in proptest::collection::vec(0u32..400, 1..4),
            counts in proptest::collection::vec(0u32..30, 1..3),
            pods in 0u32..27,
            discovery in any::<bool>(),
        ) {
            let subnets: Vec<_> = free.iter().enumerate().map(|(i, f)| json!({
                "id": format!("s{i}"), "cidr": format!("10.{i}.0.0/23"), "zone": "z",
                "available": f, "tags": {"kubernetes.io/role/cni": "1"}
            })).collect();
            let groups: Vec<_> = counts.iter().enumerate().map(|(i, c)| json!({
                "name": format!("g{i}"), "instance_type": "m5.large", "count": c,
                "pods_per_node": pods, "subnets": ["s0"]
            })).collect();
            let p = plan(&spec(json!({
                "subnets": subnets, "node_groups": groups,
                "settings": {"ENABLE_SUBNET_DISCOVERY": discovery},
            }))).unwrap();
            let total: u64 = counts.iter().map(|c| u64::from(*c)).sum();
            for s in &p.subnets {
                prop_assert!(s.fleet_addresses <= u64::from(s.available), "{s:?}");
                prop_assert_eq!(s.headroom, i64::from(s.available) - s.fleet_addresses as i64);
                if s.runs_out_at_nodes.is_some_and(|n| n <= total) {
                    prop_assert!(!p.shortfalls.is_empty(), "{s:?} ran out but no node is short");
                }
            }
            let placed: u64 = p.subnets.iter().map(|s| s.fleet_addresses).sum();
            let wanted = total * u64::from(p.groups[0].per_node.addresses());
            let lacked: u64 = p.shortfalls.iter().map(|s| u64::from(s.addresses)).sum();
            prop_assert_eq!(placed + lacked, wanted);
        }
    }
}

#[test]
fn a_zone_without_a_subnet_for_new_enis_is_said_so() {
    let p = plan(&spec(json!({
        "subnets": [{"id": "subnet-node", "cidr": "10.0.0.0/24", "zone": "us-east-1a",
                     "tags": {"kubernetes.io/role/cni": "0"}}],
        "node_groups": [{"name": "web", "instance_type": "m5.large", "count": 1,
                         "pods_per_node": 5, "subnets": ["subnet-node"]}],
    })))
    .unwrap();
    assert_eq!(p.shortfalls.len(), 1);
    assert!(
        p.shortfalls[0].subnets[0].contains("no subnet of us-east-1a may get ENIs"),
        "{:?}",
        p.shortfalls
    );
}
