//! Issue 32 item 1: recovery from evidence. Two faults at once — a lost or corrupt checkpoint,
//! and a running pod missing one of its traces on the node (route, rule, host veth) — and
//! still no address of a running pod goes to another pod, none is freed at once, and nothing
//! leaks. The agent runs with the options the chart gives it (VPC CNI checkpoint import on,
//! the runtime's CNI cache read), against the in-process fake cloud on a paused clock; the
//! node's datapath is a fake.

mod common;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud};
use common::fake_node::{remove_cni_cache, veth_of, write_cni_cache, FakeNode};
use common::*;
use vpcnet_agent::clock::now_ms;
use vpcnet_ipam::PodKey;

#[derive(Clone, Copy, Debug)]
enum CheckpointFault {
    Lost,
    Corrupt,
}

#[derive(Clone, Copy, Debug)]
enum MissingTrace {
    Route,
    Rule,
    Veth,
}

const GRACE: Duration = Duration::from_secs(60);

/// Options as the chart runs the agent: the VPC CNI's checkpoint imported when the agent has
/// none (its file absent here, as on a node that never ran the VPC CNI), the CNI cache read.
fn chart_options(dir: &Path) -> vpcnet_agent::AgentOptions {
    let mut o = fake_options(dir);
    o.vpc_cni_checkpoint = Some(dir.join("aws-node/ipam.json"));
    o.cni_cache_dir = Some(dir.join("cni"));
    o.pod_reclaim_grace = GRACE;
    o.pod_reclaim_interval = Duration::from_secs(5);
    o
}

/// The dependencies beside [`chart_options`]: the fake cloud and the fake node's network.
fn chart_deps(fake: &FakeCloud, node: &Arc<FakeNode>) -> vpcnet_agent::AgentDeps {
    fake_deps(fake).with_node_network(node.clone())
}

/// Every trace of a running pod on the node, as the plugin and the runtime leave them.
fn pod_on_node(dir: &Path, node: &FakeNode, id: &str, ip: Ipv4Addr) {
    node.routes.lock().unwrap().insert(ip);
    node.rules.lock().unwrap().insert(ip);
    node.links.lock().unwrap().insert(veth_of(id));
    write_cni_cache(&dir.join("cni"), id, ip);
}

/// A pod deleted as DEL and the runtime remove it.
fn pod_gone(dir: &Path, node: &FakeNode, id: &str, ip: Ipv4Addr) {
    node.routes.lock().unwrap().remove(&ip);
    node.rules.lock().unwrap().remove(&ip);
    node.links.lock().unwrap().remove(&veth_of(id));
    remove_cni_cache(&dir.join("cni"), id);
}

/// First life of the agent: pods `ids` get addresses and run.
async fn first_life(
    fake: &FakeCloud,
    dir: &Path,
    node: &Arc<FakeNode>,
    ids: &[&str],
) -> (vpcnet_agent::AgentHandle, BTreeMap<String, Ipv4Addr>) {
    let agent = vpcnet_agent::start(chart_options(dir), chart_deps(fake, node))
        .await
        .unwrap();
    let mut c = client(&dir.join("agent.sock")).await;
    let mut running = BTreeMap::new();
    for id in ids {
        let r = add_retry(&mut c, id, Duration::from_secs(10))
            .await
            .unwrap();
        let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
        pod_on_node(dir, node, id, ip);
        running.insert(id.to_string(), ip);
    }
    (agent, running)
}

fn break_checkpoint(dir: &Path, fault: CheckpointFault) {
    let path = dir.join("ipam.json");
    match fault {
        CheckpointFault::Lost => std::fs::remove_file(path).unwrap(),
        CheckpointFault::Corrupt => {
            std::fs::write(path, "{\"version\":1,\"assignments\":[{").unwrap()
        }
    }
}

/// ADDs `n` new pods `<prefix>0..`; asserts none gets an address of `running`.
async fn new_pods_avoid(
    dir: &Path,
    node: &FakeNode,
    prefix: &str,
    n: usize,
    running: &BTreeMap<String, Ipv4Addr>,
) {
    let mut c = client(&dir.join("agent.sock")).await;
    for i in 0..n {
        let id = format!("{prefix}{i}");
        let r = add_retry(&mut c, &id, Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("ADD {id}: {e}"));
        let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
        if let Some((pod, _)) = running.iter().find(|(_, r)| **r == ip) {
            panic!("{ip} of running pod {pod} handed to {id}");
        }
        pod_on_node(dir, node, &id, ip);
    }
}

fn metrics_line(agent: &vpcnet_agent::AgentHandle, series: &str) -> Option<String> {
    agent
        .shared
        .metrics()
        .encode()
        .lines()
        .find(|l| l.starts_with(series))
        .map(str::to_string)
}

async fn combined(cp: CheckpointFault, nf: MissingTrace) {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let node = Arc::new(FakeNode::default());
    let (agent, running) = first_life(&fake, dir, &node, &["p1", "p2", "p3"]).await;
    agent.shutdown().await;
    // Two faults meet: the checkpoint is gone or corrupt, and p1 misses one trace.
    let ip1 = running["p1"];
    match nf {
        MissingTrace::Route => node.routes.lock().unwrap().remove(&ip1),
        MissingTrace::Rule => node.rules.lock().unwrap().remove(&ip1),
        MissingTrace::Veth => node.links.lock().unwrap().remove(&veth_of("p1")),
    };
    break_checkpoint(dir, cp);
    let agent = vpcnet_agent::start(chart_options(dir), chart_deps(&fake, &node))
        .await
        .unwrap();
    let reason = match cp {
        CheckpointFault::Lost => "lost",
        CheckpointFault::Corrupt => "corrupt",
    };
    let line = metrics_line(
        &agent,
        &format!("vpcnet_checkpoint_recoveries{{reason=\"{reason}\"}}"),
    );
    assert!(
        line.is_some_and(|l| l.ends_with(" 1")),
        "recovery not counted"
    );
    if let CheckpointFault::Corrupt = cp {
        let aside = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("ipam.json.corrupt-")
            });
        assert!(aside, "the corrupt checkpoint was not moved aside");
    }
    // Every running pod is held under its own key (the runtime's record), so its DEL works.
    for (id, ip) in &running {
        let a = agent
            .shared
            .pool()
            .assignment(&PodKey::new(id.clone(), "eth0"))
            .cloned();
        assert_eq!(
            a.map(|a| a.ip),
            Some(*ip),
            "{id} not held ({cp:?} × {nf:?})"
        );
    }
    // Pods created right after the restart, and more after the grace, the cooldown and many
    // reclaim checks: never an address of a running pod.
    new_pods_avoid(dir, &node, "n", 8, &running).await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    new_pods_avoid(dir, &node, "m", 6, &running).await;
    for (id, ip) in &running {
        assert!(
            agent
                .shared
                .pool()
                .assignment(&PodKey::new(id.clone(), "eth0"))
                .is_some(),
            "{id} ({ip}) released while running ({cp:?} × {nf:?})"
        );
    }
    // Nothing leaks: p1's DEL releases its address into the cooldown.
    let mut c = client(&dir.join("agent.sock")).await;
    c.del_network(del_req("p1")).await.unwrap();
    pod_gone(dir, &node, "p1", ip1);
    assert!(agent.shared.pool().is_cooling(ip1, now_ms()));
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn lost_checkpoint_and_a_missing_route() {
    combined(CheckpointFault::Lost, MissingTrace::Route).await;
}

#[tokio::test(start_paused = true)]
async fn lost_checkpoint_and_a_missing_rule() {
    combined(CheckpointFault::Lost, MissingTrace::Rule).await;
}

#[tokio::test(start_paused = true)]
async fn lost_checkpoint_and_a_missing_veth() {
    combined(CheckpointFault::Lost, MissingTrace::Veth).await;
}

#[tokio::test(start_paused = true)]
async fn corrupt_checkpoint_and_a_missing_route() {
    combined(CheckpointFault::Corrupt, MissingTrace::Route).await;
}

#[tokio::test(start_paused = true)]
async fn corrupt_checkpoint_and_a_missing_rule() {
    combined(CheckpointFault::Corrupt, MissingTrace::Rule).await;
}

#[tokio::test(start_paused = true)]
async fn corrupt_checkpoint_and_a_missing_veth() {
    combined(CheckpointFault::Corrupt, MissingTrace::Veth).await;
}

/// A restart during the cooldown with the checkpoint lost: the address a deleted pod left
/// cooling is not handed out before the grace and the cooldown have passed, then it is
/// (nothing is lost either).
async fn restart_during_the_cooldown(cp: CheckpointFault) {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let node = Arc::new(FakeNode::default());
    let (agent, running) = first_life(&fake, dir, &node, &["p1", "p2", "p3"]).await;
    let ip3 = running["p3"];
    let mut c = client(&dir.join("agent.sock")).await;
    c.del_network(del_req("p3")).await.unwrap();
    pod_gone(dir, &node, "p3", ip3);
    agent.shutdown().await;
    break_checkpoint(dir, cp);
    let before = now_ms();
    let agent = vpcnet_agent::start(chart_options(dir), chart_deps(&fake, &node))
        .await
        .unwrap();
    let after = now_ms();
    let mut cooling = running.clone();
    cooling.retain(|id, _| id != "p3");
    cooling.insert("deleted p3 (cooling)".into(), ip3);
    new_pods_avoid(dir, &node, "n", 8, &cooling).await;
    assert_cools_from_start(&agent, ip3, before, after);
    agent.shutdown().await;
}

/// `ip` cools until the grace plus the cooldown after the agent's start (which happened
/// between the times `before` and `after` of the agent's clock), then is free. `now_ms` on a
/// paused clock rounds wall clock and skew apart: 5 ms of slack.
fn assert_cools_from_start(
    agent: &vpcnet_agent::AgentHandle,
    ip: Ipv4Addr,
    before: u64,
    after: u64,
) {
    let pool = agent.shared.pool();
    let hold = GRACE.as_millis() as u64 + pool.config().cooldown_ms;
    assert!(
        pool.is_cooling(ip, after + pool.config().cooldown_ms),
        "cools only for the cooldown"
    );
    assert!(
        pool.is_cooling(ip, before + hold - 5),
        "free before the grace and the cooldown passed"
    );
    assert!(
        !pool.is_cooling(ip, after + hold + 5),
        "still cooling after the grace and the cooldown"
    );
}

#[tokio::test(start_paused = true)]
async fn lost_checkpoint_during_the_cooldown() {
    restart_during_the_cooldown(CheckpointFault::Lost).await;
}

#[tokio::test(start_paused = true)]
async fn corrupt_checkpoint_during_the_cooldown() {
    restart_during_the_cooldown(CheckpointFault::Corrupt).await;
}

/// A pod whose ADD the runtime sends while the agent restarts (answered once it serves) gets
/// an address no running pod holds.
#[tokio::test(start_paused = true)]
async fn a_pod_created_during_the_restart() {
    let fake = FakeCloud::new("m5.large");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let node = Arc::new(FakeNode::default());
    let (agent, running) = first_life(&fake, &dir, &node, &["p1", "p2", "p3"]).await;
    agent.shutdown().await;
    node.routes.lock().unwrap().remove(&running["p1"]);
    break_checkpoint(&dir, CheckpointFault::Lost);
    // The runtime's ADD, retried until the agent's socket answers.
    let socket = dir.join("agent.sock");
    let late = tokio::spawn(async move {
        loop {
            if let Ok(s) = tokio::net::UnixStream::connect(&socket).await {
                drop(s);
                // As kubelet does: a sandbox whose ADD failed is retried.
                let mut c = client(&socket).await;
                loop {
                    match c.add_network(add_req("late")).await {
                        Err(s)
                            if matches!(
                                s.code(),
                                tonic::Code::Unavailable | tonic::Code::FailedPrecondition
                            ) =>
                        {
                            tokio::time::sleep(Duration::from_millis(100)).await
                        }
                        r => return r.map(|r| r.into_inner()),
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let agent = vpcnet_agent::start(chart_options(&dir), chart_deps(&fake, &node))
        .await
        .unwrap();
    let ip: Ipv4Addr = late.await.unwrap().unwrap().ipv4_addr.parse().unwrap();
    assert!(
        !running.values().any(|r| *r == ip),
        "{ip} of a running pod handed to the pod created during the restart"
    );
    agent.shutdown().await;
}

/// The in-place swap: addresses on the ENIs that the VPC CNI's checkpoint does not list (freed
/// by it just before the swap, their cooldown in its memory) cool down for the full cooldown
/// (after the grace) instead of being free at once; its pods are held under their keys.
#[tokio::test(start_paused = true)]
async fn after_the_swap_addresses_the_vpc_cni_did_not_list_cool_down() {
    let fake = FakeCloud::new("m5.large");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let node = Arc::new(FakeNode::default());
    // The ENIs and addresses the VPC CNI left (made here by a first agent).
    let (agent, running) = first_life(&fake, dir, &node, &["p1", "p2", "p3"]).await;
    agent.shutdown().await;
    std::fs::remove_file(dir.join("ipam.json")).unwrap();
    let ip3 = running["p3"];
    pod_gone(dir, &node, "p3", ip3);
    let allocations: Vec<_> = ["p1", "p2"]
        .iter()
        .map(|id| {
            serde_json::json!({
                "networkName": "aws-cni", "containerID": id, "ifName": "eth0",
                "ipv4": running[*id].to_string(), "allocationTimestamp": 1_764_586_000_000_000_000u64,
                "metadata": {"k8sPodNamespace": "default", "k8sPodName": format!("pod-{id}"), "interfacesCount": 1},
            })
        })
        .collect();
    std::fs::create_dir_all(dir.join("aws-node")).unwrap();
    std::fs::write(
        dir.join("aws-node/ipam.json"),
        serde_json::json!({"version": "vpc-cni-ipam/1", "allocations": allocations}).to_string(),
    )
    .unwrap();
    let before = now_ms();
    let agent = vpcnet_agent::start(chart_options(dir), chart_deps(&fake, &node))
        .await
        .unwrap();
    let after = now_ms();
    for id in ["p1", "p2"] {
        let a = agent
            .shared
            .pool()
            .assignment(&PodKey::new(id, "eth0"))
            .cloned();
        assert_eq!(a.map(|a| a.ip), Some(running[id]), "{id} not imported");
    }
    assert!(
        metrics_line(&agent, "vpcnet_checkpoint_recoveries").is_none(),
        "an import is no recovery"
    );
    assert_cools_from_start(&agent, ip3, before, after);
    agent.shutdown().await;
}

/// How the runtime releases the pod: its DEL, or a GC that no longer lists it.
#[derive(Clone, Copy)]
enum Release {
    Del,
    Gc,
}

/// A release (DEL or GC) that arrives while the agent starts (here: listing the node's pod
/// routes takes `listing` seconds) against a restored checkpoint that holds the pod.
/// Start-up's evidence, the runtime's CNI cache, still names the pod until the runtime has
/// seen the release succeed (here 4 s after the agent's answer), so a release served before
/// start-up ended would be undone by it.
async fn release_during_start_up(listing: u64, how: Release) -> StartUpRelease {
    let fake = FakeCloud::new("m5.large");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let node = Arc::new(FakeNode::default());
    let (agent, running) = first_life(&fake, dir, &node, &["p1"]).await;
    let ip = running["p1"];
    agent.shutdown().await;

    *node.listing_delay.lock().unwrap() = Duration::from_secs(listing);
    let t0 = tokio::time::Instant::now();
    let starting = tokio::spawn(vpcnet_agent::start(
        chart_options(dir),
        chart_deps(&fake, &node),
    ));
    // Serving (the socket is bound and answered before start-up's evidence is read).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut c = client(&dir.join("agent.sock")).await;
    let released = match how {
        Release::Del => c.del_network(del_req("p1")).await.map(|r| {
            let r = r.into_inner();
            r.released.then_some(r.ipv4_addr).into_iter().collect()
        }),
        Release::Gc => c
            .garbage_collect(vpcnet_proto::GarbageCollectRequest {
                valid_attachments: vec![],
            })
            .await
            .map(|r| r.into_inner().released),
    };
    let took = t0.elapsed();
    if released.is_ok() {
        // The plugin removes the pod's datapath at once, the runtime its cache entry later.
        node.routes.lock().unwrap().remove(&ip);
        node.rules.lock().unwrap().remove(&ip);
        node.links.lock().unwrap().remove(&veth_of("p1"));
        tokio::time::sleep(Duration::from_secs(4)).await;
        remove_cni_cache(&dir.join("cni"), "p1");
    }
    let agent = starting.await.unwrap().unwrap();
    StartUpRelease {
        released,
        took,
        ip,
        agent,
        _dir: tmp,
    }
}

/// What [`release_during_start_up`] saw: the addresses the answer released, when it came
/// (from the start), the pod's address, and the agent once started (with its files).
struct StartUpRelease {
    released: Result<Vec<String>, tonic::Status>,
    took: Duration,
    ip: Ipv4Addr,
    agent: vpcnet_agent::AgentHandle,
    _dir: tempfile::TempDir,
}

impl StartUpRelease {
    /// The address the agent's pool assigns to pod `p1` now.
    fn p1(&self) -> Option<Ipv4Addr> {
        let pool = self.agent.shared.pool();
        pool.assignment(&PodKey::new("p1", "eth0")).map(|a| a.ip)
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_while_the_agent_starts_waits_for_start_up_and_stays_done() {
    for how in [Release::Del, Release::Gc] {
        let r = release_during_start_up(3, how).await;
        let released = r.released.as_ref().expect("answered once start-up ends");
        assert_eq!(released, &vec![r.ip.to_string()]);
        assert!(
            r.took >= Duration::from_secs(3),
            "the release was served before start-up ended ({:?})",
            r.took
        );
        // Start-up read the CNI cache before the release was served: the pod is not held
        // again.
        assert_eq!(r.p1(), None, "the release was undone by start-up");
        r.agent.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_while_a_slow_start_up_runs_is_refused_with_what_to_do() {
    for (how, says) in [(Release::Del, "retry the DEL"), (Release::Gc, "next GC")] {
        let r = release_during_start_up(8, how).await;
        let e = r
            .released
            .as_ref()
            .expect_err("start-up takes longer than a release waits");
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        assert!(
            e.message().contains("the agent is starting") && e.message().contains(says),
            "{}",
            e.message()
        );
        // Refused after waiting 5 s (RELEASE_READY_WAIT) of the 8 s start-up.
        assert!(
            r.took >= Duration::from_secs(5) && r.took < Duration::from_secs(8),
            "{:?}",
            r.took
        );
        // Nothing was released: the pod keeps its address until the runtime's retry.
        assert_eq!(r.p1(), Some(r.ip));
        let mut c = client(&r.agent.socket_path).await;
        let d = c.del_network(del_req("p1")).await.unwrap().into_inner();
        assert!(d.released && d.ipv4_addr == r.ip.to_string(), "{d:?}");
        r.agent.shutdown().await;
    }
}
