//! The reference plugins the agent chains after vpcnet-cni on request, in the Kubernetes lab
//! (one cluster, one m5.large node, phases in order):
//!
//! - `ENABLE_BANDWIDTH_PLUGIN=true` and `DISABLE_POD_V6=true`: the node's conflist chains
//!   `bandwidth` and `tuning` after `portmap`; a pod annotated
//!   `kubernetes.io/ingress-bandwidth: 1M` and `kubernetes.io/egress-bandwidth: 1M` (kubelet and
//!   containerd pass them as the `bandwidth` capability) gets a 1 Mbit/s token bucket on its
//!   host veth (ingress) and on an `ifb` device fed from it (egress), and IPv6 is off in its
//!   network namespace (`disable_ipv6` = 1 for all, default and lo).
//! - Negative control: the agent restarted without the settings writes the conflist without
//!   them, and the next pod, annotated the same, gets no qdisc, no `ifb` device and IPv6 on.
//! - The shaped pod deleted then keeps its `ifb` device on the node (containerd runs DEL
//!   through the conflist in place, without bandwidth), as `ENABLE_BANDWIDTH_PLUGIN`'s
//!   documentation says.
//!
//! Needs root, the workspace binaries and the Kubernetes binaries; fails when not root.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::Value;
use vpcnet_lab::kube::kubectl::Kubectl;
use vpcnet_lab::lab::{Lab, CONFLIST};
use vpcnet_lab::state::NodeRecord;

mod common;
use common::*;

/// A busybox pod bound to `node`, asking for 1 Mbit/s each way.
fn shaped_pod_manifest(name: &str, node: &str) -> String {
    let mut pod = sleep_pod_json(name, node);
    pod["metadata"]["annotations"] = serde_json::json!({
        "kubernetes.io/ingress-bandwidth": "1M",
        "kubernetes.io/egress-bandwidth": "1M",
    });
    pod.to_string()
}

/// Creates the pod, retrying while the fresh cluster refuses it (its `default` service
/// account not created yet), and returns its address once it runs.
fn run_shaped_pod(k: &Kubectl, name: &str, node: &str) -> Ipv4Addr {
    create_pod_retrying(k, name, &shaped_pod_manifest(name, node));
    running_pod_ip(k, name, Duration::from_secs(120))
        .parse()
        .unwrap()
}

/// The plugin types of the node's conflist, in chain order.
fn chain(n: &NodeRecord) -> Vec<String> {
    let text = std::fs::read_to_string(n.cni_conf_dir().join(CONFLIST)).unwrap();
    let conf: Value = serde_json::from_str(&text).unwrap();
    conf["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap().to_string())
        .collect()
}

/// `tc qdisc show dev <dev>` in the node's network namespace.
fn qdiscs(n: &NodeRecord, dev: &str) -> String {
    sh(
        "ip",
        &["netns", "exec", &n.netns, "tc", "qdisc", "show", "dev", dev],
    )
}

/// The node's `ifb` devices (the bandwidth plugin's egress shapers).
fn ifb_devices(n: &NodeRecord) -> Vec<String> {
    ipn(n, &["-o", "link", "show", "type", "ifb"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|d| d.split('@').next().unwrap().to_string())
        .collect()
}

/// `disable_ipv6` of all, default and lo as pod `name` sees them.
fn pod_disable_ipv6(k: &Kubectl, name: &str) -> Vec<String> {
    ["all", "default", "lo"]
        .iter()
        .map(|i| {
            let path = format!("/proc/sys/net/ipv6/conf/{i}/disable_ipv6");
            k.run(&["exec", "-n", "default", name, "--", "cat", &path])
                .unwrap()
                .trim()
                .to_string()
        })
        .collect()
}

fn has_1mbit_tbf(qdiscs: &str) -> bool {
    qdiscs
        .lines()
        .any(|l| l.starts_with("qdisc tbf ") && l.contains("rate 1Mbit"))
}

#[test]
fn bandwidth_annotations_are_enforced_and_pod_ipv6_is_off_only_with_the_settings() {
    with_kube_lab(
        "k8sbw",
        |o| {
            o.agent_env
                .push(("ENABLE_BANDWIDTH_PLUGIN".into(), "true".into()));
            o.agent_env.push(("DISABLE_POD_V6".into(), "true".into()));
        },
        |lab: &Lab| {
            let k = lab.kube().kubectl().unwrap();
            let n = node(lab);
            let node_name = n.k8s_name.clone();
            assert_eq!(chain(&n), ["vpcnet-cni", "portmap", "bandwidth", "tuning"]);

            let shaped_ip = run_shaped_pod(&k, "shaped", &node_name);
            let veth = host_veth(&n, shaped_ip).expect("a host veth routes to the pod");
            let host = qdiscs(&n, &veth);
            eprintln!("{veth}:\n{host}");
            assert!(
                has_1mbit_tbf(&host),
                "no 1 Mbit/s token bucket on {veth} (the pod's ingress):\n{host}"
            );
            assert!(
                host.lines().any(|l| l.starts_with("qdisc ingress ")),
                "no ingress qdisc on {veth} (the pod's egress is redirected from it):\n{host}"
            );
            let ifbs = ifb_devices(&n);
            assert_eq!(ifbs.len(), 1, "ifb devices: {ifbs:?}");
            let ifb = qdiscs(&n, &ifbs[0]);
            eprintln!("{}:\n{ifb}", ifbs[0]);
            assert!(
                has_1mbit_tbf(&ifb),
                "no 1 Mbit/s token bucket on {} (the pod's egress):\n{ifb}",
                ifbs[0]
            );
            assert_eq!(pod_disable_ipv6(&k, "shaped"), ["1", "1", "1"]);

            // Negative control: the agent restarted without the settings.
            lab.node("n1")
                .set_agent_env(&[("VPCNET_RECONCILE_INTERVAL".into(), "2".into())])
                .unwrap();
            lab.node("n1").stop_agent().unwrap();
            lab.node("n1").start_agent().unwrap();
            assert_eq!(chain(&n), ["vpcnet-cni", "portmap"]);
            let ip = run_shaped_pod(&k, "plain", &node_name);
            let veth = host_veth(&n, ip).expect("a host veth routes to the pod");
            let host = qdiscs(&n, &veth);
            assert!(
                !host.contains("tbf") && !host.contains("ingress"),
                "{veth} shaped without ENABLE_BANDWIDTH_PLUGIN:\n{host}"
            );
            assert_eq!(ifb_devices(&n), ifbs, "a new ifb device");
            assert_eq!(pod_disable_ipv6(&k, "plain"), ["0", "0", "0"]);

            // The shaped pod deleted under the default chain: containerd runs DEL through the
            // conflist in place, without bandwidth, so its ifb device stays (documented at
            // ENABLE_BANDWIDTH_PLUGIN: drain the node before turning it off).
            k.run(&["delete", "pod", "-n", "default", "shaped", "--wait=true"])
                .unwrap();
            wait_until(
                "the shaped pod's route removed by DEL",
                Duration::from_secs(60),
                || host_veth(&n, shaped_ip).is_none(),
            );
            assert_eq!(
                ifb_devices(&n),
                ifbs,
                "the shaped pod's ifb device after its DEL without bandwidth"
            );
        },
    );
}
