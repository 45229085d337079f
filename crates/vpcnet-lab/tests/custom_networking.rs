//! Custom networking acceptance (issue 9) in the two-zone Kubernetes lab
//! ([`VpcLayout::TwoZones`]): one ENIConfig per zone selected by the zone label, pods in their
//! zone's subnet of the secondary CIDR 100.64.0.0/16 behind the ENIConfig's security groups,
//! which the fabric enforces; a host outside the VPC reaching pods and reached by them (SNAT to
//! the node unless excluded); an ENIConfig edited while ENIs exist; the annotation beating the
//! label; bad input named without losing anything. One lab for all (a lab cluster is slow to
//! start), phases in order. Needs root, the workspace binaries and the Kubernetes binaries;
//! fails when not root.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use vpcnet_lab::lab::VpcLayout;

mod common;
use common::custom_networking::*;
use common::*;

const CONDITION: &str = "vpcnet.io/ENIConfigResolved";

#[test]
fn two_zones_eniconfigs_security_groups_and_the_outside_network() {
    with_kube_lab(
        "k8scn",
        |o| {
            o.layout = VpcLayout::TwoZones;
            o.nodes = 2;
            // Eight ENIs per node: room for new ENIs after each change.
            o.instance_type = "m5.4xlarge".into();
            o.agent_env = lab_agent_env();
            o.cluster_endpoint = true;
        },
        |lab| {
            let k = lab.kube().kubectl().unwrap();
            let st = lab.state().unwrap();
            let n1 = st.node("n1").unwrap().clone();
            let n2 = st.node("n2").unwrap().clone();
            let out = st
                .outside
                .clone()
                .expect("the two-zone lab has an outside host");
            assert_eq!(
                (n1.zone.as_str(), n2.zone.as_str()),
                ("us-east-1a", "us-east-1b")
            );
            let vpc_xml = lab.cloud().ec2("DescribeVpcs", &[]).unwrap();
            let vpc = xml_first(&vpc_xml, "vpcId");
            assert!(
                xml_all(&vpc_xml, "cidrBlock").contains(&"100.64.0.0/16".to_string()),
                "{vpc_xml}"
            );
            let (_, nodes_a_cidr) = subnet(lab, "nodes-a");
            let (_, nodes_b_cidr) = subnet(lab, "nodes-b");
            let (pods_a, pods_a_cidr) = subnet(lab, "pods-a");
            let (pods_b, pods_b_cidr) = subnet(lab, "pods-b");
            let (pods_a2, pods_a2_cidr) = subnet(lab, "pods-a2");
            let (pods_a3, pods_a3_cidr) = subnet(lab, "pods-a3");
            let vpc_cidr: Ipv4Net = "10.0.0.0/16".parse().unwrap();
            for n in [&n1, &n2] {
                let ip: Ipv4Addr = n.primary_ip.parse().unwrap();
                assert!(
                    [nodes_a_cidr, nodes_b_cidr].iter().any(|c| c.contains(&ip)),
                    "{} at {ip}",
                    n.name
                );
            }
            // The zone label, from the lab's cloud controller manager.
            for n in [&n1, &n2] {
                wait_until("the zone label", Duration::from_secs(60), || {
                    k.json(&["get", "node", &n.k8s_name]).is_ok_and(|o| {
                        o["metadata"]["labels"]["topology.kubernetes.io/zone"] == n.zone.as_str()
                    })
                });
            }

            // Security groups: everything from anywhere (zone a), TCP 80 from nodes-a only
            // (zone b).
            let sg_open = create_group(lab, &vpc, "pods-open");
            ingress(
                lab,
                "AuthorizeSecurityGroupIngress",
                &sg_open,
                "-1",
                "",
                "0.0.0.0/0",
            );
            let sg_web = create_group(lab, &vpc, "pods-web");
            ingress(
                lab,
                "AuthorizeSecurityGroupIngress",
                &sg_web,
                "tcp",
                "80",
                &nodes_a_cidr.to_string(),
            );

            // Phase 1: pods wait for their ENIConfigs; creating them starts the pods.
            k.run(&["create", "namespace", NS]).unwrap();
            httpd_pod(&k, "web-a1", "n1");
            httpd_pod(&k, "web-b1", "n2");
            wait_until(
                "both nodes report ENIConfigNotFound",
                Duration::from_secs(60),
                || {
                    [&n1, &n2].iter().all(|n| {
                        node_condition(&k, &n.k8s_name, CONDITION)
                            .is_some_and(|(s, r, _)| s == "False" && r == "ENIConfigNotFound")
                    })
                },
            );
            assert!(running_ip(&k, "web-a1").is_none());
            let t0 = Instant::now();
            eniconfig(&k, "us-east-1a", &pods_a, &sg_open);
            eniconfig(&k, "us-east-1b", &pods_b, &sg_web);
            let mut ips = (None, None);
            wait_until("both pods Running", Duration::from_secs(120), || {
                ips = (running_ip(&k, "web-a1"), running_ip(&k, "web-b1"));
                ips.0.is_some() && ips.1.is_some()
            });
            let running = t0.elapsed();
            let (ip_a, ip_b) = (ips.0.unwrap(), ips.1.unwrap());
            eprintln!(
                "FIGURE: ENIConfigs created -> both pods Running in {} ms",
                running.as_millis()
            );

            // Phase 2: addresses from the zone's pod subnet, ENIs there with the groups.
            assert!(
                pods_a_cidr.contains(&ip_a),
                "web-a1 {ip_a} not in {pods_a_cidr}"
            );
            assert!(
                pods_b_cidr.contains(&ip_b),
                "web-b1 {ip_b} not in {pods_b_cidr}"
            );
            for ip in [ip_a, ip_b] {
                assert!(!vpc_cidr.contains(&ip), "{ip} from a node subnet");
            }
            for (n, s, sg) in [(&n1, &pods_a, &sg_open), (&n2, &pods_b, &sg_web)] {
                let enis = node_enis(lab, n);
                assert!(enis.len() >= 2, "{}: {enis:?}", n.name);
                for (id, sub, groups, dev) in &enis {
                    if *dev > 0 {
                        assert_eq!(sub, s, "{} ENI {id}", n.name);
                        assert_eq!(groups, &vec![sg.clone()], "{} ENI {id}", n.name);
                    }
                }
                // EC2 lists them in that subnet with the group.
                let xml = lab
                    .cloud()
                    .ec2(
                        "DescribeNetworkInterfaces",
                        &[
                            ("Filter.1.Name", "subnet-id"),
                            ("Filter.1.Value.1", s),
                            ("Filter.2.Name", "attachment.instance-id"),
                            ("Filter.2.Value.1", &n.instance_id),
                        ],
                    )
                    .unwrap();
                let listed = xml_all(&xml, "networkInterfaceId");
                assert_eq!(listed.len(), enis.len() - 1, "{xml}");
                assert!(xml_all(&xml, "groupId").iter().all(|g| g == sg), "{xml}");
            }

            // Phase 3: security groups take effect. web-b1 admits TCP 80 from nodes-a only.
            let from_n1 = http_get(&n1.netns, ip_b, 80);
            assert!(
                from_n1
                    .as_ref()
                    .is_ok_and(|b| b.contains("hello from web-b1")),
                "n1 (nodes-a) -> web-b1: {from_n1:?}"
            );
            let from_out = http_get(&out.netns, ip_b, 80);
            assert!(
                from_out.is_err(),
                "outside -> web-b1 must be dropped: {from_out:?}"
            );
            // A client in another subnet of the VPC (the control-plane host, 10.0.0.0/24).
            let cp_ns = format!("{}-cp", lab.state().unwrap().prefix);
            let from_cp = http_get(&cp_ns, ip_b, 80);
            assert!(
                from_cp.is_err(),
                "control plane (another subnet) -> web-b1 must be dropped: {from_cp:?}"
            );
            // Authorizing the outside network opens it; revoking nodes-a closes that.
            ingress(
                lab,
                "AuthorizeSecurityGroupIngress",
                &sg_web,
                "tcp",
                "80",
                "10.200.0.0/24",
            );
            let from_out = http_get(&out.netns, ip_b, 80);
            assert!(
                from_out.is_ok(),
                "outside -> web-b1 after authorize: {from_out:?}"
            );
            ingress(
                lab,
                "RevokeSecurityGroupIngress",
                &sg_web,
                "tcp",
                "80",
                &nodes_a_cidr.to_string(),
            );
            let from_n1 = http_get(&n1.netns, ip_b, 80);
            assert!(from_n1.is_err(), "n1 -> web-b1 after revoke: {from_n1:?}");
            // Pod to pod across zones keeps the pod's address (100.64.0.0/16 is a VPC CIDR, so
            // no SNAT): admitting pods-a (not nodes-a) lets web-a1 reach web-b1.
            ingress(
                lab,
                "AuthorizeSecurityGroupIngress",
                &sg_web,
                "tcp",
                "80",
                &pods_a_cidr.to_string(),
            );
            let page = pod_get(&k, "web-a1", &format!("http://{ip_b}/"));
            assert!(
                page.as_ref().is_ok_and(|b| b.contains("hello from web-b1")),
                "web-a1 -> web-b1 with pods-a admitted: {page:?}"
            );
            assert!(http_get(&n1.netns, ip_b, 80).is_err(), "n1 still refused");
            ingress(
                lab,
                "RevokeSecurityGroupIngress",
                &sg_web,
                "tcp",
                "80",
                &pods_a_cidr.to_string(),
            );
            ingress(
                lab,
                "AuthorizeSecurityGroupIngress",
                &sg_web,
                "tcp",
                "80",
                &nodes_a_cidr.to_string(),
            );
            assert!(http_get(&n1.netns, ip_b, 80).is_ok());

            // Phase 4: the outside host reaches a custom-networking pod (replies leave by the
            // pod's own ENI: by eth0 the fabric's source/destination check would drop them).
            // The pod's ENI has its own route table (device index + 1, as the VPC CNI numbers
            // them) whose default route is the pod subnet's router on that ENI.
            let owner = lab
                .cloud()
                .enis()
                .unwrap()
                .into_iter()
                .find(|e| e.secondary_ips.contains(&ip_a))
                .expect("web-a1's address on an ENI");
            let dev = owner.attachment.as_ref().unwrap().device_index;
            let table = ipn(&n1, &["route", "show", "table", &(dev + 1).to_string()]);
            let router = Ipv4Addr::from(u32::from(pods_a_cidr.network()) + 1);
            assert!(
                table.contains(&format!("default via {router} dev eth{dev}")),
                "ENI table {}: {table}",
                dev + 1
            );
            assert!(ping_from(&out.netns, ip_a), "outside pings web-a1 {ip_a}");
            let body = http_get(&out.netns, ip_a, 80);
            assert!(
                body.as_ref().is_ok_and(|b| b.contains("hello from web-a1")),
                "outside -> web-a1: {body:?}"
            );

            // Phase 5: the pod reaches the outside host with the node's address (SNAT).
            let seen = peer_reporter(&out.netns, 9000);
            let n1_ip: Ipv4Addr = n1.primary_ip.parse().unwrap();
            assert_eq!(pod_seen_from_outside(&k, "web-a1", 9000), n1_ip);

            // Phase 6: the ENIConfig edited while ENIs exist: existing ENIs are kept.
            let before = node_enis(lab, &n1);
            eniconfig(&k, "us-east-1a", &pods_a2, &sg_open);
            wait_until(
                "n1's agent resolves the edited ENIConfig",
                Duration::from_secs(30),
                || agent_doc(lab, "n1", "/v1/eniconfig")["subnet"] == pods_a2.as_str(),
            );
            // Three reconcile passes later, nothing moved.
            let c0 = reconcile_count(&n1);
            wait_until("three reconcile passes", Duration::from_secs(30), || {
                reconcile_count(&n1) >= c0 + 3.0
            });
            assert_eq!(node_enis(lab, &n1), before, "existing ENIs kept");
            assert_eq!(running_ip(&k, "web-a1"), Some(ip_a));
            assert!(ping_from(&out.netns, ip_a));
            // A new ENI (one more warm ENI: the agent restarted with WARM_ENI_TARGET=2) goes
            // to the edited subnet.
            restart_agent(lab, "n1", &[("WARM_ENI_TARGET", "2")]);
            wait_until("a new ENI on n1", Duration::from_secs(60), || {
                node_enis(lab, &n1).len() > before.len()
            });
            let now = node_enis(lab, &n1);
            let new: Vec<_> = now.iter().filter(|e| !before.contains(e)).collect();
            assert!(
                new.iter().all(|(_, s, _, _)| s == &pods_a2),
                "new ENIs in pods-a2 ({pods_a2_cidr}): {new:?}"
            );
            assert!(before.iter().all(|e| now.contains(e)), "old ENIs kept");

            // Phase 7: the annotation beats the label: n1's new ENIs move to pods-a3; and with
            // the outside network in AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS the pod reaches it with
            // its own address (through its own ENI).
            eniconfig(&k, "annotated-a3", &pods_a3, &sg_open);
            k.run(&[
                "annotate",
                "node",
                &n1.k8s_name,
                "k8s.amazonaws.com/eniConfig=annotated-a3",
            ])
            .unwrap();
            wait_until("n1 resolves annotated-a3", Duration::from_secs(30), || {
                let d = agent_doc(lab, "n1", "/v1/eniconfig");
                d["name"] == "annotated-a3" && d["state"] == "resolved"
            });
            let before = node_enis(lab, &n1);
            restart_agent(
                lab,
                "n1",
                &[
                    ("WARM_ENI_TARGET", "3"),
                    ("AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", "10.200.0.0/24"),
                ],
            );
            wait_until(
                "a new ENI on n1 in pods-a3",
                Duration::from_secs(60),
                || node_enis(lab, &n1).len() > before.len(),
            );
            let now = node_enis(lab, &n1);
            let new: Vec<_> = now.iter().filter(|e| !before.contains(e)).collect();
            assert!(
                new.iter().all(|(_, s, _, _)| s == &pods_a3),
                "new ENIs in pods-a3 ({pods_a3_cidr}): {new:?}"
            );
            wait_until(
                "the excluded CIDR reaches the pod's own address",
                Duration::from_secs(20),
                || pod_seen_from_outside(&k, "web-a1", 9000) == ip_a,
            );
            assert!(seen.lock().unwrap().contains(&n1_ip));
            assert!(seen.lock().unwrap().contains(&ip_a));

            // Phase 8: bad input on n2, each named; nothing running lost.
            let n2_enis = node_enis(lab, &n2);
            let cases: Vec<(&str, String, &str)> = vec![
                (
                    "bad-unknown",
                    "subnet-00000000000000000".into(),
                    "subnet subnet-00000000000000000 does not exist",
                ),
                (
                    "bad-zone",
                    pods_a.clone(),
                    "is in us-east-1a, but the node is in us-east-1b",
                ),
                ("bad-empty", String::new(), "spec.subnet"),
            ];
            for (name, subnet, _) in &cases {
                eniconfig(&k, name, subnet, &sg_web);
            }
            k.run(&[
                "annotate",
                "node",
                &n2.k8s_name,
                "k8s.amazonaws.com/eniConfig=bad-unknown",
            ])
            .unwrap();
            wait_until("n2 selects bad-unknown", Duration::from_secs(30), || {
                agent_doc(lab, "n2", "/v1/eniconfig")["name"] == "bad-unknown"
            });
            // One more warm ENI wanted, so a bad placement is tried (and refused).
            restart_agent(lab, "n2", &[("WARM_ENI_TARGET", "2")]);
            for (name, _, says) in &cases {
                k.run(&[
                    "annotate",
                    "--overwrite",
                    "node",
                    &n2.k8s_name,
                    &format!("k8s.amazonaws.com/eniConfig={name}"),
                ])
                .unwrap();
                wait_until(
                    &format!("{name} named with {says:?}"),
                    Duration::from_secs(30),
                    || {
                        // On the Node (condition False) and in /v1/eniconfig.
                        let cond = node_condition(&k, &n2.k8s_name, CONDITION).unwrap_or_default();
                        let doc = agent_doc(lab, "n2", "/v1/eniconfig");
                        let doc = doc["message"].as_str().unwrap_or_default();
                        cond.0 == "False"
                            && [cond.2.as_str(), doc]
                                .iter()
                                .all(|m| m.contains(name) && m.contains(says))
                    },
                );
                eprintln!("{name}: named");
            }
            k.run(&[
                "annotate",
                "--overwrite",
                "node",
                &n2.k8s_name,
                "k8s.amazonaws.com/eniConfig=Bad_Name",
            ])
            .unwrap();
            wait_until("InvalidSelection", Duration::from_secs(30), || {
                node_condition(&k, &n2.k8s_name, CONDITION)
                    .is_some_and(|(_, r, _)| r == "InvalidSelection")
            });
            // Nothing lost: the same ENIs, the pod still serves, the agent never restarted.
            assert_eq!(node_enis(lab, &n2), n2_enis);
            assert_eq!(running_ip(&k, "web-b1"), Some(ip_b));
            assert!(http_get(&n1.netns, ip_b, 80).is_ok());
            assert_eq!(lab.node("n2").agent_get("/healthz").unwrap().0, 200);
            // Removing the annotation: the label's ENIConfig again, the new ENI in pods-b.
            k.run(&[
                "annotate",
                "node",
                &n2.k8s_name,
                "k8s.amazonaws.com/eniConfig-",
            ])
            .unwrap();
            wait_until("a new ENI on n2 in pods-b", Duration::from_secs(60), || {
                node_enis(lab, &n2).len() > n2_enis.len()
            });
            assert!(node_enis(lab, &n2)
                .iter()
                .filter(|e| e.3 > 0)
                .all(|(_, s, _, _)| s == &pods_b));
            let _ = k.run(&["delete", "namespace", NS, "--wait=false"]);
        },
    );
}
