//! Issue 13, datapath self-healing: an in-process agent against the emulator whose node
//! datapath is the real `NetlinkNode` pointed at a network namespace the test creates (and
//! deletes again, even on failure). The periodic pass repairs and reports; a vanished ENI
//! interface triggers a describe at once. Needs root.

// std's clocks (banned by the workspace clippy.toml): the real kernel's datapath, repaired by the audit: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vpcnet_agent::AgentDeps;

use common::netns::{plugin_add, run, veth_of, Netns};
use common::*;
use vpcnet_agent::node::{
    AuditReport, AuditRequest, BoxFuture, NetlinkNode, NodeEni, NodeFirewall, NodeNetwork,
};
use vpcnet_agent::Targets;
use vpcnet_datapath::audit::{Finding, Kind};

impl Netns {
    /// A veth end named `name` with `mac`, standing in for an ENI's interface.
    fn eni_link(&self, name: &str, mac: &str) {
        let peer = format!("{name}p");
        self.ip(&[
            "link", "add", name, "address", mac, "type", "veth", "peer", "name", &peer,
        ]);
        self.ip(&["link", "set", &peer, "up"]);
        self.ip(&["link", "set", name, "up"]);
    }

    fn sysctl(&self, key: &str) -> String {
        run(&["ip", "netns", "exec", &self.name, "sysctl", "-n", key])
            .trim()
            .to_string()
    }

    fn set_sysctl(&self, key: &str, value: &str) {
        run(&[
            "ip",
            "netns",
            "exec",
            &self.name,
            "sysctl",
            "-qw",
            &format!("{key}={value}"),
        ]);
    }
}

/// The instance's ENIs as EC2 has them attached: (device index, MAC, id).
fn attached(lab: &Lab) -> Vec<(u32, String, String)> {
    lab.emu
        .enis()
        .into_iter()
        .filter_map(|e| {
            let a = e.attachment.as_ref()?;
            (a.instance_id == lab.instance.instance_id).then_some((a.device_index, e.mac, e.eni_id))
        })
        .collect()
}

/// Gives each ENI EC2 attaches to the instance an interface in `ns` (what udev does on a real
/// node), once: `eth<device>` with the ENI's MAC. Stops when the returned flag is set.
fn udev(lab: &Lab, ns: &Netns) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let (emu, instance, name, s) = (
        lab.emu.clone(),
        lab.instance.instance_id.clone(),
        ns.name.clone(),
        stop.clone(),
    );
    std::thread::spawn(move || {
        let mut made = BTreeSet::new();
        while !s.load(Ordering::SeqCst) {
            for e in emu.enis() {
                let Some(a) = e.attachment.as_ref().filter(|a| a.instance_id == instance) else {
                    continue;
                };
                if made.insert(e.mac.clone()) {
                    let dev = format!("eth{}", a.device_index);
                    let peer = format!("{dev}p");
                    let _ = Command::new("ip")
                        .args(["-n", &name, "link", "add", &dev, "address", &e.mac])
                        .args(["type", "veth", "peer", "name", &peer])
                        .status();
                    let _ = Command::new("ip")
                        .args(["-n", &name, "link", "set", &peer, "up"])
                        .status();
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    stop
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

async fn datapath_doc(addr: std::net::SocketAddr) -> vpcnet_introspection::DatapathDoc {
    let (code, body) = http_get(addr, vpcnet_introspection::DATAPATH).await;
    assert_eq!(code, 200, "{body}");
    // The body may be chunked: take the JSON object.
    let start = body.find('{').unwrap();
    let end = body.rfind('}').unwrap();
    serde_json::from_str(&body[start..=end]).unwrap()
}

/// An agent whose node datapath is `node_ns`, with pod `p1` (in `pod_ns`) added and its
/// datapath built as the plugin builds it; addresses on the primary ENI only.
async fn agent_with_a_pod(
    lab: &Lab,
    node_ns: &Netns,
    pod_ns: &Netns,
    grace: Duration,
) -> (vpcnet_agent::AgentHandle, Ipv4Addr) {
    let mut opts = lab.options();
    let deps = AgentDeps::default().with_node_network(Arc::new(NetlinkNode {
        wait: Duration::ZERO,
        netns: Some(node_ns.path()),
    }));
    // Addresses on the primary ENI only: no secondary ENI interfaces needed.
    opts.targets = Targets {
        warm_eni_target: 0,
        warm_ip_target: Some(3),
        minimum_ip_target: Some(3),
        ..Targets::default()
    };
    opts.reconcile_interval = Duration::from_millis(300);
    opts.pod_reclaim_grace = grace;
    // The reclaim checks once at start only: a pod whose veth goes stays assigned, so what
    // the audit reports about it is seen.
    opts.pod_reclaim_interval = Duration::from_secs(3600);
    opts.introspection_addr = Some("127.0.0.1:0".parse().unwrap());
    opts.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    let agent = vpcnet_agent::start(opts, deps).await.unwrap();
    let mut c = client(&lab.socket()).await;
    let r = add_retry(&mut c, "p1", Duration::from_secs(10))
        .await
        .unwrap();
    let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
    assert_eq!(r.route_table, 0, "primary ENI");
    // The plugin's ADD, as it builds the pod's datapath.
    plugin_add(node_ns, pod_ns, "p1", ip, 9001).await;
    (agent, ip)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_young_pods_lost_route_and_rule_are_repaired_within_the_grace() {
    let lab = lab("m5.large").await;
    let (node_ns, pod_ns) = (Netns::new("a"), Netns::new("a"));
    let primary = attached(&lab).into_iter().find(|e| e.0 == 0).unwrap();
    node_ns.eni_link("eth0", &primary.1);
    // The pod stays younger than the grace for the whole test.
    let (agent, ip) = agent_with_a_pod(&lab, &node_ns, &pod_ns, Duration::from_secs(3600)).await;
    let (dst, ip_s) = (format!("{ip}/32"), ip.to_string());
    eventually("the route ADD built", Duration::from_secs(5), || {
        node_ns
            .ip(&["route", "show", &dst])
            .contains(&veth_of("p1"))
    })
    .await;
    node_ns.ip(&["route", "del", &dst]);
    node_ns.ip(&["rule", "del", "priority", "512", "to", &ip_s]);
    eventually("route and rule repaired", Duration::from_secs(5), || {
        node_ns
            .ip(&["route", "show", &dst])
            .contains(&veth_of("p1"))
            && node_ns
                .ip(&["rule", "show"])
                .contains(&format!("512:\tfrom all to {ip_s} lookup main"))
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_pass_repairs_a_pods_datapath_and_the_node_and_reports_it() {
    let lab = lab("m5.large").await;
    let (node_ns, pod_ns) = (Netns::new("a"), Netns::new("a"));
    // The primary ENI's interface (the firewall's rp_filter and SNAT are set on it).
    let primary = attached(&lab).into_iter().find(|e| e.0 == 0).unwrap();
    node_ns.eni_link("eth0", &primary.1);
    let (agent, ip) = agent_with_a_pod(&lab, &node_ns, &pod_ns, Duration::from_millis(200)).await;
    let addr = agent.introspection_addr.unwrap();
    // A fresh namespace forwards nothing: the first pass turns forwarding on.
    eventually("forwarding enabled", Duration::from_secs(5), || {
        node_ns.sysctl("net.ipv4.ip_forward") == "1"
    })
    .await;
    let healthy = |d: &vpcnet_introspection::DatapathDoc| {
        d.pods
            .iter()
            .any(|p| p.ip == ip.to_string() && p.findings.is_empty())
            && d.node.is_empty()
    };
    let t0 = std::time::Instant::now();
    while !healthy(&datapath_doc(addr).await) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{:#?}",
            datapath_doc(addr).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Drift: route and rule 512 deleted, host veth MAC rewritten, forwarding off, the firewall
    // table deleted.
    let dst = format!("{ip}/32");
    let ip_s = ip.to_string();
    node_ns.ip(&["route", "del", &dst]);
    node_ns.ip(&["rule", "del", "priority", "512", "to", &ip_s]);
    node_ns.ip(&[
        "link",
        "set",
        &veth_of("p1"),
        "address",
        "02:de:ad:be:ef:01",
    ]);
    node_ns.set_sysctl("net.ipv4.ip_forward", "0");
    run(&[
        "ip",
        "netns",
        "exec",
        &node_ns.name,
        "nft",
        "delete",
        "table",
        "ip",
        "vpcnet",
    ]);
    let want_mac =
        vpcnet_datapath::names::format_mac(&vpcnet_datapath::names::veth_macs(&veth_of("p1")).0);
    eventually("everything repaired", Duration::from_secs(5), || {
        node_ns
            .ip(&["route", "show", &dst])
            .contains(&veth_of("p1"))
            && node_ns
                .ip(&["rule", "show"])
                .contains(&format!("512:\tfrom all to {ip_s} lookup main"))
            && node_ns
                .ip(&["link", "show", &veth_of("p1")])
                .contains(&want_mac)
            && node_ns.sysctl("net.ipv4.ip_forward") == "1"
            && Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &node_ns.name,
                    "nft",
                    "list",
                    "table",
                    "ip",
                    "vpcnet",
                ])
                .output()
                .unwrap()
                .status
                .success()
    })
    .await;
    // Reported: every repair counted by kind in /v1/datapath and the metrics.
    let d = datapath_doc(addr).await;
    for kind in [
        "pod_route",
        "rule_to_pod",
        "host_veth_mac",
        "ip_forward",
        "firewall_table",
    ] {
        assert!(
            d.repairs.get(kind).copied().unwrap_or(0) >= 1,
            "{kind}: {:#?}",
            d
        );
    }
    assert!(d.last_repair.is_some());
    assert_eq!(d.not_ready, None);
    let (_, metrics) = http_get(agent.metrics_addr.unwrap(), "/metrics").await;
    assert!(
        metrics.contains("vpcnet_datapath_repair_count{kind=\"pod_route\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("vpcnet_datapath_repair_count{kind=\"host_veth_mac\"} 1"));
    assert_eq!(http_get(addr, "/healthz").await.0, 200);

    // What cannot be repaired is reported: the pod's veth pair is gone.
    node_ns.ip(&["link", "del", &veth_of("p1")]);
    let t0 = std::time::Instant::now();
    loop {
        let d = datapath_doc(addr).await;
        let f = d
            .pods
            .iter()
            .find(|p| p.ip == ip_s)
            .map(|p| p.findings.clone());
        if let Some(f) = f.filter(|f| f.iter().any(|f| f.kind == "host_veth" && !f.repaired)) {
            assert_eq!(d.unrepaired, 1, "{f:?}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{d:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    agent.shutdown().await;
}

/// A node network whose audit reports what the test says (the real datapath cannot be made
/// to refuse a sysctl write inside a test namespace).
#[derive(Default)]
struct ScriptedNode {
    node: Mutex<Vec<Finding>>,
}

impl NodeNetwork for ScriptedNode {
    fn setup_eni<'a>(&'a self, _eni: &'a NodeEni) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn pod_route_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>> {
        Box::pin(async { Ok(BTreeSet::new()) })
    }
    fn link_names(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<String>>> {
        Box::pin(async { Ok(BTreeSet::new()) })
    }
    fn setup_node_firewall<'a>(
        &'a self,
        _fw: &'a NodeFirewall,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn audit<'a>(
        &'a self,
        req: &'a AuditRequest,
    ) -> BoxFuture<'a, anyhow::Result<Option<AuditReport>>> {
        Box::pin(async move {
            Ok(Some(AuditReport {
                pods: vec![vec![]; req.pods.len()],
                node: self.node.lock().unwrap().clone(),
            }))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_that_cannot_be_enabled_takes_the_node_out_of_service() {
    let lab = lab("m5.large").await;
    let node = Arc::new(ScriptedNode::default());
    let mut opts = lab.options();
    let deps = AgentDeps::default().with_node_network(node.clone());
    opts.reconcile_interval = Duration::from_millis(200);
    opts.introspection_addr = Some("127.0.0.1:0".parse().unwrap());
    let agent = vpcnet_agent::start(opts, deps).await.unwrap();
    let addr = agent.introspection_addr.unwrap();
    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    // An unrepaired route of one pod is reported but keeps the node in service.
    *node.node.lock().unwrap() = vec![Finding {
        kind: Kind::EniTable,
        object: "table 2".into(),
        problem: "table 2: missing default via 10.0.0.1 dev eth1".into(),
        unrepaired: Some("injected".into()),
    }];
    eventually("unrepaired reported", Duration::from_secs(3), || {
        agent.shared.health().datapath().unrepaired == 1
    })
    .await;
    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    *node.node.lock().unwrap() = vec![Finding {
        kind: Kind::IpForward,
        object: "net.ipv4.ip_forward".into(),
        problem: "IPv4 forwarding is disabled (net.ipv4.ip_forward = 0): pods are cut off".into(),
        unrepaired: Some("write 1 to /proc/sys/net/ipv4/ip_forward: Read-only file system".into()),
    }];
    let t0 = std::time::Instant::now();
    let body = loop {
        let (code, body) = http_get(addr, "/healthz").await;
        if code == 503 {
            break body;
        }
        assert!(t0.elapsed() < Duration::from_secs(3), "still healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        body.contains("datapath: IPv4 forwarding is disabled"),
        "{body}"
    );
    assert!(body.contains("Read-only"), "{body}");
    // Repaired later (e.g. by the operator): in service again.
    node.node.lock().unwrap().clear();
    eventually("ready again", Duration::from_secs(3), || {
        agent.shared.datapath_not_ready().is_none()
    })
    .await;
    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    agent.shutdown().await;
}

/// An agent whose pool spans a secondary ENI (interfaces in `node_ns` come from [`udev`]), and
/// no periodic pass during the test (1 h): only an event can trigger a describe.
async fn agent_with_secondary_eni(
    lab: &Lab,
    node_ns: &Netns,
) -> (vpcnet_agent::AgentHandle, String, String) {
    let mut opts = lab.options();
    let deps = AgentDeps::default().with_node_network(Arc::new(NetlinkNode {
        wait: Duration::from_secs(5),
        netns: Some(node_ns.path()),
    }));
    // More than the primary ENI holds (9 on m5.large): a secondary ENI is attached.
    opts.targets = Targets {
        warm_eni_target: 0,
        warm_ip_target: Some(12),
        minimum_ip_target: Some(12),
        ..Targets::default()
    };
    opts.reconcile_interval = Duration::from_secs(3600);
    let agent = vpcnet_agent::start(opts, deps).await.unwrap();
    eventually(
        "a secondary ENI with addresses",
        Duration::from_secs(10),
        || {
            agent
                .shared
                .pool()
                .enis()
                .any(|e| !e.info.primary && !e.ips.is_empty())
        },
    )
    .await;
    let (id, mac) = agent
        .shared
        .pool()
        .enis()
        .find(|e| !e.info.primary)
        .map(|e| (e.info.id.clone(), e.info.mac.clone()))
        .unwrap();
    (agent, id, mac)
}

fn describes(lab: &Lab) -> u64 {
    lab.emu
        .calls()
        .per_action
        .get("DescribeNetworkInterfaces")
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_eni_interface_stops_its_addresses_and_triggers_a_describe_at_once() {
    let lab = lab("m5.large").await;
    let node_ns = Netns::new("a");
    let udev = udev(&lab, &node_ns);
    let (agent, eni, _mac) = agent_with_secondary_eni(&lab, &node_ns).await;
    let dev = format!(
        "eth{}",
        agent.shared.pool().eni(&eni).unwrap().info.device_number
    );
    eventually("the ENI's interface exists", Duration::from_secs(5), || {
        node_ns.ip(&["-o", "link"]).contains(&format!("{dev}:"))
    })
    .await;
    let eni_ips: BTreeSet<Ipv4Addr> = agent
        .shared
        .pool()
        .eni(&eni)
        .unwrap()
        .ips
        .keys()
        .copied()
        .collect();
    let before = describes(&lab);
    // The interface goes (EC2 still lists the ENI as attached): nothing of it is handed out
    // from now on, and EC2 is described right away, not after the 1 h interval.
    node_ns.ip(&["link", "del", &dev]);
    eventually("the ENI is marked", Duration::from_secs(3), || {
        agent.shared.pool().interface_gone(&eni)
    })
    .await;
    eventually("a describe right away", Duration::from_secs(3), || {
        describes(&lab) > before
    })
    .await;
    let mut c = client(&lab.socket()).await;
    for i in 0..12 {
        let id = format!("g{i}");
        match add_retry(&mut c, &id, Duration::from_secs(5)).await {
            Ok(r) => {
                let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
                assert!(
                    !eni_ips.contains(&ip),
                    "{ip} of the ENI without interface handed to {id}"
                );
                assert_ne!(r.eni_id, eni);
            }
            Err(s) => panic!("ADD {id}: {s:?}"),
        }
    }
    assert!(
        agent.shared.pool().interface_gone(&eni),
        "still marked while EC2 lists it"
    );
    udev.store(true, Ordering::SeqCst);
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eni_detached_behind_the_agents_back_leaves_the_pool_without_waiting_for_the_pass() {
    let lab = lab("m5.large").await;
    let node_ns = Netns::new("a");
    let udev = udev(&lab, &node_ns);
    let (agent, eni, _mac) = agent_with_secondary_eni(&lab, &node_ns).await;
    let dev = format!(
        "eth{}",
        agent.shared.pool().eni(&eni).unwrap().info.device_number
    );
    eventually("the ENI's interface exists", Duration::from_secs(5), || {
        node_ns.ip(&["-o", "link"]).contains(&format!("{dev}:"))
    })
    .await;
    // EC2 detaches it; the kernel removes its interface.
    lab.emu.detach_behind_back(&eni).await.unwrap();
    node_ns.ip(&["link", "del", &dev]);
    eventually("the ENI left the pool", Duration::from_secs(3), || {
        agent.shared.pool().eni(&eni).is_none()
    })
    .await;
    udev.store(true, Ordering::SeqCst);
    agent.shutdown().await;
}
