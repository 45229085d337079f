//! Custom networking acceptance (issue 9) in the two-zone Kubernetes lab
//! ([`VpcLayout::TwoZones`]): one ENIConfig per zone selected by the zone label, pods in their
//! zone's subnet of the secondary CIDR 100.64.0.0/16 behind the ENIConfig's security groups,
//! which the fabric enforces; a host outside the VPC reaching pods and reached by them (SNAT to
//! the node unless excluded); an ENIConfig edited while ENIs exist; the annotation beating the
//! label; bad input named without losing anything. One lab for all (a lab cluster is slow to
//! start), phases in order. Needs root, the workspace binaries and the Kubernetes binaries;
//! fails when not root.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use serde_json::Value;
use vpcnet_lab::kube::kubectl::Kubectl;
use vpcnet_lab::lab::{Lab, VpcLayout, OUTSIDE_HOST};
use vpcnet_lab::spawn::in_netns;
use vpcnet_lab::state::NodeRecord;

mod common;
use common::*;

const NS: &str = "cn";
const CONDITION: &str = "vpcnet.io/ENIConfigResolved";

fn create_group(lab: &Lab, vpc: &str, name: &str) -> String {
    let xml = lab
        .cloud()
        .ec2(
            "CreateSecurityGroup",
            &[
                ("GroupName", name),
                ("GroupDescription", name),
                ("VpcId", vpc),
            ],
        )
        .unwrap();
    xml_first(&xml, "groupId")
}

/// Authorize (or revoke) `proto` `port` from `cidr` on `sg` (`port` ignored for `-1`).
fn ingress(lab: &Lab, action: &str, sg: &str, proto: &str, port: &str, cidr: &str) {
    let mut p = vec![
        ("GroupId", sg),
        ("IpPermissions.1.IpProtocol", proto),
        ("IpPermissions.1.IpRanges.1.CidrIp", cidr),
    ];
    if proto != "-1" {
        p.push(("IpPermissions.1.FromPort", port));
        p.push(("IpPermissions.1.ToPort", port));
    }
    lab.cloud().ec2(action, &p).unwrap();
}

fn eniconfig(k: &Kubectl, name: &str, subnet: &str, sg: &str) {
    k.apply(&format!(
        "apiVersion: crd.k8s.amazonaws.com/v1alpha1\nkind: ENIConfig\nmetadata: {{name: {name}}}\nspec: {{subnet: \"{subnet}\", securityGroups: [{sg}]}}\n"
    ))
    .unwrap();
}

/// A busybox httpd pod on lab node `node` (by its lab label; the scheduler places it).
fn httpd_pod(k: &Kubectl, name: &str, node: &str) {
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeSelector": {"vpcnet.lab/node": node},
            "containers": [{
                "name": "httpd", "image": vpcnet_lab::image::IMAGE_REF,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c",
                    "mkdir -p /www && echo \"hello from $(hostname)\" > /www/index.html && exec httpd -f -p 80 -h /www"],
            }],
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
        },
    });
    k.apply(&pod.to_string()).unwrap();
}

/// The pod's IP once it is Running.
fn running_ip(k: &Kubectl, name: &str) -> Option<Ipv4Addr> {
    let p = k.json(&["get", "pod", "-n", NS, name]).ok()?;
    (p["status"]["phase"] == "Running")
        .then(|| p["status"]["podIP"].as_str()?.parse().ok())
        .flatten()
}

/// GET / on `ip:port` from inside namespace `netns` (3 s to connect and to answer).
fn http_get(netns: &str, ip: Ipv4Addr, port: u16) -> Result<String, String> {
    in_netns(netns, move || {
        let mut s =
            TcpStream::connect_timeout(&SocketAddr::from((ip, port)), Duration::from_secs(3))?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        write!(s, "GET / HTTP/1.0\r\nHost: {ip}\r\n\r\n")?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        Ok(body)
    })
    .map_err(|e| format!("{e:#}"))
}

/// A TCP server on the outside host that answers every connection with the peer's address.
fn peer_reporter(netns: &str, port: u16) -> Arc<Mutex<Vec<Ipv4Addr>>> {
    let l = in_netns(netns, move || Ok(TcpListener::bind(("0.0.0.0", port))?)).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut c = c;
            if let Ok(SocketAddr::V4(peer)) = c.peer_addr() {
                s.lock().unwrap().push(*peer.ip());
                // Read the request first: closing with it unread would reset the connection.
                let _ = c.set_read_timeout(Some(Duration::from_secs(3)));
                let mut req = Vec::new();
                let mut buf = [0u8; 512];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = write!(c, "HTTP/1.0 200 OK\r\n\r\nyou are {}\n", peer.ip());
            }
        }
    });
    seen
}

/// `wget -O - url` inside pod `name` (busybox's `timeout` 10 s: its `wget -T` crashes in
/// Debian's busybox 1.35).
fn pod_get(k: &Kubectl, name: &str, url: &str) -> Result<String, String> {
    k.run(&[
        "exec", "-n", NS, name, "--", "timeout", "10", "wget", "-q", "-O", "-", url,
    ])
    .map_err(|e| format!("{e:#}"))
}

/// `wget` from inside pod `name` to the outside host's reporter; the address it saw.
fn pod_seen_from_outside(k: &Kubectl, name: &str, port: u16) -> Ipv4Addr {
    let out = pod_get(k, name, &format!("http://{OUTSIDE_HOST}:{port}/")).unwrap();
    out.trim()
        .strip_prefix("you are ")
        .unwrap_or_else(|| panic!("reporter said {out:?}"))
        .parse()
        .unwrap()
}

/// The node's ENIs as EC2 has them: (ENI ID, subnet ID, groups, device index), attached ones.
fn node_enis(lab: &Lab, node: &NodeRecord) -> Vec<(String, String, Vec<String>, u32)> {
    lab.cloud()
        .enis()
        .unwrap()
        .into_iter()
        .filter_map(|e| {
            let a = e.attachment.as_ref()?;
            (a.instance_id == node.instance_id).then(|| {
                (
                    e.eni_id.clone(),
                    e.subnet_id.clone(),
                    e.security_group_ids.clone(),
                    a.device_index,
                )
            })
        })
        .collect()
}

/// The agent's `awscni_reconcile_count` (all kinds) from its metrics endpoint.
fn reconcile_count(node: &NodeRecord) -> f64 {
    let text = in_netns(&node.netns, || {
        let mut s = TcpStream::connect_timeout(
            &"127.0.0.1:61678".parse().unwrap(),
            Duration::from_secs(3),
        )?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut t = String::new();
        s.read_to_string(&mut t)?;
        Ok(t)
    })
    .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("awscni_reconcile_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn agent_doc(lab: &Lab, node: &str, path: &str) -> Value {
    let (code, body) = lab.node(node).agent_get(path).unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Restarts the node's agent with `extra` environment (as a DaemonSet change would).
fn restart_agent(lab: &Lab, node: &str, extra: &[(&str, &str)]) {
    let mut env: Vec<(String, String)> = lab_agent_env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    lab.node(node).stop_agent().unwrap();
    lab.node(node).set_agent_env(&env).unwrap();
    lab.node(node).start_agent().unwrap();
}

/// The agent environment every node starts with in this test.
fn lab_agent_env() -> Vec<(String, String)> {
    [
        ("VPCNET_RECONCILE_INTERVAL", "2"),
        ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true"),
        ("ENI_CONFIG_LABEL_DEF", "topology.kubernetes.io/zone"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

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
