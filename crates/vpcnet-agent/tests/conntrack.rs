//! Issue 29 (3b), VPC CNI #3634: an address handed to a new pod after its cooldown must not
//! inherit a deleted pod's flows from the node's connection tracking. An in-process agent
//! against the emulator, its node datapath the real `NetlinkNode` in a namespace the test
//! creates, with a client namespace and pods as namespaces; every namespace is deleted again,
//! also on failure, and conntrack is only touched inside them. Needs root.

// std's clocks (banned by the workspace clippy.toml): real kernel conntrack and UDP streams: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vpcnet_agent::AgentDeps;

use common::netns::{plugin_add, run, Netns};
use common::*;
use vpcnet_agent::node::NetlinkNode;
use vpcnet_agent::Targets;

/// The client's address and the node's side of its link (TEST-NET-1), and the stand-in
/// Service address (TEST-NET-2): none leaves the test's namespaces.
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const CLIENT_GW: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SERVICE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const PORT: u16 = 5353;

impl Netns {
    /// A UDP socket bound to `addr` inside this namespace (made on a helper thread that
    /// enters it; the test's threads never change namespace).
    fn udp(&self, addr: SocketAddr) -> UdpSocket {
        let path = self.path();
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).unwrap();
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            UdpSocket::bind(addr).unwrap()
        })
        .join()
        .unwrap()
    }
}

/// Datagrams `sock` receives within `window` (each `from` and payload).
fn received(sock: &UdpSocket, window: Duration) -> Vec<(SocketAddr, String)> {
    let deadline = std::time::Instant::now() + window;
    let mut got = Vec::new();
    let mut buf = [0u8; 128];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return got;
        }
        sock.set_read_timeout(Some(left)).unwrap();
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => got.push((from, String::from_utf8_lossy(&buf[..n]).into())),
            Err(_) => return got,
        }
    }
}

/// A client that sends one datagram to the Service every 20 ms, always from the same port
/// (one UDP stream: one conntrack entry), until dropped.
struct Stream {
    stop: Arc<AtomicBool>,
}

impl Stream {
    fn start(client_ns: &Netns) -> Stream {
        let sock = client_ns.udp(SocketAddr::from((CLIENT, 40_000)));
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !s.load(Ordering::SeqCst) {
                // Errors (an ICMP unreachable once nothing answers for the Service) are fine.
                let _ = sock.send_to(format!("seq {n}").as_bytes(), (SERVICE, PORT));
                n += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Stream { stop }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Old pod A (address X) gets a client's UDP stream through a DNAT rule standing in for a
/// Service; A is deleted; the client keeps sending while the "kube-proxy" lags (the rule
/// stays a moment, re-creating the entry during the cooldown), then the rule goes; pod B gets
/// X after the cooldown. B must receive nothing of the old stream. Before the fix, the stale
/// entry kept DNATing the stream to X, so B received it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_address_does_not_inherit_the_old_pods_udp_stream() {
    let lab = lab("m5.large").await;
    let node_ns = Netns::new("ct-node-");
    let client_ns = Netns::new("ct-cli-");
    let pod_a = Netns::new("ct-a-");
    let pod_b = Netns::new("ct-b-");

    // The node: the primary ENI's interface (by MAC) with the VPC subnet's route, so traffic
    // to an address without a pod leaves by it (as on an instance) and its entries are kept.
    let primary = lab
        .emu
        .enis()
        .into_iter()
        .find(|e| {
            e.attachment
                .as_ref()
                .is_some_and(|a| a.instance_id == lab.instance.instance_id && a.device_index == 0)
        })
        .unwrap();
    node_ns.ip(&[
        "link",
        "add",
        "eth0",
        "address",
        &primary.mac,
        "type",
        "veth",
        "peer",
        "name",
        "eth0p",
    ]);
    node_ns.ip(&["link", "set", "eth0p", "up"]);
    node_ns.ip(&["link", "set", "eth0", "up"]);
    node_ns.ip(&["route", "add", "10.0.0.0/20", "dev", "eth0"]);
    node_ns.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    // The client, on a link of its own.
    run(&[
        "ip",
        "link",
        "add",
        "ctc0",
        "netns",
        &client_ns.name,
        "type",
        "veth",
        "peer",
        "name",
        "ctn0",
        "netns",
        &node_ns.name,
    ]);
    node_ns.ip(&["addr", "add", &format!("{CLIENT_GW}/24"), "dev", "ctn0"]);
    node_ns.ip(&["link", "set", "ctn0", "up"]);
    client_ns.ip(&["addr", "add", &format!("{CLIENT}/24"), "dev", "ctc0"]);
    client_ns.ip(&["link", "set", "ctc0", "up"]);
    client_ns.ip(&["route", "add", "default", "via", &CLIENT_GW.to_string()]);

    let cooldown = Duration::from_secs(2);
    let mut opts = lab.options();
    let deps = AgentDeps::default().with_node_network(Arc::new(NetlinkNode {
        wait: Duration::ZERO,
        netns: Some(node_ns.path()),
    }));
    opts.targets = Targets {
        warm_eni_target: 0,
        warm_ip_target: Some(3),
        minimum_ip_target: Some(3),
        ..Targets::default()
    };
    opts.cooldown = cooldown;
    opts.pod_reclaim_interval = Duration::from_secs(3600);
    opts.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    let agent = vpcnet_agent::start(opts, deps).await.unwrap();
    let mut c = client(&lab.socket()).await;

    // Pod A with address X, serving UDP; the "Service" DNATs to it.
    let x: Ipv4Addr = add_retry(&mut c, "a", Duration::from_secs(10))
        .await
        .unwrap()
        .ipv4_addr
        .parse()
        .unwrap();
    plugin_add(&node_ns, &pod_a, "a", x, 1500).await;
    let sock_a = pod_a.udp(SocketAddr::from((x, PORT)));
    let rules = format!(
        "table ip svc {{\n chain pre {{\n  type nat hook prerouting priority -100;\n  ip daddr {SERVICE} udp dport {PORT} dnat to {x}\n }}\n}}\n"
    );
    let rules_file = lab.dir.path().join("svc.nft");
    std::fs::write(&rules_file, rules).unwrap();
    node_ns.exec(&["nft", "-f", rules_file.to_str().unwrap()]);
    let stream = Stream::start(&client_ns);
    let to_a = received(&sock_a, Duration::from_millis(500));
    assert!(
        to_a.iter()
            .any(|(from, _)| *from == SocketAddr::from((CLIENT, 40_000))),
        "pod A gets the client's stream through the Service: {to_a:?}"
    );

    // A is deleted: the agent releases X, the pod's namespace (and its veth) goes. The
    // client keeps sending, and the Service keeps pointing at X for a moment.
    let r = c.del_network(del_req("a")).await.unwrap().into_inner();
    assert!(r.released);
    drop(sock_a);
    drop(pod_a);
    tokio::time::sleep(Duration::from_millis(500)).await;
    node_ns.exec(&["nft", "delete", "table", "ip", "svc"]);

    // After the cooldown, pod B gets X.
    tokio::time::sleep(cooldown).await;
    let b = add_retry(&mut c, "b", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(b.ipv4_addr, x.to_string(), "B reuses X");
    plugin_add(&node_ns, &pod_b, "b", x, 1500).await;
    let sock_b = pod_b.udp(SocketAddr::from((x, PORT)));
    let to_b = received(&sock_b, Duration::from_secs(1));
    drop(stream);
    let left = node_ns.exec(&["cat", "/proc/net/nf_conntrack"]);
    assert!(
        to_b.is_empty(),
        "the new pod B received {} datagrams of the old pod's stream, e.g. {:?}; node conntrack:\n{left}",
        to_b.len(),
        to_b.first()
    );

    // The flushes were counted.
    let metrics = agent.metrics_addr.unwrap();
    let body = reqwest_less_get(metrics).await;
    let flushed: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("vpcnet_conntrack_flushed_entries "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(flushed >= 1, "vpcnet_conntrack_flushed_entries: {body}");
    agent.shutdown().await;
}

/// `GET /metrics` over plain TCP.
async fn reqwest_less_get(addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}
