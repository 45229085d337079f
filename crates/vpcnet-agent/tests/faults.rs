//! Issue 13: the agent never double-assigns or leaks an address under disk, crash and cloud
//! faults. In-process agent against the emulator over HTTP, or against the in-process fake
//! cloud on tokio's paused clock (the tests that wait: reclaim grace, sweep age); the node's
//! datapath is a fake ([`FakeNode`]) so no namespace is touched.

// std's clocks (banned by the workspace clippy.toml): the real agent process: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vpcnet_agent::AgentDeps;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud};
use common::fake_node::{veth_of, FakeNode};
use common::*;
use vpcnet_agent::checkpoint_file::{CheckpointStore, FileCheckpoint, Loaded};

/// The checkpoint file, with writes that fail while `fail` is set.
struct FlakyStore {
    file: FileCheckpoint,
    fail: AtomicBool,
}

impl CheckpointStore for FlakyStore {
    fn load(&self, now_ms: u64) -> Loaded {
        self.file.load(now_ms)
    }
    fn write(&self, cp: &vpcnet_ipam::Checkpoint) -> std::io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("injected: no space left on device"));
        }
        self.file.write(cp)
    }
    fn location(&self) -> String {
        self.file.location()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_write_failure_fails_the_add_and_undoes_the_assignment() {
    let lab = lab("m5.large").await;
    let store = Arc::new(FlakyStore {
        file: FileCheckpoint {
            path: lab.checkpoint(),
        },
        fail: AtomicBool::new(false),
    });
    let opts = lab.options();
    let deps = AgentDeps::default().with_checkpoint_store(store.clone());
    let agent = vpcnet_agent::start(opts, deps).await.unwrap();
    let mut c = client(&lab.socket()).await;
    let kept = add_retry(&mut c, "kept", Duration::from_secs(10))
        .await
        .unwrap();

    store.fail.store(true, Ordering::SeqCst);
    let e = c.add_network(add_req("lost")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("checkpoint") && e.message().contains("no space left"),
        "names the checkpoint and the cause: {}",
        e.message()
    );
    assert_eq!(
        e.metadata()
            .get(vpcnet_proto::REASON_HEADER)
            .and_then(|v| v.to_str().ok()),
        Some(vpcnet_proto::REASON_CHECKPOINT_WRITE),
        "marked, so the plugin does not report an empty pool"
    );
    let key = vpcnet_ipam::PodKey::new("lost", "eth0");
    assert!(
        agent.shared.pool().assignment(&key).is_none(),
        "assignment undone"
    );
    assert_eq!(agent.shared.pool().assignments().count(), 1);

    // Writes work again: the retried ADD succeeds and is on disk.
    store.fail.store(false, Ordering::SeqCst);
    let r = add_retry(&mut c, "lost", Duration::from_secs(10))
        .await
        .unwrap();
    agent.shutdown().await;
    // After a restart both pods keep their addresses: nothing handed out is unrecorded.
    let agent = vpcnet_agent::start(lab.options(), AgentDeps::default())
        .await
        .unwrap();
    let pool = agent.shared.pool().clone();
    assert_eq!(
        pool.assignment(&key).map(|a| a.ip.to_string()),
        Some(r.ipv4_addr.clone())
    );
    assert_eq!(
        pool.assignment(&vpcnet_ipam::PodKey::new("kept", "eth0"))
            .map(|a| a.ip.to_string()),
        Some(kept.ipv4_addr.clone())
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_write_failure_fails_the_del_and_reinstates_the_address() {
    let lab = lab("m5.large").await;
    let store = Arc::new(FlakyStore {
        file: FileCheckpoint {
            path: lab.checkpoint(),
        },
        fail: AtomicBool::new(false),
    });
    let opts = lab.options();
    let deps = AgentDeps::default().with_checkpoint_store(store.clone());
    let agent = vpcnet_agent::start(opts, deps).await.unwrap();
    let mut c = client(&lab.socket()).await;
    let r = add_retry(&mut c, "p1", Duration::from_secs(10))
        .await
        .unwrap();
    let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
    let key = vpcnet_ipam::PodKey::new("p1", "eth0");

    store.fail.store(true, Ordering::SeqCst);
    let e = c.del_network(del_req("p1")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("checkpoint")
            && e.message().contains("no space left")
            && e.message().contains("not released"),
        "names the checkpoint, the cause and the outcome: {}",
        e.message()
    );
    assert_eq!(
        e.metadata()
            .get(vpcnet_proto::REASON_HEADER)
            .and_then(|v| v.to_str().ok()),
        Some(vpcnet_proto::REASON_CHECKPOINT_WRITE)
    );
    {
        let pool = agent.shared.pool();
        assert_eq!(
            pool.assignment(&key).map(|a| a.ip),
            Some(ip),
            "the address is reinstated to the pod"
        );
        assert!(
            !pool.is_cooling(ip, vpcnet_agent::clock::now_ms()),
            "a reinstated address is not cooling"
        );
    }
    // Memory and disk agree: the file still records the pod.
    let file = FileCheckpoint {
        path: lab.checkpoint(),
    };
    let on_disk = match file.load(0) {
        Loaded::Valid(cp) => cp,
        other => panic!("{other:?}"),
    };
    assert!(on_disk
        .assignments
        .iter()
        .any(|a| a.container_id == "p1" && a.ip == ip));
    // Another pod cannot get an address either while nothing can be recorded.
    let other = c.add_network(add_req("p2")).await;
    assert!(other.is_err(), "{other:?}");

    // The runtime retries the DEL once writes work: released into cooldown, and on disk.
    store.fail.store(false, Ordering::SeqCst);
    let d = c.del_network(del_req("p1")).await.unwrap().into_inner();
    assert!(d.released && d.ipv4_addr == r.ipv4_addr, "{d:?}");
    assert!(agent.shared.pool().assignment(&key).is_none());
    assert!(agent
        .shared
        .pool()
        .is_cooling(ip, vpcnet_agent::clock::now_ms()));
    agent.shutdown().await;
    let agent = vpcnet_agent::start(lab.options(), AgentDeps::default())
        .await
        .unwrap();
    assert!(agent.shared.pool().assignment(&key).is_none());
    agent.shutdown().await;
}

async fn healthz(addr: std::net::SocketAddr) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, out))
}

/// Every essential task: its end turns `/healthz` to 503 naming it within 5 s (or, for the
/// introspection server that answers `/healthz`, makes it stop answering), and `failed()`
/// (what `run` waits on to exit non-zero) names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_essential_task_makes_health_fail_within_5s() {
    for task in [
        "reconciler",
        "grpc",
        "leaked-eni-sweep",
        "pod-reclaim",
        "metrics",
        "introspection",
    ] {
        let lab = lab("m5.large").await;
        let mut opts = lab.options();
        opts.introspection_addr = Some("127.0.0.1:0".parse().unwrap());
        opts.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
        // The pod reclaim runs when the agent manages the node's datapath.
        let deps = AgentDeps::default().with_node_network(Arc::new(FakeNode::default()));
        let agent = vpcnet_agent::start(opts, deps).await.unwrap();
        let addr = agent.introspection_addr.unwrap();
        assert_eq!(healthz(addr).await.unwrap().0, 200);
        assert!(agent.abort_task(task), "{task} runs");
        let t0 = std::time::Instant::now();
        let body = loop {
            match healthz(addr).await {
                Some((503, body)) => break body,
                None if task == "introspection" => break task.to_string(),
                _ => {
                    assert!(
                        t0.elapsed() < Duration::from_secs(5),
                        "/healthz still healthy 5 s after {task} stopped"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        assert!(body.contains(task), "{task}: {body}");
        let why = tokio::time::timeout(Duration::from_secs(5), agent.failed())
            .await
            .expect("failed() resolves");
        assert!(why.contains(task), "{why}");
        agent.shutdown().await;
    }
}

/// The real binary: an essential task that ends (through the debug-build test hook
/// `VPCNET_TEST_END_TASK`) makes the process exit non-zero, with exactly one error line, which
/// names the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_essential_task_exits_the_process_non_zero_with_one_error_line() {
    for task in ["reconciler", "grpc"] {
        let lab = lab("m5.large").await;
        let out = lab
            .agent_command()
            .env(
                "VPCNET_CNI_CONFLIST",
                lab.dir.path().join("10-vpcnet.conflist"),
            )
            .env("DISABLE_INTROSPECTION", "true")
            .env("DISABLE_METRICS", "true")
            .env("VPCNET_NODE_DATAPATH", "false")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .env("VPCNET_TEST_END_TASK", task)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("the agent exits on its own")
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !out.status.success(),
            "{task}: exit {:?}\n{text}",
            out.status
        );
        // Log lines are JSON (`level`, `msg`, ...); anything else on the output (the exit
        // message on stderr) is not a log line.
        let errors: Vec<&str> = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v["level"] == "error")
            })
            .collect();
        assert_eq!(errors.len(), 1, "{task}: one error line\n{text}");
        assert!(
            errors[0].contains(&format!("essential task {task}")),
            "{}",
            errors[0]
        );
    }
}

/// A detached ENI as the agent would have left it (our description and instance tag),
/// created straight in the fake cloud's model.
fn leaked_eni(fake: &FakeCloud, created_at: Option<String>) -> String {
    let instance = fake.instance_id().to_string();
    fake.with_model(|m| {
        let primary = m.instance(&instance).unwrap().primary_eni.clone();
        let subnet_id = m.eni(&primary).unwrap().subnet_id.clone();
        let mut tags = vec![(
            "node.k8s.amazonaws.com/instance_id".to_string(),
            instance.clone(),
        )];
        if let Some(t) = created_at {
            tags.push(("node.k8s.amazonaws.com/createdAt".into(), t));
        }
        m.create_eni(vpcnet_emu::model::CreateEniRequest {
            subnet_id,
            description: format!("vpcnet-cni: {instance}"),
            tags,
            ..Default::default()
        })
        .unwrap()
    })
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[tokio::test(start_paused = true)]
async fn leaked_eni_sweep_is_periodic_and_spares_young_enis() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let now = vpcnet_agent::clock::wall_now();
    let old = leaked_eni(&fake, Some(rfc3339(now - chrono::Duration::minutes(10))));
    let young = leaked_eni(&fake, Some(rfc3339(now)));
    let untagged = leaked_eni(&fake, None);
    let mut opts = fake_options(dir.path());
    opts.leaked_eni_sweep_interval = Duration::from_secs(60);
    opts.leaked_eni_min_age = Duration::from_secs(300);
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    let exists = |id: &str| fake.with_model(|m| m.eni(id).is_some());
    eventually(
        "the old leaked ENI is deleted",
        Duration::from_secs(5),
        || !exists(&old),
    )
    .await;
    assert!(exists(&young), "a young ENI was swept");
    eventually("the untagged ENI is tagged", Duration::from_secs(5), || {
        fake.with_model(|m| {
            m.eni(&untagged)
                .is_some_and(|e| e.tags.get("node.k8s.amazonaws.com/createdAt").is_some())
        })
    })
    .await;
    // Four minutes on, both are still younger than five minutes: kept by every sweep.
    tokio::time::sleep(Duration::from_secs(240)).await;
    assert!(exists(&young) && exists(&untagged), "swept before aging");
    // Later passes of the same sweep delete both once they have aged.
    eventually(
        "young and untagged ENIs swept once aged",
        Duration::from_secs(180),
        || !exists(&young) && !exists(&untagged),
    )
    .await;
    assert!(fake.detached_enis().is_empty());
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn reclaim_needs_route_and_veth_gone_after_the_grace() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let node = Arc::new(FakeNode::default());
    let mut opts = fake_options(dir.path());
    let deps = fake_deps(&fake).with_node_network(node.clone());
    opts.pod_reclaim_grace = Duration::from_secs(60);
    opts.pod_reclaim_interval = Duration::from_secs(5);
    let agent = vpcnet_agent::start(opts, deps).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    let key = vpcnet_ipam::PodKey::new("p1", "eth0");
    // A pod whose ADD is still building its datapath (nothing on the node yet) keeps its
    // address through the grace.
    let r = add_retry(&mut c, "p1", Duration::from_secs(10))
        .await
        .unwrap();
    let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
    tokio::time::sleep(Duration::from_secs(55)).await;
    assert!(
        agent.shared.pool().assignment(&key).is_some(),
        "reclaimed inside the grace"
    );
    // Route gone but the host veth is still there: not gone.
    node.links.lock().unwrap().insert(veth_of("p1"));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        agent.shared.pool().assignment(&key).is_some(),
        "reclaimed with its veth present"
    );
    // Veth gone, route there: not gone either.
    node.links.lock().unwrap().clear();
    node.routes.lock().unwrap().insert(ip);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        agent.shared.pool().assignment(&key).is_some(),
        "reclaimed with its route present"
    );
    // Both gone: one check misses it (kept), the second consecutive miss reclaims it.
    node.routes.lock().unwrap().clear();
    tokio::time::sleep(Duration::from_millis(5_100)).await;
    eventually("address reclaimed", Duration::from_secs(6), || {
        agent.shared.pool().assignment(&key).is_none()
    })
    .await;
    assert!(agent
        .shared
        .pool()
        .is_cooling(ip, vpcnet_agent::clock::now_ms()));
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn addresses_routed_to_pods_survive_a_missing_checkpoint() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    // First life: three pods get addresses.
    let agent = vpcnet_agent::start(fake_options(dir.path()), fake_deps(&fake))
        .await
        .unwrap();
    let mut c = client(&socket).await;
    let mut running = BTreeSet::new();
    for id in ["r1", "r2", "r3"] {
        let r = add_retry(&mut c, id, Duration::from_secs(10))
            .await
            .unwrap();
        running.insert(r.ipv4_addr.parse::<Ipv4Addr>().unwrap());
    }
    agent.shutdown().await;
    // The checkpoint is lost; the pods still run (their routes are on the node).
    std::fs::remove_file(dir.path().join("ipam.json")).unwrap();
    let node = Arc::new(FakeNode::default());
    *node.routes.lock().unwrap() = running.clone();
    let mut opts = fake_options(dir.path());
    let deps = fake_deps(&fake).with_node_network(node.clone());
    opts.pod_reclaim_grace = Duration::from_secs(60);
    opts.pod_reclaim_interval = Duration::from_secs(5);
    let agent = vpcnet_agent::start(opts, deps).await.unwrap();
    let mut c = client(&socket).await;
    // Addresses the lost checkpoint cannot vouch for cool down for the grace and the cooldown
    // first; at the ENI limit the last new pods wait for them.
    for i in 0..20 {
        let id = format!("n{i}");
        let r = add_retry(&mut c, &id, Duration::from_secs(120))
            .await
            .unwrap();
        let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
        assert!(
            !running.contains(&ip),
            "{ip} of a running pod handed to {id}"
        );
        node.routes.lock().unwrap().insert(ip);
    }
    // The holds outlive the grace, the cooldown and many reclaim checks while the routes
    // exist.
    tokio::time::sleep(Duration::from_secs(300)).await;
    for ip in &running {
        let held = agent
            .shared
            .pool()
            .assignments()
            .any(|(k, a)| a.ip == *ip && k.container_id.starts_with("unknown:"));
        assert!(held, "{ip} not held");
    }
    // The pods go away: their addresses are reclaimed.
    for ip in &running {
        node.routes.lock().unwrap().remove(ip);
    }
    eventually("holds released", Duration::from_secs(15), || {
        !agent
            .shared
            .pool()
            .assignments()
            .any(|(k, _)| k.container_id.starts_with("unknown:"))
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_handshake_unknown_call_names_the_agent_version() {
    use hyper_util::rt::TokioIo;
    let lab = lab("m5.large").await;
    let agent = vpcnet_agent::start(lab.options(), AgentDeps::default())
        .await
        .unwrap();
    let path = lab.socket();
    let ch = tonic::transport::Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let p = path.clone();
            async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
        }))
        .await
        .unwrap();
    // A call from a newer plugin that this agent does not know.
    let mut g = tonic::client::Grpc::new(ch.clone());
    g.ready().await.unwrap();
    let codec =
        tonic_prost::ProstCodec::<vpcnet_proto::StatusRequest, vpcnet_proto::StatusReply>::default(
        );
    let mut req = tonic::Request::new(vpcnet_proto::StatusRequest {});
    req.metadata_mut().insert(
        vpcnet_proto::PLUGIN_VERSION_HEADER,
        tonic::metadata::MetadataValue::from_static("9.9.9"),
    );
    let e = g
        .unary(
            req,
            http::uri::PathAndQuery::from_static("/vpcnet.cni.v1.CniBackend/SomeFutureCall"),
            codec,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented);
    assert_eq!(
        e.metadata()
            .get(vpcnet_proto::AGENT_VERSION_HEADER)
            .and_then(|v| v.to_str().ok()),
        Some(vpcnet_proto::VERSION),
        "{e:?}"
    );
    // Known calls from a plugin of another version are served, with the agent's version.
    let mut c = vpcnet_proto::cni_backend_client::CniBackendClient::new(ch);
    let mut req = tonic::Request::new(vpcnet_proto::StatusRequest {});
    req.metadata_mut().insert(
        vpcnet_proto::PLUGIN_VERSION_HEADER,
        tonic::metadata::MetadataValue::from_static("0.0.1"),
    );
    let r = c.status(req).await.unwrap();
    assert_eq!(
        r.metadata()
            .get(vpcnet_proto::AGENT_VERSION_HEADER)
            .and_then(|v| v.to_str().ok()),
        Some(vpcnet_proto::VERSION)
    );
    agent.shutdown().await;
}

/// Issue 32 item 3: a listener that cannot be bound fails the start before the conflist
/// points kubelet at the agent; a start that succeeds writes it, and it stays across a restart
/// (an upgrade keeps the node Ready).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_cannot_be_bound_fails_the_start_without_writing_the_conflist() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let conflist = dir.path().join("net.d/10-vpcnet.conflist");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    for what in ["introspection", "metrics"] {
        let mut opts = fake_options(dir.path());
        opts.conflist_path = Some(conflist.clone());
        let addr = Some(busy.local_addr().unwrap());
        match what {
            "introspection" => opts.introspection_addr = addr,
            _ => opts.metrics_addr = addr,
        }
        let e = match vpcnet_agent::start(opts, fake_deps(&fake)).await {
            Ok(_) => panic!("started with {what} on a port in use"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains(&format!("cannot bind {what}")), "{e}");
        assert!(
            !conflist.exists(),
            "conflist written by a start that failed ({what})"
        );
    }
    let mut opts = fake_options(dir.path());
    opts.conflist_path = Some(conflist.clone());
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    assert!(conflist.exists());
    agent.shutdown().await;
    assert!(conflist.exists(), "the conflist must outlive a restart");
}
