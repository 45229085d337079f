//! A fleet on one machine (`vpcnet lab fleet`): N agent-only nodes ([`UpOptions::fleet`]:
//! each its own network and mount namespace, its ENIs appearing as interfaces through the VPC
//! fabric, no kubelet or containerd) against one lab cloud whose account rate limits are on
//! ([`vpcnet_emu::account_limits`], AWS's documented buckets by default), all sharing the one
//! account as a cluster's nodes do.
//!
//! The scenario run here is the join: every node's agent (vpcnet-agent, or the unmodified VPC
//! CNI's ipamd) starts at once; the observer polls the cloud (each node's attached ENIs and
//! pod addresses) and each agent (serving the plugin or not) until every node can serve a pod
//! and nothing has changed for a quiet window ([`timeline`]); then it reads the cloud's request
//! log and computes the figures ([`figures`]): time to each node's first pod and to its full
//! warm pool (p50, p99, last), EC2 calls by action, throttled answers, and the floors the
//! account's buckets impose. It checks the fleet's invariants (no address on two ENIs, no ENI
//! left unattached, every node serving: one pod per node through the CNI, [`pods`]) and the
//! agents' memory, which, with the cores, bounds how many nodes one machine holds.

pub mod churn;
pub mod figures;
pub mod other_tools;
pub mod pods;
pub mod predict;
pub mod timeline;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
pub use vpcnet_emu::{AccountLimits, BucketOverride};

use crate::lab::{progress, with_lab, Lab, UpOptions};
use crate::nodes::Starting;
use crate::state::NodeCni;

pub use figures::{FleetFigures, Floor};
pub use timeline::{Holdings, Timeline};

/// Resident memory one agent takes on a fleet node at most, for the check before a fleet is
/// built (measured: `docs/benchmarks.md#a-fleet-joining`).
pub fn agent_memory_mib(cni: NodeCni) -> u64 {
    match cni {
        NodeCni::Vpcnet => 50,
        NodeCni::VpcCni => 80,
    }
}

/// What a fleet run does.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Lab name.
    pub name: String,
    pub nodes: usize,
    /// Every node's CNI.
    pub cni: NodeCni,
    pub instance_type: String,
    /// Extra environment for every agent (e.g. `WARM_IP_TARGET=5`).
    pub agent_env: Vec<(String, String)>,
    /// Directory of vpcnet's binaries.
    pub bin_dir: PathBuf,
    /// Directory of the VPC CNI's binaries (default: the build cache).
    pub k8s_bin_dir: Option<PathBuf>,
    /// The account's rate limits (default: on, AWS's documented buckets).
    pub account_limits: AccountLimits,
    /// Nothing changes for this long: the fleet has settled (default 20 s; the VPC CNI looks
    /// at its pool every 5 s).
    pub quiet: Duration,
    /// Give up when the fleet has not settled after this long (default 15 min).
    pub timeout: Duration,
    /// At the end, add and delete one pod on every node through the CNI (default true).
    pub pod_check: bool,
    /// Share (0 to 1) of every bucket's refill another tool in the account uses while the
    /// fleet joins ([`other_tools`]; default 0).
    pub other_tools_share: f64,
    /// After the join, steady churn of pods on every node ([`churn`]; default none).
    pub churn: Option<churn::ChurnOptions>,
}

impl FleetOptions {
    pub fn new(name: &str, nodes: usize, cni: NodeCni) -> Self {
        FleetOptions {
            name: name.into(),
            nodes,
            cni,
            instance_type: "m5.large".into(),
            agent_env: Vec::new(),
            bin_dir: crate::lab::default_bin_dir(),
            k8s_bin_dir: None,
            account_limits: AccountLimits {
                enabled: true,
                ..Default::default()
            },
            quiet: Duration::from_secs(20),
            timeout: Duration::from_secs(15 * 60),
            pod_check: true,
            other_tools_share: 0.0,
            churn: None,
        }
    }

    fn up_options(&self) -> UpOptions {
        let mut o = UpOptions::fleet(&self.name, self.nodes);
        o.instance_type = self.instance_type.clone();
        o.agent_env = self.agent_env.clone();
        o.bin_dir = self.bin_dir.clone();
        o.k8s_bin_dir = self.k8s_bin_dir.clone();
        o.cni = vec![("*".into(), self.cni)];
        o
    }
}

/// What the fleet's invariants came to at the end.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Invariants {
    /// Addresses found on more than one ENI.
    pub duplicate_addresses: Vec<Ipv4Addr>,
    /// ENIs in the VPC not attached to any instance (created by an agent and left behind).
    pub unattached_enis: Vec<String>,
    /// Nodes where one pod's CNI ADD and DEL failed, with why (empty without the pod check).
    pub nodes_not_serving: Vec<(String, String)>,
    /// Nodes whose pod got an address their instance does not hold.
    pub foreign_pod_addresses: Vec<(String, Ipv4Addr)>,
    /// Whether one pod per node was added and deleted.
    pub pods_checked: bool,
}

impl Invariants {
    /// Whether every invariant holds.
    pub fn hold(&self) -> bool {
        self.duplicate_addresses.is_empty()
            && self.unattached_enis.is_empty()
            && self.nodes_not_serving.is_empty()
            && self.foreign_pod_addresses.is_empty()
    }
}

/// A fleet run's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub cni: NodeCni,
    pub instance_type: String,
    pub figures: FleetFigures,
    pub invariants: Invariants,
    /// How long starting every agent took (the join is "at once" within this).
    pub launch_ms: u64,
    /// Agents that exited during the join and were started again.
    pub restarts: Restarts,
    /// Calls the other tool in the account made meanwhile ([`FleetOptions::other_tools_share`]).
    pub other_tool_calls: u64,
    /// The agents' resident memory at the end: total and the largest, MiB.
    pub agents_rss_mib: f64,
    pub largest_agent_rss_mib: f64,
    /// What `vpcnet plan` and its simulator predict for the same vpcnet fleet (none for the
    /// VPC CNI, whose agent they do not model).
    pub prediction: Option<predict::Prediction>,
    /// Why there is no prediction for a vpcnet fleet.
    pub no_prediction: Option<String>,
    /// The churn after the join, when asked for.
    pub churn: Option<churn::ChurnReport>,
}

/// Runs the join scenario on a new fleet lab and tears it down (always). Errors: the machine
/// lacks the memory for `opts.nodes` agents, the lab cannot be built, or the fleet did not
/// settle within the timeout (naming the nodes still waiting).
pub fn join(opts: &FleetOptions) -> Result<FleetReport> {
    if !(0.0..1.0).contains(&opts.other_tools_share) {
        bail!(
            "other tools' share {} is not in [0, 1): it is the share of every bucket's refill \
             another tool uses",
            opts.other_tools_share
        );
    }
    check_memory(opts.nodes, opts.cni)?;
    with_lab(&opts.up_options(), |lab| Fleet { lab }.join(opts))
}

/// Refuses a fleet whose agents would not fit in the memory available.
fn check_memory(nodes: usize, cni: NodeCni) -> Result<()> {
    let available = mem_available_mib()?;
    let need = nodes as u64 * agent_memory_mib(cni);
    if need > available * 8 / 10 {
        bail!(
            "{nodes} nodes of {cni} need about {need} MiB for their agents ({} MiB each), more \
             than 80 % of the {available} MiB available: use fewer nodes (at most {})",
            agent_memory_mib(cni),
            available * 8 / 10 / agent_memory_mib(cni)
        );
    }
    Ok(())
}

fn mem_available_mib() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo")?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb / 1024)
        .context("/proc/meminfo has no MemAvailable")
}

/// Agents that exited while the fleet joined.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Restarts {
    /// Restarts per node (nodes whose agent never exited are not listed).
    pub by_node: BTreeMap<String, u32>,
    /// The first agent that exited, with the last line of its log.
    pub first_exit: Option<(String, String)>,
}

impl Restarts {
    pub fn total(&self) -> u32 {
        self.by_node.values().sum()
    }
}

/// kubelet's crash-loop back-off before starting a pod's container again after its
/// `restarts`-th exit: 10 s, doubling, at most 5 minutes.
pub fn crash_loop_backoff(restarts: u32) -> Duration {
    let secs = 10u64.saturating_mul(1 << restarts.saturating_sub(1).min(5));
    Duration::from_secs(secs.min(300))
}

/// One node's agent while the fleet joins: running, or waiting to be started again.
struct Agent<'a> {
    name: String,
    starting: Option<Starting<'a>>,
    restarts: u32,
    restart_at_ms: Option<u64>,
}

/// A fleet lab being driven.
struct Fleet<'a> {
    lab: &'a Lab,
}

impl<'l> Fleet<'l> {
    fn join(&self, opts: &FleetOptions) -> Result<FleetReport> {
        let state = self.lab.state()?;
        let node_of: BTreeMap<String, String> = state
            .nodes
            .iter()
            .map(|n| (n.instance_id.clone(), n.name.clone()))
            .collect();
        let up = opts.up_options();
        for n in &state.nodes {
            self.lab.node(&n.name).save_agent_env(&up)?;
        }
        // The fleet's clock starts now; the emulator's request log counts from its own start
        // (read before the account limits would meter the reading).
        let cloud = self.lab.cloud();
        let (emu_base, emu_t0) = cloud.clock()?;
        cloud.set_account_limits(&opts.account_limits)?;
        progress(&format!(
            "starting {} agents at once ({}), account limits {}",
            state.nodes.len(),
            opts.cni,
            if opts.account_limits.enabled {
                "on"
            } else {
                "off"
            }
        ));
        let other =
            other_tools::OtherTool::start(self.lab, &opts.account_limits, opts.other_tools_share);
        let t0 = Instant::now();
        let start_ms = emu_base + t0.duration_since(emu_t0).as_millis() as u64;
        let names: Vec<String> = state.nodes.iter().map(|n| n.name.clone()).collect();
        let starting = launch_all(self.lab, &names)?;
        let launch_ms = t0.elapsed().as_millis() as u64;
        let (timeline, restarts) = self.observe(opts, starting, &node_of, t0)?;
        let other_tool_calls = other.calls();
        drop(other);
        let records = cloud.requests()?.records;
        let figures = figures::figures(
            &timeline,
            &records,
            start_ms,
            &node_of,
            &opts.account_limits,
            opts.other_tools_share,
        );
        let (agents_rss_mib, largest_agent_rss_mib) = agents_rss(self.lab)?;
        let mut invariants = self.cloud_invariants()?;
        if opts.pod_check {
            self.pod_check(&mut invariants)?;
        }
        let churn = match &opts.churn {
            Some(c) => Some(self.churn(c, &node_of)?),
            None => None,
        };
        let (prediction, no_prediction) = match opts.cni {
            NodeCni::Vpcnet => match self.predict(opts, figures.first_call.last_ms) {
                Ok(p) => (Some(p), None),
                Err(e) => (None, Some(format!("{e:#}"))),
            },
            NodeCni::VpcCni => (None, None),
        };
        Ok(FleetReport {
            cni: opts.cni,
            instance_type: opts.instance_type.clone(),
            figures,
            invariants,
            launch_ms,
            restarts,
            other_tool_calls,
            agents_rss_mib,
            largest_agent_rss_mib,
            prediction,
            no_prediction,
            churn,
        })
    }

    /// Steady churn on the settled fleet; calls counted from the request log by node.
    fn churn(
        &self,
        o: &churn::ChurnOptions,
        node_of: &BTreeMap<String, String>,
    ) -> Result<churn::ChurnReport> {
        let names: Vec<String> = node_of.values().cloned().collect();
        let cloud = self.lab.cloud();
        churn::run(self.lab, &names, o, |mark| {
            let Some(start_ms) = mark else {
                return Ok((cloud.clock()?.0, BTreeMap::new(), BTreeMap::new()));
            };
            let mut calls = BTreeMap::<String, u64>::new();
            let mut throttled = BTreeMap::<String, u64>::new();
            for r in cloud.requests()?.records.iter().filter(|r| {
                r.at_ms > start_ms && figures::fleet_caller(r, start_ms, node_of).is_some()
            }) {
                *calls.entry(r.action.clone()).or_default() += 1;
                if figures::is_throttled(r) {
                    *throttled.entry(r.action.clone()).or_default() += 1;
                }
            }
            Ok((start_ms, calls, throttled))
        })
    }

    /// The planner's and the simulator's prediction for this fleet.
    fn predict(&self, opts: &FleetOptions, boot_spread_ms: u64) -> Result<predict::Prediction> {
        let ready: crate::daemon::Ready =
            serde_json::from_slice(&std::fs::read(crate::daemon::ready_path(&self.lab.dir))?)?;
        let (spec, unmodelled) = predict::fleet_spec(
            &ready.subnet_ids,
            &opts.instance_type,
            opts.nodes as u32,
            &opts.agent_env,
        )?;
        predict::predict(
            &spec,
            unmodelled,
            &opts.agent_env,
            opts.other_tools_share,
            boot_spread_ms,
        )
    }

    /// Polls the cloud and the agents every 250 ms until the fleet settles. An agent that
    /// exits is started again after kubelet's crash-loop back-off ([`crash_loop_backoff`]),
    /// as its DaemonSet pod would be; the fleet has not settled while one waits for it.
    fn observe(
        &self,
        opts: &FleetOptions,
        starting: Vec<Starting<'l>>,
        node_of: &BTreeMap<String, String>,
        t0: Instant,
    ) -> Result<(Timeline, Restarts)> {
        let mut agents: Vec<Agent<'l>> = starting
            .into_iter()
            .map(|s| Agent {
                name: s.node().name().to_string(),
                starting: Some(s),
                restarts: 0,
                restart_at_ms: None,
            })
            .collect();
        let mut timeline = Timeline::new(agents.iter().map(|a| a.name.as_str()));
        let mut restarts = Restarts::default();
        let quiet_ms = opts.quiet.as_millis() as u64;
        let mut last_progress = 0;
        loop {
            let now_ms = t0.elapsed().as_millis() as u64;
            timeline.observe_cloud(now_ms, &self.holdings(node_of)?);
            for a in &mut agents {
                if let Some(at) = a.restart_at_ms {
                    if now_ms >= at {
                        a.starting = Some(self.lab.node(&a.name).launch_agent()?);
                        a.restart_at_ms = None;
                    }
                    continue;
                }
                let Some(s) = &a.starting else { continue };
                if s.exited() {
                    a.restarts += 1;
                    let wait = crash_loop_backoff(a.restarts);
                    if restarts.first_exit.is_none() {
                        restarts.first_exit = Some((a.name.clone(), s.last_log_line()));
                    }
                    *restarts.by_node.entry(a.name.clone()).or_default() += 1;
                    a.restart_at_ms = Some(now_ms + wait.as_millis() as u64);
                    a.starting = None;
                    continue;
                }
                if timeline.nodes[&a.name].serving_ms.is_some() {
                    continue;
                }
                match s.serving() {
                    Ok(true) => timeline.observe_serving(&a.name, t0.elapsed().as_millis() as u64),
                    Ok(false) => {}
                    // It exited meanwhile: the next round restarts it.
                    Err(_) if s.exited() => {}
                    Err(e) => return Err(e),
                }
            }
            let restarting = agents.iter().filter(|a| a.restart_at_ms.is_some()).count();
            if restarting == 0 && timeline.settled(now_ms, quiet_ms) {
                return Ok((timeline, restarts));
            }
            let still = timeline.waiting();
            if now_ms >= last_progress + 5_000 {
                last_progress = now_ms;
                progress(&format!(
                    "{:.1} s: {} of {} nodes can serve a pod{}",
                    now_ms as f64 / 1000.0,
                    timeline.nodes.len() - still.len(),
                    timeline.nodes.len(),
                    match (restarts.total(), restarting) {
                        (0, _) => String::new(),
                        (n, r) => format!("; agents restarted {n} times, {r} waiting to restart"),
                    }
                ));
            }
            if t0.elapsed() > opts.timeout {
                bail!(
                    "the fleet did not settle within {:?}: {} nodes cannot serve a pod yet ({}); \
                     agent logs are under {}",
                    opts.timeout,
                    still.len(),
                    still
                        .iter()
                        .take(10)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", "),
                    self.lab.dir.join("logs").display()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Each node's attached ENIs and pod addresses, from the cloud.
    fn holdings(&self, node_of: &BTreeMap<String, String>) -> Result<BTreeMap<String, Holdings>> {
        let mut held = BTreeMap::<String, Holdings>::new();
        for e in self.lab.cloud().enis()? {
            let Some(a) = e.attachment.as_ref().filter(|a| a.status == "attached") else {
                continue;
            };
            let Some(node) = node_of.get(&a.instance_id) else {
                continue;
            };
            let h = held.entry(node.clone()).or_default();
            h.enis += 1;
            h.addresses += e.secondary_ips.len() + 16 * e.prefixes.len();
        }
        Ok(held)
    }

    /// No address on two ENIs; no ENI left unattached.
    fn cloud_invariants(&self) -> Result<Invariants> {
        let mut seen = BTreeSet::new();
        let mut inv = Invariants::default();
        for e in self.lab.cloud().enis()? {
            if e.attachment.is_none() {
                inv.unattached_enis.push(e.eni_id.clone());
            }
            let addrs = std::iter::once(e.primary_ip)
                .chain(e.secondary_ips.iter().copied())
                .chain(e.prefixes.iter().flat_map(|p| p.hosts()));
            for a in addrs {
                if !seen.insert(a) {
                    inv.duplicate_addresses.push(a);
                }
            }
        }
        Ok(inv)
    }

    /// One pod added and deleted on every node through its CNI; its address must be one the
    /// node's instance holds.
    fn pod_check(&self, inv: &mut Invariants) -> Result<()> {
        progress("adding and deleting one pod on every node through its CNI");
        let state = self.lab.state()?;
        let enis = self.lab.cloud().enis()?;
        for n in &state.nodes {
            let node = self.lab.node(&n.name);
            let pod = format!("fleet-{}", n.name);
            let added = node.add_pod(&pod);
            let pod = match added {
                Ok(p) => p,
                Err(e) => {
                    inv.nodes_not_serving
                        .push((n.name.clone(), format!("{e:#}")));
                    continue;
                }
            };
            match crate::cloud::owner(&enis, pod.ip) {
                Some(o) if o.instance_id == n.instance_id => {}
                _ => inv.foreign_pod_addresses.push((n.name.clone(), pod.ip)),
            }
            if let Err(e) = node.delete_pod(&pod) {
                inv.nodes_not_serving
                    .push((n.name.clone(), format!("{e:#}")));
            }
        }
        inv.pods_checked = true;
        Ok(())
    }
}

/// Starts the agents of `names` without waiting, from eight threads so that the last starts
/// soon after the first (each start records its process in the lab's state under a lock).
fn launch_all<'a>(lab: &'a Lab, names: &[String]) -> Result<Vec<Starting<'a>>> {
    let per_thread = names.len().div_ceil(8).max(1);
    std::thread::scope(|s| {
        let threads: Vec<_> = names
            .chunks(per_thread)
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|n| lab.node(n).launch_agent())
                        .collect::<Result<Vec<_>>>()
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in threads {
            all.extend(t.join().expect("an agent launch thread panicked")?);
        }
        Ok(all)
    })
}

/// The agents' resident memory (`VmRSS`): total and largest, MiB.
fn agents_rss(lab: &Lab) -> Result<(f64, f64)> {
    let mut total = 0.0;
    let mut largest: f64 = 0.0;
    for p in lab.state()?.processes {
        if !p.role.starts_with("agent ") || !p.alive() {
            continue;
        }
        // An agent gone meanwhile counts for nothing.
        let kb = crate::procs::memory_kib(p.pid).map_or(0, |(rss, _)| rss) as f64;
        total += kb / 1024.0;
        largest = largest.max(kb / 1024.0);
    }
    Ok((total, largest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_loop_backoff_doubles_from_ten_seconds_to_five_minutes() {
        let secs: Vec<u64> = (1..=8).map(|n| crash_loop_backoff(n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(crash_loop_backoff(u32::MAX).as_secs(), 300);
    }
}
