//! Prefix delegation on a fragmented subnet, in the Kubernetes lab (one m5.large node,
//! `ENABLE_PREFIX_DELEGATION=true`, `VPCNET_PREFIX_RETRY=3`): the emulator fragments the
//! node's subnet (one address in every free /28), twenty pods need more than the node's one
//! prefix, and every pod runs on secondary IPs while the Node says why (condition
//! `vpcnet.io/PrefixBlocksAvailable=False`, reason `InsufficientCidrBlocks`, a Warning Event).
//! Once the subnet has /28 blocks again the node gets a prefix and the condition turns `True`
//! with a Normal Event. Needs root, the workspace binaries and the Kubernetes binaries;
//! fails when not root.

use std::time::Duration;

use vpcnet_lab::kube::kubectl::Kubectl;
use vpcnet_lab::lab::Lab;

mod common;
use common::*;

const CONDITION: &str = "vpcnet.io/PrefixBlocksAvailable";

fn running(k: &Kubectl, names: &[String]) -> usize {
    names
        .iter()
        .filter(|n| {
            k.json(&["get", "pod", "-n", "default", n])
                .is_ok_and(|p| p["status"]["phase"] == "Running")
        })
        .count()
}

/// The node's (secondary /32s, /28 prefixes), per the emulator.
fn addresses(lab: &Lab, instance_id: &str) -> (usize, usize) {
    instance_enis(lab, instance_id)
        .into_iter()
        .fold((0, 0), |(ips, ps), e| {
            (ips + e.secondary_ips.len(), ps + e.prefixes.len())
        })
}

#[test]
fn pods_run_on_secondary_ips_while_the_subnet_has_no_free_28() {
    with_kube_lab(
        "k8spdfb",
        |o| {
            o.agent_env
                .push(("ENABLE_PREFIX_DELEGATION".into(), "true".into()));
            o.agent_env.push(("VPCNET_PREFIX_RETRY".into(), "3".into()));
        },
        |lab| {
            let k = lab.kube().kubectl().unwrap();
            let n = node(lab);
            let name = n.k8s_name.clone();
            let subnet = lab
                .cloud()
                .enis()
                .unwrap()
                .into_iter()
                .find(|e| {
                    e.attachment
                        .as_ref()
                        .is_some_and(|a| a.instance_id == n.instance_id && a.device_index == 0)
                })
                .expect("the node's primary ENI")
                .subnet_id;
            // The node starts on prefixes (WARM_PREFIX_TARGET=1).
            wait_until("the node's first prefix", Duration::from_secs(30), || {
                addresses(lab, &n.instance_id).1 >= 1
            });
            assert_eq!(
                node_condition(&k, &name, CONDITION),
                None,
                "no fallback yet"
            );
            let taken = lab.cloud().fragment_subnet(&subnet, true).unwrap();
            assert!(!taken.is_empty());
            let prefixes = addresses(lab, &n.instance_id).1;

            // Twenty pods: more than the prefixes hold; the rest get secondary IPs.
            let names: Vec<String> = (0..20).map(|i| format!("pd{i}")).collect();
            for p in &names {
                create_pod_retrying(&k, p, &sleep_pod(p, &name));
            }
            wait_until(
                "every pod Running on the fragmented subnet",
                Duration::from_secs(240),
                || running(&k, &names) == names.len(),
            );
            let (ips, now_prefixes) = addresses(lab, &n.instance_id);
            assert_eq!(now_prefixes, prefixes, "a prefix on a fragmented subnet");
            assert!(ips >= 20 - 16 * prefixes, "{ips} secondary IPs");
            wait_until("the condition False", Duration::from_secs(30), || {
                node_condition(&k, &name, CONDITION)
                    .is_some_and(|c| c.0 == "False" && c.1 == "InsufficientCidrBlocks")
            });
            let (_, _, message) = node_condition(&k, &name, CONDITION).unwrap();
            assert!(
                message.contains("create-subnet-cidr-reservation"),
                "{message}"
            );
            wait_until("a Warning Event", Duration::from_secs(30), || {
                node_event(&k, &name, "InsufficientCidrBlocks", "Warning")
            });

            // /28 blocks again: the next retry gets a prefix (the pool is short of a whole
            // free prefix, WARM_PREFIX_TARGET=1), and the Node says so.
            lab.cloud().fragment_subnet(&subnet, false).unwrap();
            wait_until("the condition True", Duration::from_secs(120), || {
                node_condition(&k, &name, CONDITION)
                    .is_some_and(|c| c.0 == "True" && c.1 == "PrefixesAssigned")
            });
            assert!(addresses(lab, &n.instance_id).1 > prefixes);
            wait_until("a Normal Event", Duration::from_secs(30), || {
                node_event(&k, &name, "PrefixesAssigned", "Normal")
            });
            let last = vec!["pd-last".to_string()];
            create_pod_retrying(&k, &last[0], &sleep_pod(&last[0], &name));
            wait_until("a pod after the return", Duration::from_secs(120), || {
                running(&k, &last) == 1
            });
        },
    );
}
