//! Helpers of the custom networking acceptance (`custom_networking.rs`): security groups and
//! ENIConfigs, httpd pods and HTTP from a namespace or a pod, a reporter on the outside host,
//! a node's ENIs per EC2, and the agent's reconcile count, documents, environment and restart.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use vpcnet_lab::kube::kubectl::Kubectl;
use vpcnet_lab::lab::{Lab, OUTSIDE_HOST};
use vpcnet_lab::spawn::in_netns;
use vpcnet_lab::state::NodeRecord;

use super::xml_first;

/// The test's Kubernetes namespace.
pub const NS: &str = "cn";

pub fn create_group(lab: &Lab, vpc: &str, name: &str) -> String {
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
pub fn ingress(lab: &Lab, action: &str, sg: &str, proto: &str, port: &str, cidr: &str) {
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

pub fn eniconfig(k: &Kubectl, name: &str, subnet: &str, sg: &str) {
    k.apply(&format!(
        "apiVersion: crd.k8s.amazonaws.com/v1alpha1\nkind: ENIConfig\nmetadata: {{name: {name}}}\nspec: {{subnet: \"{subnet}\", securityGroups: [{sg}]}}\n"
    ))
    .unwrap();
}

/// A busybox httpd pod on lab node `node` (by its lab label; the scheduler places it).
pub fn httpd_pod(k: &Kubectl, name: &str, node: &str) {
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
pub fn running_ip(k: &Kubectl, name: &str) -> Option<Ipv4Addr> {
    let p = k.json(&["get", "pod", "-n", NS, name]).ok()?;
    (p["status"]["phase"] == "Running")
        .then(|| p["status"]["podIP"].as_str()?.parse().ok())
        .flatten()
}

/// GET / on `ip:port` from inside namespace `netns` (3 s to connect and to answer).
pub fn http_get(netns: &str, ip: Ipv4Addr, port: u16) -> Result<String, String> {
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
pub fn peer_reporter(netns: &str, port: u16) -> Arc<Mutex<Vec<Ipv4Addr>>> {
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
pub fn pod_get(k: &Kubectl, name: &str, url: &str) -> Result<String, String> {
    k.run(&[
        "exec", "-n", NS, name, "--", "timeout", "10", "wget", "-q", "-O", "-", url,
    ])
    .map_err(|e| format!("{e:#}"))
}

/// `wget` from inside pod `name` to the outside host's reporter; the address it saw.
pub fn pod_seen_from_outside(k: &Kubectl, name: &str, port: u16) -> Ipv4Addr {
    let out = pod_get(k, name, &format!("http://{OUTSIDE_HOST}:{port}/")).unwrap();
    out.trim()
        .strip_prefix("you are ")
        .unwrap_or_else(|| panic!("reporter said {out:?}"))
        .parse()
        .unwrap()
}

/// The node's ENIs as EC2 has them: (ENI ID, subnet ID, groups, device index), attached ones.
pub fn node_enis(lab: &Lab, node: &NodeRecord) -> Vec<(String, String, Vec<String>, u32)> {
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
pub fn reconcile_count(node: &NodeRecord) -> f64 {
    super::agent_metrics(&node.netns)
        .lines()
        .filter(|l| l.starts_with("awscni_reconcile_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn agent_doc(lab: &Lab, node: &str, path: &str) -> Value {
    let (code, body) = lab.node(node).agent_get(path).unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Restarts the node's agent with `extra` environment (as a DaemonSet change would).
pub fn restart_agent(lab: &Lab, node: &str, extra: &[(&str, &str)]) {
    let mut env: Vec<(String, String)> = lab_agent_env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    lab.node(node).stop_agent().unwrap();
    lab.node(node).set_agent_env(&env).unwrap();
    lab.node(node).start_agent().unwrap();
}

/// The agent environment every node starts with in this test.
pub fn lab_agent_env() -> Vec<(String, String)> {
    [
        ("VPCNET_RECONCILE_INTERVAL", "2"),
        ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true"),
        ("ENI_CONFIG_LABEL_DEF", "topology.kubernetes.io/zone"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}
