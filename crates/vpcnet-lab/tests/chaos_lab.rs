//! Issue 13 item 3, under the real datapath: containers started and removed through the
//! lab node's containerd (`ctr run --cni`, which executes vpcnet-cni) while the node's
//! vpcnet-agent is killed with SIGKILL at random points of those operations and restarted.
//! Checked: no address is ever held by two running containers (each container's eth0
//! address at start); after settling, the agent's checkpoint lists exactly the running
//! containers, the agent's ENIs and addresses equal EC2's (the emulator's), and after every
//! container is removed nothing is held and no pod route, rule or host veth is left.
//!
//! Combined faults (issue 32): a quarter of the kills also delete the node's checkpoint and a
//! quarter corrupt it, and every kill deletes a running container's host route, so the
//! restarted agent recovers from evidence (the runtime's CNI cache, routes, rules) and repairs
//! the route.
//!
//! CI size: 36 container operations, 4 kills, seed 13 (`CHAOS_LAB_OPS`, `CHAOS_LAB_KILLS`,
//! `CHAOS_LAB_SEED` change it; `scripts/chaos-lab.sh` runs a bigger one). Needs root and the
//! workspace binaries; fails when not root. The lab (its namespaces) is created and removed
//! by the test, also on failure.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use vpcnet_lab::lab::Lab;
use vpcnet_lab::state::NodeRecord;

mod common;
use common::*;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Figures printed at the end (and for the note).
#[derive(Debug, Default)]
struct Figures {
    starts: u32,
    removes: u32,
    kills: u32,
    kills_during_add: u32,
    kills_during_del: u32,
    checkpoints_lost: u32,
    checkpoints_corrupt: u32,
    routes_deleted: u32,
    addresses_checked: u32,
    invariant_checks: u32,
}

#[test]
fn containers_come_and_go_while_the_agent_is_killed() {
    let ops = env_or("CHAOS_LAB_OPS", 36) as u32;
    let kills = env_or("CHAOS_LAB_KILLS", 4) as u32;
    let seed = env_or("CHAOS_LAB_SEED", 13);
    with_lab(
        "chaoslab",
        |o| {
            // Containers removed while the agent is down are reclaimed (route and veth gone,
            // two misses 5 s apart) soon after the shortest grace.
            o.agent_env
                .push(("VPCNET_POD_RECLAIM_GRACE".into(), "5".into()));
        },
        |lab| chaos(lab, ops, kills, seed),
    );
}

fn chaos(lab: &Lab, ops: u32, kills: u32, seed: u64) {
    let t0 = Instant::now();
    let node = node(lab);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut running: BTreeMap<String, Ipv4Addr> = BTreeMap::new();
    let mut fig = Figures::default();
    let mut next = 0u32;
    for op in 0..ops {
        let left = ops - op;
        let kill = fig.kills < kills && rng.random_range(0..left) < kills - fig.kills;
        let start = running.len() < 2 || (running.len() < 12 && rng.random_bool(0.55));
        let id = if start {
            next += 1;
            format!("k{next}")
        } else {
            let i = rng.random_range(0..running.len());
            running.keys().nth(i).unwrap().clone()
        };
        let delay = Duration::from_millis(rng.random_range(0..600));
        // The second fault of a kill (issue 32): the checkpoint lost or corrupt at the
        // restart, and a running container's host route deleted.
        let damage = if kill { rng.random_range(0..4) } else { 3 };
        let unrouted = (kill && !running.is_empty()).then(|| {
            *running
                .values()
                .nth(rng.random_range(0..running.len()))
                .unwrap()
        });
        let result = std::thread::scope(|s| {
            let worker = s.spawn(|| {
                if start {
                    lab.containers()
                        .run("n1", std::slice::from_ref(&id))
                        .map(|mut v| Some(v.remove(0).ip))
                } else {
                    lab.containers().remove(&id).map(|()| None)
                }
            });
            if kill {
                std::thread::sleep(delay);
                assert!(lab.node("n1").kill_agent().unwrap(), "no agent to kill");
                let checkpoint = node.checkpoint_path();
                let what = match damage {
                    0 => {
                        let _ = std::fs::remove_file(&checkpoint);
                        "checkpoint lost"
                    }
                    1 => {
                        std::fs::write(&checkpoint, "{\"version\":1,\"assign").unwrap();
                        "checkpoint corrupt"
                    }
                    _ => "checkpoint intact",
                };
                if let Some(ip) = unrouted {
                    let _ = std::process::Command::new("ip")
                        .args(["-n", &node.netns, "route", "del", &format!("{ip}/32")])
                        .status();
                }
                eprintln!(
                    "op {op}: SIGKILL {delay:?} into the {} of {id}; {what}; route to {unrouted:?} deleted",
                    if start { "start" } else { "removal" }
                );
                lab.node("n1")
                    .start_agent()
                    .expect("agent restarts after SIGKILL");
            }
            worker.join().unwrap()
        });
        if kill {
            fig.kills += 1;
            match damage {
                0 => fig.checkpoints_lost += 1,
                1 => fig.checkpoints_corrupt += 1,
                _ => {}
            }
            fig.routes_deleted += u32::from(unrouted.is_some());
            if start {
                fig.kills_during_add += 1;
            } else {
                fig.kills_during_del += 1;
            }
        }
        match result {
            Ok(Some(ip)) => {
                fig.starts += 1;
                fig.addresses_checked += 1;
                if let Some((other, _)) = running.iter().find(|(_, a)| **a == ip) {
                    panic!("{ip} handed to {id} while {other} holds it");
                }
                running.insert(id, ip);
            }
            Ok(None) => {
                fig.removes += 1;
                running.remove(&id);
            }
            Err(e) => panic!("op {op} on {id}: {e:#}"),
        }
    }
    assert_eq!(fig.kills, kills, "every planned kill happened");

    // Settled with containers running: runtime, checkpoint, agent and EC2 agree.
    let live: BTreeMap<String, Ipv4Addr> = lab
        .containers()
        .list()
        .unwrap()
        .into_iter()
        .map(|c| (c.id, c.ip))
        .collect();
    assert_eq!(
        live, running,
        "the runtime's containers are the ones started"
    );
    let ips: BTreeSet<Ipv4Addr> = running.values().copied().collect();
    assert_eq!(ips.len(), running.len(), "distinct addresses");
    settle(lab, &node, &running, &mut fig);
    // Deleted routes of running containers are repaired by the audit (whatever the age).
    for (id, ip) in &running {
        wait_until(
            &format!("{id} ({ip}): host route repaired"),
            Duration::from_secs(90),
            || host_veth(&node, *ip).is_some(),
        );
    }

    // Remove everything: nothing held, nothing left on the node.
    let ids: Vec<String> = running.keys().cloned().collect();
    for id in ids {
        lab.containers().remove(&id).unwrap();
        fig.removes += 1;
        running.remove(&id);
    }
    settle(lab, &node, &running, &mut fig);
    let routes = ipn(&node, &["route", "show"]);
    assert!(
        !routes.lines().any(|l| l.contains(" dev eni")),
        "pod routes left: {routes}"
    );
    let rules = ipn(&node, &["rule", "show"]);
    assert!(
        !rules
            .lines()
            .any(|l| l.starts_with("512:") || l.starts_with("1536:")),
        "pod rules left: {rules}"
    );
    wait_until("host veths gone", Duration::from_secs(10), || {
        !ipn(&node, &["-o", "link", "show"])
            .split_whitespace()
            .any(|w| w.starts_with("eni") && w.contains('@'))
    });
    fig.invariant_checks += 3;
    eprintln!(
        "chaos lab combined faults: {} checkpoints lost, {} corrupt, {} routes of running containers deleted",
        fig.checkpoints_lost, fig.checkpoints_corrupt, fig.routes_deleted
    );
    eprintln!(
        "chaos lab (seed {seed}): {} container operations ({} starts, {} removals), {} SIGKILLs \
         ({} during a start, {} during a removal), {} start addresses checked, {} invariant \
         checks, all held; {:.1} s",
        fig.starts + fig.removes,
        fig.starts,
        fig.removes,
        fig.kills,
        fig.kills_during_add,
        fig.kills_during_del,
        fig.addresses_checked,
        fig.invariant_checks,
        t0.elapsed().as_secs_f64()
    );
}

/// Waits (60 s) until the checkpoint lists exactly `running` (each address under its
/// container's CNI ID, `<ctr namespace>-<id>`, nothing held for unknown pods) and the agent's
/// ENIs and addresses equal EC2's for the node.
fn settle(lab: &Lab, node: &NodeRecord, running: &BTreeMap<String, Ipv4Addr>, fig: &mut Figures) {
    let want: BTreeMap<Ipv4Addr, String> = running
        .iter()
        .map(|(id, ip)| (*ip, format!("-{id}")))
        .collect();
    let mut last = String::new();
    let t0 = Instant::now();
    loop {
        let problem = check_once(lab, node, &want);
        match problem {
            None => break,
            Some(p) => {
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "not settled after 60 s: {p}"
                );
                if p != last {
                    eprintln!("settling: {p}");
                    last = p;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
    // checkpoint = runtime, agent = EC2, every address on an ENI of the node
    fig.invariant_checks += 3;
}

/// The first disagreement, in words.
fn check_once(lab: &Lab, node: &NodeRecord, want: &BTreeMap<Ipv4Addr, String>) -> Option<String> {
    let cp = checkpoint(node);
    let held: BTreeMap<Ipv4Addr, String> = cp
        .assignments
        .iter()
        .map(|a| (a.ip, a.container_id.clone()))
        .collect();
    if held.keys().ne(want.keys()) {
        return Some(format!(
            "checkpoint holds {:?}, running containers have {:?}",
            held,
            want.keys().collect::<Vec<_>>()
        ));
    }
    for (ip, suffix) in want {
        if !held[ip].ends_with(suffix.as_str()) {
            return Some(format!("{ip} held by {}, runs in {suffix}", held[ip]));
        }
    }
    let (code, body) = match lab.node("n1").agent_get(vpcnet_introspection::ENIS) {
        Ok(r) => r,
        Err(e) => return Some(format!("introspection: {e:#}")),
    };
    if code != 200 {
        return Some(format!("introspection answered {code}"));
    }
    let doc: vpcnet_introspection::EnisDoc = serde_json::from_str(&body).unwrap();
    let agent: BTreeMap<String, BTreeSet<Ipv4Addr>> = doc
        .enis
        .iter()
        .map(|e| {
            let ips = e
                .addresses
                .iter()
                .map(|a| a.ip.parse().unwrap())
                .filter(|ip: &Ipv4Addr| ip.to_string() != e.primary_ip)
                .collect();
            (e.id.clone(), ips)
        })
        .collect();
    let ec2: BTreeMap<String, BTreeSet<Ipv4Addr>> = describe_node_enis(lab, node)
        .into_iter()
        .map(|e| (e.eni_id, e.secondary_ips.into_iter().collect()))
        .collect();
    if agent != ec2 {
        return Some(format!("agent's ENIs {agent:?} != EC2's {ec2:?}"));
    }
    for (ip, suffix) in want {
        if !agent.values().any(|ips| ips.contains(ip)) {
            return Some(format!("{ip} (container {suffix}) on no ENI of the node"));
        }
    }
    None
}
