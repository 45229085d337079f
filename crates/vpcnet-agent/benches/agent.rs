//! Agent benchmarks (issue 3). Run with `scripts/bench-agent.sh` (release) or
//! `cargo bench -p vpcnet-agent --bench agent --profile dev`.
//!
//! The emulator runs in this process; the agent runs as its own process (the real
//! `vpcnet-agent` binary configured through the environment), so RSS and start-up are the
//! agent's alone. Scenarios:
//! 1. start-up: process start → first servable IP on a fresh m5.large (defaults) under the
//!    latency profile Describe 100 ms, Assign 200 ms, Create 300 ms, Attach 2 s, next to the
//!    EC2 latency the agent cannot avoid (one DescribeNetworkInterfaces + one
//!    AssignPrivateIpAddresses = 300 ms);
//! 2. AddNetwork + DelNetwork over the socket with a warm pool (IP_COOLDOWN_PERIOD=0 so the
//!    same addresses cycle): p50 / p99 / max;
//! 3. agent RSS with 250 assigned IPs (c5.18xlarge);
//! 4. mutating EC2 calls per pod roll (delete one, create one, every 50 ms) with the default
//!    30 s cooldown and with WARM_IP_TARGET=5 MINIMUM_IP_TARGET=10.

// std's clocks (banned by the workspace clippy.toml): a benchmark measures wall time.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use vpcnet_emu::{ActionFaults, Emulator, RunInstance};
use vpcnet_proto::cni_backend_client::CniBackendClient;
use vpcnet_proto::{AddNetworkRequest, DelNetworkRequest};

struct Node {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Cloud {
    emu: Emulator,
    server: vpcnet_emu::EmuServer,
    subnet: String,
}

async fn cloud() -> Cloud {
    let emu = Emulator::new(3);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "10.0.0.0/18".parse().unwrap(), "us-east-1a")
        .unwrap();
    let server = emu.spawn().await.unwrap();
    Cloud {
        emu,
        server,
        subnet,
    }
}

fn tmpdir() -> tempfile::TempDir {
    // /var/run is a tmpfs on nodes; /dev/shm is the closest stand-in here.
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

async fn spawn_agent(c: &Cloud, instance_type: &str, env: &[(&str, &str)]) -> (Node, Instant) {
    let inst = c
        .emu
        .run_instance(RunInstance {
            instance_type: instance_type.into(),
            subnet_id: c.subnet.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let imds = c.emu.imds_endpoint(&inst.instance_id).await.unwrap();
    let dir = tmpdir();
    let socket = dir.path().join("agent.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vpcnet-agent"));
    cmd.env_clear()
        .env("AWS_EC2_ENDPOINT", &c.server.endpoint)
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("VPCNET_AGENT_SOCKET", &socket)
        .env("VPCNET_CHECKPOINT_PATH", dir.path().join("ipam.json"))
        .env("VPCNET_CNI_CONFLIST", dir.path().join("10-vpcnet.conflist"))
        .env("AWS_VPC_K8S_CNI_LOG_FILE", "stdout")
        .env("DISABLE_INTROSPECTION", "true")
        .env("DISABLE_METRICS", "true")
        .env("VPCNET_NODE_DATAPATH", "false")
        .env(
            "RUST_LOG",
            std::env::var("BENCH_AGENT_LOG").unwrap_or_else(|_| "error".into()),
        )
        .stdout(if std::env::var_os("BENCH_AGENT_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let child = cmd.spawn().expect("spawn vpcnet-agent");
    (
        Node {
            child,
            socket,
            _dir: dir,
        },
        started,
    )
}

async fn connect(path: &Path) -> Option<CniBackendClient<Channel>> {
    let path = path.to_path_buf();
    let ch = Endpoint::try_from("http://[::]:50051")
        .ok()?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
        }))
        .await
        .ok()?;
    Some(CniBackendClient::new(ch))
}

fn add(id: &str) -> AddNetworkRequest {
    AddNetworkRequest {
        container_id: id.into(),
        if_name: "eth0".into(),
        netns: "/proc/1/ns/net".into(),
        k8s_pod_namespace: "bench".into(),
        k8s_pod_name: id.into(),
        network_name: "aws-cni".into(),
        requires_multi_nic_attachment: false,
    }
}

fn del(id: &str) -> DelNetworkRequest {
    DelNetworkRequest {
        container_id: id.into(),
        if_name: "eth0".into(),
        ..Default::default()
    }
}

/// Polls until an ADD succeeds; returns the client.
async fn first_ip(node: &Node, id: &str, within: Duration) -> CniBackendClient<Channel> {
    let deadline = Instant::now() + within;
    loop {
        assert!(
            Instant::now() < deadline,
            "agent did not serve within {within:?}"
        );
        if node.socket.exists() {
            if let Some(mut c) = connect(&node.socket).await {
                if c.add_network(add(id)).await.is_ok() {
                    return c;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn add_retry(c: &mut CniBackendClient<Channel>, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match c.add_network(add(id)).await {
            Ok(_) => return,
            Err(s) if s.code() == tonic::Code::Unavailable && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            Err(s) => panic!("ADD {id}: {s:?}"),
        }
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn startup(c: &Cloud) {
    let profile = [
        ("DescribeNetworkInterfaces", 100),
        // Subnet discovery's check of the node's subnet at start (beside the ENI describe).
        ("DescribeSubnets", 100),
        ("AssignPrivateIpAddresses", 200),
        ("CreateNetworkInterface", 300),
        ("AttachNetworkInterface", 2000),
    ];
    for (a, ms) in profile {
        c.emu
            .set_action_faults(
                a,
                Some(ActionFaults::default().latency(Duration::from_millis(ms))),
            )
            .unwrap();
    }
    let floor = Duration::from_millis(100 + 200);
    let mut runs = Vec::new();
    for i in 0..5 {
        let (node, started) = spawn_agent(c, "m5.large", &[]).await;
        let _c = first_ip(&node, &format!("s{i}"), Duration::from_secs(30)).await;
        runs.push(started.elapsed());
    }
    for (a, _) in profile {
        c.emu.set_action_faults(a, None).unwrap();
    }
    runs.sort();
    let median = pct(&runs, 0.5);
    println!("start-up to first servable IP (m5.large, defaults; Describe 100 ms, Assign 200 ms, Create 300 ms, Attach 2 s): median {median:?}, min {:?}, max {:?} over {} runs; unavoidable EC2 latency {floor:?}; overhead {:?} (goal <= 50 ms)", runs[0], runs[runs.len() - 1], runs.len(), median.saturating_sub(floor));
}

async fn add_del_latency(c: &Cloud) {
    let (node, _) = spawn_agent(c, "m5.large", &[("IP_COOLDOWN_PERIOD", "0")]).await;
    let mut cl = first_ip(&node, "warm", Duration::from_secs(30)).await;
    for i in 0..200 {
        let id = format!("w{i}");
        add_retry(&mut cl, &id).await;
        cl.del_network(del(&id)).await.unwrap();
    }
    let mut lat = Vec::new();
    for i in 0..3000 {
        let id = format!("b{i}");
        let t = Instant::now();
        cl.add_network(add(&id)).await.unwrap();
        cl.del_network(del(&id)).await.unwrap();
        lat.push(t.elapsed());
    }
    lat.sort();
    println!("AddNetwork+DelNetwork over the Unix socket, warm pool, {} pairs: p50 {:?}, p99 {:?}, max {:?}", lat.len(), pct(&lat, 0.5), pct(&lat, 0.99), lat[lat.len() - 1]);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn rss(c: &Cloud) {
    let (node, _) = spawn_agent(c, "c5.18xlarge", &[]).await;
    let mut cl = first_ip(&node, "r0", Duration::from_secs(30)).await;
    let idle = rss_kib(node.child.id());
    for i in 1..250 {
        add_retry(&mut cl, &format!("r{i}")).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "agent RSS: {} KiB with 1 assigned IP, {} KiB with 250 assigned IPs (c5.18xlarge)",
        idle,
        rss_kib(node.child.id())
    );
}

async fn rolls(c: &Cloud, label: &str, env: &[(&str, &str)]) {
    let (node, _) = spawn_agent(c, "m5.xlarge", env).await;
    let mut cl = first_ip(&node, "p0", Duration::from_secs(30)).await;
    for i in 1..10 {
        add_retry(&mut cl, &format!("p{i}")).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = c.emu.calls().mutating;
    for roll in 0..100 {
        cl.del_network(del(&format!("p{roll}"))).await.unwrap();
        add_retry(&mut cl, &format!("p{}", roll + 10)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = c.emu.calls().mutating - before;
    println!("pod rolls ({label}): 100 rolls, {calls} mutating EC2 calls = {:.2} per roll (during the rolls + 1 s)", calls as f64 / 100.0);
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = cloud().await;
        let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
        let want = |s: &str| only.as_deref().is_none_or(|o| o == s);
        if want("startup") {
            startup(&c).await;
        }
        if want("latency") {
            add_del_latency(&c).await;
        }
        if want("rss") {
            rss(&c).await;
        }
        if want("rolls") {
            rolls(&c, "defaults: WARM_ENI_TARGET=1, 30 s cooldown", &[]).await;
            rolls(
                &c,
                "WARM_IP_TARGET=5 MINIMUM_IP_TARGET=10, 30 s cooldown",
                &[("WARM_IP_TARGET", "5"), ("MINIMUM_IP_TARGET", "10")],
            )
            .await;
        }
    });
}
