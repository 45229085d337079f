//! What flushing a released address's conntrack entries costs the agent
//! ([`vpcnet_datapath::conntrack::flush`]: one dump of the namespace's whole table, then one
//! delete per matching entry), by table size. Runs in a network namespace of its own (deleted
//! again, also on failure): a veth pair, a route through a gateway with a permanent neighbour, an nftables rule that makes the namespace track
//! connections, and UDP datagrams to distinct destinations, each one an (unreplied) entry.
//! Needs root; prints `skipped` otherwise.
//!
//!   cargo bench -p vpcnet-datapath --bench conntrack            # 1,000 / 10,000 / 50,000
//!   cargo bench -p vpcnet-datapath --bench conntrack -- 200000  # table sizes to measure

// std's clocks (banned by the workspace clippy.toml): a benchmark measures wall time.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// Entries of the released address among the table (a busy pod's flows).
const MATCHING: u32 = 20;
const RELEASED: Ipv4Addr = Ipv4Addr::new(10, 10, 255, 1);

struct Netns(String);

impl Netns {
    fn new() -> Self {
        let name = format!("vpcnet-ctbench-{}", std::process::id());
        run("ip", &["netns", "add", &name]);
        Netns(name)
    }
    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.0))
    }
    fn exec(&self, program: &str, args: &[&str]) {
        let mut a = vec!["netns", "exec", &self.0, program];
        a.extend_from_slice(args);
        run("ip", &a);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sends one datagram to each of `n` other destinations and `MATCHING` to [`RELEASED`], from
/// inside the namespace (a thread that enters it).
fn fill(ns: &Netns, n: u32) {
    let path = ns.path();
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).unwrap();
        nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let sock = UdpSocket::bind("10.9.0.1:0").unwrap();
        for i in 0..n {
            let dst = Ipv4Addr::new(10, 10, 1 + (i / 60000) as u8, 2);
            let port = 1024 + (i % 60000) as u16;
            let _ = sock.send_to(b"x", SocketAddrV4::new(dst, port));
        }
        for p in 0..MATCHING {
            let _ = sock.send_to(b"x", SocketAddrV4::new(RELEASED, 5000 + p as u16));
        }
    })
    .join()
    .unwrap();
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: needs root (network namespaces)");
        return;
    }
    let sizes: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 10_000, 50_000]
    } else {
        sizes
    };
    println!("table entries | matching | deleted | flush time");
    println!("---|---|---|---");
    for n in sizes {
        let ns = Netns::new();
        ns.exec(
            "ip",
            &["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
        );
        ns.exec("ip", &["addr", "add", "10.9.0.1/16", "dev", "v0"]);
        ns.exec("ip", &["link", "set", "v0", "up"]);
        ns.exec("ip", &["link", "set", "v1", "up"]);
        // Destinations behind a gateway with a permanent neighbour: datagrams leave at once
        // (none wait for ARP, so the sender never blocks) and v1 drops them.
        ns.exec(
            "ip",
            &[
                "neigh",
                "add",
                "10.9.0.254",
                "lladdr",
                "02:00:00:00:00:01",
                "dev",
                "v0",
                "nud",
                "permanent",
            ],
        );
        ns.exec("ip", &["route", "add", "10.10.0.0/16", "via", "10.9.0.254"]);
        ns.exec(
            "nft",
            &[
                "add table ip t; add chain ip t out { type filter hook output priority 0; }; add rule ip t out ct state new counter",
            ],
        );
        fill(&ns, n);
        let ips: BTreeSet<Ipv4Addr> = [RELEASED].into();
        let t0 = Instant::now();
        let r = vpcnet_datapath::conntrack::flush(Some(&ns.path()), &ips)
            .await
            .unwrap();
        let took = t0.elapsed();
        println!(
            "{} | {MATCHING} | {} | {:.1} ms",
            n + MATCHING,
            r.deleted,
            took.as_secs_f64() * 1000.0
        );
        assert!(r.tracking, "the namespace tracks no connections");
        assert_eq!(
            r.deleted, MATCHING as u64,
            "every entry of the address deleted"
        );
    }
}
