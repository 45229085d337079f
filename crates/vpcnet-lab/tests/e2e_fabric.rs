//! End-to-end acceptance of issue 4 across the VPC fabric, the traffic half of `e2e.rs`: pods
//! on /28 prefixes routed through the fabric, pods of two nodes reaching each other, a detached
//! ENI leaving the node and the fabric, and SNAT of traffic leaving the VPC. Lab cloud
//! (vpcnet-emu) + VPC fabric, node namespaces with containerd and vpcnet-agent, containers
//! started by `ctr run --cni`. Needs root and the workspace binaries (`cargo build --workspace
//! --bins`, as scripts/test.sh does); fails when not root.
//!
//! Every test builds its own lab (unique name), tears it down even on failure, and checks that
//! the root network namespace's links, routes and rules are unchanged and no namespace of the
//! lab is left.

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::*;

#[test]
fn prefix_delegation_pods_route_through_the_fabric() {
    with_lab(
        "prefix",
        |o| {
            o.agent_env
                .push(("ENABLE_PREFIX_DELEGATION".into(), "true".into()))
        },
        |lab| {
            let node = node(lab);
            let names: Vec<String> = (1..=3).map(|i| format!("x{i}")).collect();
            let started = lab.containers().run("n1", &names).unwrap();
            let enis = lab.cloud().enis().unwrap();
            for c in &started {
                let in_prefix = enis.iter().any(|e| {
                    e.attachment
                        .as_ref()
                        .is_some_and(|a| a.instance_id == node.instance_id)
                        && e.prefixes.iter().any(|p| p.contains(&c.ip))
                });
                assert!(
                    in_prefix,
                    "{} is not inside a /28 prefix of the node's ENIs",
                    c.ip
                );
            }
            // The router's reply to a prefix address is routed by the fabric to its ENI.
            assert!(
                lab.containers()
                    .ping("x1", "10.0.1.1".parse().unwrap())
                    .unwrap(),
                "pod -> VPC router"
            );
            assert!(
                lab.containers().ping("x1", started[2].ip).unwrap(),
                "pod -> pod"
            );
            assert!(
                lab.containers()
                    .ping("x2", node.primary_ip.parse().unwrap())
                    .unwrap(),
                "pod -> node"
            );
        },
    );
}

#[test]
fn two_nodes_pods_reach_each_other_across_the_fabric() {
    with_lab(
        "two",
        |o| o.nodes = 2,
        |lab| {
            let s = lab.state().unwrap();
            let a = lab
                .containers()
                .run("n1", &["a1".to_string()])
                .unwrap()
                .remove(0);
            let b = lab
                .containers()
                .run("n2", &["b1".to_string()])
                .unwrap()
                .remove(0);
            let enis = lab.cloud().enis().unwrap();
            for (c, n) in [(&a, "n1"), (&b, "n2")] {
                let owner = vpcnet_lab::cloud::owner(&enis, c.ip).expect("IP on an ENI");
                assert_eq!(
                    owner.instance_id,
                    s.node(n).unwrap().instance_id,
                    "{} on {n}",
                    c.ip
                );
            }
            assert!(
                lab.containers().ping("a1", b.ip).unwrap(),
                "pod on n1 -> pod on n2"
            );
            assert!(
                lab.containers().ping("b1", a.ip).unwrap(),
                "pod on n2 -> pod on n1"
            );
            let n1_ip = s.node("n1").unwrap().primary_ip.parse().unwrap();
            assert!(
                lab.containers().ping("b1", n1_ip).unwrap(),
                "pod on n2 -> node n1"
            );
        },
    );
}

#[test]
fn detached_eni_disappears_from_the_node_and_the_fabric() {
    with_lab(
        "detach",
        |_| {},
        |lab| {
            let node = node(lab);
            let s = lab.state().unwrap();
            let vpc = s.namespaces[0].clone();
            // With one pod, eth0 has fewer free IPs than one ENI's worth: WARM_ENI_TARGET=1 makes
            // the agent attach a warm secondary ENI. Wait for it.
            let pod = lab
                .containers()
                .run("n1", &["w1".to_string()])
                .unwrap()
                .remove(0);
            let mut warm = None;
            wait_until("a warm secondary ENI", Duration::from_secs(30), || {
                warm = lab.cloud().enis().unwrap().into_iter().find(|e| {
                    e.attachment.as_ref().is_some_and(|a| {
                        a.instance_id == node.instance_id
                            && a.device_index > 0
                            && a.status == "attached"
                    })
                });
                warm.is_some()
            });
            let eni = warm.unwrap();
            let mac = eni.mac.clone();
            // EC2 reports `attached` as the attachment completes; the fabric hook runs right
            // after, and the agent assigns the ENI's secondary IPs (the fabric's neighbours)
            // with a separate call: wait for both rather than race them.
            wait_until(
                &format!("ENI {mac} on the node"),
                Duration::from_secs(10),
                || ipn(&node, &["-o", "link"]).contains(&mac),
            );
            wait_until(
                &format!("fabric neighbours for {mac}"),
                Duration::from_secs(10),
                || sh("ip", &["-n", &vpc, "neigh"]).contains(&mac),
            );

            let sock = vpcnet_lab::daemon::api_socket(&lab.dir);
            let (status, body) = vpcnet_lab::api::request(
                &sock,
                "POST",
                &format!("/_emu/enis/{}/detach", eni.eni_id),
                "application/json",
                b"{}",
            )
            .unwrap();
            assert_eq!(status, 200, "{body}");
            assert!(
                !ipn(&node, &["-o", "link"]).contains(&mac),
                "interface {mac} still on the node"
            );
            assert!(
                !sh("ip", &["-n", &vpc, "neigh"]).contains(&mac),
                "fabric still routes to {mac}"
            );
            let port = vpcnet_lab::fabric::port_name(&eni.eni_id);
            assert!(
                !sh("ip", &["-n", &vpc, "-o", "link"]).contains(&port),
                "bridge port {port} left"
            );
            let sdc = nft(&vpc, &["list", "set", "bridge", "vpcnet", "owned"]);
            assert!(
                !sdc.contains(&port),
                "source check still allows {port}: {sdc}"
            );
            // The pod on eth0 is unaffected.
            assert!(
                lab.containers()
                    .ping("w1", "10.0.1.1".parse().unwrap())
                    .unwrap(),
                "pod {} -> router",
                pod.ip
            );
        },
    );
}

/// `nft <args>` run in namespace `ns`; its stdout (fails the test when nft fails).
fn nft(ns: &str, args: &[&str]) -> String {
    let mut v = vec!["netns", "exec", ns, "nft"];
    v.extend_from_slice(args);
    sh("ip", &v)
}

/// Packets counted by the rule with `comment "<tag>"` in `nft list table ip <table>` of `ns`.
fn nft_count(ns: &str, table: &str, tag: &str) -> u64 {
    let out = nft(ns, &["list", "table", "ip", table]);
    let line = out
        .lines()
        .find(|l| l.contains(&format!("comment \"{tag}\"")))
        .unwrap_or_else(|| panic!("no rule {tag} in\n{out}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    let i = f.iter().position(|w| *w == "packets").unwrap();
    f[i + 1].parse().unwrap()
}

#[test]
fn traffic_leaving_the_vpc_is_snated_to_the_node_ip_and_vpc_traffic_keeps_the_pod_ip() {
    with_lab(
        "snat",
        // Two addresses per ENI: the second pod lands on the warm secondary ENI (eth1).
        |o| o.instance_type = "t3.micro".into(),
        |lab| {
            let node = node(lab);
            let vpc = lab.state().unwrap().namespaces[0].clone();
            let node_ip: Ipv4Addr = node.primary_ip.parse().unwrap();
            // The agent applied its table at start: SNAT to the primary IP, connmark rule.
            let fw = nft(&node.netns, &["list", "table", "ip", "vpcnet"]);
            assert!(
                fw.contains(&format!("snat to {node_ip} fully-random")),
                "node firewall:\n{fw}"
            );
            assert!(
                ipn(&node, &["rule", "show"])
                    .contains("1024:\tfrom all fwmark 0x80/0x80 lookup main"),
                "fwmark rule: {}",
                ipn(&node, &["rule", "show"])
            );

            lab.containers().run("n1", &["s1".to_string()]).unwrap();
            wait_until(
                "a warm secondary ENI with a free address",
                Duration::from_secs(20),
                || {
                    lab.cloud().enis().unwrap().iter().any(|e| {
                        !e.secondary_ips.is_empty()
                            && e.attachment.as_ref().is_some_and(|a| {
                                a.instance_id == node.instance_id
                                    && a.device_index > 0
                                    && a.status == "attached"
                            })
                    })
                },
            );
            let pod = lab
                .containers()
                .run("n1", &["s2".to_string()])
                .unwrap()
                .remove(0);
            let owner = vpcnet_lab::cloud::owner(&lab.cloud().enis().unwrap(), pod.ip)
                .expect("pod IP on an ENI");
            assert!(
                owner.device_index > 0,
                "{} is on a secondary ENI (device {})",
                pod.ip,
                owner.device_index
            );

            // An address outside the VPC CIDR, inside the lab's VPC namespace (the namespace has
            // no link to the root namespace: nothing leaves the lab), and counters of the
            // sources that reach it and the VPC router.
            let outside = "198.51.100.1";
            sh(
                "ip",
                &[
                    "-n",
                    &vpc,
                    "addr",
                    "add",
                    &format!("{outside}/32"),
                    "dev",
                    "lo",
                ],
            );
            let probe = format!(
                "table ip snatprobe {{
  chain input {{
    type filter hook input priority 0; policy accept;
    ip protocol icmp ip saddr {node_ip} ip daddr {outside} counter comment \"node-outside\"
    ip protocol icmp ip saddr {pod} ip daddr {outside} counter comment \"pod-outside\"
    ip protocol icmp ip saddr {pod} ip daddr 10.0.1.1 counter comment \"pod-router\"
    ip protocol icmp ip saddr {node_ip} ip daddr 10.0.1.1 counter comment \"node-router\"
  }}
}}
",
                pod = pod.ip
            );
            let path = lab.dir.join("snatprobe.nft");
            std::fs::write(&path, probe).unwrap();
            nft(&vpc, &["-f", path.to_str().unwrap()]);

            // Outside the VPC: SNATed to the node's primary IP, and it leaves by eth0 (the
            // fabric's source/destination check drops the node IP on eth1's port), so the
            // echo comes back.
            assert!(
                lab.containers()
                    .ping("s2", outside.parse().unwrap())
                    .unwrap(),
                "pod on eth{} -> {outside}",
                owner.device_index
            );
            assert!(nft_count(&vpc, "snatprobe", "node-outside") >= 1);
            assert_eq!(nft_count(&vpc, "snatprobe", "pod-outside"), 0);
            // Inside the VPC: the pod's own address.
            assert!(lab
                .containers()
                .ping("s2", "10.0.1.1".parse().unwrap())
                .unwrap());
            assert!(nft_count(&vpc, "snatprobe", "pod-router") >= 1);
            assert_eq!(nft_count(&vpc, "snatprobe", "node-router"), 0);
            // The SNAT rule in the node counts the connection. The agent's periodic pass
            // (every 2 s here) writes its table again, which starts the rule's counter from
            // zero, so a read can fall just after a pass: ping and read again until one read
            // sees the ping (the rule never counting fails after 10 s).
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                assert!(lab
                    .containers()
                    .ping("s2", outside.parse().unwrap())
                    .unwrap());
                let fw = nft(
                    &node.netns,
                    &["list", "chain", "ip", "vpcnet", "postrouting"],
                );
                if !fw.contains("counter packets 0 ") {
                    break;
                }
                assert!(Instant::now() < deadline, "SNAT rule not hit:\n{fw}");
            }

            // Drift is repaired by the agent's periodic pass (every 2 s here).
            nft(&node.netns, &["delete", "table", "ip", "vpcnet"]);
            ipn(&node, &["rule", "del", "priority", "1024"]);
            wait_until(
                "the agent re-applies its table and fwmark rule",
                Duration::from_secs(10),
                || {
                    let t = Command::new("ip")
                        .args([
                            "netns",
                            "exec",
                            &node.netns,
                            "nft",
                            "list",
                            "table",
                            "ip",
                            "vpcnet",
                        ])
                        .output()
                        .unwrap();
                    t.status.success()
                        && String::from_utf8_lossy(&t.stdout).contains("snat to")
                        && ipn(&node, &["rule", "show"]).contains("fwmark 0x80/0x80 lookup main")
                },
            );
            assert!(lab
                .containers()
                .ping("s2", outside.parse().unwrap())
                .unwrap());
        },
    );
}
