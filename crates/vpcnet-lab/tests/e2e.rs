//! End-to-end acceptance of issue 4 on the whole system: lab cloud (vpcnet-emu) + VPC fabric,
//! a node namespace with containerd and vpcnet-agent, containers started by `ctr run --cni`
//! (which executes vpcnet-cni). Needs root and the workspace binaries (`cargo build --workspace
//! --bins`, as scripts/test.sh does); fails when not root. Traffic across the VPC fabric
//! (prefixes, two nodes, a detached ENI, SNAT) is in `e2e_fabric.rs`.
//!
//! Every test builds its own lab (unique name), tears it down even on failure, and checks that
//! the root network namespace's links, routes and rules are unchanged and no namespace of the
//! lab is left.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vpcnet_lab::containers::ContainerInfo;
use vpcnet_lab::lab::{Lab, UpOptions};
use vpcnet_lab::state::NodeRecord;

mod common;
use common::*;

/// Kernel state of a pod on a secondary ENI (device `dev`): exactly rules 512 and 1536 for
/// its IP, the host /32 route, the pod's permanent neighbour, table `dev` + 1 (the VPC CNI's
/// numbering) default via the subnet router on eth<dev>.
fn assert_secondary_eni_pod_datapath(node: &NodeRecord, c: &ContainerInfo, dev: u32) {
    // `vpcnet_datapath::node::eni_route_table`: device number + 1.
    let table = dev + 1;
    let mut rules = rules_for(node, c.ip);
    rules.sort();
    assert_eq!(
        rules,
        vec![
            format!("1536: from {} lookup {table}", c.ip),
            format!("512: from all to {} lookup main", c.ip),
        ],
        "policy rules for {}",
        c.ip
    );
    let veth = host_veth(node, c.ip).expect("host /32 route to the pod");
    assert!(
        veth.starts_with("eni"),
        "host veth {veth} has the VPC CNI prefix"
    );
    let routes = ipn(node, &["route", "show", "table", &table.to_string()]);
    assert!(
        routes.contains(&format!("default via 10.0.1.1 dev eth{dev}")),
        "table {table}: {routes}"
    );
    let neigh = sh(
        "nsenter",
        &[
            &format!("--net=/proc/{}/ns/net", c.pid),
            "ip",
            "neigh",
            "show",
            "169.254.1.1",
        ],
    );
    assert!(
        neigh.contains("PERMANENT"),
        "pod neighbour 169.254.1.1: {neigh}"
    );
    let veth_mac = ipn(node, &["-br", "link", "show", &veth]);
    let mac = veth_mac.split_whitespace().nth(2).unwrap().to_string();
    assert!(
        neigh.contains(&mac),
        "pod neighbour points at the host veth {mac}: {neigh}"
    );
    let routes = sh(
        "nsenter",
        &[&format!("--net=/proc/{}/ns/net", c.pid), "ip", "route"],
    );
    assert!(
        routes.contains("default via 169.254.1.1 dev eth0"),
        "pod routes: {routes}"
    );
}

#[test]
fn demo_twelve_containers_use_secondary_enis_and_talk() {
    with_lab(
        "demo",
        |_| {},
        |lab| {
            let node = node(lab);
            let names = lab.containers().next_names(12).unwrap();
            let started = lab.containers().run("n1", &names).unwrap();
            assert_eq!(started.len(), 12);

            // Every container IP is a secondary IP of an ENI attached to this node, per EC2.
            let enis = describe_node_enis(lab, &node);
            for e in &enis {
                assert_eq!(e.instance_id, node.instance_id);
            }
            let mut dev_of = BTreeMap::new();
            for c in &started {
                let e = eni_of(&enis, c.ip).unwrap_or_else(|| {
                    panic!(
                        "{} ({}) is not a secondary IP of the node's ENIs: {enis:?}",
                        c.id, c.ip
                    )
                });
                dev_of.insert(c.id.clone(), e.device_index.unwrap());
            }
            let distinct: BTreeSet<Ipv4Addr> = started.iter().map(|c| c.ip).collect();
            assert_eq!(distinct.len(), 12, "distinct IPs");
            let on_primary: Vec<&ContainerInfo> =
                started.iter().filter(|c| dev_of[&c.id] == 0).collect();
            let on_secondary: Vec<&ContainerInfo> =
                started.iter().filter(|c| dev_of[&c.id] > 0).collect();
            assert!(on_primary.len() >= 2, "eth0's pool used: {dev_of:?}");
            assert!(
                !on_secondary.is_empty(),
                "12 pods on an m5.large need eth1 or eth2: {dev_of:?}"
            );

            // Pings: same ENI, across ENIs both ways, secondary-ENI pod -> node, -> VPC router.
            let s = on_secondary[0];
            let (p0, p1) = (on_primary[0], on_primary[1]);
            let node_ip: Ipv4Addr = node.primary_ip.parse().unwrap();
            for (from, to) in [
                (p0, p1.ip),
                (s, p0.ip),
                (p0, s.ip),
                (s, node_ip),
                (s, "10.0.1.1".parse().unwrap()),
            ] {
                assert!(
                    lab.containers().ping(&from.id, to).unwrap(),
                    "ping {} ({}) -> {to}",
                    from.id,
                    from.ip
                );
            }
            if let Some(s2) = on_secondary.get(1) {
                assert!(
                    lab.containers().ping(&s.id, s2.ip).unwrap(),
                    "same secondary ENI ping"
                );
            }

            // Kernel state for the pod on a secondary ENI.
            assert_secondary_eni_pod_datapath(&node, s, dev_of[&s.id]);

            // DEL through the runtime: route and rules go; the veth goes with the task's network
            // namespace (as with the VPC CNI, DEL leaves it to that teardown, which the kernel
            // runs asynchronously); the IP cools down in the pool.
            let veth = host_veth(&node, s.ip).unwrap();
            lab.containers().remove(&s.id).unwrap();
            assert!(
                host_veth(&node, s.ip).is_none(),
                "host route left after DEL"
            );
            assert!(rules_for(&node, s.ip).is_empty(), "rules left after DEL");
            wait_until(
                "the namespace teardown destroyed the host veth",
                Duration::from_secs(10),
                || !ipn(&node, &["-o", "link"]).contains(&format!("{veth}@")),
            );
            let cp = checkpoint(&node);
            assert!(
                !cp.assignments.iter().any(|a| a.ip == s.ip),
                "still assigned: {cp:?}"
            );
            assert!(
                cp.cooldowns.iter().any(|c| c.ip == s.ip),
                "not in cooldown: {cp:?}"
            );
            let enis = describe_node_enis(lab, &node);
            assert!(
                eni_of(&enis, s.ip).is_some(),
                "released IP stays on the ENI (warm pool)"
            );
        },
    );
}

#[test]
fn del_with_agent_down_removes_datapath_and_restart_reclaims_the_ip() {
    with_lab(
        "agentdown",
        // The pod is gone long before the default 60 s grace would pass.
        |o| {
            o.agent_env
                .push(("VPCNET_POD_RECLAIM_GRACE".into(), "5".into()))
        },
        |lab| {
            let node = node(lab);
            let c = lab
                .containers()
                .run("n1", &["a1".to_string()])
                .unwrap()
                .remove(0);
            let veth = host_veth(&node, c.ip).expect("datapath before");
            assert!(checkpoint(&node).assignments.iter().any(|a| a.ip == c.ip));

            lab.node("n1").stop_agent().unwrap();
            lab.containers().remove("a1").unwrap();
            assert!(
                host_veth(&node, c.ip).is_none(),
                "route left with the agent down"
            );
            assert!(
                rules_for(&node, c.ip).is_empty(),
                "rules left with the agent down"
            );
            wait_until(
                "the namespace teardown destroyed the host veth",
                Duration::from_secs(10),
                || !ipn(&node, &["-o", "link"]).contains(&format!("{veth}@")),
            );

            lab.node("n1").start_agent().unwrap();
            wait_until(
                "the restarted agent reclaims the IP",
                Duration::from_secs(30),
                || !checkpoint(&node).assignments.iter().any(|a| a.ip == c.ip),
            );
            // Reusable: a new container gets an address and a working datapath.
            let c2 = lab
                .containers()
                .run("n1", &["a2".to_string()])
                .unwrap()
                .remove(0);
            assert!(lab
                .containers()
                .ping("a2", node.primary_ip.parse().unwrap())
                .unwrap());
            assert!(host_veth(&node, c2.ip).is_some());
        },
    );
}

#[test]
fn fifty_containers_in_parallel_get_distinct_ips_and_datapaths() {
    with_lab(
        "fifty",
        |o| {
            o.instance_type = "m5.4xlarge".into();
            o.agent_env.push(("MINIMUM_IP_TARGET".into(), "60".into()));
        },
        |lab| {
            let node = node(lab);
            // Let the warm pool fill first, as a node would before pods are scheduled.
            wait_until("60 warm IPs", Duration::from_secs(60), || {
                describe_node_enis(lab, &node)
                    .iter()
                    .map(|e| e.secondary_ips.len())
                    .sum::<usize>()
                    >= 60
            });
            let names: Vec<String> = (1..=50).map(|i| format!("p{i}")).collect();
            let started = lab.containers().run("n1", &names).unwrap();
            let ips: BTreeSet<Ipv4Addr> = started.iter().map(|c| c.ip).collect();
            assert_eq!(ips.len(), 50, "distinct IPs");
            let enis = describe_node_enis(lab, &node);
            let cp = checkpoint(&node);
            for c in &started {
                assert!(
                    eni_of(&enis, c.ip).is_some(),
                    "{} not on the node's ENIs",
                    c.ip
                );
                assert!(host_veth(&node, c.ip).is_some(), "{}: no host route", c.ip);
                let dev = eni_of(&enis, c.ip).unwrap().device_index.unwrap();
                // 512 "to pod -> main" always; 1536 "from pod -> table N" on a secondary ENI.
                let expected = if dev > 0 { 2 } else { 1 };
                assert_eq!(rules_for(&node, c.ip).len(), expected, "{}: rules", c.ip);
                assert!(
                    cp.assignments.iter().any(|a| a.ip == c.ip),
                    "{} not checkpointed",
                    c.ip
                );
            }
            assert!(
                lab.containers().ping("p1", started[49].ip).unwrap(),
                "first and last pod talk"
            );
        },
    );
}

#[test]
fn failed_up_removes_everything_and_quotes_the_failing_component() {
    vpcnet_cni_harness::netns::require_root();
    remove_stale_test_labs();
    let before = root_snapshot();
    let real = bin_dir();
    let fake = tempfile::tempdir().unwrap();
    for b in ["vpcnet", "vpcnet-cni"] {
        std::os::unix::fs::symlink(real.join(b), fake.path().join(b)).unwrap();
    }
    let agent = fake.path().join("vpcnet-agent");
    std::fs::write(
        &agent,
        "#!/bin/sh\necho 'agent refuses: injected failure' >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let name = format!(
        "e2e-fail-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let mut opts = UpOptions::bare(&name);
    opts.bin_dir = fake.path().to_path_buf();
    let err = Lab::up(&opts).expect_err("up must fail when the agent exits");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("injected failure"),
        "error quotes the agent's log: {msg}"
    );
    assert!(
        !vpcnet_lab::state::lab_dir(&name).exists(),
        "lab directory left"
    );
    assert!(!vpcnet_lab::state::list_labs().contains(&name));
    let t0 = Instant::now();
    while root_snapshot() != before && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(before, root_snapshot(), "root namespace changed");
    // Invalid input is refused before anything is created.
    let mut bad = UpOptions::bare("e2e-bad-type");
    bad.instance_type = "x9.huge".into();
    let msg = format!("{:#}", Lab::up(&bad).unwrap_err());
    assert!(msg.contains("unknown instance type"), "{msg}");
    assert!(!vpcnet_lab::state::lab_dir("e2e-bad-type").exists());
}
