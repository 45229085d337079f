//! End-to-end tests of the real `vpcnet-cni` binary chained with Debian's reference plugins:
//! portmap receives its result, bandwidth and tuning shape the pod and turn its IPv6 off.
//! Each test creates (and removes) its own namespaces; needs root; never touches the root
//! namespace.

// std's clocks (banned by the workspace clippy.toml): the real plugin binary and kernel: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{sha1_11, Lab};
use serde_json::json;
use vpcnet_cni::conflist::ConflistSettings;
use vpcnet_cni_harness::fake_agent::FakeConfig;
use vpcnet_cni_harness::netns::TestNetns;

#[test]
fn chained_portmap_receives_our_result_and_returns_it() {
    let lab = Lab::new(FakeConfig::default(), |s| s.portmap = true);
    let (_pod, mut att) = lab.pod("ports");
    att.capability_args =
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]});
    let result = lab.rt.add(&att).unwrap();
    let trace = lab.rt.trace.lock().unwrap().clone();
    let ours = trace
        .iter()
        .find(|e| e.plugin == "vpcnet-cni" && e.command == "ADD")
        .unwrap();
    let pm = trace
        .iter()
        .find(|e| e.plugin == "portmap" && e.command == "ADD")
        .unwrap();
    assert_eq!(
        pm.stdin["prevResult"],
        ours.json(),
        "portmap got something else than our result"
    );
    assert_eq!(
        pm.stdin["runtimeConfig"]["portMappings"][0]["hostPort"],
        8080
    );
    assert_eq!(
        result,
        ours.json(),
        "portmap did not pass our result through"
    );
    // Debian's portmap 1.1.1 fails CHECK on IPv4-only pods looking for an IPv6 chain it never
    // created (containernetworking/plugins#819); our CHECK in the chain must pass regardless.
    match lab.rt.check(&att) {
        Ok(()) => {}
        Err(e) => {
            assert_eq!(e.exec.plugin, "portmap", "{e}");
            assert!(e.exec.stdout.contains("ipv6"), "{e}");
        }
    }
    let trace = lab.rt.trace.lock().unwrap().clone();
    let check = trace
        .iter()
        .find(|e| e.plugin == "vpcnet-cni" && e.command == "CHECK")
        .unwrap();
    assert_eq!((check.status, &check.stdin["prevResult"]), (0, &result));
    lab.rt.del(&att).unwrap();
    let trace = lab.rt.trace.lock().unwrap().clone();
    let dels: Vec<&str> = trace
        .iter()
        .filter(|e| e.command == "DEL")
        .map(|e| e.plugin.as_str())
        .collect();
    assert_eq!(dels, ["portmap", "vpcnet-cni"]);
    let del_ours = trace
        .iter()
        .find(|e| e.plugin == "vpcnet-cni" && e.command == "DEL")
        .unwrap();
    assert_eq!(del_ours.stdin["prevResult"], result);
    lab.assert_clean();
}

/// `tc qdisc show dev <dev>` in namespace `ns`.
fn qdiscs(ns: &TestNetns, dev: &str) -> String {
    vpcnet_cni_harness::netns::run(&[
        "ip", "netns", "exec", &ns.name, "tc", "qdisc", "show", "dev", dev,
    ])
    .unwrap()
}

/// A sysctl as the processes of namespace `ns` see it.
fn sysctl_in(ns: &TestNetns, path: &str) -> String {
    vpcnet_cni_harness::netns::run(&["ip", "netns", "exec", &ns.name, "cat", path])
        .unwrap()
        .trim()
        .to_string()
}

/// The `ifb` devices of namespace `ns` (the bandwidth plugin's egress shapers).
fn ifb_devices(ns: &TestNetns) -> Vec<String> {
    ns.ip(&["-o", "link", "show", "type", "ifb"])
        .unwrap()
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap().to_string())
        .collect()
}

/// Runs one pod with 1 Mbit/s of ingress and egress asked for (the runtime's `bandwidth`
/// capability, as containerd passes the pod annotations) through the chain `settings` gives,
/// and returns (host veth qdiscs, ifb qdiscs, the pod's all/default/lo disable_ipv6), then DELs.
fn shaped_pod(settings: impl FnOnce(&mut ConflistSettings)) -> (String, String, [String; 3]) {
    let lab = Lab::new(FakeConfig::default(), settings);
    let (pod, mut att) = lab.pod("shaped");
    att.capability_args = json!({"bandwidth": {
        "ingressRate": 1_000_000, "ingressBurst": u32::MAX,
        "egressRate": 1_000_000, "egressBurst": u32::MAX,
    }});
    let result = lab.rt.add(&att).unwrap();
    let veth = format!("eni{}", sha1_11("default.shaped"));
    assert_eq!(result["interfaces"][0]["name"], veth.as_str());
    let host = qdiscs(&lab.node, &veth);
    let ifb = ifb_devices(&lab.node)
        .iter()
        .map(|d| qdiscs(&lab.node, d))
        .collect::<Vec<_>>()
        .join("");
    let v6 = ["all", "default", "lo"]
        .map(|i| sysctl_in(&pod, &format!("/proc/sys/net/ipv6/conf/{i}/disable_ipv6")));
    lab.rt.del(&att).unwrap();
    assert!(ifb_devices(&lab.node).is_empty(), "DEL left an ifb device");
    lab.assert_clean();
    (host, ifb, v6)
}

#[test]
fn chained_bandwidth_and_tuning_shape_the_pod_and_turn_its_ipv6_off() {
    // ENABLE_BANDWIDTH_PLUGIN and DISABLE_POD_V6: Debian's reference plugins after ours find
    // the host veth in our result and act on the pod.
    let (host, ifb, v6) = shaped_pod(|s| {
        s.bandwidth = true;
        s.disable_pod_v6 = true;
    });
    assert!(
        host.lines()
            .any(|l| l.starts_with("qdisc tbf ") && l.contains("rate 1Mbit")),
        "no 1 Mbit/s token bucket on the host veth (pod ingress):\n{host}"
    );
    assert!(
        host.lines().any(|l| l.starts_with("qdisc ingress ")),
        "no ingress qdisc on the host veth (pod egress is redirected from it):\n{host}"
    );
    assert!(
        ifb.lines()
            .any(|l| l.starts_with("qdisc tbf ") && l.contains("rate 1Mbit")),
        "no 1 Mbit/s token bucket on an ifb device (pod egress):\n{ifb}"
    );
    assert_eq!(v6, ["1", "1", "1"], "disable_ipv6 of all, default, lo");

    // Negative control: the default chain, same capability arguments.
    let (host, ifb, v6) = shaped_pod(|_| {});
    assert!(!host.contains("tbf") && !host.contains("ingress"), "{host}");
    assert!(ifb.is_empty(), "{ifb}");
    assert_eq!(v6, ["0", "0", "0"], "disable_ipv6 of all, default, lo");
}
