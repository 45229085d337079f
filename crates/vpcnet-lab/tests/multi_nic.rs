//! `ENABLE_MULTI_NIC` in the Kubernetes lab: one hpc7a.12xlarge node (two network cards, two
//! ENIs each) with `ENABLE_MULTI_NIC=true` and `WARM_IP_TARGET=2`. The agent keeps a warm ENI
//! on card 1 too; a pod annotated `k8s.amazonaws.com/nicConfig: multi-nic-attachment` (the
//! runtime passes it in `runtimeConfig`) gets `eth0` with an address of a card-0 ENI and
//! `mNicIf1` with one of the card-1 ENI, routed as the VPC CNI routes them: in the pod,
//! `from <ip> lookup 1` to gateway 169.254.1.2; on the node, `from <ip> lookup 10100` (card 1,
//! device 0) out of the card-1 ENI. The lab's fabric drops any packet that leaves the node by
//! an ENI that does not own its source address, so the VPC reaching `mNicIf1`'s address proves
//! the reply path. A plain pod gets one interface. Deleting the multi-homed pod releases both
//! addresses and removes both node sides. Needs root, the workspace binaries and the Kubernetes
//! binaries; fails when not root.

use std::net::Ipv4Addr;
use std::time::Duration;

use vpcnet_lab::kube::kubectl::Kubectl;
use vpcnet_lab::lab::Lab;

mod common;
use common::*;

/// ENIs attached to `instance_id` on network card `card`.
fn card_enis(lab: &Lab, instance_id: &str, card: u32) -> usize {
    instance_enis(lab, instance_id)
        .into_iter()
        .filter(|e| {
            e.attachment
                .as_ref()
                .is_some_and(|a| a.network_card == card)
        })
        .count()
}

/// The network card of the ENI holding `ip` as a secondary address.
fn card_of(lab: &Lab, ip: Ipv4Addr) -> Option<u32> {
    lab.cloud()
        .enis()
        .unwrap()
        .into_iter()
        .find(|e| e.secondary_ips.contains(&ip))
        .and_then(|e| e.attachment.map(|a| a.network_card))
}

/// `cmd` run in pod `default/name`.
fn exec(k: &Kubectl, name: &str, cmd: &[&str]) -> String {
    let mut args = vec!["exec", "-n", "default", name, "--"];
    args.extend_from_slice(cmd);
    k.run(&args).unwrap()
}

/// The IPv4 address on interface `dev` of pod `name`.
fn pod_addr(k: &Kubectl, name: &str, dev: &str) -> Option<Ipv4Addr> {
    exec(k, name, &["ip", "-4", "addr", "show", "dev", dev])
        .lines()
        .find_map(|l| l.trim().strip_prefix("inet "))
        .and_then(|r| r.split('/').next())
        .and_then(|ip| ip.parse().ok())
}

#[test]
fn a_multi_homed_pod_gets_an_interface_on_the_card_1_eni() {
    with_kube_lab(
        "k8smnic",
        |o| {
            o.instance_type = "hpc7a.12xlarge".into();
            o.agent_env.push(("ENABLE_MULTI_NIC".into(), "true".into()));
            o.agent_env.push(("WARM_IP_TARGET".into(), "2".into()));
        },
        |lab| {
            let k = lab.kube().kubectl().unwrap();
            let n = node(lab);
            let vpc = lab.state().unwrap().namespaces[0].clone();
            // Card 1 has a warm pool of its own: the agent attaches an ENI there.
            wait_until("an ENI on network card 1", Duration::from_secs(60), || {
                card_enis(lab, &n.instance_id, 1) >= 1
            });

            let mut multi = sleep_pod_json("multi", &n.k8s_name);
            multi["metadata"]["annotations"] =
                serde_json::json!({"k8s.amazonaws.com/nicConfig": "multi-nic-attachment"});
            create_pod_retrying(&k, "multi", &multi.to_string());
            let ip0: Ipv4Addr = running_pod_ip(&k, "multi", Duration::from_secs(120))
                .parse()
                .unwrap();
            create_pod_retrying(&k, "plain", &sleep_pod("plain", &n.k8s_name));
            let plain: Ipv4Addr = running_pod_ip(&k, "plain", Duration::from_secs(120))
                .parse()
                .unwrap();

            // eth0 on card 0, mNicIf1 on card 1; the plain pod has eth0 alone, on card 0.
            assert_eq!(pod_addr(&k, "multi", "eth0"), Some(ip0));
            let ip1 = pod_addr(&k, "multi", "mNicIf1").expect("mNicIf1 has an address");
            assert_eq!(card_of(lab, ip0), Some(0), "eth0's address {ip0}");
            assert_eq!(card_of(lab, ip1), Some(1), "mNicIf1's address {ip1}");
            assert_eq!(card_of(lab, plain), Some(0));
            let plain_links = exec(&k, "plain", &["ip", "-o", "link"]);
            assert!(!plain_links.contains("mNicIf"), "{plain_links}");

            // Pod side: mNicIf1's own address leaves through its own table.
            let rules = exec(&k, "multi", &["ip", "rule"]);
            assert!(
                rules.contains(&format!("from {ip1} lookup 1")),
                "pod rules:\n{rules}"
            );
            let t1 = exec(&k, "multi", &["ip", "route", "show", "table", "1"]);
            assert!(
                t1.contains("default via 169.254.1.2 dev mNicIf1"),
                "pod table 1:\n{t1}"
            );
            // Node side: table 10100 = 10000 + 100 × card 1 + device 0, out of the card-1 ENI.
            let node_rules = rules_for(&n, ip1);
            assert!(
                node_rules.iter().any(|r| r.contains("lookup 10100")),
                "{node_rules:?} {:#?}",
                lab.cloud().enis().unwrap()
            );
            let t10100 = ipn(&n, &["-4", "route", "show", "table", "10100"]);
            assert!(t10100.contains("default via"), "{t10100}");
            assert!(t10100.contains("dev c1eth0"), "{t10100}");

            // Reachable from the VPC on both addresses (the fabric drops a reply that leaves by
            // an ENI not owning its source), and from a pod on the same node.
            for ip in [ip0, ip1] {
                assert!(ping_from(&vpc, ip), "the VPC pings {ip}");
            }
            let from_plain = k.run(&[
                "exec",
                "-n",
                "default",
                "plain",
                "--",
                "ping",
                "-c",
                "1",
                "-W",
                "2",
                &ip1.to_string(),
            ]);
            assert!(
                from_plain.is_ok(),
                "the plain pod pings {ip1}: {from_plain:?}"
            );

            // DEL: both addresses released, both node sides gone.
            k.run(&["delete", "pod", "-n", "default", "multi", "--wait=true"])
                .unwrap();
            wait_until("both addresses released", Duration::from_secs(60), || {
                let cp = checkpoint(&n);
                !cp.assignments.iter().any(|a| a.ip == ip0 || a.ip == ip1)
            });
            wait_until(
                "mNicIf1's node rules removed",
                Duration::from_secs(30),
                || rules_for(&n, ip1).is_empty(),
            );
            assert!(rules_for(&n, ip0).is_empty());
        },
    );
}
