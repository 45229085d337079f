//! Self-healing of the datapath ([`audit`], [`prereq`], [`link_watch`]), each test inside
//! namespaces it creates and deletes (needs root).

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::TestNetns;
use vpcnet_datapath::audit::{self, Kind, NodeView, PodExpect};
use vpcnet_datapath::{firewall, link_watch, netns, node, pod, prereq, sysctl};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn handle(ns: &TestNetns) -> rtnetlink::Handle {
    let fd = netns::open(&ns.path()).unwrap();
    netns::connect_in(&fd, &ns.path()).unwrap()
}

/// A veth end in `ns` standing in for an ENI's interface (no dummy module needed).
fn eni_link(ns: &TestNetns, name: &str, mac: &str) {
    let peer = format!("{name}p");
    ns.ip(&[
        "link", "add", name, "address", mac, "type", "veth", "peer", "name", &peer,
    ]);
    ns.ip(&["link", "set", &peer, "up"]);
}

fn eni_spec() -> node::EniSpec {
    node::EniSpec {
        mac: "02:00:00:00:01:02".into(),
        device_number: 2,
        network_card: 0,
        subnet: "10.0.2.0/24".parse().unwrap(),
        mtu: 9001,
        primary_ip: None,
    }
}

/// A node namespace with ENI device 2 set up and a pod on it (`10.0.2.20`, table 3), built by
/// the ADD code path.
fn pod_on_eni(node_ns: &TestNetns, pod_ns: &TestNetns, veth: &str) -> (pod::PodSpec, PodExpect) {
    eni_link(node_ns, "eth2", "02:00:00:00:01:02");
    let spec = pod::PodSpec {
        ip: Ipv4Addr::new(10, 0, 2, 20),
        host_veth: veth.into(),
        container_ifname: "eth0".into(),
        mtu: 9001,
        route_table: node::eni_route_table(2),
        interface: 0,
    };
    rt().block_on(async {
        let node = handle(node_ns);
        node::setup_eni(&node, &eni_spec()).await.unwrap();
        let fd = netns::open(&pod_ns.path()).unwrap();
        pod::setup(&node, &fd, &pod_ns.path(), &spec).await.unwrap();
    });
    let want = PodExpect {
        ip: spec.ip,
        host_veth: spec.host_veth.clone(),
        route_table: node::eni_route_table(2),
        building: false,
        check_mac: true,
    };
    (spec, want)
}

fn expected(spec: &pod::PodSpec) -> pod::Expected {
    pod::Expected {
        ip: spec.ip,
        host_veth: spec.host_veth.clone(),
        container_ifname: "eth0".into(),
        mtu: Some(9001),
    }
}

async fn audit_pod(
    node: &rtnetlink::Handle,
    want: &PodExpect,
    repair: bool,
) -> Vec<audit::Finding> {
    let view = NodeView::read(node).await.unwrap();
    audit::check_pod(node, &view, want, repair).await
}

#[test]
fn a_deleted_pod_route_and_rules_512_and_1536_are_repaired() {
    let (node_ns, pod_ns) = (TestNetns::new(), TestNetns::new());
    let (spec, want) = pod_on_eni(&node_ns, &pod_ns, "enihealroute01");
    rt().block_on(async {
        let node = handle(&node_ns);
        let pod = handle(&pod_ns);
        assert!(
            audit_pod(&node, &want, true).await.is_empty(),
            "fresh pod is healthy"
        );

        node_ns.ip(&["route", "del", "10.0.2.20/32"]);
        // Report only: the finding says what is wrong and that it was left.
        let f = audit_pod(&node, &want, false).await;
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, Kind::PodRoute);
        assert!(!f[0].repaired());
        assert!(pod::check(&node, Some(&pod), &expected(&spec))
            .await
            .unwrap()
            .iter()
            .any(|p| p.contains("node route")));
        // Repair.
        let f = audit_pod(&node, &want, true).await;
        assert_eq!(
            (f.len(), f[0].kind, f[0].repaired()),
            (1, Kind::PodRoute, true),
            "{f:?}"
        );
        assert!(pod::check(&node, Some(&pod), &expected(&spec))
            .await
            .unwrap()
            .is_empty());

        node_ns.ip(&["rule", "del", "priority", "512", "to", "10.0.2.20"]);
        node_ns.ip(&["rule", "del", "priority", "1536", "from", "10.0.2.20"]);
        let f = audit_pod(&node, &want, true).await;
        let kinds: Vec<Kind> = f.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [Kind::RuleToPod, Kind::RuleFromPod], "{f:?}");
        assert!(f.iter().all(|f| f.repaired()), "{f:?}");
        let rules = node_ns.ip(&["rule", "show"]);
        assert!(
            rules.contains("512:\tfrom all to 10.0.2.20 lookup main"),
            "{rules}"
        );
        assert!(rules.contains("1536:\tfrom 10.0.2.20 lookup 3"), "{rules}");
        assert!(pod::check(&node, Some(&pod), &expected(&spec))
            .await
            .unwrap()
            .is_empty());

        // A 1536 rule that looks up the wrong table is replaced.
        node_ns.ip(&["rule", "del", "priority", "1536", "from", "10.0.2.20"]);
        node_ns.ip(&[
            "rule",
            "add",
            "priority",
            "1536",
            "from",
            "10.0.2.20",
            "lookup",
            "7",
        ]);
        let f = audit_pod(&node, &want, true).await;
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].problem.contains("looks up table 7"), "{f:?}");
        let rules = node_ns.ip(&["rule", "show"]);
        assert!(
            !rules.contains("lookup 7") && rules.contains("lookup 3"),
            "{rules}"
        );
        assert!(audit_pod(&node, &want, true).await.is_empty());

        // Upgrade from the old numbering (table = device number): a rule to table 2 next to the
        // right one is stale too (at equal priority the older rule wins), and only it goes.
        node_ns.ip(&[
            "rule",
            "add",
            "priority",
            "1536",
            "from",
            "10.0.2.20",
            "lookup",
            "2",
        ]);
        let f = audit_pod(&node, &want, true).await;
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].problem.contains("looks up table 2, want 3") && f[0].repaired(),
            "{f:?}"
        );
        let rules = node_ns.ip(&["rule", "show"]);
        assert!(
            !rules.contains("from 10.0.2.20 lookup 2")
                && rules.contains("1536:\tfrom 10.0.2.20 lookup 3"),
            "{rules}"
        );
        assert!(audit_pod(&node, &want, true).await.is_empty());
    });
}

#[test]
fn a_rewritten_host_veth_mac_is_restored_and_a_missing_veth_reported() {
    let (node_ns, pod_ns) = (TestNetns::new(), TestNetns::new());
    let (spec, want) = pod_on_eni(&node_ns, &pod_ns, "enihealmac0001");
    rt().block_on(async {
        let node = handle(&node_ns);
        let pod = handle(&pod_ns);
        node_ns.ip(&[
            "link",
            "set",
            "enihealmac0001",
            "address",
            "02:de:ad:be:ef:01",
        ]);
        let bad = pod::check(&node, Some(&pod), &expected(&spec))
            .await
            .unwrap();
        assert!(bad.iter().any(|b| b.contains("points to")), "{bad:?}");
        let f = audit_pod(&node, &want, true).await;
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].kind, f[0].repaired()), (Kind::HostVethMac, true));
        assert!(f[0].problem.contains("02:de:ad:be:ef:01"), "{f:?}");
        // The pod's gateway neighbour matches the host veth again.
        assert!(pod::check(&node, Some(&pod), &expected(&spec))
            .await
            .unwrap()
            .is_empty());

        // Another CNI's veth (its own MAC, which its pod's neighbour points to) is left alone.
        node_ns.ip(&[
            "link",
            "set",
            "enihealmac0001",
            "address",
            "02:de:ad:be:ef:02",
        ]);
        let foreign = PodExpect {
            check_mac: false,
            ..want.clone()
        };
        assert!(audit_pod(&node, &foreign, true).await.is_empty());
        assert!(node_ns
            .ip(&["link", "show", "enihealmac0001"])
            .contains("02:de:ad:be:ef:02"));

        // A veth that is gone cannot be repaired here: reported, nothing else attempted.
        node_ns.ip(&["link", "del", "enihealmac0001"]);
        let f = audit_pod(&node, &want, true).await;
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].kind, f[0].repaired()), (Kind::HostVeth, false));
        assert!(!node_ns.ip(&["route", "show"]).contains("10.0.2.20"));
        // For a pod whose ADD may still be building it, a veth not there yet is no finding.
        let building = PodExpect {
            building: true,
            ..want.clone()
        };
        assert!(audit_pod(&node, &building, true).await.is_empty());
    });
}

#[test]
fn disabled_forwarding_is_enabled_again_in_the_given_namespace_only() {
    let ns = TestNetns::new();
    let path = ns.path();
    let root_before = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    rt().block_on(async {
        sysctl::write(Some(&path), prereq::IP_FORWARD, "0")
            .await
            .unwrap();
        let f = prereq::check_forwarding(Some(&path), false)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((f.kind, f.repaired()), (Kind::IpForward, false));
        let f = prereq::check_forwarding(Some(&path), true)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((f.kind, f.repaired()), (Kind::IpForward, true), "{f:?}");
        assert_eq!(
            sysctl::read(Some(&path), prereq::IP_FORWARD).await.unwrap(),
            "1"
        );
        assert!(prereq::check_forwarding(Some(&path), true)
            .await
            .unwrap()
            .is_none());
    });
    // The test's own namespace only: the caller's is as it was.
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
        root_before
    );
}

#[test]
fn eni_table_drift_is_repaired_and_a_missing_eni_interface_reported() {
    let ns = TestNetns::new();
    eni_link(&ns, "eth2", "02:00:00:00:01:02");
    rt().block_on(async {
        let h = handle(&ns);
        node::setup_eni(&h, &eni_spec()).await.unwrap();
        assert!(prereq::check_eni(&h, &eni_spec(), true)
            .await
            .unwrap()
            .is_empty());
        ns.ip(&["route", "flush", "table", "3"]);
        let f = prereq::check_eni(&h, &eni_spec(), true).await.unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].kind, f[0].repaired()),
            (Kind::EniTable, true),
            "{f:?}"
        );
        assert!(
            f[0].problem.contains("missing default via 10.0.2.1"),
            "{f:?}"
        );
        assert!(ns
            .ip(&["route", "show", "table", "3"])
            .contains("default via 10.0.2.1"));

        ns.ip(&["link", "del", "eth2"]);
        let f = prereq::check_eni(&h, &eni_spec(), true).await.unwrap();
        assert_eq!(
            (f[0].kind, f[0].repaired()),
            (Kind::EniInterface, false),
            "{f:?}"
        );
    });
}

#[test]
fn a_deleted_firewall_table_and_strict_rp_filter_are_repaired() {
    let ns = TestNetns::new();
    let path = ns.path();
    eni_link(&ns, "eth0", "02:00:00:00:01:00");
    let spec = firewall::FirewallSpec {
        primary_ip: Ipv4Addr::new(10, 0, 0, 10),
        primary_interface: "eth0".into(),
        vpc_cidrs: vec!["10.0.0.0/16".parse().unwrap()],
        exclude_snat_cidrs: vec![],
        randomize_snat: Default::default(),
        external_snat: false,
        node_port_support: true,
        veth_prefix: "eni".into(),
    };
    rt().block_on(async {
        let h = handle(&ns);
        firewall::apply(&h, Some(&path), &spec).await.unwrap();
        assert!(prereq::check_firewall(&h, Some(&path), &spec, true)
            .await
            .unwrap()
            .is_empty());
        common::run(&[
            "ip", "netns", "exec", &ns.name, "nft", "delete", "table", "ip", "vpcnet",
        ]);
        sysctl::write(Some(&path), "net.ipv4.conf.eth0.rp_filter", "1")
            .await
            .unwrap();
        let f = prereq::check_firewall(&h, Some(&path), &spec, true)
            .await
            .unwrap();
        let kinds: Vec<Kind> = f.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [Kind::FirewallTable, Kind::RpFilter], "{f:?}");
        assert!(f.iter().all(|f| f.repaired()), "{f:?}");
        assert!(prereq::firewall_table_present(Some(&path)).await.unwrap());
        assert_eq!(
            sysctl::read(Some(&path), "net.ipv4.conf.eth0.rp_filter")
                .await
                .unwrap(),
            "2"
        );
    });
}

#[test]
fn link_removals_are_announced_with_name_and_mac() {
    let ns = TestNetns::new();
    eni_link(&ns, "eth3", "02:00:00:00:01:03");
    rt().block_on(async {
        let mut rx = link_watch::removed_links(Some(&ns.path())).unwrap();
        ns.ip(&["link", "del", "eth3"]);
        let mut seen = Vec::new();
        // Deleting a veth removes both ends; the order of the two events is the kernel's.
        while seen.len() < 2 {
            let l = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .expect("a link event within 5 s")
                .expect("channel open");
            seen.push(l);
        }
        assert!(
            seen.iter()
                .any(|l| l.name == "eth3" && l.mac == "02:00:00:00:01:03"),
            "{seen:?}"
        );
    });
}
