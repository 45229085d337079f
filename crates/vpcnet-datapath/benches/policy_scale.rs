//! What network policy costs the agent in a large cluster, without the kernel: the memory of
//! the agent's model of the cluster ([`vpcnet_policy::World`]: every pod's labels, addresses and
//! named ports, every namespace, every policy), the time to compile one node's rules, and the
//! size and render time of the nftables transactions (the whole table at start; the in-place
//! update after one pod elsewhere in the cluster starts). Memory is counted by a global
//! allocator that tracks live bytes.
//!
//!   cargo bench -p vpcnet-datapath --bench policy_scale                # 5,000 pods, 500 policies
//!   cargo bench -p vpcnet-datapath --bench policy_scale -- 20000 2000  # pods, policies

// std's clocks (banned by the workspace clippy.toml): a benchmark measures wall time.
#![allow(clippy::disallowed_methods)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use vpcnet_policy::{
    compile, LabelSelector, LocalPod, Mode, NamedPort, Namespace, Peer, Pod, Policy, PortRef,
    PortSpec, Protocol, Rule, World,
};

/// Live heap bytes.
static LIVE: AtomicUsize = AtomicUsize::new(0);

struct Counting;

// SAFETY: forwards to the system allocator and only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Pods per node (an m5.large's max pods is 29; a large node 110).
const LOCAL_PODS: usize = 110;
const NAMESPACES: usize = 100;
/// Apps per namespace (each app's pods share `app`).
const APPS: usize = 10;

fn labels(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn sel(pairs: &[(&str, String)]) -> LabelSelector {
    LabelSelector {
        match_labels: labels(pairs),
        match_expressions: vec![],
    }
}

fn addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000u32 + 10 + i as u32)
}

fn pod(i: usize) -> Pod {
    let ns = i % NAMESPACES;
    Pod {
        namespace: format!("ns-{ns}"),
        name: format!("pod-{i}"),
        labels: labels(&[
            ("app", format!("app-{}", (i / NAMESPACES) % APPS)),
            ("tier", ["web", "api", "db"][i % 3].to_string()),
            ("pod-template-hash", format!("{:x}", i * 7919)),
        ]),
        ips: vec![addr(i)],
        host_network: false,
        ports: vec![
            NamedPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8080,
            },
            NamedPort {
                name: "metrics".into(),
                protocol: Protocol::Tcp,
                port: 9100,
            },
        ],
    }
}

/// Policy `j`: four shapes, as clusters have them: same-namespace app to app on a port;
/// from a labelled namespace; an ipBlock with an except; egress to a named port plus DNS.
fn policy(j: usize) -> Policy {
    let ns = format!("ns-{}", j % NAMESPACES);
    let app = format!("app-{}", (j / NAMESPACES) % APPS);
    let tcp = |p: u16| PortSpec {
        protocol: Protocol::Tcp,
        port: Some(PortRef::Number(p)),
        end_port: None,
    };
    let (ingress, egress) = match j % 4 {
        0 => (
            Some(vec![Rule {
                peers: vec![Peer::Pods {
                    namespaces: None,
                    pods: Some(sel(&[("tier", "web".into())])),
                }],
                ports: vec![tcp(8080)],
            }]),
            None,
        ),
        1 => (
            Some(vec![Rule {
                peers: vec![Peer::Pods {
                    namespaces: Some(sel(&[("team", format!("team-{}", j % 7))])),
                    pods: Some(sel(&[("app", app.clone())])),
                }],
                ports: vec![],
            }]),
            None,
        ),
        2 => (
            Some(vec![Rule {
                peers: vec![Peer::IpBlock {
                    cidr: "10.0.0.0/16".parse().unwrap(),
                    except: vec!["10.0.3.0/24".parse().unwrap()],
                }],
                ports: vec![tcp(443)],
            }]),
            None,
        ),
        _ => (
            None,
            Some(vec![
                Rule {
                    peers: vec![Peer::Pods {
                        namespaces: Some(LabelSelector::default()),
                        pods: Some(sel(&[("tier", "api".into())])),
                    }],
                    ports: vec![PortSpec {
                        protocol: Protocol::Tcp,
                        port: Some(PortRef::Name("http".into())),
                        end_port: None,
                    }],
                },
                Rule {
                    peers: vec![],
                    ports: vec![PortSpec {
                        protocol: Protocol::Udp,
                        port: Some(PortRef::Number(53)),
                        end_port: None,
                    }],
                },
            ]),
        ),
    };
    Policy {
        namespace: ns,
        name: format!("policy-{j}"),
        pod_selector: sel(&[("app", app)]),
        ingress,
        egress,
    }
}

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let pods = args.first().copied().unwrap_or(5_000);
    let policies = args.get(1).copied().unwrap_or(500);

    let before = LIVE.load(Ordering::Relaxed);
    let t = Instant::now();
    let mut world = World::default();
    for n in 0..NAMESPACES {
        world.upsert_namespace(Namespace {
            name: format!("ns-{n}"),
            labels: labels(&[
                ("kubernetes.io/metadata.name", format!("ns-{n}")),
                ("team", format!("team-{}", n % 7)),
            ]),
        });
    }
    for i in 0..pods {
        world.upsert_pod(pod(i));
    }
    for j in 0..policies {
        world.upsert_policy(policy(j));
    }
    let built = t.elapsed();
    let world_bytes = LIVE.load(Ordering::Relaxed) - before;

    // This node's pods: every (pods / LOCAL_PODS)-th pod of the cluster.
    let step = (pods / LOCAL_PODS).max(1);
    let local: Vec<LocalPod> = (0..pods)
        .step_by(step)
        .take(LOCAL_PODS)
        .map(|i| LocalPod {
            namespace: format!("ns-{}", i % NAMESPACES),
            name: format!("pod-{i}"),
            interface: vpcnet_datapath::names::host_veth_name("eni", "ns", &format!("pod-{i}")),
            ip: addr(i),
        })
        .collect();

    let compile_times: Vec<Duration> = (0..15)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(compile(&world, &local, Mode::Standard));
            t.elapsed()
        })
        .collect();
    let before_rules = LIVE.load(Ordering::Relaxed);
    let rules = compile(&world, &local, Mode::Standard);
    let rules_bytes = LIVE.load(Ordering::Relaxed) - before_rules;
    let full_t = Instant::now();
    let full = vpcnet_datapath::policy::render_full(&rules, None).expect("render");
    let full_took = full_t.elapsed();

    // One pod elsewhere in the cluster starts (an `api` pod, a peer of many sets).
    let mut next = world.clone();
    let mut p = pod(pods + 1);
    p.labels.insert("tier".into(), "api".into());
    next.upsert_pod(p);
    let t = Instant::now();
    let after = compile(&next, &local, Mode::Standard);
    let update = vpcnet_datapath::policy::render_update(&rules, &after, None)
        .expect("render")
        .unwrap_or_default();
    let update_took = t.elapsed();

    let isolated = rules
        .pods
        .values()
        .filter(|r| {
            !matches!(r.ingress, vpcnet_policy::Direction::Open)
                || !matches!(r.egress, vpcnet_policy::Direction::Open)
        })
        .count();
    let elements: usize = rules
        .sets
        .values()
        .map(|s| match s {
            vpcnet_policy::PeerSet::Addrs(r) => r.len(),
            vpcnet_policy::PeerSet::AddrPorts(e) => e.len(),
        })
        .sum();
    println!(
        "cluster: {pods} pods in {NAMESPACES} namespaces, {policies} policies; node: {} pods",
        local.len()
    );
    println!(
        "world (the agent's model of the cluster): {:.1} MiB ({} bytes per pod), built in {:.1} ms",
        world_bytes as f64 / 1048576.0,
        world_bytes / pods.max(1),
        built.as_secs_f64() * 1e3
    );
    println!(
        "compile of the node's rules: median {:.2} ms of 15; {} isolated pods, {} sets with {} elements, {:.1} KiB",
        median(compile_times).as_secs_f64() * 1e3,
        isolated,
        rules.sets.len(),
        elements,
        rules_bytes as f64 / 1024.0
    );
    println!(
        "full table transaction: {:.1} KiB, rendered in {:.2} ms",
        full.len() as f64 / 1024.0,
        full_took.as_secs_f64() * 1e3
    );
    println!(
        "one new pod elsewhere: compile + update transaction {:.2} ms, {} bytes",
        update_took.as_secs_f64() * 1e3,
        update.len()
    );
}
