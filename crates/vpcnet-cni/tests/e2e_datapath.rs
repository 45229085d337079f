//! End-to-end tests of the real `vpcnet-cni` binary building pod datapaths: a "node" namespace
//! and pod namespaces created (and removed) by each test, a fake agent on a temporary Unix
//! socket, the plugin run inside the node namespace by the in-repo CNI runtime. Needs root;
//! never touches the root namespace.

// std's clocks (banned by the workspace clippy.toml): the real plugin binary and kernel: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{lines_with, sha1_11, Lab};
use serde_json::Value;
use vpcnet_cni_harness::fake_agent::FakeConfig;

#[test]
fn add_check_del_on_a_secondary_eni() {
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 0,
            ..Default::default()
        },
        |_| {},
    );
    let (pod, att) = lab.pod("nginx");
    let result = lab.rt.add(&att).unwrap();
    let veth = format!("eni{}", sha1_11("default.nginx"));

    // Result per spec 1.0.0.
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["interfaces"][0]["name"], veth.as_str());
    assert_eq!(result["interfaces"][1]["name"], "eth0");
    assert_eq!(result["interfaces"][1]["sandbox"], att.netns.as_str());
    assert_eq!(result["ips"][0]["address"], "10.0.1.10/32");
    assert_eq!(result["ips"][0]["interface"], 1);
    assert!(result["ips"][0].get("version").is_none());

    // Kernel state, exactly.
    let rules = lab.node.ip(&["-4", "rule", "show"]).unwrap();
    assert_eq!(
        lines_with(&rules, "10.0.1.10"),
        [
            "512:\tfrom all to 10.0.1.10 lookup main",
            "1536:\tfrom 10.0.1.10 lookup 2"
        ]
    );
    let routes = lab
        .node
        .ip(&["-4", "route", "show", "table", "all"])
        .unwrap();
    assert_eq!(
        lines_with(&routes, "10.0.1.10"),
        [format!("10.0.1.10 dev {veth} proto static scope link")]
    );
    let host_mac = result["interfaces"][0]["mac"].as_str().unwrap();
    assert_eq!(
        pod.ip(&["neigh", "show"]).unwrap().trim(),
        format!("169.254.1.1 dev eth0 lladdr {host_mac} PERMANENT")
    );
    assert_eq!(
        pod.ip(&["-4", "route", "show"])
            .unwrap()
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>(),
        [
            "default via 169.254.1.1 dev eth0 proto static",
            "169.254.1.1 dev eth0 proto static scope link"
        ]
    );
    assert!(pod
        .ip(&["-4", "addr", "show", "eth0"])
        .unwrap()
        .contains("inet 10.0.1.10/32"));
    let l = pod.ip(&["link", "show", "eth0"]).unwrap();
    assert!(l.contains("mtu 9001") && l.contains(",UP"), "{l}");
    let l = lab.node.ip(&["link", "show", &veth]).unwrap();
    assert!(l.contains("mtu 9001") && l.contains(",UP"), "{l}");

    lab.rt.check(&att).unwrap();

    // CHECK names what is wrong.
    lab.node.ip(&["rule", "del", "priority", "1536"]).unwrap();
    pod.ip(&["route", "del", "default"]).unwrap();
    let e = lab.rt.check(&att).unwrap_err();
    assert_eq!(e.code(), 105, "{e}");
    let details = e.exec.json()["details"].as_str().unwrap().to_string();
    assert!(
        details.contains("pod default route via 169.254.1.1 dev eth0 is missing"),
        "{details}"
    );
    lab.node
        .ip(&[
            "rule",
            "add",
            "from",
            "10.0.1.10",
            "lookup",
            "2",
            "priority",
            "1536",
        ])
        .unwrap();
    pod.ip(&[
        "route",
        "add",
        "default",
        "via",
        "169.254.1.1",
        "dev",
        "eth0",
    ])
    .unwrap();
    lab.rt.check(&att).unwrap();

    lab.rt.del(&att).unwrap();
    lab.assert_clean();
    // Like the VPC CNI's DEL: the veth pair is left to the runtime's namespace teardown.
    assert!(pod.ip(&["link"]).unwrap().contains("eth0"));
    assert!(lab.node.ip(&["-o", "link"]).unwrap().contains(&veth));
    assert_eq!(
        lab.agent.state().released,
        ["10.0.1.10".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    // DEL again: idempotent.
    lab.rt.del(&att).unwrap();
    lab.assert_clean();
    drop(pod);
    lab.assert_clean_after_teardown();
}

#[test]
fn add_replaces_the_veth_of_a_same_named_pod_whose_namespace_outlived_del() {
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 0,
            ..Default::default()
        },
        |_| {},
    );
    let veth = format!("eni{}", sha1_11("default.sts-0"));
    let (old_ns, old) = lab.pod("sts-0");
    lab.rt.add(&old).unwrap();
    lab.rt.del(&old).unwrap();
    // The runtime keeps the old sandbox's namespace (and so the veth pair) a while longer; the
    // pod comes back under the same name, so with the same host veth name.
    assert!(old_ns.ip(&["link"]).unwrap().contains("eth0"));
    let (_new_ns, mut new) = lab.pod("sts-0");
    new.container_id = "cid-sts-0-new".into();
    let r = lab.rt.add(&new).unwrap();
    assert_eq!(r["interfaces"][0]["name"], veth.as_str());
    lab.rt.check(&new).unwrap();
    assert!(
        !old_ns.ip(&["link"]).unwrap().contains("eth0"),
        "the stale pair was not replaced"
    );
    let links = lab.node.ip(&["-o", "link"]).unwrap();
    assert_eq!(lines_with(&links, &veth).len(), 1, "{links}");
    let ip = r["ips"][0]["address"]
        .as_str()
        .unwrap()
        .trim_end_matches("/32");
    let routes = lab
        .node
        .ip(&["-4", "route", "show", "table", "all"])
        .unwrap();
    assert_eq!(
        lines_with(&routes, &veth),
        [format!("{ip} dev {veth} proto static scope link")]
    );
    lab.rt.del(&new).unwrap();
    lab.assert_clean();
}

#[test]
fn primary_eni_pod_gets_only_the_512_rule_and_v040_result() {
    let lab = Lab::new(FakeConfig::default(), |s| s.cni_version = "0.4.0".into());
    let (_pod, att) = lab.pod("web");
    let result = lab.rt.add(&att).unwrap();
    assert_eq!(result["cniVersion"], "0.4.0");
    assert_eq!(result["ips"][0]["version"], "4");
    let rules = lab.node.ip(&["-4", "rule", "show"]).unwrap();
    assert_eq!(
        lines_with(&rules, "10.0.1.10"),
        ["512:\tfrom all to 10.0.1.10 lookup main"]
    );
    lab.rt.check(&att).unwrap();
    lab.rt.del(&att).unwrap();
    lab.assert_clean();
}

#[test]
fn bare_container_without_pod_args_uses_the_container_id() {
    let lab = Lab::new(FakeConfig::default(), |s| s.cni_version = "1.1.0".into());
    let (_pod, mut att) = lab.pod("x");
    att.args.clear();
    att.container_id = "abc123".into();
    let result = lab.rt.add(&att).unwrap();
    assert_eq!(
        result["interfaces"][0]["name"],
        format!("eni{}", sha1_11("abc123"))
    );
    assert_eq!(result["interfaces"][1]["mtu"], 9001);
    lab.rt.del(&att).unwrap();
    lab.assert_clean();
}

#[test]
fn fifty_parallel_adds_get_distinct_ips_and_complete_datapaths() {
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 25,
            ..Default::default()
        },
        |_| {},
    );
    let pods: Vec<_> = (0..50).map(|i| lab.pod(&format!("par-{i}"))).collect();
    let results: Vec<Value> = std::thread::scope(|s| {
        let hs: Vec<_> = pods
            .iter()
            .map(|(_, att)| s.spawn(|| lab.rt.add(att).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ips: Vec<String> = results
        .iter()
        .map(|r| r["ips"][0]["address"].as_str().unwrap().to_string())
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 50);
    let rules = lab.node.ip(&["-4", "rule", "show"]).unwrap();
    assert_eq!(lines_with(&rules, "512:").len(), 50);
    assert_eq!(lines_with(&rules, "1536:").len(), 25);
    for (_, att) in &pods {
        lab.rt.check(att).unwrap();
    }
    std::thread::scope(|s| {
        for (_, att) in &pods {
            s.spawn(|| lab.rt.del(att).unwrap());
        }
    });
    lab.assert_clean();
    assert!(lab.agent.state().assigned.is_empty());
}

#[test]
fn late_del_of_an_old_sandbox_spares_the_new_pod_with_the_same_name() {
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 0,
            ..Default::default()
        },
        |_| {},
    );
    let (_old_ns, old) = lab.pod("sts-0");
    lab.rt.add(&old).unwrap();
    // The old sandbox's DEL is lost; the pod comes back with a new sandbox, same name.
    let (_new_ns, mut new) = lab.pod("sts-0");
    new.container_id = "cid-sts-0-new".into();
    let r = lab.rt.add(&new).unwrap();
    assert_eq!(r["ips"][0]["address"], "10.0.1.11/32");
    // Now the late DEL of the old sandbox arrives.
    lab.rt.del(&old).unwrap();
    lab.rt.check(&new).unwrap();
    let rules = lab.node.ip(&["-4", "rule", "show"]).unwrap();
    assert!(lines_with(&rules, "10.0.1.10").is_empty(), "{rules}");
    assert_eq!(lines_with(&rules, "10.0.1.11").len(), 2, "{rules}");
    lab.rt.del(&new).unwrap();
    lab.assert_clean();
}
