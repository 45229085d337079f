//! `ENABLE_IMDS_ONLY_MODE=true` in the Kubernetes lab (one cluster, one m5.large node): the
//! node's agent first provisions a few addresses as usual (`WARM_IP_TARGET=3`), then restarts
//! in IMDS-only mode; a new pod runs on one of those addresses while the emulator's request log
//! shows no EC2 request at all from the node since the restart, and the agent says the mode.
//! An address assigned later by someone else (this test, through EC2) serves a pod after the
//! next reconcile.
//!
//! Needs root, the workspace binaries and the Kubernetes binaries; fails when not root.

use std::net::Ipv4Addr;
use std::time::Duration;

use vpcnet_lab::kube::kubectl::Kubectl;
use vpcnet_lab::lab::Lab;

mod common;
use common::*;

fn create_pod(k: &Kubectl, name: &str, node: &str) {
    create_pod_retrying(k, name, &sleep_pod(name, node));
}

/// Every secondary address on the node's ENIs, per EC2.
fn node_ips(lab: &Lab) -> Vec<Ipv4Addr> {
    describe_node_enis(lab, &node(lab))
        .into_iter()
        .flat_map(|e| e.secondary_ips)
        .collect()
}

#[test]
fn a_node_in_imds_only_mode_runs_pods_without_calling_ec2() {
    with_kube_lab(
        "k8simds",
        |o| o.agent_env.push(("WARM_IP_TARGET".into(), "3".into())),
        |lab| {
            let k = lab.kube().kubectl().unwrap();
            let n = node(lab);
            wait_until("the pool provisioned", Duration::from_secs(60), || {
                node_ips(lab).len() >= 3
            });
            let before = node_ips(lab);

            lab.node("n1")
                .set_agent_env(&[
                    ("VPCNET_RECONCILE_INTERVAL".into(), "2".into()),
                    ("ENABLE_IMDS_ONLY_MODE".into(), "true".into()),
                ])
                .unwrap();
            lab.node("n1").stop_agent().unwrap();
            let since = last_request_seq(lab);
            lab.node("n1").start_agent().unwrap();

            create_pod(&k, "imds-only", &n.k8s_name);
            let ip: Ipv4Addr = running_pod_ip(&k, "imds-only", Duration::from_secs(120))
                .parse()
                .unwrap();
            assert!(before.contains(&ip), "{ip} not among {before:?}");

            // Someone else assigns one more address to the primary ENI: after the next
            // reconcile (IMDS) it serves a pod, once the others are taken.
            let primary = describe_node_enis(lab, &n)
                .into_iter()
                .find(|e| e.device_index == Some(0))
                .unwrap();
            lab.cloud()
                .ec2(
                    "AssignPrivateIpAddresses",
                    &[
                        ("NetworkInterfaceId", primary.eni_id.as_str()),
                        ("SecondaryPrivateIpAddressCount", "1"),
                    ],
                )
                .unwrap();
            let after = node_ips(lab);
            let late = *after.iter().find(|ip| !before.contains(ip)).unwrap();
            // Enough pods to take every address attached before (those of running pods, ours
            // and the cluster's, excluded) and the late one.
            let pods = k.json(&["get", "pods", "-A"]).unwrap();
            let used = pods["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["status"]["podIP"].as_str())
                .filter_map(|ip| ip.parse::<Ipv4Addr>().ok())
                .filter(|ip| before.contains(ip))
                .count();
            let mut names = Vec::new();
            for i in 0..before.len() - used + 1 {
                let name = format!("more-{i}");
                create_pod(&k, &name, &n.k8s_name);
                names.push(name);
            }
            let ips: Vec<String> = names
                .iter()
                .map(|name| running_pod_ip(&k, name, Duration::from_secs(120)))
                .collect();
            assert!(
                ips.contains(&late.to_string()),
                "the address assigned later ({late}) serves no pod: {ips:?}"
            );

            let ec2: Vec<String> = lab
                .node("n1")
                .requests()
                .unwrap()
                .into_iter()
                .filter(|r| r.seq > since && r.api == vpcnet_emu::Api::Ec2)
                .map(|r| format!("#{} {}", r.seq, r.action))
                .collect();
            assert!(ec2.is_empty(), "EC2 requests in IMDS-only mode: {ec2:?}");
            let log = std::fs::read_to_string(lab.dir.join("logs").join("agent-n1.log"))
                .unwrap_or_default();
            assert!(log.contains("ENABLE_IMDS_ONLY_MODE=true"), "{log}");
        },
    );
}
