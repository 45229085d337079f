//! NetworkPolicy enforced by vpcnet from a pod's first packet, on the lab cluster with vpcnet
//! installed by its chart with `enableNetworkPolicy=true` (the agent under the chart's service
//! account and ClusterRole). Each probe pod's container does one thing as soon as it starts:
//! one HTTP request; its phase (Succeeded or Failed, `restartPolicy: Never`) is the verdict of
//! its very first connection. With a window at pod start (the VPC CNI's `standard` mode lets a
//! new pod through until its policies arrive; its `strict` mode denies until then) the denied
//! pods' first request would pass, or the allowed pods' would fail. Then the same in `strict`
//! mode. Needs root, the workspace binaries, the Kubernetes binaries and Helm
//! (scripts/test.sh provides them).

use std::time::{Duration, Instant};

use serde_json::json;
use vpcnet_lab::image::IMAGE_REF;
use vpcnet_lab::kube::workload::{httpd_manifest, Placement};
use vpcnet_lab::lab::{KubeProxyMode, Lab};
use vpcnet_lab::state::AgentInstall;

mod common;
use common::*;

/// A pod on `node` whose container's first and only act is `GET http://<to>/` (busybox `nc`,
/// 5 s timeout; Debian's static busybox `wget` crashes without NSS files); it succeeds on a
/// `200 OK`.
fn probe(name: &str, labels: serde_json::Value, node: &str, to: std::net::Ipv4Addr) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "probe", "image": IMAGE_REF, "imagePullPolicy": "Never",
                "command": ["sh", "-c", format!(
                    "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {to} 80 | grep -q '200 OK'"
                )],
            }],
        },
    })
    .to_string()
}

fn policy(name: &str, spec: serde_json::Value) -> String {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
    .to_string()
}

/// The phase a probe pod ends in (`Succeeded` or `Failed`).
fn verdict(lab: &Lab, pod: &str) -> String {
    let k = lab.kube().kubectl().unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let p = k.json(&["get", "pod", "-n", "default", pod]).unwrap();
        let phase = p["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if phase == "Succeeded" || phase == "Failed" {
            return phase;
        }
        assert!(
            Instant::now() < deadline,
            "probe {pod} did not finish in 90 s: {}",
            p["status"]
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn policies_hold_from_a_pods_first_packet() {
    with_kube_lab(
        "netpol",
        |o| {
            o.nodes = 2;
            o.agent_install = AgentInstall::Chart;
            o.kube_proxy_mode = KubeProxyMode::DaemonSet;
            o.agent_env
                .push(("VPCNET_ENABLE_NETWORK_POLICY".into(), "true".into()));
            // The chart's nodeAgent.enablePolicyEventLogs=true.
            o.agent_env
                .push(("VPCNET_POLICY_EVENT_LOGS".into(), "true".into()));
        },
        |lab| {
            let k = lab.kube().kubectl().unwrap();
            let state = lab.state().unwrap();
            let (a, b) = (&state.nodes[0].k8s_name, &state.nodes[1].k8s_name);
            let only = |n: &str| Placement {
                only_node: Some(n.to_string()),
                ..Default::default()
            };
            // A server the policies guard and one no policy selects, both on node a.
            // Placement by the lab's node label (its name, n1), probes by Kubernetes name.
            let lab_a = &state.nodes[0].name;
            k.apply(&httpd_manifest("guarded", 1, &only(lab_a)))
                .unwrap();
            k.apply(&httpd_manifest("open", 1, &only(lab_a))).unwrap();
            let w = lab.workloads();
            let guarded = w
                .wait_pods_ready("app=guarded", 1, Duration::from_secs(180))
                .unwrap()[0]
                .ip
                .unwrap();
            let open = w
                .wait_pods_ready("app=open", 1, Duration::from_secs(180))
                .unwrap()[0]
                .ip
                .unwrap();
            // guarded admits role=client on port 80 only; role=locked pods may send nothing.
            k.apply(&policy(
                "guarded-ingress",
                json!({
                    "podSelector": {"matchLabels": {"app": "guarded"}},
                    "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                                 "ports": [{"port": 80}]}],
                }),
            ))
            .unwrap();
            k.apply(&policy(
                "locked-egress",
                json!({"podSelector": {"matchLabels": {"role": "locked"}}, "policyTypes": ["Egress"]}),
            ))
            .unwrap();
            // The agent on a programs guarded's isolation once the policy reaches its watch.
            let deadline = Instant::now() + Duration::from_secs(30);
            let node_a = &state.nodes[0];
            loop {
                let out = std::process::Command::new("ip")
                    .args(["netns", "exec", &node_a.netns])
                    .args(["nft", "list", "map", "inet", "vpcnet_policy", "ingress"])
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&out.stdout).contains("jump in_") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node a's ingress map never isolated guarded: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                std::thread::sleep(Duration::from_millis(200));
            }

            // Each probe's first request gets the verdict its policies give.
            let cases = [
                // A client beside the server: allowed by label.
                (
                    "client-same",
                    json!({"role": "client"}),
                    a,
                    guarded,
                    "Succeeded",
                ),
                // A client on the other node: allowed by label (node a learns its address
                // from its status; a dropped first SYN is retransmitted within the timeout).
                (
                    "client-remote",
                    json!({"role": "client"}),
                    b,
                    guarded,
                    "Succeeded",
                ),
                // Not a client: guarded's ingress denies it.
                ("stranger", json!({"role": "other"}), a, guarded, "Failed"),
                // Its own egress denies everything, from its first packet, on either node.
                ("locked-same", json!({"role": "locked"}), a, open, "Failed"),
                (
                    "locked-remote",
                    json!({"role": "locked"}),
                    b,
                    open,
                    "Failed",
                ),
                // No policy selects it or its server.
                ("free", json!({"role": "other"}), b, open, "Succeeded"),
            ];
            for (name, labels, node, to, _) in &cases {
                k.apply(&probe(name, labels.clone(), node, *to)).unwrap();
            }
            let got: Vec<(&str, String)> = cases
                .iter()
                .map(|(name, ..)| (*name, verdict(lab, name)))
                .collect();
            let want: Vec<(&str, String)> = cases
                .iter()
                .map(|(name, .., v)| (*name, v.to_string()))
                .collect();
            assert_eq!(got, want);

            // Node a's policy event log (the node agent's file, through the chart's mount of
            // /var/log/aws-routed-eni) has a line for an allowed and for denied connections.
            let log = node_a.path("/var/log/aws-routed-eni/network-policy-agent.log");
            let line = |verdict: &str, direction: &str, to: std::net::Ipv4Addr, pod: &str| {
                let want = format!(
                    "Dest IP: {to} Dest Port: 80 Proto TCP Verdict {verdict} Direction {direction}, Tier NETWORK_POLICY"
                );
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    let found = text.lines().find(|l| {
                        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
                        v["msg"].as_str().is_some_and(|m| m.ends_with(&want))
                            && v["pod"].as_str().is_some_and(|p| p.starts_with(pod))
                    });
                    if let Some(l) = found {
                        eprintln!("event log: {l}");
                        return;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "no {verdict} {direction} line to {to} for {pod} in {}:\n{text}",
                        log.display()
                    );
                    std::thread::sleep(Duration::from_millis(500));
                }
            };
            line("ACCEPT", "ingress", guarded, "default/guarded-");
            line("DENY", "ingress", guarded, "default/guarded-");
            line("DENY", "egress", open, "default/locked-same");
            let text = agent_metrics(&node_a.netns);
            assert!(
                text.contains("vpcnet_network_policy_events_written{verdict=\"DENY\"}"),
                "{text}"
            );

            // A table deleted behind the agent's back (another tool flushing nftables) is
            // replaced whole at the agent's next audit (every 15 s), isolation included.
            let nft_a = |args: &[&str]| {
                std::process::Command::new("ip")
                    .args(["netns", "exec", &node_a.netns, "nft"])
                    .args(args)
                    .output()
                    .unwrap()
            };
            let gone = nft_a(&["delete", "table", "inet", "vpcnet_policy"]);
            assert!(gone.status.success(), "{gone:?}");
            let deadline = Instant::now() + Duration::from_secs(40);
            loop {
                let out = nft_a(&["list", "map", "inet", "vpcnet_policy", "ingress"]);
                if String::from_utf8_lossy(&out.stdout).contains("jump in_") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node a's agent did not put back its deleted table within 40 s"
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            let text = agent_metrics(&node_a.netns);
            assert!(
                text.contains("vpcnet_network_policy_program_ms_count{trigger=\"repair\"} 1"),
                "{text}"
            );
            k.apply(&probe(
                "stranger-after-repair",
                json!({"role": "other"}),
                a,
                guarded,
            ))
            .unwrap();
            assert_eq!(verdict(lab, "stranger-after-repair"), "Failed");

            // Deleting the egress policy opens locked pods for their first packet too.
            k.run(&["delete", "networkpolicy", "-n", "default", "locked-egress"])
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut n = 0;
            loop {
                n += 1;
                let name = format!("unlocked-{n}");
                k.apply(&probe(&name, json!({"role": "locked"}), a, open))
                    .unwrap();
                if verdict(lab, &name) == "Succeeded" {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "locked pods stay denied after their policy was deleted"
                );
            }

            // Strict mode: a pod no policy selects denies everything from its first packet;
            // once a policy selects it, the Kubernetes semantics apply. The agents restart with
            // the new mode (a rolling update of the DaemonSet); the rules stay in force
            // meanwhile and are replaced once each new agent has read the API.
            k.run(&[
                "set",
                "env",
                "daemonset/aws-node",
                "-n",
                "kube-system",
                "-c",
                "aws-node",
                "NETWORK_POLICY_ENFORCING_MODE=strict",
            ])
            .unwrap();
            k.run(&[
                "rollout",
                "status",
                "daemonset/aws-node",
                "-n",
                "kube-system",
                "--timeout=180s",
            ])
            .unwrap();
            k.apply(&policy(
                "egress-allowed",
                json!({"podSelector": {"matchLabels": {"egress": "allowed"}},
                       "policyTypes": ["Egress"], "egress": [{}]}),
            ))
            .unwrap();
            std::thread::sleep(Duration::from_secs(2));
            let strict = [
                // Selected by egress-allowed (egress open) and admitted by guarded's ingress.
                (
                    "strict-client",
                    json!({"role": "client", "egress": "allowed"}),
                    b,
                    guarded,
                    "Succeeded",
                ),
                // Admitted by guarded, but no policy selects it: strict denies its egress.
                (
                    "strict-unselected",
                    json!({"role": "client"}),
                    b,
                    guarded,
                    "Failed",
                ),
                // Its egress is allowed, but no policy selects the open server: strict denies
                // the server's ingress.
                (
                    "strict-to-open",
                    json!({"egress": "allowed"}),
                    b,
                    open,
                    "Failed",
                ),
            ];
            for (name, labels, node, to, _) in &strict {
                k.apply(&probe(name, labels.clone(), node, *to)).unwrap();
            }
            let got: Vec<(&str, String)> = strict
                .iter()
                .map(|(name, ..)| (*name, verdict(lab, name)))
                .collect();
            let want: Vec<(&str, String)> = strict
                .iter()
                .map(|(name, .., v)| (*name, v.to_string()))
                .collect();
            assert_eq!(got, want, "strict mode");

            // The agent counted its programs and isolated pods (node b's: the agents restarted
            // with strict mode, and the strict probes ran on b).
            let text = agent_metrics(&state.nodes[1].netns);
            let sample = |name: &str| -> f64 {
                text.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or_else(|| panic!("no {name} in the agent's metrics:\n{text}"))
            };
            let count = sample("vpcnet_network_policy_program_ms_count{trigger=\"ADD\"}");
            let sum = sample("vpcnet_network_policy_program_ms_sum{trigger=\"ADD\"}");
            assert!(count > 0.0, "no ADD programmed the rules");
            eprintln!(
                "node b: {count} ADDs programmed the rules, {:.1} ms each on average",
                sum / count
            );
            assert_eq!(
                sample("vpcnet_network_policy_program_errors"),
                0.0,
                "nft refused a program"
            );
            // strict-to-open's packets, dropped by the open server's ingress on node a (it
            // runs on, so its counters stay), reach the verdict metric (read every 15 s).
            let deadline = Instant::now() + Duration::from_secs(40);
            let denied = "vpcnet_network_policy_denied_packets{direction=\"ingress\"} ";
            loop {
                let text = agent_metrics(&state.nodes[0].netns);
                let n: f64 = text
                    .lines()
                    .find_map(|l| l.strip_prefix(denied))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0.0);
                if n > 0.0 {
                    eprintln!("node a: {n} packets denied on ingress");
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "no denied ingress packets counted on node a:\n{text}"
                );
                std::thread::sleep(Duration::from_secs(2));
            }
        },
    );
}
