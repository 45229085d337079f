//! Subnet discovery (`ENABLE_SUBNET_DISCOVERY`, default `true`) on the whole system: the
//! two-zone lab ([`VpcLayout::TwoZones`]: several subnets in us-east-1a) without Kubernetes,
//! containers started by `ctr run --cni`. The node subnet of zone a runs full; `pods-a2` (zone
//! a) is tagged `kubernetes.io/role/cni=1`, `pods-a3` (zone a) is tagged for another cluster,
//! `pods-a` (zone a) is untagged and `pods-b` (zone b) is tagged. The node's next ENI lands in
//! `pods-a2`, and a container on it reaches, and is reached from, a container of the other
//! zone's node through the VPC router. Needs root and the workspace binaries; fails when not
//! root.

use std::net::Ipv4Addr;
use std::time::Duration;

use vpcnet_lab::lab::{Lab, VpcLayout};

mod common;
use common::*;

const ROLE: &str = "kubernetes.io/role/cni";

fn tag(lab: &Lab, subnet: &str, key: &str, value: &str) {
    lab.cloud()
        .ec2(
            "CreateTags",
            &[
                ("ResourceId.1", subnet),
                ("Tag.1.Key", key),
                ("Tag.1.Value", value),
            ],
        )
        .unwrap();
}

/// Takes all but `leave` free addresses of `subnet` with unattached ENIs (at most 50
/// addresses each).
fn fill(lab: &Lab, subnet: &str, leave: u32) {
    let free = || -> u32 {
        let xml = lab
            .cloud()
            .ec2("DescribeSubnets", &[("SubnetId.1", subnet)])
            .unwrap();
        xml_first(&xml, "availableIpAddressCount").parse().unwrap()
    };
    while free() > leave {
        let take = (free() - leave).min(50);
        let secondaries = (take - 1).to_string();
        let mut p = vec![("SubnetId", subnet)];
        if take > 1 {
            p.push(("SecondaryPrivateIpAddressCount", secondaries.as_str()));
        }
        lab.cloud().ec2("CreateNetworkInterface", &p).unwrap();
    }
    assert_eq!(free(), leave);
}

#[test]
fn a_full_node_subnet_puts_the_next_eni_in_the_tagged_subnet_of_the_zone() {
    with_lab(
        "subnetdisc",
        |o| {
            o.layout = VpcLayout::TwoZones;
            o.nodes = 2;
            // The bare lab has no cluster; the cluster tags count only with a name.
            o.agent_env = vec![("CLUSTER_NAME".into(), "vpcnet-lab".into())];
        },
        |lab| {
            let st = lab.state().unwrap();
            let (n1, n2) = (
                st.node("n1").unwrap().clone(),
                st.node("n2").unwrap().clone(),
            );
            assert_eq!(n1.zone, "us-east-1a");
            let (nodes_a, _) = subnet(lab, "nodes-a");
            let (pods_a, _) = subnet(lab, "pods-a");
            let (pods_a2, pods_a2_cidr) = subnet(lab, "pods-a2");
            let (pods_a3, _) = subnet(lab, "pods-a3");
            let (pods_b, _) = subnet(lab, "pods-b");
            tag(lab, &pods_a2, ROLE, "1");
            tag(lab, &pods_a3, ROLE, "1");
            tag(lab, &pods_a3, "kubernetes.io/cluster/another", "owned");
            tag(lab, &pods_b, ROLE, "1");
            // The agents started with the primary ENI's addresses only (WARM_ENI_TARGET=1);
            // nodes-a keeps 2 free addresses, too few for an ENI with 9 secondary addresses.
            fill(lab, &nodes_a, 2);
            // pods-a3 (another cluster's) has more free addresses than pods-a2: only the
            // cluster tag keeps the ENI out of it.
            fill(lab, &pods_a2, 246);
            let enis_of = |node: &str| {
                lab.cloud()
                    .enis()
                    .unwrap()
                    .into_iter()
                    .filter(|e| e.attachment.as_ref().is_some_and(|a| a.instance_id == node))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                enis_of(&n1.instance_id).len(),
                1,
                "only the primary ENI yet"
            );

            // Ten containers on n1: nine fit the primary ENI; the pool grows a second ENI.
            let names = lab.containers().next_names(10).unwrap();
            let cs = lab.containers().run("n1", &names).unwrap();
            // The pool keeps a whole ENI's worth free (WARM_ENI_TARGET=1), so it may go on to
            // a third ENI: every new one is in pods-a2.
            wait_until("n1's second ENI", Duration::from_secs(60), || {
                enis_of(&n1.instance_id).len() >= 2
            });
            let new: Vec<_> = enis_of(&n1.instance_id)
                .into_iter()
                .filter(|e| e.attachment.as_ref().is_some_and(|a| a.device_index > 0))
                .collect();
            assert!(
                !new.is_empty() && new.iter().all(|e| e.subnet_id == pods_a2),
                "{new:?}"
            );
            for s in [&pods_a, &pods_a3, &pods_b] {
                assert!(
                    lab.cloud().enis().unwrap().iter().all(|e| &e.subnet_id != s
                        || e.attachment
                            .as_ref()
                            .is_none_or(|a| a.instance_id != n1.instance_id)),
                    "n1 has an ENI in {s}"
                );
            }
            let on_a2: Vec<_> = cs.iter().filter(|c| pods_a2_cidr.contains(&c.ip)).collect();
            // Nine on the primary ENI (fullest first), the rest on the new ENI.
            assert_eq!(on_a2.len(), cs.len() - 9, "{cs:?}");
            let pod = on_a2[0];

            // Reachable across zones through the VPC router, both ways.
            let other = lab
                .containers()
                .run("n2", &lab.containers().next_names(1).unwrap())
                .unwrap()
                .remove(0);
            assert!(
                lab.containers().ping(&pod.id, other.ip).unwrap(),
                "{} -> {}",
                pod.ip,
                other.ip
            );
            assert!(
                lab.containers().ping(&other.id, pod.ip).unwrap(),
                "{} -> {}",
                other.ip,
                pod.ip
            );
            let gw: Ipv4Addr = pods_a2_cidr.hosts().next().unwrap();
            assert!(
                lab.containers().ping(&pod.id, gw).unwrap(),
                "{} -> its subnet's router {gw}",
                pod.ip
            );
            let _ = n2;
        },
    );
}
