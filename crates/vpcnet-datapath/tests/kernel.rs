//! Kernel tests of the datapath, each inside namespaces it creates (needs root).

// std's clocks (banned by the workspace clippy.toml): the real kernel: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::net::Ipv4Addr;

use common::TestNetns;
use vpcnet_datapath::host::VethAction;
use vpcnet_datapath::{host, netns, node, pod};

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

#[test]
fn setup_eni_builds_table_n_plus_1_and_reconciles() {
    let ns = TestNetns::new();
    // No dummy module here: a veth end stands in for the ENI's interface.
    ns.ip(&[
        "link",
        "add",
        "eth2",
        "address",
        "02:aa:bb:cc:dd:02",
        "type",
        "veth",
        "peer",
        "name",
        "peer2",
    ]);
    ns.ip(&["link", "set", "peer2", "up"]);
    let spec = node::EniSpec {
        mac: "02:AA:BB:CC:DD:02".into(),
        device_number: 2,
        network_card: 0,
        subnet: "10.0.2.0/24".parse().unwrap(),
        mtu: 9001,
        primary_ip: Some(Ipv4Addr::new(10, 0, 2, 10)),
    };
    ns.ip(&["link", "set", "eth2", "up"]);
    // What an older vpcnet left (table = device number): eth2's routes in table 2, plus a route
    // of another interface there, which is not eth2's to remove (table 2 is now eth1's).
    ns.ip(&[
        "route", "add", "default", "via", "10.0.2.1", "dev", "eth2", "onlink", "table", "2",
    ]);
    ns.ip(&[
        "route",
        "add",
        "198.51.100.0/24",
        "dev",
        "peer2",
        "table",
        "2",
    ]);
    rt().block_on(async {
        let h = handle(&ns);
        // A pod of the old numbering still looks up table 2: its routes stay (the audit
        // re-points the rule first).
        ns.ip(&[
            "rule", "add", "priority", "1536", "from", "10.0.2.5", "lookup", "2",
        ]);
        node::setup_eni(&h, &spec).await.unwrap();
        let old = ns.ip(&["-4", "route", "show", "table", "2"]);
        assert!(old.contains("default via 10.0.2.1 dev eth2"), "{old}");
        ns.ip(&[
            "rule", "del", "priority", "1536", "from", "10.0.2.5", "lookup", "2",
        ]);
        let drift = node::verify_eni(&h, &spec).await.unwrap();
        assert!(
            drift
                .iter()
                .any(|d| d.contains("table 2: stale route 0.0.0.0/0 dev eth2")),
            "{drift:?}"
        );
        let link = node::setup_eni(&h, &spec).await.unwrap();
        let old = ns.ip(&["-4", "route", "show", "table", "2"]);
        assert_eq!(
            old.lines().map(str::trim).collect::<Vec<_>>(),
            ["198.51.100.0/24 dev peer2 scope link"],
            "table 2 (old numbering):\n{old}"
        );
        ns.ip(&[
            "route",
            "del",
            "198.51.100.0/24",
            "dev",
            "peer2",
            "table",
            "2",
        ]);
        assert_eq!((link.name.as_str(), link.table), ("eth2", 3));
        let table = ns.ip(&["-4", "route", "show", "table", "3"]);
        assert_eq!(
            table.lines().map(str::trim).collect::<Vec<_>>(),
            [
                "default via 10.0.2.1 dev eth2 proto static",
                "10.0.2.0/24 dev eth2 proto static scope link"
            ],
            "table 3:\n{table}"
        );
        let main = ns.ip(&["-4", "route", "show", "table", "main"]);
        assert!(
            !main.contains("10.0.2.0/24"),
            "main still routes the subnet:\n{main}"
        );
        let l = ns.ip(&["link", "show", "eth2"]);
        assert!(l.contains("mtu 9001") && l.contains(",UP"), "{l}");
        assert!(node::verify_eni(&h, &spec).await.unwrap().is_empty());

        // Drift: remove the default route, add a stray one; verify names both, setup repairs.
        ns.ip(&["route", "del", "default", "table", "3"]);
        ns.ip(&["route", "add", "192.0.2.0/24", "dev", "eth2", "table", "3"]);
        ns.ip(&["link", "set", "eth2", "mtu", "1500"]);
        let drift = node::verify_eni(&h, &spec).await.unwrap();
        assert_eq!(drift.len(), 3, "{drift:?}");
        assert!(
            drift
                .iter()
                .any(|d| d.contains("missing default via 10.0.2.1")),
            "{drift:?}"
        );
        assert!(
            drift.iter().any(|d| d.contains("MTU 1500, want 9001")),
            "{drift:?}"
        );
        assert!(
            drift
                .iter()
                .any(|d| d.contains("unexpected route 192.0.2.0/24")),
            "{drift:?}"
        );
        node::setup_eni(&h, &spec).await.unwrap();
        node::setup_eni(&h, &spec).await.unwrap();
        assert!(node::verify_eni(&h, &spec).await.unwrap().is_empty());
        assert_eq!(
            ns.ip(&["-4", "route", "show", "table", "3"])
                .lines()
                .count(),
            2
        );

        node::teardown_eni(&h, 0, 2).await.unwrap();
        assert_eq!(ns.ip(&["-4", "route", "show", "table", "3"]), "");
        assert_eq!(ns.ip(&["-4", "route", "show", "table", "2"]), "");
        node::teardown_eni(&h, 0, 2).await.unwrap();

        let missing = node::EniSpec {
            mac: "02:00:00:00:00:99".into(),
            ..spec.clone()
        };
        let e = node::setup_eni(&h, &missing).await.unwrap_err();
        assert!(e.to_string().contains("no interface has MAC"), "{e}");
    });
}

#[test]
fn pod_setup_check_and_remove() {
    let node_ns = TestNetns::new();
    let pod_ns = TestNetns::new();
    let spec = pod::PodSpec {
        ip: Ipv4Addr::new(10, 0, 1, 20),
        host_veth: "enitest0000001".into(),
        container_ifname: "eth0".into(),
        mtu: 9001,
        route_table: node::eni_route_table(1),
        interface: 0,
    };
    node_ns.ip(&[
        "link",
        "add",
        "eth1",
        "address",
        "02:00:00:00:01:01",
        "type",
        "veth",
        "peer",
        "name",
        "x1",
    ]);
    rt().block_on(async {
        let node = handle(&node_ns);
        let eni = node::EniSpec {
            mac: "02:00:00:00:01:01".into(),
            device_number: 1,
            network_card: 0,
            subnet: "10.0.1.0/24".parse().unwrap(),
            mtu: 9001,
            primary_ip: None,
        };
        node::setup_eni(&node, &eni).await.unwrap();
        let pod_fd = netns::open(&pod_ns.path()).unwrap();
        let links = pod::setup(&node, &pod_fd, &pod_ns.path(), &spec)
            .await
            .unwrap();
        let pod = handle(&pod_ns);
        let exp = pod::Expected {
            ip: spec.ip,
            host_veth: spec.host_veth.clone(),
            container_ifname: "eth0".into(),
            mtu: Some(9001),
        };
        assert_eq!(
            pod::check(&node, Some(&pod), &exp).await.unwrap(),
            Vec::<String>::new()
        );

        let rules = node_ns.ip(&["-4", "rule", "show"]);
        let ours: Vec<_> = rules
            .lines()
            .filter(|l| l.contains("10.0.1.20"))
            .map(str::trim)
            .collect();
        assert_eq!(
            ours,
            [
                "512:\tfrom all to 10.0.1.20 lookup main",
                "1536:\tfrom 10.0.1.20 lookup 2"
            ],
            "{rules}"
        );
        let r = node_ns.ip(&["-4", "route", "show", "10.0.1.20/32"]);
        assert_eq!(
            r.trim(),
            "10.0.1.20 dev enitest0000001 proto static scope link"
        );
        let n = pod_ns.ip(&["neigh", "show", "169.254.1.1"]);
        let mac = vpcnet_datapath::names::format_mac(&links.host_mac);
        assert_eq!(
            n.trim(),
            format!("169.254.1.1 dev eth0 lladdr {mac} PERMANENT")
        );
        let pr = pod_ns.ip(&["-4", "route", "show"]);
        assert_eq!(
            pr.lines().map(str::trim).collect::<Vec<_>>(),
            [
                "default via 169.254.1.1 dev eth0 proto static",
                "169.254.1.1 dev eth0 proto static scope link"
            ]
        );
        assert!(pod_ns.ip(&["link", "show", "eth0"]).contains("mtu 9001"));

        // CHECK names a broken neighbour and a missing rule.
        pod_ns.ip(&["neigh", "del", "169.254.1.1", "dev", "eth0"]);
        node_ns.ip(&["rule", "del", "priority", "512"]);
        let bad = pod::check(&node, Some(&pod), &exp).await.unwrap();
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].contains("to 10.0.1.20 lookup main"), "{bad:?}");
        assert!(bad[1].contains("neighbour 169.254.1.1"), "{bad:?}");

        // Idempotent setup over a stale veth; then removal leaves nothing.
        pod_ns.ip(&["link", "del", "eth0"]);
        pod::setup(&node, &pod_fd, &pod_ns.path(), &spec)
            .await
            .unwrap();
        assert!(pod::check(&node, Some(&pod), &exp)
            .await
            .unwrap()
            .is_empty());
        // DEL's removal: routes and rules go, the veth pair stays for the namespace teardown.
        let removed = host::remove(&node, &spec.host_veth, None, VethAction::Keep)
            .await
            .unwrap();
        assert_eq!(removed.ip, Some(spec.ip));
        assert!(removed.veth_kept && !removed.veth, "{removed:?}");
        assert_eq!((removed.routes, removed.rules), (1, 2));
        assert!(!node_ns.ip(&["-4", "rule", "show"]).contains("10.0.1.20"));
        assert!(!node_ns.ip(&["-4", "route", "show"]).contains("10.0.1.20"));
        assert!(node_ns.ip(&["link"]).contains(&spec.host_veth));
        assert!(pod_ns.ip(&["link"]).contains("eth0"));
        let again = host::remove(&node, &spec.host_veth, Some(spec.ip), VethAction::Keep)
            .await
            .unwrap();
        assert_eq!((again.routes, again.rules), (0, 0));
        // GC's removal deletes the pair itself.
        let gone = host::remove(&node, &spec.host_veth, Some(spec.ip), VethAction::Delete)
            .await
            .unwrap();
        assert!(gone.veth, "{gone:?}");
        assert!(!node_ns.ip(&["link"]).contains(&spec.host_veth));
        assert!(!pod_ns.ip(&["link"]).contains("eth0"));
        let again = host::remove(&node, &spec.host_veth, Some(spec.ip), VethAction::Delete)
            .await
            .unwrap();
        assert_eq!((again.veth, again.rules), (false, 0));
    });
}

/// Waits up to 10 s for `name` to disappear from `ns` (the kernel destroys a deleted namespace's
/// interfaces asynchronously, in its netns cleanup work).
fn wait_link_gone(ns: &TestNetns, name: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ns.ip(&["-o", "link"]).contains(name) {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} still in {} 10 s after its pod namespace was deleted",
            ns.name
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn pod_spec(ip: [u8; 4], host_veth: &str) -> pod::PodSpec {
    pod::PodSpec {
        ip: Ipv4Addr::from(ip),
        host_veth: host_veth.into(),
        container_ifname: "eth0".into(),
        mtu: 9001,
        route_table: 0,
        interface: 0,
    }
}

#[test]
fn kept_veth_goes_with_the_pod_namespace() {
    let node_ns = TestNetns::new();
    let pod_ns = TestNetns::new();
    let spec = pod_spec([10, 0, 1, 40], "enitest0000040");
    rt().block_on(async {
        let node = handle(&node_ns);
        let pod_fd = netns::open(&pod_ns.path()).unwrap();
        pod::setup(&node, &pod_fd, &pod_ns.path(), &spec)
            .await
            .unwrap();
        let r = host::remove(&node, &spec.host_veth, Some(spec.ip), VethAction::Keep)
            .await
            .unwrap();
        assert!(r.veth_kept, "{r:?}");
    });
    assert!(node_ns.ip(&["-o", "link"]).contains(&spec.host_veth));
    // The runtime deletes the pod's namespace: the kernel destroys the pair.
    drop(pod_ns);
    wait_link_gone(&node_ns, &spec.host_veth);
    assert!(!node_ns
        .ip(&["-4", "route", "show", "table", "all"])
        .contains("10.0.1.40"));
    assert!(!node_ns.ip(&["-4", "rule", "show"]).contains("10.0.1.40"));
}

#[test]
fn add_replaces_a_same_named_veth_left_by_a_kept_namespace() {
    let node_ns = TestNetns::new();
    let old_ns = TestNetns::new();
    let new_ns = TestNetns::new();
    // Same pod name, same host veth name; the old sandbox's namespace outlives its DEL.
    let old = pod_spec([10, 0, 1, 50], "enitest0000050");
    let new = pod_spec([10, 0, 1, 51], "enitest0000050");
    rt().block_on(async {
        let node = handle(&node_ns);
        let old_fd = netns::open(&old_ns.path()).unwrap();
        let new_fd = netns::open(&new_ns.path()).unwrap();
        pod::setup(&node, &old_fd, &old_ns.path(), &old)
            .await
            .unwrap();
        host::remove(&node, &old.host_veth, Some(old.ip), VethAction::Keep)
            .await
            .unwrap();
        let links = pod::setup(&node, &new_fd, &new_ns.path(), &new)
            .await
            .unwrap();
        let new_pod = handle(&new_ns);
        let exp = pod::Expected {
            ip: new.ip,
            host_veth: new.host_veth.clone(),
            container_ifname: "eth0".into(),
            mtu: Some(9001),
        };
        let bad = pod::check(&node, Some(&new_pod), &exp).await.unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        // The host veth is the new pair's: its peer is the new pod's eth0.
        let host = vpcnet_datapath::nl::link_by_name(&node, &new.host_veth)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(host.index, links.host_index);
        assert_eq!(host.peer_index, Some(links.pod_index));
        // A late DEL of the old sandbox spares the new pod (its veth routes another IP).
        let late = host::remove(&node, &old.host_veth, Some(old.ip), VethAction::Keep)
            .await
            .unwrap();
        assert!(late.veth_of_other_pod, "{late:?}");
        assert!(pod::check(&node, Some(&new_pod), &exp)
            .await
            .unwrap()
            .is_empty());
    });
    // The stale pair went with its replacement: the old namespace has no eth0 any more.
    assert!(!old_ns.ip(&["-o", "link"]).contains("eth0"));
    let routes = node_ns.ip(&["-4", "route", "show", "table", "all"]);
    assert!(!routes.contains("10.0.1.50"), "{routes}");
    assert_eq!(
        routes
            .lines()
            .filter(|l| l.contains("enitest0000050"))
            .count(),
        1,
        "{routes}"
    );
}

#[test]
fn failed_setup_leaves_nothing() {
    let node_ns = TestNetns::new();
    let pod_ns = TestNetns::new();
    // Pod already has eth0: veth creation fails; nothing must remain on the node.
    pod_ns.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "other0",
    ]);
    let before = (
        node_ns.ip(&["link"]),
        node_ns.ip(&["-4", "rule"]),
        node_ns.ip(&["-4", "route"]),
    );
    let spec = pod::PodSpec {
        ip: Ipv4Addr::new(10, 0, 1, 21),
        host_veth: "enitest0000002".into(),
        container_ifname: "eth0".into(),
        mtu: 1500,
        route_table: 0,
        interface: 0,
    };
    rt().block_on(async {
        let node = handle(&node_ns);
        let pod_fd = netns::open(&pod_ns.path()).unwrap();
        let e = pod::setup(&node, &pod_fd, &pod_ns.path(), &spec)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("create veth enitest0000002"), "{e}");
    });
    let after = (
        node_ns.ip(&["link"]),
        node_ns.ip(&["-4", "rule"]),
        node_ns.ip(&["-4", "route"]),
    );
    assert_eq!(before, after);
}

#[test]
fn a_further_interface_routes_its_own_address_through_its_own_table() {
    let node_ns = TestNetns::new();
    let pod_ns = TestNetns::new();
    let eth0 = pod_spec([10, 0, 1, 60], "enitest0000060");
    let further = pod::PodSpec {
        ip: Ipv4Addr::new(10, 1, 0, 60),
        host_veth: "enitest0000061".into(),
        container_ifname: "mNicIf1".into(),
        mtu: 9001,
        route_table: node::card_route_table(1, 0),
        interface: 1,
    };
    rt().block_on(async {
        let node = handle(&node_ns);
        let pod_fd = netns::open(&pod_ns.path()).unwrap();
        pod::setup(&node, &pod_fd, &pod_ns.path(), &eth0)
            .await
            .unwrap();
        pod::setup(&node, &pod_fd, &pod_ns.path(), &further)
            .await
            .unwrap();
    });
    // The pod: eth0 keeps main; mNicIf1's gateway 169.254.1.2 and default live in table 1,
    // chosen for its own address by the rule at priority 1.
    let main = pod_ns.ip(&["-4", "route", "show"]);
    assert!(main.contains("default via 169.254.1.1 dev eth0"), "{main}");
    assert!(!main.contains("mNicIf1"), "{main}");
    let t1 = pod_ns.ip(&["-4", "route", "show", "table", "1"]);
    assert!(t1.contains("default via 169.254.1.2 dev mNicIf1"), "{t1}");
    assert!(
        t1.lines()
            .any(|l| l.starts_with("169.254.1.2 dev mNicIf1") && l.contains("scope link")),
        "{t1}"
    );
    let rules = pod_ns.ip(&["-4", "rule"]);
    assert!(rules.contains("1:\tfrom 10.1.0.60 lookup 1"), "{rules}");
    let neigh = pod_ns.ip(&["-4", "neigh", "show", "dev", "mNicIf1"]);
    assert!(
        neigh.contains("169.254.1.2") && neigh.contains("PERMANENT"),
        "{neigh}"
    );
    // The node: the address routes to its own veth, and leaves by the card-1 ENI's table.
    let node_rules = node_ns.ip(&["-4", "rule"]);
    assert!(
        node_rules.contains("from 10.1.0.60 lookup 10100"),
        "{node_rules}"
    );
    let routes = node_ns.ip(&["-4", "route"]);
    assert!(routes.contains("10.1.0.60 dev enitest0000061"), "{routes}");
    // The reply path in the pod really takes mNicIf1 for its own source.
    let get = pod_ns.ip(&["-4", "route", "get", "192.0.2.1", "from", "10.1.0.60"]);
    assert!(get.contains("dev mNicIf1"), "{get}");
    let get0 = pod_ns.ip(&["-4", "route", "get", "192.0.2.1"]);
    assert!(get0.contains("dev eth0"), "{get0}");
}
