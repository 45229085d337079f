//! Issue 13 chaos test: pod ADD/DEL against a real `vpcnet-agent` process and the emulator
//! while the agent is killed with SIGKILL at random points, EC2 throttles, fails and loses
//! replies (applied, answer replaced by a 500), and checkpoint writes fail (a directory
//! planted where the agent writes its temp file makes the write fail with EISDIR, even as
//! root). Invariants: no address is ever held by two pods (as the runtime sees the ADD
//! results), the agent's checkpoint matches the pods the runtime thinks are running, and after
//! scale-down nothing is held and every detached ENI is one the sweep will delete.
//!
//! Combined faults (issue 32): a quarter of the kills also delete the checkpoint and a quarter
//! corrupt it, so the restarted agent recovers from evidence only — the runtime's CNI cache,
//! which the test writes and removes as containerd's libcni does (the node datapath is off, so
//! there are no routes to go by).
//!
//! Kills land while a call is in flight, at `CHAOS_KILLS` random operations and at half of the
//! operations right after a checkpoint fault window; an agent that exits on its own (start-up
//! gave up against the faulty EC2) is restarted, as kubelet would.
//!
//! Size: `CHAOS_OPS` operations (default 150) and `CHAOS_KILLS` kills (default 4) in CI;
//! `scripts/chaos-agent.sh` runs the full size (1,000 operations, 12 kills). Seed:
//! `CHAOS_SEED`.

// std's clocks (banned by the workspace clippy.toml): real agent processes, SIGKILLed and restarted: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::fake_node::{remove_cni_cache, write_cni_cache};
use common::*;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;
use vpcnet_proto::cni_backend_client::CniBackendClient;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Agent {
    child: Child,
    log: PathBuf,
}

fn spawn_agent(lab: &Lab, front: &str, n: u32) -> Agent {
    let log = lab.dir.path().join(format!("agent-{n}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_vpcnet-agent"))
        .env_clear()
        .env("AWS_EC2_ENDPOINT", front)
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", &lab.imds)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("VPCNET_AGENT_SOCKET", lab.socket())
        .env("VPCNET_CHECKPOINT_PATH", lab.checkpoint())
        .env("AWS_VPC_K8S_CNI_LOG_FILE", "stdout")
        .env(
            "VPCNET_CNI_CONFLIST",
            lab.dir.path().join("10-vpcnet.conflist"),
        )
        .env("DISABLE_INTROSPECTION", "true")
        .env("DISABLE_METRICS", "true")
        .env("VPCNET_NODE_DATAPATH", "false")
        // As the chart runs it: the VPC CNI's checkpoint imported when the agent has none
        // (absent here), the runtime's CNI cache read at start.
        .env(
            "VPCNET_VPC_CNI_CHECKPOINT",
            lab.dir.path().join("aws-node/ipam.json"),
        )
        .env("VPCNET_CNI_CACHE_DIR", cni_cache(lab))
        .env("VPCNET_POD_RECLAIM_GRACE", "5")
        .env("VPCNET_RECONCILE_INTERVAL", "1")
        .env("IP_COOLDOWN_PERIOD", "1")
        .env("WARM_IP_TARGET", "3")
        .env("MINIMUM_IP_TARGET", "3")
        .env("VPCNET_EC2_CALL_TIMEOUT", "5")
        .env("RUST_LOG", "info")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::OpenOptions::new().append(true).open(&log).unwrap())
        .spawn()
        .expect("spawn vpcnet-agent");
    Agent { child, log }
}

impl Drop for Agent {
    /// A failing run (panic) must not leave the agent process running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The runtime's CNI cache directory (the test writes it as containerd's libcni would).
fn cni_cache(lab: &Lab) -> PathBuf {
    lab.dir.path().join("cni")
}

/// The second fault of a kill: the checkpoint lost or corrupt when the agent restarts.
#[derive(Clone, Copy, Debug)]
enum Damage {
    Lost,
    Corrupt,
}

fn damage_checkpoint(lab: &Lab, d: Damage) {
    match d {
        Damage::Lost => {
            let _ = std::fs::remove_file(lab.checkpoint());
        }
        Damage::Corrupt => std::fs::write(lab.checkpoint(), "{\"version\":1,\"assign").unwrap(),
    }
}

fn kill9(a: &mut Agent) {
    // SIGKILL: no shutdown path runs.
    let _ = a.child.kill();
    let _ = a.child.wait();
}

/// SIGKILLs `agent` `pause` into the call in flight, applies `damage` to its checkpoint and
/// starts the next agent (number `n` + 1), as kubelet would restart the DaemonSet pod.
async fn kill_mid_call(
    mut agent: Agent,
    pause: Duration,
    damage: Option<Damage>,
    lab: &Lab,
    front: &str,
    n: &mut u32,
    fig: &mut Figures,
) -> Agent {
    tokio::time::sleep(pause).await;
    kill9(&mut agent);
    fig.kills += 1;
    if let Some(d) = damage {
        damage_checkpoint(lab, d);
        *fig.damaged_checkpoints.entry(format!("{d:?}")).or_default() += 1;
    }
    *n += 1;
    spawn_agent(lab, front, *n)
}

async fn connect(path: &Path) -> Option<CniBackendClient<Channel>> {
    let path = path.to_path_buf();
    let ch = tonic::transport::Endpoint::try_from("http://[::]:50051")
        .ok()?
        .timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let p = path.clone();
            async move {
                tokio::net::UnixStream::connect(p)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .ok()?;
    Some(CniBackendClient::new(ch))
}

/// The runtime's view: pods whose ADD succeeded, and pods whose ADD or DEL ended without a
/// definitive answer (the runtime DELs them until a DEL succeeds, as kubelet does).
#[derive(Default)]
struct Runtime {
    live: BTreeMap<String, Ipv4Addr>,
    to_delete: BTreeSet<String>,
}

#[derive(Default, Debug)]
struct Figures {
    ops: u64,
    adds_ok: u64,
    adds_failed: u64,
    dels_ok: u64,
    dels_failed: u64,
    kills: u64,
    /// Agent processes that exited on their own (restarted, as kubelet would).
    exits: u64,
    invariant_checks: u64,
    checkpoint_fault_windows: u64,
    /// Kills whose restart found the checkpoint lost or corrupt, by damage.
    damaged_checkpoints: BTreeMap<String, u64>,
    add_failures: BTreeMap<String, u64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_kill9_and_ec2_faults_never_double_assign_or_leak() {
    let ops = env_u64("CHAOS_OPS", 150);
    let kills = env_u64("CHAOS_KILLS", 4);
    let seed = env_u64("CHAOS_SEED", 13);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let lab = lab("m5.large").await;
    let (front, counts) = faulty_front_lossy(lab.emu.clone(), 0.30, 0.05, 0.05, seed).await;
    let tmp_blocker = lab.dir.path().join(".ipam.json.tmp");
    let mut fig = Figures::default();
    let mut rt = Runtime::default();
    let mut n = 0;
    let mut agent = spawn_agent(&lab, &front, n);
    // Kill points spread over the run.
    let mut kill_at: BTreeSet<u64> = BTreeSet::new();
    while (kill_at.len() as u64) < kills.min(ops) {
        kill_at.insert(rng.random_range(1..ops.max(2)));
    }
    let mut client: Option<CniBackendClient<Channel>> = None;
    let started = Instant::now();
    let mut next_id = 0u64;
    let mut after_fault = false;
    for op in 0..ops {
        fig.ops += 1;
        // Kill points: the kill lands while this operation's call is in flight (after 0 to
        // 30 ms, so at random points of ADD, DEL and the agent's EC2 work). Also half of the
        // operations right after a checkpoint fault window: an address handed out without
        // being recorded would then come back as free.
        let kill_now = kill_at.contains(&op) || (after_fault && rng.random_bool(0.5));
        // Checkpoint writes fail ~5 % of the time: windows where the temp path is blocked.
        let block = rng.random_bool(0.05);
        after_fault = block;
        if block {
            fig.checkpoint_fault_windows += 1;
            let _ = std::fs::create_dir(&tmp_blocker);
        }
        if client.is_none() {
            let deadline = Instant::now() + Duration::from_secs(30);
            while client.is_none() && Instant::now() < deadline {
                // An agent that exited (start-up gave up against the faulty EC2) is restarted,
                // as kubelet restarts the container.
                if let Ok(Some(status)) = agent.child.try_wait() {
                    fig.exits += 1;
                    eprintln!(
                        "agent {n} exited ({status}); restarting it. Its log ends:\n{}",
                        log_tail(&agent.log)
                    );
                    n += 1;
                    agent = spawn_agent(&lab, &front, n);
                }
                client = connect(&lab.socket()).await;
                if client.is_none() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        let Some(c) = client.as_mut() else {
            panic!(
                "agent did not come back within 30 s; its log ends:\n{}",
                log_tail(&agent.log)
            );
        };
        let del_pending = rt.to_delete.iter().next().cloned();
        let do_add = del_pending.is_none() && (rt.live.len() < 5 || rng.random_bool(0.55));
        if do_add {
            next_id += 1;
            let id = format!("p{next_id}");
            let mut cc = c.clone();
            let req = add_req(&id);
            let call = tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(5), cc.add_network(req)).await
            });
            if kill_now {
                let pause = Duration::from_millis(rng.random_range(0..30));
                let damage = damage_at(&mut rng);
                agent = kill_mid_call(agent, pause, damage, &lab, &front, &mut n, &mut fig).await;
                client = None;
            }
            let res = call.await.unwrap();
            match res {
                Ok(Ok(r)) => {
                    let ip: Ipv4Addr = r.into_inner().ipv4_addr.parse().unwrap();
                    fig.invariant_checks += 1;
                    if let Some((other, _)) = rt.live.iter().find(|(_, x)| **x == ip) {
                        panic!("{ip} handed to {id} while {other} holds it (seed {seed})");
                    }
                    write_cni_cache(&cni_cache(&lab), &id, ip);
                    rt.live.insert(id, ip);
                    fig.adds_ok += 1;
                }
                other => {
                    let why = match other {
                        Ok(Err(s)) => format!("{:?}", s.code()),
                        _ => "timeout".to_string(),
                    };
                    *fig.add_failures.entry(why).or_default() += 1;
                    // kubelet retries a failed sandbox after a back-off; give the agent time
                    // to grow its pool (or finish starting) against the faulty EC2.
                    tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
                    // Failed or unknown: the runtime cleans up with DEL.
                    rt.to_delete.insert(id);
                    fig.adds_failed += 1;
                    client = None;
                }
            }
        } else {
            let id = del_pending.unwrap_or_else(|| {
                let k: Vec<&String> = rt.live.keys().collect();
                k[rng.random_range(0..k.len())].clone()
            });
            let mut cc = c.clone();
            let req = del_req(&id);
            let call = tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(5), cc.del_network(req)).await
            });
            if kill_now {
                let pause = Duration::from_millis(rng.random_range(0..30));
                let damage = damage_at(&mut rng);
                agent = kill_mid_call(agent, pause, damage, &lab, &front, &mut n, &mut fig).await;
                client = None;
            }
            let res = call.await.unwrap();
            match res {
                Ok(Ok(_)) => {
                    remove_cni_cache(&cni_cache(&lab), &id);
                    rt.live.remove(&id);
                    rt.to_delete.remove(&id);
                    fig.dels_ok += 1;
                }
                _ => {
                    // The pod is gone for the runtime either way; DEL is retried.
                    rt.live.remove(&id);
                    rt.to_delete.insert(id);
                    fig.dels_failed += 1;
                    client = None;
                }
            }
        }
        if block {
            let _ = std::fs::remove_dir(&tmp_blocker);
        }
    }
    let _ = std::fs::remove_dir(&tmp_blocker);
    // Settle: faults off (new front without faults), a last kill and restart, pending DELs.
    kill9(&mut agent);
    fig.kills += 1;
    let (clean, _) = faulty_front(lab.emu.clone(), 0.0, 0.0, seed).await;
    n += 1;
    agent = spawn_agent(&lab, &clean, n);
    let mut c = loop {
        if let Some(c) = connect(&lab.socket()).await {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Wait until the agent serves, then clear what the runtime still has to delete.
    eventually_async(&mut c).await;
    for id in std::mem::take(&mut rt.to_delete) {
        c.del_network(del_req(&id)).await.unwrap();
        remove_cni_cache(&cni_cache(&lab), &id);
    }
    // The agent's checkpoint lists exactly the running pods with the addresses they got.
    let cp = checkpoint(&lab);
    let held: BTreeMap<String, Ipv4Addr> = cp
        .assignments
        .iter()
        .map(|a| (a.container_id.clone(), a.ip))
        .collect();
    assert_eq!(held, rt.live, "agent and runtime disagree (seed {seed})");
    // Every held address is one EC2 lists on the instance.
    let ec2_ips = lab.ec2_ips();
    for ip in held.values() {
        assert!(
            ec2_ips.contains(ip),
            "{ip} held but not on the instance in EC2"
        );
    }
    // Scale down to zero: nothing stays held.
    for id in rt.live.keys().cloned().collect::<Vec<_>>() {
        c.del_network(del_req(&id)).await.unwrap();
        remove_cni_cache(&cni_cache(&lab), &id);
        rt.live.remove(&id);
    }
    assert!(
        checkpoint(&lab).assignments.is_empty(),
        "held after scale-down"
    );
    // Every ENI EC2 holds for the instance is either attached (the agent's) or detached with
    // our tags and a createdAt, so the leaked-ENI sweep deletes it once 5 minutes old.
    let detached: Vec<_> = lab
        .emu
        .enis()
        .into_iter()
        .filter(|e| e.attachment.is_none())
        .collect();
    for e in &detached {
        let tag = |k: &str| e.tags.iter().any(|(t, _)| t == k);
        assert!(
            e.description.starts_with("vpcnet-cni: ")
                && tag("node.k8s.amazonaws.com/instance_id")
                && tag("node.k8s.amazonaws.com/createdAt"),
            "detached ENI {} would never be swept: {e:?}",
            e.eni_id
        );
    }
    kill9(&mut agent);
    let write_failures: usize = (0..=n)
        .map(|i| {
            std::fs::read_to_string(lab.dir.path().join(format!("agent-{i}.log")))
                .unwrap_or_default()
                .matches("checkpoint write failed")
                .count()
        })
        .sum();
    println!(
        "chaos figures (seed {seed}): {fig:?}; EC2 requests {}, throttled {}, 5xx {}, lost replies {}; checkpoint writes failed {write_failures}; detached ENIs left for the sweep {}; {:.1} s",
        counts.total.load(Ordering::Relaxed),
        counts.throttled.load(Ordering::Relaxed),
        counts.server_errors.load(Ordering::Relaxed),
        counts.lost_replies.load(Ordering::Relaxed),
        detached.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Half of the kills also lose or corrupt the checkpoint (the combined faults of issue 32).
fn damage_at(rng: &mut impl Rng) -> Option<Damage> {
    match rng.random_range(0..4) {
        0 => Some(Damage::Lost),
        1 => Some(Damage::Corrupt),
        _ => None,
    }
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn checkpoint(lab: &Lab) -> vpcnet_ipam::Checkpoint {
    vpcnet_ipam::Checkpoint::from_json(&std::fs::read_to_string(lab.checkpoint()).unwrap()).unwrap()
}

/// Waits until the agent answers Status as started (it serves only once its pool is filled).
async fn eventually_async(c: &mut CniBackendClient<Channel>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = c.status(vpcnet_proto::StatusRequest {}).await {
            if !r.into_inner().message.starts_with("starting") {
                return;
            }
        }
        assert!(Instant::now() < deadline, "agent not serving after 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
