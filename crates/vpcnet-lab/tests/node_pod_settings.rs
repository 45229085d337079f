//! Two VPC CNI settings that need the Kubernetes API, in the Kubernetes lab (one cluster, one
//! m5.large node, phases in order):
//!
//! - `ANNOTATE_POD_IP=true`: a pod gets the annotation `vpc.amazonaws.com/pod-ips` with its
//!   address; restarted without the setting, the agent annotates the next pod not at all.
//! - `AWS_MANAGE_ENIS_NON_SCHEDULABLE` unset (false): with the node cordoned, pods that need
//!   more addresses than the pool has get none, and the EC2 request log shows no
//!   CreateNetworkInterface, AttachNetworkInterface or AssignPrivateIpAddresses from the node;
//!   uncordoned, the pool grows (a second ENI) and every pod runs.
//!
//! Needs root, the workspace binaries and the Kubernetes binaries; fails when not root.

use std::time::Duration;

use serde_json::Value;
use vpcnet_lab::kube::kubectl::Kubectl;
use vpcnet_lab::lab::Lab;

mod common;
use common::*;

const ANNOTATION: &str = "vpc.amazonaws.com/pod-ips";
/// The EC2 calls that grow the pool.
const GROWTH: [&str; 3] = [
    "CreateNetworkInterface",
    "AttachNetworkInterface",
    "AssignPrivateIpAddresses",
];

fn create_pod(k: &Kubectl, name: &str, node: &str) {
    create_pod_retrying(k, name, &sleep_pod(name, node));
}

fn pod_json(k: &Kubectl, name: &str) -> Value {
    k.json(&["get", "pod", "-n", "default", name]).unwrap()
}

fn running(k: &Kubectl, names: &[String]) -> usize {
    names
        .iter()
        .filter(|n| pod_json(k, n)["status"]["phase"] == "Running")
        .count()
}

/// The node's pool-growth EC2 calls after request `after_seq`.
fn growth_calls(lab: &Lab, after_seq: u64) -> Vec<String> {
    lab.node("n1")
        .requests()
        .unwrap()
        .into_iter()
        .filter(|r| r.seq > after_seq && GROWTH.contains(&r.action.as_str()))
        .map(|r| format!("#{} {} ({})", r.seq, r.action, r.status))
        .collect()
}

fn agent_log(lab: &Lab) -> String {
    std::fs::read_to_string(lab.dir.join("logs").join("agent-n1.log")).unwrap_or_default()
}

#[test]
fn pod_ip_annotation_and_no_eni_management_while_cordoned() {
    with_kube_lab(
        "k8sset",
        |o| {
            o.agent_env.push(("ANNOTATE_POD_IP".into(), "true".into()));
            o.agent_env.push(("WARM_IP_TARGET".into(), "1".into()));
            o.cluster_endpoint = true;
        },
        |lab| {
            let k = lab.kube().kubectl().unwrap();
            let n = node(lab);
            let name = n.k8s_name.clone();

            // ANNOTATE_POD_IP=true: the pod carries its address.
            create_pod(&k, "annotated", &name);
            let ip = running_pod_ip(&k, "annotated", Duration::from_secs(120));
            let got = pod_json(&k, "annotated")["metadata"]["annotations"][ANNOTATION].clone();
            assert_eq!(got, ip.as_str(), "{ANNOTATION} of pod annotated");

            // Negative control: the same agent without the setting annotates nothing.
            lab.node("n1")
                .set_agent_env(&[
                    ("VPCNET_RECONCILE_INTERVAL".into(), "2".into()),
                    ("WARM_IP_TARGET".into(), "1".into()),
                ])
                .unwrap();
            lab.node("n1").stop_agent().unwrap();
            lab.node("n1").start_agent().unwrap();
            create_pod(&k, "plain", &name);
            running_pod_ip(&k, "plain", Duration::from_secs(120));
            let plain = pod_json(&k, "plain");
            assert!(
                plain["metadata"]["annotations"].get(ANNOTATION).is_none(),
                "pod plain annotated without ANNOTATE_POD_IP: {}",
                plain["metadata"]
            );

            // AWS_MANAGE_ENIS_NON_SCHEDULABLE unset: the pool settles (2 pods + 1 free on the
            // primary ENI), then the node is cordoned.
            wait_until("one ENI", Duration::from_secs(30), || {
                describe_node_enis(lab, &n).len() == 1
            });
            std::thread::sleep(Duration::from_secs(5));
            k.run(&["cordon", &name]).unwrap();
            wait_until(
                "the cordon taint on the Node",
                Duration::from_secs(60),
                || {
                    k.json(&["get", "node", &name]).unwrap()["spec"]["taints"]
                        .to_string()
                        .contains("node.kubernetes.io/unschedulable")
                },
            );
            wait_until(
                "the agent pauses ENI management",
                Duration::from_secs(30),
                || agent_log(lab).contains("ENI management paused"),
            );
            let seq = last_request_seq(lab);
            let names: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
            for p in &names {
                create_pod(&k, p, &name);
            }
            // Ten more pods than the one free address: kubelet tries them (and retries) while
            // the agent's reconcile interval is 2 s.
            std::thread::sleep(Duration::from_secs(25));
            let calls = growth_calls(lab, seq);
            assert!(calls.is_empty(), "pool growth while cordoned: {calls:?}");
            assert_eq!(
                describe_node_enis(lab, &n).len(),
                1,
                "an ENI while cordoned"
            );
            let up = running(&k, &names);
            assert!(up <= 1, "{up} pods got addresses while the pool had 1 free");
            assert_eq!(lab.node("n1").agent_get("/healthz").unwrap().0, 200);

            // Uncordoned: the pool grows to a second ENI and every pod runs.
            k.run(&["uncordon", &name]).unwrap();
            wait_until(
                "every pod Running after uncordon",
                Duration::from_secs(240),
                || running(&k, &names) == names.len(),
            );
            let calls = growth_calls(lab, seq);
            assert!(
                calls.iter().any(|c| c.contains("CreateNetworkInterface")),
                "no ENI created after uncordon: {calls:?}"
            );
            assert!(describe_node_enis(lab, &n).len() >= 2);
            assert!(agent_log(lab).contains("ENI management resumed"));
            eprintln!("after uncordon: {calls:?}");
        },
    );
}
