//! Steady churn on a settled fleet (scenario b): every node keeps `population` pods and
//! replaces `per_minute` of them a minute (the oldest deleted, a new one added, through the
//! node's CNI, [`super::pods`]), node after node evenly spread over each node's period, from a
//! few worker threads. Measured over the churn window: the EC2 calls the nodes made per minute
//! by action and how many were throttled, the ADD latency, and the invariants every ADD is
//! checked against: no address on two live pods, every pod's address one its node's instance
//! holds (at the end).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use vpcnet_capacity::sim::Spread;

use super::pods::FleetPod;
use crate::lab::{progress, Lab};

/// What the churn does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChurnOptions {
    /// Pods each node keeps.
    pub population: usize,
    /// Pods each node replaces per minute.
    pub per_minute: u32,
    /// How long the churn runs after the population is up.
    pub duration: Duration,
}

/// What the churn measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChurnReport {
    pub population: usize,
    pub per_minute: u32,
    /// The churn window, seconds.
    pub seconds: f64,
    /// Pods added and deleted in the window.
    pub added: u64,
    pub deleted: u64,
    /// ADD wall time through the node's conflist (plugins included).
    pub add_ms: Spread,
    /// EC2 calls of the fleet's nodes in the window, by action, and the throttled ones.
    pub calls: BTreeMap<String, u64>,
    pub throttled: BTreeMap<String, u64>,
    /// ADDs or DELs that failed: node, pod, why (the first 20).
    pub failures: Vec<(String, String, String)>,
    pub failure_count: u64,
    /// Addresses an ADD returned while another live pod held them.
    pub duplicate_pod_addresses: Vec<Ipv4Addr>,
    /// Live pods at the end whose address their node's instance does not hold.
    pub foreign_pod_addresses: Vec<(String, Ipv4Addr)>,
}

impl ChurnReport {
    /// EC2 calls per minute over the whole fleet.
    pub fn calls_per_minute(&self) -> f64 {
        match self.seconds {
            s if s > 0.0 => self.calls.values().sum::<u64>() as f64 * 60.0 / s,
            _ => 0.0,
        }
    }

    /// Whether the churn kept its invariants.
    pub fn held(&self) -> bool {
        self.failure_count == 0
            && self.duplicate_pod_addresses.is_empty()
            && self.foreign_pod_addresses.is_empty()
    }
}

/// Live pods and the outcome so far, shared by the workers.
#[derive(Default)]
struct Books {
    pods: BTreeMap<String, VecDeque<FleetPod>>,
    holders: BTreeMap<Ipv4Addr, String>,
    report: ChurnReport,
    add_ms: Vec<u64>,
    seq: u64,
}

impl Books {
    fn failed(&mut self, node: &str, pod: &str, why: String) {
        self.report.failure_count += 1;
        if self.report.failures.len() < 20 {
            self.report
                .failures
                .push((node.to_string(), pod.to_string(), why));
        }
    }
}

/// Adds one pod on `node`, recording it (and any address another live pod holds).
fn add(lab: &Lab, node: &str, books: &Mutex<Books>, counted: bool) {
    let name = {
        let mut b = books.lock().unwrap();
        b.seq += 1;
        format!("churn-{node}-{}", b.seq)
    };
    let t = Instant::now();
    let added = lab.node(node).add_pod(&name);
    let ms = t.elapsed().as_millis() as u64;
    let mut b = books.lock().unwrap();
    match added {
        Ok(pod) => {
            if let Some(other) = b.holders.insert(pod.ip, pod.name.clone()) {
                if other != pod.name {
                    b.report.duplicate_pod_addresses.push(pod.ip);
                }
            }
            if counted {
                b.report.added += 1;
                b.add_ms.push(ms);
            }
            b.pods.entry(node.to_string()).or_default().push_back(pod);
        }
        Err(e) => b.failed(node, &name, format!("{e:#}")),
    }
}

/// Deletes `node`'s oldest pod, if it has one.
fn delete_oldest(lab: &Lab, node: &str, books: &Mutex<Books>) {
    let pod = books
        .lock()
        .unwrap()
        .pods
        .get_mut(node)
        .and_then(VecDeque::pop_front);
    let Some(pod) = pod else {
        return;
    };
    let deleted = lab.node(node).delete_pod(&pod);
    let mut b = books.lock().unwrap();
    b.holders.remove(&pod.ip);
    match deleted {
        Ok(()) => b.report.deleted += 1,
        Err(e) => b.failed(node, &pod.name, format!("{e:#}")),
    }
}

/// Runs `jobs` (node names) on `threads` workers.
fn on_workers(nodes: &[String], threads: usize, job: impl Fn(&str) + Sync) {
    let queue = Mutex::new(nodes.iter());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let next = queue.lock().unwrap().next();
                match next {
                    Some(n) => job(n),
                    None => break,
                }
            });
        }
    });
}

/// Brings every node to `population` pods, churns for the duration, and reports. `calls_since`
/// gives the nodes' EC2 calls and throttled calls since a mark it took when called with
/// `None` (the fleet's request log); it is called twice, around the window.
pub fn run(
    lab: &Lab,
    nodes: &[String],
    o: &ChurnOptions,
    mut calls_since: impl FnMut(
        Option<u64>,
    ) -> Result<(u64, BTreeMap<String, u64>, BTreeMap<String, u64>)>,
) -> Result<ChurnReport> {
    const WORKERS: usize = 4;
    let books = Mutex::new(Books::default());
    progress(&format!(
        "churn: {} pods on each of {} nodes",
        o.population,
        nodes.len()
    ));
    for _ in 0..o.population {
        on_workers(nodes, WORKERS, |n| add(lab, n, &books, false));
    }
    let (mark, _, _) = calls_since(None)?;
    let period = Duration::from_secs(60) / o.per_minute.max(1);
    progress(&format!(
        "churn: each node replaces {} pods a minute for {:?}",
        o.per_minute, o.duration
    ));
    // Each node's next replacement, spread evenly over one period.
    let t0 = Instant::now();
    let due = Mutex::new(
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Reverse((period * i as u32 / nodes.len().max(1) as u32, n.clone())))
            .collect::<BinaryHeap<_>>(),
    );
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| loop {
                let next = {
                    let mut q = due.lock().unwrap();
                    match q.peek() {
                        Some(Reverse((at, _))) if *at > o.duration => None,
                        Some(Reverse((at, _))) if *at > t0.elapsed() => Some(None),
                        Some(_) => q.pop().map(|Reverse(e)| Some(e)),
                        None => None,
                    }
                };
                match next {
                    None => break,
                    Some(None) => std::thread::sleep(Duration::from_millis(20)),
                    Some(Some((at, node))) => {
                        delete_oldest(lab, &node, &books);
                        add(lab, &node, &books, true);
                        due.lock().unwrap().push(Reverse((at + period, node)));
                    }
                }
            });
        }
    });
    let seconds = t0.elapsed().as_secs_f64();
    let (_, calls, throttled) = calls_since(Some(mark))?;
    let mut b = books.into_inner().unwrap();
    let enis = lab.cloud().enis()?;
    let state = lab.state()?;
    for n in &state.nodes {
        for pod in b.pods.get(&n.name).into_iter().flatten() {
            match crate::cloud::owner(&enis, pod.ip) {
                Some(o) if o.instance_id == n.instance_id => {}
                _ => b
                    .report
                    .foreign_pod_addresses
                    .push((n.name.clone(), pod.ip)),
            }
        }
    }
    let mut r = b.report;
    r.population = o.population;
    r.per_minute = o.per_minute;
    r.seconds = seconds;
    r.add_ms = Spread::of(b.add_ms);
    r.calls = calls;
    r.throttled = throttled;
    Ok(r)
}
