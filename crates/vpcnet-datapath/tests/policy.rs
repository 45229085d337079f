//! Kernel tests of NetworkPolicy enforcement (`table inet vpcnet_policy`), with real traffic,
//! inside namespaces each test creates and deletes (needs root): a "node" namespace with
//! forwarding on, three "pod" namespaces joined to it by veth pairs shaped as vpcnet builds
//! them (host side `eni…`, pod side `eth0` with a /32, default route via 169.254.1.1 with a
//! permanent neighbour), and an "outside" namespace behind the node's `eth0`. Small TCP and
//! UDP echo servers and clients run on threads that entered those namespaces. No traffic
//! leaves them and the root namespace is never touched.

// The echo servers poll with std's sleep (real sockets, real time).
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{run, TestNetns};
use nix::sched::{setns, CloneFlags};
use vpcnet_datapath::nflog::{NflogSocket, RecvError};
use vpcnet_datapath::policy::{self, RuleCounter, POLICY_TABLE};
use vpcnet_datapath::policy_events::{EventLog, EventPrefix, Flow, PolicyEvent, Side, Verdict};
use vpcnet_policy::{
    AddrRange, Allow, Direction, PeerMatch, PeerSet, PodRules, PortMatch, Protocol, Ruleset,
};

/// How long a probe waits for a connection or an answer before calling it dropped.
const WAIT: Duration = Duration::from_millis(1000);
const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 1);
const OUTSIDE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 2);
/// A Service address the node DNATs to pod A (the hairpin test).
const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `f` on a thread that entered the network namespace at `path`.
fn in_netns<T: Send + 'static>(path: &Path, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = path.to_owned();
    std::thread::spawn(move || {
        enter(&path);
        f()
    })
    .join()
    .unwrap()
}

/// Moves the calling thread into the network namespace at `path`.
fn enter(path: &Path) {
    let fd = std::fs::File::open(path).unwrap();
    setns(&fd, CloneFlags::CLONE_NEWNET).unwrap();
}

/// A place traffic starts from or goes to.
struct Host {
    name: &'static str,
    ns: TestNetns,
    ip: Ipv4Addr,
    /// The host-side veth of a pod.
    ifname: Option<String>,
}

impl Host {
    fn path(&self) -> PathBuf {
        self.ns.path()
    }

    fn at(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(self.ip, port)
    }

    fn ifname(&self) -> &str {
        self.ifname.as_deref().unwrap()
    }
}

/// The node, its three pods and the outside host.
struct Topology {
    /// Policy event logs in the rendered table.
    events: Option<EventLog>,
    node: Host,
    a: Host,
    b: Host,
    c: Host,
    outside: Host,
}

impl Topology {
    fn new() -> Topology {
        let node = Host {
            name: "node",
            ns: TestNetns::new(),
            ip: NODE_IP,
            ifname: None,
        };
        in_ns(&node.ns, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        let outside = Host {
            name: "outside",
            ns: TestNetns::new(),
            ip: OUTSIDE_IP,
            ifname: None,
        };
        node.ns.ip(&[
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &outside.ns.name,
        ]);
        node.ns
            .ip(&["addr", "add", "192.168.0.1/24", "dev", "eth0"]);
        node.ns.ip(&["link", "set", "eth0", "up"]);
        outside
            .ns
            .ip(&["addr", "add", "192.168.0.2/24", "dev", "eth0"]);
        outside.ns.ip(&["link", "set", "eth0", "up"]);
        outside
            .ns
            .ip(&["route", "add", "10.0.0.0/24", "via", "192.168.0.1"]);
        let pod = |i: u8, name: &'static str| {
            let ns = TestNetns::new();
            let ifname = format!("eni{:011x}", 0xa1 + u32::from(i));
            let ip = Ipv4Addr::new(10, 0, 0, 11 + i);
            let host_mac = format!("02:00:00:00:01:0{i}");
            let pod_mac = format!("02:00:00:00:02:0{i}");
            let ip_s = ip.to_string();
            node.ns.ip(&[
                "link", "add", &ifname, "address", &host_mac, "type", "veth", "peer", "name",
                "eth0", "address", &pod_mac, "netns", &ns.name,
            ]);
            node.ns.ip(&["link", "set", &ifname, "up"]);
            node.ns.ip(&[
                "route",
                "add",
                &format!("{ip}/32"),
                "dev",
                &ifname,
                "scope",
                "link",
            ]);
            node.ns.ip(&[
                "neigh",
                "add",
                &ip_s,
                "lladdr",
                &pod_mac,
                "dev",
                &ifname,
                "nud",
                "permanent",
            ]);
            ns.ip(&["addr", "add", &format!("{ip}/32"), "dev", "eth0"]);
            ns.ip(&["link", "set", "eth0", "up"]);
            ns.ip(&[
                "route",
                "add",
                "169.254.1.1",
                "dev",
                "eth0",
                "scope",
                "link",
            ]);
            ns.ip(&[
                "route",
                "add",
                "default",
                "via",
                "169.254.1.1",
                "dev",
                "eth0",
            ]);
            ns.ip(&[
                "neigh",
                "add",
                "169.254.1.1",
                "lladdr",
                &host_mac,
                "dev",
                "eth0",
                "nud",
                "permanent",
            ]);
            Host {
                name,
                ns,
                ip,
                ifname: Some(ifname),
            }
        };
        let a = pod(0, "pod A");
        let b = pod(1, "pod B");
        let c = pod(2, "pod C");
        Topology {
            events: None,
            node,
            a,
            b,
            c,
            outside,
        }
    }

    fn node_path(&self) -> PathBuf {
        self.node.path()
    }

    fn apply(&self, script: &str) {
        let path = self.node_path();
        rt().block_on(policy::apply(Some(&path), script))
            .unwrap_or_else(|e| panic!("{e}\n{script}"));
    }

    fn apply_full(&self, rs: &Ruleset) {
        self.apply(&policy::render_full(rs, self.events).unwrap());
    }

    fn update(&self, old: &Ruleset, new: &Ruleset) {
        let script = policy::render_update(old, new, self.events)
            .unwrap()
            .expect("the rulesets differ");
        self.apply(&script);
    }

    fn counters(&self) -> Vec<RuleCounter> {
        rt().block_on(policy::counters(Some(&self.node_path())))
            .unwrap()
    }

    /// Packets counted by the rules of `chain` (`policy: None` = the drop).
    fn counted(&self, chain: &str, policy: Option<&str>) -> u64 {
        self.counters()
            .iter()
            .filter(|c| c.chain == chain && c.policy.as_deref() == policy)
            .map(|c| c.packets)
            .sum()
    }

    fn listing(&self) -> serde_json::Value {
        json_listing(&self.node.ns).expect("the table exists")
    }
}

/// Applies an nft script of the test's own (not vpcnet's) in `ns`.
fn nft_script(ns: &TestNetns, script: &str) {
    let mut child = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "{script}");
}

fn in_ns(ns: &TestNetns, args: &[&str]) -> String {
    let mut full = vec!["ip", "netns", "exec", &ns.name];
    full.extend_from_slice(args);
    run(&full)
}

/// `nft -j list table inet vpcnet_policy` of `ns`, or `None` without the table.
fn json_listing(ns: &TestNetns) -> Option<serde_json::Value> {
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "nft",
            "-j",
            "list",
            "table",
            "inet",
            POLICY_TABLE,
        ])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// The kernel handle of the set or chain `name` (`kind` = "set", "map" or "chain").
fn handle(listing: &serde_json::Value, kind: &str, name: &str) -> u64 {
    listing["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i.get(kind))
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {listing}"))["handle"]
        .as_u64()
        .unwrap()
}

/// Echo servers (TCP and UDP) inside one namespace, stopped on drop.
struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Servers {
    fn start(host: &Host, tcp: &[u16], udp: &[u16]) -> Servers {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for &port in tcp {
            let (ready, wait) = std::sync::mpsc::channel();
            let stop = stop.clone();
            let path = host.path();
            threads.push(std::thread::spawn(move || {
                enter(&path);
                let listener = TcpListener::bind(("0.0.0.0", port)).unwrap();
                listener.set_nonblocking(true).unwrap();
                ready.send(()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let stop = stop.clone();
                            std::thread::spawn(move || echo_tcp(conn, &stop));
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(e) => panic!("accept on {port}: {e}"),
                    }
                }
            }));
            wait.recv().unwrap();
        }
        for &port in udp {
            let (ready, wait) = std::sync::mpsc::channel();
            let stop = stop.clone();
            let path = host.path();
            threads.push(std::thread::spawn(move || {
                enter(&path);
                let sock = UdpSocket::bind(("0.0.0.0", port)).unwrap();
                sock.set_read_timeout(Some(Duration::from_millis(20)))
                    .unwrap();
                ready.send(()).unwrap();
                let mut buf = [0u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = sock.recv_from(&mut buf) {
                        let _ = sock.send_to(&buf[..n], from);
                    }
                }
            }));
            wait.recv().unwrap();
        }
        Servers { stop, threads }
    }
}

fn echo_tcp(mut conn: TcpStream, stop: &AtomicBool) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        match conn.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if conn.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum L4 {
    Tcp,
    Udp,
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Connected (TCP) and the echo came back.
    Passed,
    /// Nothing came back in time: dropped.
    TimedOut,
    /// Anything else (refused, unreachable, wrong echo): a broken test, not a verdict.
    Failed(String),
}

/// Echoes "ping" over `s`.
fn echo(s: &mut TcpStream) -> Outcome {
    s.set_read_timeout(Some(WAIT)).unwrap();
    if let Err(e) = s.write_all(b"ping") {
        return Outcome::Failed(format!("write: {e}"));
    }
    let mut buf = [0u8; 4];
    match s.read_exact(&mut buf) {
        Ok(()) if &buf == b"ping" => Outcome::Passed,
        Ok(()) => Outcome::Failed(format!("echo {buf:?}")),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Outcome::TimedOut
        }
        Err(e) => Outcome::Failed(format!("read: {e}")),
    }
}

/// A new connection (TCP) or a datagram and its answer (UDP) from `from` to `to`.
fn probe(from: &Path, l4: L4, to: SocketAddrV4) -> Outcome {
    in_netns(from, move || match l4 {
        L4::Tcp => match TcpStream::connect_timeout(&to.into(), WAIT) {
            Ok(mut s) => echo(&mut s),
            Err(e) if e.kind() == ErrorKind::TimedOut => Outcome::TimedOut,
            Err(e) => Outcome::Failed(format!("connect: {e}")),
        },
        L4::Udp => {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.connect(to).unwrap();
            s.set_read_timeout(Some(WAIT)).unwrap();
            if let Err(e) = s.send(b"ping") {
                return Outcome::Failed(format!("send: {e}"));
            }
            let mut buf = [0u8; 8];
            match s.recv(&mut buf) {
                Ok(4) if &buf[..4] == b"ping" => Outcome::Passed,
                Ok(n) => Outcome::Failed(format!("echo {:?}", &buf[..n])),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    Outcome::TimedOut
                }
                Err(e) => Outcome::Failed(format!("recv: {e}")),
            }
        }
    })
}

/// One expected verdict.
struct Expect<'a> {
    from: &'a Host,
    l4: L4,
    to: SocketAddrV4,
    to_name: &'a str,
    allowed: bool,
}

fn allowed<'a>(from: &'a Host, l4: L4, to: &'a Host, port: u16) -> Expect<'a> {
    Expect {
        from,
        l4,
        to: to.at(port),
        to_name: to.name,
        allowed: true,
    }
}

fn denied<'a>(from: &'a Host, l4: L4, to: &'a Host, port: u16) -> Expect<'a> {
    Expect {
        allowed: false,
        ..allowed(from, l4, to, port)
    }
}

/// Probes all `expects` at once (a dropped probe costs [`WAIT`]) and asserts every verdict.
fn check(what: &str, expects: &[Expect]) {
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let probes: Vec<_> = expects
            .iter()
            .map(|e| {
                let path = e.from.path();
                s.spawn(move || probe(&path, e.l4, e.to))
            })
            .collect();
        probes.into_iter().map(|p| p.join().unwrap()).collect()
    });
    let wrong: Vec<String> = expects
        .iter()
        .zip(&outcomes)
        .filter(|(e, o)| {
            let want = if e.allowed {
                Outcome::Passed
            } else {
                Outcome::TimedOut
            };
            **o != want
        })
        .map(|(e, o)| {
            format!(
                "{} → {} {:?} {}: want {}, got {o:?}",
                e.from.name,
                e.to_name,
                e.l4,
                e.to,
                if e.allowed { "allowed" } else { "dropped" }
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{what}:\n{}", wrong.join("\n"));
}

fn addr_set(ips: &[Ipv4Addr]) -> PeerSet {
    PeerSet::Addrs(
        ips.iter()
            .map(|&ip| AddrRange {
                first: ip,
                last: ip,
            })
            .collect(),
    )
}

fn rule(policy: &str, peer: PeerMatch, ports: PortMatch) -> Allow {
    Allow {
        policy: policy.into(),
        peer,
        ports,
    }
}

fn in_set(name: &str) -> PeerMatch {
    PeerMatch::Set(name.into())
}

fn ports(protocol: Protocol, first: u16, last: u16) -> PortMatch {
    PortMatch::Ports {
        protocol,
        first,
        last,
    }
}

fn pod_rules(host: &Host, ingress: Direction, egress: Direction) -> (String, PodRules) {
    (
        host.ifname().to_string(),
        PodRules {
            pod: format!("test/{}", host.name),
            ingress,
            egress,
        },
    )
}

/// Every pod of `t` open except those given.
fn ruleset(t: &Topology, sets: &[(&str, PeerSet)], pods: Vec<(String, PodRules)>) -> Ruleset {
    let mut rs = Ruleset::default();
    for (name, set) in sets {
        rs.sets.insert(name.to_string(), set.clone());
    }
    for host in [&t.a, &t.b, &t.c] {
        rs.pods.insert(
            host.ifname().to_string(),
            PodRules {
                pod: format!("test/{}", host.name),
                ingress: Direction::Open,
                egress: Direction::Open,
            },
        );
    }
    rs.pods.extend(pods);
    rs
}

#[test]
fn ingress_isolation_allows_by_peer_set_and_port() {
    let t = Topology::new();
    let _a = Servers::start(&t.a, &[8080], &[]);
    let _b = Servers::start(&t.b, &[8080, 8081, 9090], &[8080, 5353]);
    let rs = ruleset(
        &t,
        &[("p_a", addr_set(&[t.a.ip])), ("p_c", addr_set(&[t.c.ip]))],
        vec![pod_rules(
            &t.b,
            Direction::Isolated(vec![
                rule("test/web", in_set("p_a"), ports(Protocol::Tcp, 8080, 8081)),
                rule(
                    "test/dns",
                    in_set("p_c"),
                    PortMatch::Protocol(Protocol::Udp),
                ),
            ]),
            Direction::Open,
        )],
    );
    t.apply_full(&rs);
    use L4::{Tcp, Udp};
    check(
        "pod B isolated for ingress",
        &[
            allowed(&t.a, Tcp, &t.b, 8080),
            allowed(&t.a, Tcp, &t.b, 8081),
            denied(&t.a, Tcp, &t.b, 9090),
            denied(&t.a, Udp, &t.b, 5353),
            denied(&t.c, Tcp, &t.b, 8080),
            allowed(&t.c, Udp, &t.b, 5353),
            allowed(&t.c, Udp, &t.b, 8080),
            denied(&t.outside, Tcp, &t.b, 8080),
            // The node is always allowed (its traffic never crosses the forward hook).
            allowed(&t.node, Tcp, &t.b, 9090),
            // B's egress is open, A's ingress too.
            allowed(&t.b, Tcp, &t.a, 8080),
        ],
    );
    let chain = policy::ingress_chain(t.b.ifname());
    assert!(t.counted(&chain, None) > 0, "{:?}", t.counters());
    assert!(
        t.counted(&chain, Some("test/web")) >= 2,
        "{:?}",
        t.counters()
    );
    assert!(
        t.counted(&chain, Some("test/dns")) >= 2,
        "{:?}",
        t.counters()
    );

    // The outside host joins p_a (an ipBlock, as a range): an incremental update.
    let mut rs2 = rs.clone();
    rs2.sets.insert(
        "p_a".into(),
        PeerSet::Addrs(vec![
            AddrRange {
                first: t.a.ip,
                last: t.a.ip,
            },
            AddrRange {
                first: Ipv4Addr::new(192, 168, 0, 0),
                last: Ipv4Addr::new(192, 168, 0, 255),
            },
        ]),
    );
    t.update(&rs, &rs2);
    check(
        "outside host added to p_a",
        &[
            allowed(&t.outside, Tcp, &t.b, 8080),
            denied(&t.outside, Tcp, &t.b, 9090),
            allowed(&t.a, Tcp, &t.b, 8080),
            denied(&t.c, Tcp, &t.b, 8080),
        ],
    );
}

#[test]
fn egress_isolation_with_address_sets_and_named_ports() {
    let t = Topology::new();
    let _a = Servers::start(&t.a, &[8080], &[]);
    let _b = Servers::start(&t.b, &[8080, 9090], &[5353]);
    let _c = Servers::start(&t.c, &[8080], &[5353]);
    let _out = Servers::start(&t.outside, &[7000, 7001], &[]);
    let rs = ruleset(
        &t,
        &[
            (
                "n_named",
                PeerSet::AddrPorts(vec![
                    (t.b.ip, Protocol::Tcp, 8080),
                    (t.c.ip, Protocol::Udp, 5353),
                ]),
            ),
            ("p_out", addr_set(&[OUTSIDE_IP])),
        ],
        vec![pod_rules(
            &t.a,
            Direction::Open,
            Direction::Isolated(vec![
                rule(
                    "test/named",
                    PeerMatch::AddrPorts("n_named".into()),
                    PortMatch::Any,
                ),
                rule(
                    "test/out",
                    in_set("p_out"),
                    ports(Protocol::Tcp, 7000, 7000),
                ),
            ]),
        )],
    );
    t.apply_full(&rs);
    use L4::{Tcp, Udp};
    check(
        "pod A isolated for egress",
        &[
            allowed(&t.a, Tcp, &t.b, 8080),
            denied(&t.a, Tcp, &t.b, 9090),
            denied(&t.a, Udp, &t.b, 5353),
            allowed(&t.a, Udp, &t.c, 5353),
            denied(&t.a, Tcp, &t.c, 8080),
            allowed(&t.a, Tcp, &t.outside, 7000),
            denied(&t.a, Tcp, &t.outside, 7001),
            // A's ingress is open: B reaches it, and A's replies pass its egress chain.
            allowed(&t.b, Tcp, &t.a, 8080),
            allowed(&t.outside, Tcp, &t.a, 8080),
            // Others are not affected.
            allowed(&t.b, Tcp, &t.c, 8080),
        ],
    );
    let chain = policy::egress_chain(t.a.ifname());
    assert!(t.counted(&chain, None) > 0, "{:?}", t.counters());
    assert!(
        t.counted(&chain, Some("test/named")) >= 2,
        "{:?}",
        t.counters()
    );
}

#[test]
fn isolation_without_rules_denies_all_but_the_node_and_the_pod_itself() {
    let t = Topology::new();
    let _a = Servers::start(&t.a, &[8080], &[5353]);
    let _b = Servers::start(&t.b, &[8080], &[]);
    let _node = Servers::start(&t.node, &[7000], &[]);
    let _out = Servers::start(&t.outside, &[7000], &[]);
    // A Service (10.96.0.10:80) whose endpoint is pod A, as kube-proxy would make it: DNAT,
    // and SNAT of the hairpin (a pod reaching itself through its Service).
    let nat = format!(
        "table ip hairpin {{
  chain pre {{ type nat hook prerouting priority dstnat; policy accept;
    ip daddr {SERVICE_IP} tcp dport 80 dnat to {a}:8080; }}
  chain post {{ type nat hook postrouting priority srcnat; policy accept;
    ip saddr {a} ip daddr {a} snat to {NODE_IP}; }}
}}
",
        a = t.a.ip
    );
    nft_script(&t.node.ns, &nat);
    let rs = ruleset(
        &t,
        &[],
        vec![pod_rules(
            &t.a,
            Direction::Isolated(vec![]),
            Direction::Isolated(vec![]),
        )],
    );
    t.apply_full(&rs);
    use L4::{Tcp, Udp};
    check(
        "pod A isolated both ways with no rules",
        &[
            denied(&t.a, Tcp, &t.b, 8080),
            denied(&t.b, Tcp, &t.a, 8080),
            denied(&t.b, Udp, &t.a, 5353),
            denied(&t.outside, Tcp, &t.a, 8080),
            denied(&t.a, Tcp, &t.outside, 7000),
            // The node, both ways.
            allowed(&t.node, Tcp, &t.a, 8080),
            allowed(&t.node, Udp, &t.a, 5353),
            allowed(&t.a, Tcp, &t.node, 7000),
            // Itself through its Service: out of and back into the same veth.
            Expect {
                from: &t.a,
                l4: Tcp,
                to: SocketAddrV4::new(SERVICE_IP, 80),
                to_name: "its Service",
                allowed: true,
            },
            // B is open.
            allowed(&t.outside, Tcp, &t.b, 8080),
        ],
    );
}

#[test]
fn replies_of_allowed_connections_pass_new_reverse_connections_do_not() {
    let t = Topology::new();
    let _a = Servers::start(&t.a, &[8080], &[5353]);
    let _b = Servers::start(&t.b, &[8080], &[5353]);
    // A may send to B; B may send nothing (its egress isolated, no rules).
    let rs = ruleset(
        &t,
        &[("p_b", addr_set(&[t.b.ip]))],
        vec![
            pod_rules(
                &t.a,
                Direction::Open,
                Direction::Isolated(vec![rule("test/to-b", in_set("p_b"), PortMatch::Any)]),
            ),
            pod_rules(&t.b, Direction::Open, Direction::Isolated(vec![])),
        ],
    );
    t.apply_full(&rs);
    use L4::{Tcp, Udp};
    check(
        "replies versus new connections",
        &[
            allowed(&t.a, Tcp, &t.b, 8080),
            allowed(&t.a, Udp, &t.b, 5353),
            denied(&t.b, Tcp, &t.a, 8080),
            denied(&t.b, Udp, &t.a, 5353),
        ],
    );
    // The replies crossed B's egress without reaching its drop (conntrack accepted them);
    // B's own attempts were dropped there.
    let drops = t.counted(&policy::egress_chain(t.b.ifname()), None);
    assert!(drops > 0, "{:?}", t.counters());
}

#[test]
fn updates_apply_in_place_and_established_connections_survive() {
    let t = Topology::new();
    let _a = Servers::start(&t.a, &[8080], &[]);
    let _b = Servers::start(&t.b, &[8080, 9090], &[]);
    let _c = Servers::start(&t.c, &[8080, 9090], &[]);
    let _out = Servers::start(&t.outside, &[7000], &[]);
    let ingress_b =
        |rules: Vec<Allow>| pod_rules(&t.b, Direction::Isolated(rules), Direction::Open);
    let web = || rule("test/web", in_set("p_a"), ports(Protocol::Tcp, 8080, 8080));
    let rs1 = ruleset(
        &t,
        &[("p_a", addr_set(&[t.a.ip]))],
        vec![
            ingress_b(vec![web()]),
            pod_rules(
                &t.c,
                Direction::Isolated(vec![rule(
                    "test/c",
                    in_set("p_a"),
                    ports(Protocol::Tcp, 8080, 8080),
                )]),
                Direction::Open,
            ),
        ],
    );
    t.apply_full(&rs1);
    use L4::Tcp;
    check(
        "first ruleset",
        &[
            allowed(&t.a, Tcp, &t.c, 8080),
            denied(&t.c, Tcp, &t.b, 8080),
            allowed(&t.c, Tcp, &t.a, 8080),
        ],
    );
    // A long-lived connection A → B:8080.
    let to_b = t.b.at(8080);
    let mut conn = in_netns(&t.a.path(), move || {
        TcpStream::connect_timeout(&to_b.into(), WAIT).unwrap()
    });
    assert_eq!(echo(&mut conn), Outcome::Passed);
    let chain_b = policy::ingress_chain(t.b.ifname());
    let web_count = t.counted(&chain_b, Some("test/web"));
    assert!(web_count >= 1, "{:?}", t.counters());
    let before = t.listing();

    // Other pods' rules and the contents of the set B's rule names change: p_a gains the
    // outside host; C allows 9090 from p_a and 8080 from a new set p_b (B); C's egress is
    // isolated to p_b (a new chain).
    let rs2 = ruleset(
        &t,
        &[
            ("p_a", addr_set(&[t.a.ip, OUTSIDE_IP])),
            ("p_b", addr_set(&[t.b.ip])),
        ],
        vec![
            ingress_b(vec![web()]),
            pod_rules(
                &t.c,
                Direction::Isolated(vec![
                    rule("test/c", in_set("p_a"), ports(Protocol::Tcp, 9090, 9090)),
                    rule("test/c-b", in_set("p_b"), ports(Protocol::Tcp, 8080, 8080)),
                ]),
                Direction::Isolated(vec![rule("test/c-out", in_set("p_b"), PortMatch::Any)]),
            ),
        ],
    );
    t.update(&rs1, &rs2);
    // In place: B's chain and the set keep their identity, B's rule its counter (a chain
    // built again would count from 0).
    let after = t.listing();
    for (kind, name) in [
        ("chain", chain_b.as_str()),
        ("set", "p_a"),
        ("map", "ingress"),
    ] {
        assert_eq!(
            handle(&before, kind, name),
            handle(&after, kind, name),
            "{kind} {name} was replaced"
        );
    }
    assert_eq!(t.counted(&chain_b, Some("test/web")), web_count);
    assert_eq!(echo(&mut conn), Outcome::Passed, "the connection broke");
    check(
        "second ruleset",
        &[
            allowed(&t.outside, Tcp, &t.b, 8080),
            denied(&t.a, Tcp, &t.c, 8080),
            allowed(&t.a, Tcp, &t.c, 9090),
            allowed(&t.b, Tcp, &t.c, 8080),
            denied(&t.c, Tcp, &t.a, 8080),
            denied(&t.c, Tcp, &t.outside, 7000),
            // C's egress allows B, B's ingress does not allow C.
            denied(&t.c, Tcp, &t.b, 8080),
        ],
    );
    assert_eq!(echo(&mut conn), Outcome::Passed, "the connection broke");

    // B's own chain changes (flushed and refilled in the same transaction): the connection
    // it allowed stays up, the chain is the same chain.
    let rs3 = ruleset(
        &t,
        &[
            ("p_a", addr_set(&[t.a.ip, OUTSIDE_IP])),
            ("p_b", addr_set(&[t.b.ip])),
        ],
        vec![
            ingress_b(vec![
                web(),
                rule(
                    "test/web-2",
                    in_set("p_a"),
                    ports(Protocol::Tcp, 9090, 9090),
                ),
            ]),
            (t.c.ifname().to_string(), rs2.pods[t.c.ifname()].clone()),
        ],
    );
    t.update(&rs2, &rs3);
    assert_eq!(
        handle(&before, "chain", &chain_b),
        handle(&t.listing(), "chain", &chain_b)
    );
    assert_eq!(echo(&mut conn), Outcome::Passed, "the connection broke");
    check(
        "third ruleset",
        &[
            allowed(&t.a, Tcp, &t.b, 9090),
            denied(&t.c, Tcp, &t.b, 8080),
        ],
    );

    // B's isolation is lifted: its map element and chain go, C (in no set of B's) gets in.
    let mut rs4 = rs3.clone();
    rs4.pods.insert(
        t.b.ifname().to_string(),
        PodRules {
            pod: "test/pod B".into(),
            ingress: Direction::Open,
            egress: Direction::Open,
        },
    );
    t.update(&rs3, &rs4);
    let listing = t.listing().to_string();
    assert!(!listing.contains(&chain_b), "{listing}");
    assert_eq!(echo(&mut conn), Outcome::Passed, "the connection broke");
    check(
        "B open again",
        &[
            allowed(&t.c, Tcp, &t.b, 8080),
            allowed(&t.c, Tcp, &t.b, 9090),
        ],
    );

    // And the table goes: everything is open, the connection still works.
    let path = t.node_path();
    rt().block_on(policy::remove(Some(&path))).unwrap();
    assert!(json_listing(&t.node.ns).is_none(), "table still there");
    assert!(t.counters().is_empty());
    assert_eq!(echo(&mut conn), Outcome::Passed, "the connection broke");
    check(
        "no table",
        &[
            allowed(&t.a, Tcp, &t.c, 8080),
            allowed(&t.c, Tcp, &t.a, 8080),
            allowed(&t.c, Tcp, &t.outside, 7000),
        ],
    );
}

#[test]
fn remove_deletes_only_our_table_and_tolerates_its_absence() {
    let ns = TestNetns::new();
    in_ns(&ns, &["nft", "add", "table", "inet", "other"]);
    let path = ns.path();
    let rt = rt();
    // Absent: no error, no counters.
    rt.block_on(policy::remove(Some(&path))).unwrap();
    assert!(rt
        .block_on(policy::counters(Some(&path)))
        .unwrap()
        .is_empty());
    let mut rs = Ruleset::default();
    rs.pods.insert(
        "eni000000000a1".into(),
        PodRules {
            pod: "test/a".into(),
            ingress: Direction::Isolated(vec![]),
            egress: Direction::Open,
        },
    );
    let full = policy::render_full(&rs, None).unwrap();
    rt.block_on(policy::apply(Some(&path), &full)).unwrap();
    let first = json_listing(&ns).expect("table exists");
    // A full render applied again replaces the table with an equal one.
    rt.block_on(policy::apply(Some(&path), &full)).unwrap();
    assert_eq!(normalise(&first), normalise(&json_listing(&ns).unwrap()));
    let counters = rt.block_on(policy::counters(Some(&path))).unwrap();
    assert_eq!(
        counters,
        [RuleCounter {
            chain: "in_eni000000000a1".into(),
            policy: None,
            drop: true,
            packets: 0,
            bytes: 0,
        }]
    );
    rt.block_on(policy::remove(Some(&path))).unwrap();
    assert!(json_listing(&ns).is_none());
    rt.block_on(policy::remove(Some(&path))).unwrap();
    let tables = in_ns(&ns, &["nft", "list", "tables"]);
    assert!(tables.contains("table inet other"), "{tables}");
    // An update against a missing table fails, naming the table and the way out.
    let mut rs2 = rs.clone();
    rs2.pods.clear();
    let script = policy::render_update(&rs, &rs2, None).unwrap().unwrap();
    let e = rt
        .block_on(policy::apply(Some(&path), &script))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("table inet vpcnet_policy") && e.contains("resync"),
        "{e}"
    );
}

/// A table listing made comparable: no handles, counters zeroed, set elements sorted (hash
/// sets list in hash order), objects sorted by name; rules in order, per chain.
#[derive(Debug, PartialEq, Eq)]
struct Normalised {
    objects: Vec<String>,
    rules: BTreeMap<String, Vec<String>>,
}

fn normalise(listing: &serde_json::Value) -> Normalised {
    fn clean(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(o) => {
                o.remove("handle");
                for (k, v) in o.iter_mut() {
                    if k == "counter" {
                        *v = serde_json::json!({"packets": 0, "bytes": 0});
                    } else if k == "elem" {
                        if let Some(a) = v.as_array_mut() {
                            a.sort_by_key(|e| e.to_string());
                        }
                    } else {
                        clean(v);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(clean),
            _ => {}
        }
    }
    let mut objects = Vec::new();
    let mut rules: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for item in listing["nftables"].as_array().unwrap() {
        let mut item = item.clone();
        if item.get("metainfo").is_some() {
            continue;
        }
        clean(&mut item);
        if let Some(rule) = item.get("rule") {
            rules
                .entry(rule["chain"].as_str().unwrap().to_string())
                .or_default()
                .push(rule.to_string());
        } else {
            objects.push(item.to_string());
        }
    }
    objects.sort();
    Normalised { objects, rules }
}

/// A small deterministic generator (xorshift64*): the sequence is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

const SET_NAMES: [&str; 5] = ["p_s0", "p_s1", "p_s2", "p_s3", "p_s4"];
const INTERFACES: [&str; 6] = [
    "eni00000000001",
    "eni00000000002",
    "eni00000000003",
    "eni00000000004",
    "eni.x-5",
    "vlan5",
];

fn random_allow(r: &mut Rng, addrs: &[bool; 5]) -> Allow {
    let protocol = r.pick(&[Protocol::Tcp, Protocol::Udp, Protocol::Sctp]);
    let ports = match r.below(3) {
        0 => PortMatch::Any,
        1 => PortMatch::Protocol(protocol),
        _ => {
            let first = r.pick(&[53, 80, 443, 8080]);
            PortMatch::Ports {
                protocol,
                first,
                last: first + r.pick(&[0, 0, 10]),
            }
        }
    };
    let policy = format!("ns/policy-{}", r.below(3));
    if r.percent(20) {
        return rule(&policy, PeerMatch::Any, ports);
    }
    let i = r.below(5) as usize;
    if addrs[i] {
        rule(&policy, PeerMatch::Set(SET_NAMES[i].into()), ports)
    } else {
        rule(
            &policy,
            PeerMatch::AddrPorts(SET_NAMES[i].into()),
            PortMatch::Any,
        )
    }
}

fn random_direction(r: &mut Rng, addrs: &[bool; 5]) -> Direction {
    if r.percent(35) {
        return Direction::Open;
    }
    let n = r.below(4);
    Direction::Isolated((0..n).map(|_| random_allow(r, addrs)).collect())
}

fn random_set(r: &mut Rng, addrs: bool) -> PeerSet {
    let n = r.below(5);
    if addrs {
        let n = r.pick(&[0, 2, 4, 16, 16]);
        // Random ranges in 10.0.0.0/22 (overlaps are merged by the renderer) and, at times,
        // the top of the address space.
        let mut ranges: Vec<AddrRange> = (0..n)
            .map(|_| {
                let first = 0x0a00_0000 + r.below(1024) as u32;
                let last = first + r.pick(&[0, 0, 0, 0, 3, 255]);
                AddrRange {
                    first: Ipv4Addr::from(first),
                    last: Ipv4Addr::from(last),
                }
            })
            .collect();
        if r.percent(10) {
            ranges.push(AddrRange {
                first: Ipv4Addr::new(224, 0, 0, 0),
                last: Ipv4Addr::BROADCAST,
            });
        }
        PeerSet::Addrs(ranges)
    } else {
        PeerSet::AddrPorts(
            (0..n)
                .map(|_| {
                    (
                        Ipv4Addr::from(0x0a00_0000 + r.below(64) as u32),
                        r.pick(&[Protocol::Tcp, Protocol::Udp, Protocol::Sctp]),
                        r.pick(&[53, 80, 8080]),
                    )
                })
                .collect(),
        )
    }
}

/// The next ruleset of the sequence: most of `prev` kept, some pods, sets and set kinds
/// changed. Sets are exactly those the rules name (the compiler's contract).
fn evolve(r: &mut Rng, prev: &Ruleset, addrs: &mut [bool; 5]) -> Ruleset {
    for kind in addrs.iter_mut() {
        if r.percent(8) {
            *kind = !*kind;
        }
    }
    let mut next = Ruleset::default();
    for ifname in INTERFACES {
        let mut pod = match prev.pods.get(ifname) {
            Some(p) if r.percent(60) => p.clone(),
            _ if r.percent(25) => continue,
            _ => PodRules {
                pod: format!("ns/{ifname}"),
                ingress: random_direction(r, addrs),
                egress: random_direction(r, addrs),
            },
        };
        // Kept rules follow their set's kind.
        for dir in [&mut pod.ingress, &mut pod.egress] {
            if let Direction::Isolated(allows) = dir {
                for a in allows.iter_mut() {
                    let name = match &a.peer {
                        PeerMatch::Set(s) | PeerMatch::AddrPorts(s) => s.clone(),
                        PeerMatch::Any => continue,
                    };
                    let i = SET_NAMES.iter().position(|s| *s == name).unwrap();
                    if addrs[i] {
                        a.peer = PeerMatch::Set(name);
                    } else {
                        a.peer = PeerMatch::AddrPorts(name);
                        a.ports = PortMatch::Any;
                    }
                }
            }
        }
        next.pods.insert(ifname.to_string(), pod);
    }
    for (i, name) in SET_NAMES.iter().enumerate() {
        let named = next.pods.values().any(|p| {
            [&p.ingress, &p.egress].into_iter().any(|d| match d {
                Direction::Isolated(allows) => allows.iter().any(
                    |a| matches!(&a.peer, PeerMatch::Set(s) | PeerMatch::AddrPorts(s) if s == name),
                ),
                Direction::Open => false,
            })
        });
        if !named {
            continue;
        }
        let set = match prev.sets.get(*name) {
            Some(s @ PeerSet::Addrs(_)) if addrs[i] && r.percent(40) => s.clone(),
            Some(s @ PeerSet::AddrPorts(_)) if !addrs[i] && r.percent(40) => s.clone(),
            // A few elements come and go (a pod starts or stops elsewhere): the update
            // deletes and adds elements instead of refilling the set.
            Some(PeerSet::Addrs(v)) if addrs[i] && r.percent(50) => {
                let mut v = v.clone();
                v.extend(std::iter::repeat_n((), 1 + r.below(2) as usize).map(|_| {
                    let a = Ipv4Addr::from(0x0a00_0800 + r.below(1024) as u32);
                    AddrRange { first: a, last: a }
                }));
                if r.percent(50) && !v.is_empty() {
                    v.remove(r.below(v.len() as u64) as usize);
                }
                PeerSet::Addrs(v)
            }
            _ => random_set(r, addrs[i]),
        };
        next.sets.insert(name.to_string(), set);
    }
    next
}

#[test]
fn incremental_updates_converge_to_the_full_ruleset() {
    converge(None);
}

#[test]
fn incremental_updates_with_event_logs_converge_to_the_full_ruleset() {
    converge(Some(EventLog::default()));
}

fn converge(events: Option<EventLog>) {
    let incremental = TestNetns::new();
    let reference = TestNetns::new();
    let (inc, refp) = (incremental.path(), reference.path());
    let rt = rt();
    let mut r = Rng(0x5eed_2024_0b5e_55ed);
    let mut addrs = [true, true, false, true, false];
    let mut prev = Ruleset::default();
    rt.block_on(policy::apply(
        Some(&inc),
        &policy::render_full(&prev, events).unwrap(),
    ))
    .unwrap();
    // What the updates did, to show the sequence covers every kind of step.
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let ops = [
        "add set",
        "flush set",
        "delete set",
        "add chain",
        "flush chain",
        "delete chain",
        "add element",
        "delete element",
    ];
    let steps = 80;
    for step in 0..steps {
        // Every tenth step back to nothing, so pods and sets also leave all at once.
        let next = if step % 10 == 9 {
            Ruleset::default()
        } else {
            evolve(&mut r, &prev, &mut addrs)
        };
        if let Some(script) = policy::render_update(&prev, &next, events).unwrap() {
            for op in ops {
                *seen.entry(op).or_default() += script
                    .lines()
                    .filter(|l| l.starts_with(&format!("{op} ")))
                    .count();
            }
            let kind_changed = next.sets.iter().any(|(name, set)| {
                prev.sets.get(name).is_some_and(|old| {
                    matches!(old, PeerSet::Addrs(_)) != matches!(set, PeerSet::Addrs(_))
                })
            });
            if kind_changed {
                *seen.entry("set kind changed").or_default() += 1;
            }
            if script
                .lines()
                .any(|l| l.starts_with("delete element inet vpcnet_policy p_"))
            {
                *seen.entry("set elements deleted in place").or_default() += 1;
            }
            rt.block_on(policy::apply(Some(&inc), &script))
                .unwrap_or_else(|e| panic!("step {step}: {e}\n{script}"));
        } else {
            *seen.entry("no change").or_default() += 1;
        }
        let full = policy::render_full(&next, events).unwrap();
        rt.block_on(policy::apply(Some(&refp), &full))
            .unwrap_or_else(|e| panic!("step {step}: {e}\n{full}"));
        let got = normalise(&json_listing(&incremental).unwrap());
        let want = normalise(&json_listing(&reference).unwrap());
        assert_eq!(
            got, want,
            "step {step}: the updated table differs from the full one\nruleset: {next:#?}"
        );
        prev = next;
    }
    eprintln!("{steps} steps: {seen:?}");
    for op in ops
        .iter()
        .chain(&["set kind changed", "set elements deleted in place"])
    {
        assert!(
            seen.get(op).copied().unwrap_or(0) > 0,
            "no {op:?} in {steps} steps: {seen:?}"
        );
    }
}

/// Everything logged to NFLOG within `wait` after the last packet, decoded.
fn read_events(log: &mut NflogSocket, wait: Duration) -> Vec<PolicyEvent> {
    let mut events = Vec::new();
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        match log.recv() {
            Ok(packets) => events.extend(packets.into_iter().map(|p| {
                PolicyEvent {
                    prefix: EventPrefix::parse(&p.prefix)
                        .unwrap_or_else(|| panic!("prefix {:?} is not ours", p.prefix)),
                    flow: Flow::parse(&p.payload)
                        .unwrap_or_else(|| panic!("payload {:?} is not IPv4", p.payload)),
                }
            })),
            Err(RecvError::Timeout) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    events
}

fn has_event(
    events: &[PolicyEvent],
    verdict: Verdict,
    side: Side,
    pod: &Host,
    policy: Option<&str>,
    (from, to, protocol, port): (&Host, &Host, u8, u16),
) -> bool {
    events.iter().any(|e| {
        e.prefix.verdict == verdict
            && e.prefix.side == side
            && e.prefix.interface == pod.ifname()
            && e.prefix.policy.as_deref() == policy
            && e.flow.src == from.ip
            && e.flow.dst == to.ip
            && e.flow.protocol == protocol
            && e.flow.dst_port == port
    })
}

/// An expected event: verdict, side, the pod whose chain logs, the allowing policy, the flow.
type Expected<'a> = (
    Verdict,
    Side,
    &'a Host,
    Option<&'a str>,
    (&'a Host, &'a Host, u8, u16),
);

/// Asserts that each expected event is among `events`.
fn expect_events(events: &[PolicyEvent], expected: &[Expected]) {
    for &(verdict, side, pod, policy, flow) in expected {
        assert!(
            has_event(events, verdict, side, pod, policy, flow),
            "no {verdict:?} {side:?} event of {} ({policy:?}) for {} → {} proto {} port {}: {events:#?}",
            pod.ifname(),
            flow.0.ip,
            flow.1.ip,
            flow.2,
            flow.3
        );
    }
}

#[test]
fn event_logs_report_allowed_and_denied_flows_and_leave_verdicts_alone() {
    let mut t = Topology::new();
    t.events = Some(EventLog::default());
    let _b = Servers::start(&t.b, &[8080], &[5353]);
    let _a = Servers::start(&t.a, &[8080], &[]);
    let mut log = NflogSocket::open(
        Some(&t.node_path()),
        EventLog::default().group,
        Duration::from_millis(100),
    )
    .unwrap();
    let rs = ruleset(
        &t,
        &[("p_a", addr_set(&[t.a.ip]))],
        vec![pod_rules(
            &t.b,
            Direction::Isolated(vec![rule(
                "test/web",
                in_set("p_a"),
                ports(Protocol::Tcp, 8080, 8080),
            )]),
            Direction::Isolated(vec![]),
        )],
    );
    t.apply_full(&rs);
    use L4::{Tcp, Udp};
    check(
        "pod B isolated both ways, with event logs",
        &[
            allowed(&t.a, Tcp, &t.b, 8080),
            denied(&t.c, Tcp, &t.b, 8080),
            denied(&t.a, Udp, &t.b, 5353),
            denied(&t.b, Tcp, &t.a, 8080),
            allowed(&t.c, Tcp, &t.a, 8080),
        ],
    );
    let events = read_events(&mut log, Duration::from_millis(300));
    const TCP: u8 = 6;
    const UDP: u8 = 17;
    let (a, b, c) = (&t.a, &t.b, &t.c);
    expect_events(
        &events,
        &[
            (
                Verdict::Accept,
                Side::Ingress,
                b,
                Some("test/web"),
                (a, b, TCP, 8080),
            ),
            (Verdict::Deny, Side::Ingress, b, None, (c, b, TCP, 8080)),
            (Verdict::Deny, Side::Ingress, b, None, (a, b, UDP, 5353)),
            (Verdict::Deny, Side::Egress, b, None, (b, a, TCP, 8080)),
        ],
    );
    // Only B is isolated: C → A passes no pod chain and is not logged, and the accepted
    // connection is logged once (its first packet), not per packet.
    assert!(
        !events
            .iter()
            .any(|e| e.flow.dst == a.ip && e.flow.src == c.ip),
        "{events:#?}"
    );
    let accepts = events
        .iter()
        .filter(|e| e.prefix.verdict == Verdict::Accept)
        .count();
    assert_eq!(accepts, 1, "{events:#?}");
    // The counters count as without event logs.
    let chain = policy::ingress_chain(b.ifname());
    assert_eq!(t.counted(&chain, Some("test/web")), 1, "{:?}", t.counters());
    assert!(t.counted(&chain, None) >= 2, "{:?}", t.counters());

    // In place: C joins the web policy's peers, and B may now send UDP to C.
    let mut rs2 = rs.clone();
    rs2.sets.insert("p_a".into(), addr_set(&[t.a.ip, t.c.ip]));
    rs2.sets.insert("p_c".into(), addr_set(&[t.c.ip]));
    rs2.pods.get_mut(b.ifname()).unwrap().egress = Direction::Isolated(vec![rule(
        "test/to-c",
        in_set("p_c"),
        PortMatch::Protocol(Protocol::Udp),
    )]);
    let _c = Servers::start(&t.c, &[], &[5353]);
    t.update(&rs, &rs2);
    check(
        "after the update",
        &[
            allowed(&t.c, Tcp, &t.b, 8080),
            allowed(&t.b, Udp, &t.c, 5353),
            denied(&t.b, Udp, &t.a, 5353),
        ],
    );
    let events = read_events(&mut log, Duration::from_millis(300));
    expect_events(
        &events,
        &[
            (
                Verdict::Accept,
                Side::Ingress,
                b,
                Some("test/web"),
                (c, b, TCP, 8080),
            ),
            (
                Verdict::Accept,
                Side::Egress,
                b,
                Some("test/to-c"),
                (b, c, UDP, 5353),
            ),
            (Verdict::Deny, Side::Egress, b, None, (b, a, UDP, 5353)),
        ],
    );
    assert_eq!(log.take_lost(), 0);
}

#[test]
fn a_flood_of_denied_packets_is_logged_within_the_limit_and_still_dropped() {
    let mut t = Topology::new();
    t.events = Some(EventLog::default());
    let mut log = NflogSocket::open(
        Some(&t.node_path()),
        EventLog::default().group,
        Duration::from_millis(100),
    )
    .unwrap();
    let rs = ruleset(
        &t,
        &[],
        vec![pod_rules(
            &t.b,
            Direction::Isolated(vec![]),
            Direction::Open,
        )],
    );
    t.apply_full(&rs);
    // 5,000 denied UDP datagrams as fast as one thread sends them, each from a new port, so
    // each is the first packet of its flow.
    let sent = 5_000u32;
    let to = t.b.at(9);
    let started = std::time::Instant::now();
    in_netns(&t.a.path(), move || {
        for _ in 0..sent {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            let _ = s.send_to(b"x", to);
        }
    });
    let events = read_events(&mut log, Duration::from_millis(500));
    let elapsed = started.elapsed().as_secs_f64();
    let chain = policy::ingress_chain(t.b.ifname());
    let dropped = t.counted(&chain, None);
    let bound = f64::from(vpcnet_datapath::policy_events::BURST)
        + f64::from(vpcnet_datapath::policy_events::RATE_PER_SECOND) * elapsed;
    eprintln!(
        "flood: {sent} sent, {dropped} dropped, {} logged in {elapsed:.2} s (bound {bound:.0}), {} lost",
        events.len(),
        log.take_lost()
    );
    assert_eq!(dropped, u64::from(sent), "every datagram is still dropped");
    assert!(
        events.len() as f64 <= bound + 1.0,
        "{} events logged, more than the limit's {bound:.0}",
        events.len()
    );
    assert!(
        events.len() >= vpcnet_datapath::policy_events::BURST as usize,
        "the burst is logged: {}",
        events.len()
    );
}
