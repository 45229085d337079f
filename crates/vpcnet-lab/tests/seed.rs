//! The seed scenario with real DaemonSets: a node boots with vpcnet's `aws-node` DaemonSet (by
//! its chart) and kube-proxy's DaemonSet both created before its kubelet starts, so both pods
//! are scheduled onto the booting node at the same moment, as on EKS. The agent reaches the API
//! server through the `kubernetes` Service only once kube-proxy has programmed it, unless the
//! chart's `env` gives it `CLUSTER_ENDPOINT`; IPAM never waits for the API server, so the node
//! turns Ready even with kube-proxy held back.
//!
//! Each test prints its timeline (kubelet start → agent container started → agent pod Ready
//! → Node Ready, and when the agent's Kubernetes client connected); docs/benchmarks.md, "Seed
//! scenario", records them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use vpcnet_lab::kube::vpcnet_chart::NAMESPACE;
use vpcnet_lab::lab::{KubeProxyMode, Lab};
use vpcnet_lab::state::AgentInstall;

mod common;
use common::*;

/// Seconds since the epoch of an RFC 3339 Kubernetes timestamp.
fn k8s_time(v: &Value) -> f64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    let t = chrono::DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    t.timestamp() as f64
}

/// Wall time (seconds since the epoch) at which process `pid` started.
fn process_start(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    let ticks: f64 = after.split_whitespace().nth(19).unwrap().parse().unwrap();
    let btime: f64 = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // USER_HZ is 100 on Linux.
    btime + ticks / 100.0
}

/// The node's timeline, in seconds after its kubelet started.
#[derive(Debug)]
struct Timeline {
    agent_started: f64,
    agent_ready: f64,
    node_ready: f64,
}

fn condition(obj: &Value, kind: &str) -> Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind).cloned())
        .unwrap_or_else(|| panic!("no {kind} condition: {obj}"))
}

fn timeline(lab: &Lab) -> Timeline {
    let state = lab.state().unwrap();
    let n1 = state.node("n1").unwrap();
    let kubelet = state
        .processes
        .iter()
        .find(|p| p.role == "kubelet n1")
        .expect("kubelet of n1");
    let t0 = process_start(kubelet.pid);
    let k = lab.kube().kubectl().unwrap();
    let pod = lab.vpcnet_chart().agent_pod(&n1.k8s_name).unwrap();
    let pod = k.json(&["get", "pod", "-n", NAMESPACE, &pod.name]).unwrap();
    let agent = pod["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "aws-node")
        .unwrap()
        .clone();
    let node = k.json(&["get", "node", &n1.k8s_name]).unwrap();
    Timeline {
        agent_started: k8s_time(&agent["state"]["running"]["startedAt"]) - t0,
        agent_ready: k8s_time(&condition(&pod, "Ready")["lastTransitionTime"]) - t0,
        node_ready: k8s_time(&condition(&node, "Ready")["lastTransitionTime"]) - t0,
    }
}

fn api_status(lab: &Lab) -> Value {
    let (code, body) = lab.node("n1").agent_get("/v1/apiserver").unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn chart_lab(o: &mut vpcnet_lab::lab::UpOptions) {
    o.agent_install = AgentInstall::Chart;
    o.kube_proxy_mode = KubeProxyMode::DaemonSet;
}

/// Waits for the agent's client to connect; returns `first_connected_after_ms`.
fn connected_after_ms(lab: &Lab, source: &str) -> u64 {
    wait_until(
        "the agent's Kubernetes client to connect",
        Duration::from_secs(90),
        || api_status(lab)["state"] == "connected",
    );
    let s = api_status(lab);
    assert_eq!(s["source"], source, "{s}");
    s["first_connected_after_ms"].as_u64().unwrap()
}

#[test]
fn seed_both_daemonsets_at_once_through_the_kubernetes_service() {
    with_kube_lab("seedsvc", chart_lab, |lab| {
        let t = timeline(lab);
        let after = connected_after_ms(lab, "kubernetes Service");
        eprintln!(
            "seed, kubernetes Service: {t:?}; client connected {after} ms after the agent started"
        );
        assert!(
            t.agent_started <= t.agent_ready && t.node_ready >= 0.0,
            "{t:?}"
        );
    });
}

#[test]
fn seed_both_daemonsets_at_once_with_cluster_endpoint() {
    with_kube_lab(
        "seedcep",
        |o| {
            chart_lab(o);
            o.cluster_endpoint = true;
        },
        |lab| {
            let t = timeline(lab);
            let s = api_status(lab);
            let after = connected_after_ms(lab, "CLUSTER_ENDPOINT");
            eprintln!("seed, CLUSTER_ENDPOINT: {t:?}; client connected {after} ms after the agent started");
            // The API server directly: the first attempt connects (no wait for kube-proxy).
            assert_eq!(s["attempts"], 1, "{s}");
        },
    );
}

#[test]
fn seed_with_kube_proxy_held_back_the_node_turns_ready_and_the_agent_connects_later() {
    with_kube_lab(
        "seedkp",
        |o| {
            chart_lab(o);
            o.kube_proxy = false;
        },
        |lab| {
            // lab up waited for the agent pod and the Node to be Ready: IPAM did not wait for
            // the API server, which the agent cannot reach yet.
            let t = timeline(lab);
            let s = api_status(lab);
            assert_eq!(s["state"], "connecting", "no kube-proxy, no Service: {s}");
            assert!(lab.addons().pods("k8s-app=kube-proxy").unwrap().is_empty());
            // Pods get addresses without the API server too, before kube-proxy runs.
            lab.kube()
                .kubectl()
                .unwrap()
                .apply(&vpcnet_lab::kube::workload::httpd_manifest(
                    "seed",
                    2,
                    &Default::default(),
                ))
                .unwrap();
            lab.workloads()
                .wait_pods_ready("app=seed", 2, Duration::from_secs(90))
                .unwrap();
            assert_eq!(api_status(lab)["state"], "connecting");
            // kube-proxy's DaemonSet 20 s after the kubelet started (a slow image pull).
            let state = lab.state().unwrap();
            let kubelet = state
                .processes
                .iter()
                .find(|p| p.role == "kubelet n1")
                .unwrap();
            let t0 = process_start(kubelet.pid);
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            std::thread::sleep(Duration::from_secs_f64((t0 + 20.0 - now).max(0.0)));
            let kp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
                - t0;
            lab.addons().start_kube_proxy().unwrap();
            let after = connected_after_ms(lab, "kubernetes Service");
            let connected = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
                - t0;
            eprintln!(
                "seed, kube-proxy held back: {t:?}; kube-proxy created at {kp:.1} s; client connected {after} ms after the agent started (seen at {connected:.1} s)"
            );
            assert!(
                t.node_ready < kp,
                "the node was Ready before kube-proxy: {t:?}"
            );
        },
    );
}
