//! Network namespaces for the agent's root tests: a unique name per run and per namespace,
//! loopback up, deleted again on drop (also when the test fails).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace named `vpcnet-<tag><pid>-<n>`, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("vpcnet-{tag}{}-{n}", std::process::id());
        run(&["ip", "netns", "add", &name]);
        run(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        Netns { name }
    }

    pub fn path(&self) -> PathBuf {
        format!("/var/run/netns/{}", self.name).into()
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// `ARGS` run inside the namespace (`ip netns exec`).
    pub fn exec(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Runs `args[0]` with the rest; panics with its stderr unless it succeeds; its stdout.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The host veth of pod `pod-<id>` in namespace `default`, as the plugin names it (prefix
/// `eni`).
pub fn veth_of(id: &str) -> String {
    vpcnet_datapath::names::host_veth_name("eni", "default", &format!("pod-{id}"))
}

/// The plugin's ADD for pod `pod-<id>` in `pod_ns` on a primary-ENI address (route table 0),
/// as vpcnet-cni builds it: veth into `node_ns`, address, routes, rules, neighbour.
pub async fn plugin_add(node_ns: &Netns, pod_ns: &Netns, id: &str, ip: Ipv4Addr, mtu: u32) {
    let spec = vpcnet_datapath::pod::PodSpec {
        ip,
        host_veth: veth_of(id),
        container_ifname: "eth0".into(),
        mtu,
        route_table: 0,
        interface: 0,
    };
    let node = vpcnet_datapath::netns::connect_in(
        &vpcnet_datapath::netns::open(&node_ns.path()).unwrap(),
        &node_ns.path(),
    )
    .unwrap();
    let fd = vpcnet_datapath::netns::open(&pod_ns.path()).unwrap();
    vpcnet_datapath::pod::setup(&node, &fd, &pod_ns.path(), &spec)
        .await
        .unwrap();
}
