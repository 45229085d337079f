//! The unmodified AWS VPC CNI (v1.23.2, built by scripts/build-k8s.sh: ipamd `aws-k8s-agent`,
//! `aws-cni`, `egress-cni`) as a lab node's CNI, under Kubernetes: its node turns Ready, its
//! pods get addresses of its ENIs and reach pods on a vpcnet node, and every EC2 and IMDS call
//! ipamd makes is answered as EC2 answers it (the emulator's request log). Then the in-place
//! swap of a node with running pods, VPC CNI → vpcnet → VPC CNI, under a prober.
//!
//! Needs root, the workspace binaries and the Kubernetes + VPC CNI binaries; fails when not
//! root. Every test builds its own lab (unique name) and tears it down even on failure.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use vpcnet_ipam::vpc_cni::VpcCniCheckpoint;
use vpcnet_lab::cloud::{Api, RequestRecord};
use vpcnet_lab::kube::workload::{httpd_manifest, Placement, PodInfo};
use vpcnet_lab::lab::Lab;
use vpcnet_lab::state::{NodeCni, NodeRecord};

mod common;
use common::*;
// Only this binary watches pods through a CNI swap; kept beside `common` but not part of it, so
// its unit tests run once.
#[path = "common/reachability.rs"]
mod reachability;
use reachability::{FastPinger, NetlinkMonitor, PathGap, PingCount, Prober};

/// ipamd's requests among a node's (the Go SDK's user agent; vpcnet-bootstrap's and
/// vpcnet-agent's are the Rust SDK's or none).
fn ipamd_requests(lab: &Lab, node: &str) -> Vec<RequestRecord> {
    lab.node(node)
        .requests()
        .unwrap()
        .into_iter()
        .filter(|r| {
            r.user_agent
                .as_deref()
                .is_some_and(|u| u.contains("aws-sdk-go"))
        })
        .collect()
}

/// IMDS answers EC2 gives too for these paths on these instances: 404 for the IPv6 and prefix
/// lists of an ENI that has none (ipamd asks for them on every ENI).
fn expected_failure(r: &RequestRecord) -> bool {
    r.api == Api::Imds
        && r.status == 404
        && ["/ipv6s", "/ipv4-prefix", "/ipv6-prefix"]
            .iter()
            .any(|s| r.action.ends_with(s))
}

/// Every request that failed other than [`expected_failure`], as readable lines.
fn unexpected_failures(reqs: &[RequestRecord]) -> Vec<String> {
    reqs.iter()
        .filter(|r| !r.ok() && !expected_failure(r))
        .map(|r| {
            format!(
                "{:?} {} -> {} {}",
                r.api,
                r.action,
                r.status,
                r.error_code.as_deref().unwrap_or("")
            )
        })
        .collect()
}

/// The addresses the node's agent has assigned to pods: ipamd's checkpoint
/// (`/var/run/aws-node/ipam.json`, its introspection scrubs container IDs) or vpcnet's.
fn agent_assigned(lab: &Lab, node: &NodeRecord) -> BTreeSet<Ipv4Addr> {
    match lab.state().unwrap().node(&node.name).unwrap().cni {
        NodeCni::Vpcnet => checkpoint(node).assignments.iter().map(|a| a.ip).collect(),
        NodeCni::VpcCni => {
            let text = std::fs::read_to_string(node.path("/run/aws-node/ipam.json")).unwrap();
            VpcCniCheckpoint::from_json(&text)
                .unwrap()
                .allocations
                .iter()
                .map(|a| a.ipv4.parse().unwrap())
                .collect()
        }
    }
}

#[test]
fn the_vpc_cni_runs_a_node_whose_pods_get_eni_addresses_and_every_cloud_call_succeeds() {
    with_kube_lab(
        "vpccni",
        |o| {
            o.nodes = 2;
            o.cni = vec![("n1".into(), NodeCni::VpcCni)];
        },
        |lab| {
            // Ready (lab up waited for every node) and networked by the VPC CNI's conflist.
            let n1 = node(lab);
            assert_eq!(n1.cni, NodeCni::VpcCni);
            assert!(n1.cni_conf_dir().join("10-aws.conflist").exists());
            let k = lab.kube().kubectl().unwrap();
            let nodes = k.json(&["get", "nodes"]).unwrap();
            assert!(
                nodes.to_string().contains(&n1.k8s_name),
                "node {} registered: {nodes}",
                n1.k8s_name
            );

            // Pods on the VPC CNI node, one on the vpcnet node.
            let only = |n: &str| Placement {
                only_node: Some(n.into()),
                ..Default::default()
            };
            k.apply(&httpd_manifest("peer", 4, &only("n1"))).unwrap();
            k.apply(&httpd_manifest("ours", 1, &only("n2"))).unwrap();
            let peer = lab
                .workloads()
                .wait_pods_ready("app=peer", 4, Duration::from_secs(240))
                .unwrap();
            let ours = lab
                .workloads()
                .wait_pods_ready("app=ours", 1, Duration::from_secs(120))
                .unwrap()
                .remove(0);
            let enis = describe_node_enis(lab, &n1);
            let assigned = agent_assigned(lab, &n1);
            let mut ips = BTreeSet::new();
            for p in &peer {
                assert_eq!(p.node, n1.k8s_name, "{} on n1", p.name);
                let ip = p.ip.unwrap();
                assert!(ips.insert(ip), "{ip} handed out twice");
                let eni = eni_of(&enis, ip).unwrap_or_else(|| {
                    panic!(
                        "pod {} ({ip}) is not a secondary IP of n1's ENIs: {enis:?}",
                        p.name
                    )
                });
                assert_eq!(eni.instance_id, n1.instance_id);
                assert!(assigned.contains(&ip), "ipamd lists {ip} as assigned");
                // The VPC CNI's host side: veth eni<hash> with the /32 route.
                let veth = host_veth(&n1, ip).expect("host route to the pod");
                assert!(veth.starts_with("eni"), "{veth}");
            }
            // Across plugins and nodes, both ways; the node itself; HTTP.
            let p0 = &peer[0];
            assert!(
                lab.workloads()
                    .pod_ping(&p0.name, ours.ip.unwrap())
                    .unwrap(),
                "VPC CNI pod -> vpcnet pod"
            );
            assert!(
                lab.workloads()
                    .pod_ping(&ours.name, p0.ip.unwrap())
                    .unwrap(),
                "vpcnet pod -> VPC CNI pod"
            );
            assert!(
                lab.workloads()
                    .pod_ping(&peer[1].name, p0.ip.unwrap())
                    .unwrap(),
                "same node"
            );
            let body = lab
                .workloads()
                .wait_http(&ours.name, p0.ip.unwrap(), 80, Duration::from_secs(30))
                .unwrap();
            assert!(body.starts_with("hello from peer-"), "{body}");

            // Every call ipamd made was answered as EC2 answers it.
            let reqs = ipamd_requests(lab, "n1");
            let ec2: BTreeSet<&str> = reqs
                .iter()
                .filter(|r| r.api == Api::Ec2)
                .map(|r| r.action.as_str())
                .collect();
            eprintln!(
                "ipamd's EC2 actions: {ec2:?}; {} requests in all",
                reqs.len()
            );
            assert!(
                ec2.contains("DescribeInstances") || ec2.contains("DescribeNetworkInterfaces"),
                "ipamd's calls are in the log: {ec2:?}"
            );
            assert!(reqs.iter().any(|r| r.api == Api::Imds), "IMDS calls logged");
            let bad = unexpected_failures(&reqs);
            assert!(
                bad.is_empty(),
                "the emulator failed ipamd's calls: {bad:#?}"
            );
        },
    );
}

/// Running pods of `app`, by name.
fn running(lab: &Lab, app: &str, count: usize) -> BTreeMap<String, Ipv4Addr> {
    lab.workloads()
        .wait_pods_ready(&format!("app={app}"), count, Duration::from_secs(240))
        .unwrap()
        .into_iter()
        .map(|p: PodInfo| (p.name, p.ip.unwrap()))
        .collect()
}

/// Deletes pod `name` (its Deployment replaces it) and checks the plugin's DEL removed every
/// host-side trace of `ip`: the /32 route, the rules (but `left`, a rule known to stay), the
/// veth (with the sandbox's namespace).
fn delete_and_check_gone(
    lab: &Lab,
    node: &NodeRecord,
    name: &str,
    ip: Ipv4Addr,
    left: Option<String>,
) {
    let veth = host_veth(node, ip).expect("host route to the pod before DEL");
    assert!(!rules_for(node, ip).is_empty(), "rules for {ip} before DEL");
    lab.kube()
        .kubectl()
        .unwrap()
        .run(&["delete", "pod", "-n", "default", name, "--wait=true"])
        .unwrap();
    wait_until(
        &format!("DEL of {name} removed its route"),
        Duration::from_secs(60),
        || host_veth(node, ip).is_none(),
    );
    let rules = rules_for(node, ip);
    assert_eq!(rules, left.into_iter().collect::<Vec<_>>(), "rules left");
    wait_until(
        &format!("the veth {veth} of {name} is gone"),
        Duration::from_secs(15),
        || !ipn(node, &["-o", "link"]).contains(&format!("{veth}@")),
    );
    let all_tables = ipn(node, &["route", "show", "table", "all"]);
    assert!(
        !all_tables.contains(&format!("{ip} ")),
        "a route to {ip} is left: {all_tables}"
    );
}

/// No address of a running pod is assigned twice; the agent's assignments are exactly the
/// running pods' addresses; every ENI of the instance is attached (none left behind).
fn check_no_leak(lab: &Lab, node: &NodeRecord, pods: &BTreeMap<String, Ipv4Addr>) {
    let ips: BTreeSet<Ipv4Addr> = pods.values().copied().collect();
    assert_eq!(
        ips.len(),
        pods.len(),
        "an address held by two pods: {pods:?}"
    );
    wait_until(
        "the agent's assignments = the running pods' addresses",
        Duration::from_secs(30),
        || agent_assigned(lab, node) == ips,
    );
    let enis = describe_node_enis(lab, node);
    for ip in &ips {
        assert!(eni_of(&enis, *ip).is_some(), "{ip} on no ENI of the node");
    }
    let all = lab.cloud().enis().unwrap();
    let loose: Vec<&str> = all
        .iter()
        .filter(|e| e.attachment.is_none())
        .map(|e| e.eni_id.as_str())
        .collect();
    assert!(loose.is_empty(), "ENIs left unattached: {loose:?}");
}

/// What one phase of the swap test did to the running pods: 200-per-second pings of each
/// ([`FastPinger`]), the reply-path gaps the node's kernel recorded ([`NetlinkMonitor`]) and the
/// phase's start and end on the prober's clock.
struct Phase {
    name: &'static str,
    pings: Vec<PingCount>,
    gaps: Vec<PathGap>,
    window: (Duration, Duration),
}

/// Runs `step` as phase `name` under a fast pinger of `targets` (from namespace `from_ns`) and
/// a netlink monitor of `node`; prints what it saw.
fn watch(
    prober: &Prober,
    from_ns: &str,
    node: &NodeRecord,
    targets: &[Ipv4Addr],
    name: &'static str,
    step: impl FnOnce(),
) -> Phase {
    let fast = FastPinger::start(from_ns, targets);
    let mon = NetlinkMonitor::start(&node.netns);
    let start = prober.mark(name);
    step();
    let end = prober.mark(&format!("{name}: done"));
    let gaps = mon.gaps();
    let pings = fast.lost();
    let lost: Vec<&PingCount> = pings.iter().filter(|p| p.lost > 0).collect();
    eprintln!(
        "{name}: {} pings to {} pods, lost {lost:?}; reply-path gaps {gaps:?}",
        pings.iter().map(|p| p.sent).sum::<u64>(),
        pings.len()
    );
    Phase {
        name,
        pings,
        gaps,
        window: (start, end),
    }
}

/// A phase in which the VPC CNI's ipamd starts. Its start deletes and re-adds the address of
/// every secondary ENI (with the ENI's last address the kernel flushes every route through it,
/// the ENI's table included, until ipamd re-adds them) and every pod's `from` rule, so for a
/// moment a reply of a pod on a secondary ENI finds no route out of its ENI (on EC2 as in the
/// lab, a reply leaving through another ENI is dropped by the source/destination check). It
/// does so on every restart, not only after vpcnet. Checked: every gap closed within 1 s, and
/// no pod lost 1 s of pings ([`check_no_outage`]).
fn check_vpc_cni_start(p: &Phase) {
    for g in &p.gaps {
        assert!(
            g.length.is_some_and(|l| l < Duration::from_secs(1)),
            "{}: reply path not back within 1 s: {g:?}",
            p.name
        );
    }
    check_no_outage(p);
}

/// No pod lost 1 s worth (200) of the fast pings in phase `p`. The pings are figures, not the
/// proof of a hitless step (that is the kernel's record, [`Phase::gaps`], and the prober):
/// every raw ICMP socket of the pingers' namespace gets every reply, so a starved pinger on a
/// loaded host can drop a few replies that did arrive.
fn check_no_outage(p: &Phase) {
    for c in &p.pings {
        assert!(
            c.lost < 200,
            "{}: {} lost {} of {} pings",
            p.name,
            c.ip,
            c.lost,
            c.sent
        );
    }
}

/// Both agents number a secondary ENI's route table device number + 1, so every pod's
/// `from <ip> lookup <table>` rule keeps pointing at its own ENI across both swaps
/// (docs/migration.md, "Route table numbers").
#[test]
fn a_vpc_cni_node_with_running_pods_swaps_to_vpcnet_and_back_in_place() {
    with_kube_lab(
        "swap",
        |o| o.cni = vec![("n1".into(), NodeCni::VpcCni)],
        |lab| {
            let n1 = node(lab);
            let k = lab.kube().kubectl().unwrap();
            let only = Placement {
                only_node: Some("n1".into()),
                ..Default::default()
            };
            const PODS: usize = 10;
            k.apply(&httpd_manifest("mig", PODS as u32, &only)).unwrap();
            let before = running(lab, "mig", PODS);
            let mut ever: BTreeSet<Ipv4Addr> = before.values().copied().collect();
            assert_eq!(ever.len(), PODS);
            assert_eq!(agent_assigned(lab, &n1), ever, "ipamd's view");
            // The case the table numbering decides: a pod on a secondary ENI, probed across the
            // swaps (its `from` rule looks up the VPC CNI's table of that ENI).
            let enis = describe_node_enis(lab, &n1);
            let on_secondary: Vec<Ipv4Addr> = before
                .values()
                .copied()
                .filter(|ip| eni_of(&enis, *ip).and_then(|e| e.device_index) > Some(0))
                .collect();
            assert!(
                !on_secondary.is_empty(),
                "no pod on a secondary ENI: {before:?}"
            );
            eprintln!("pods on secondary ENIs: {on_secondary:?}");
            let prefix = lab.state().unwrap().prefix;
            let cp_ns = format!("{prefix}-cp");
            // The fast pingers run from the VPC router's namespace: busybox ping uses raw ICMP
            // sockets, each of which gets a copy of every echo reply of its namespace, so 2,000
            // replies a second beside the prober could overflow its socket on a loaded host.
            let vpc_ns = format!("{prefix}-vpc");
            let all: Vec<Ipv4Addr> = before.values().copied().collect();
            let prober = Prober::start(&cp_ns, &n1.netns, all.clone());
            prober.wait_rounds(2);

            // For comparison, the VPC CNI restarting on its own (see check_vpc_cni_start).
            let restart = watch(&prober, &vpc_ns, &n1, &all, "restart the VPC CNI", || {
                lab.node("n1").stop_agent().unwrap();
                lab.node("n1").start_agent().unwrap();
            });
            check_vpc_cni_start(&restart);

            // VPC CNI → vpcnet: vpcnet's start replaces routes and rules in place, so no pod
            // loses a ping and the kernel records no reply-path gap.
            let t0 = Instant::now();
            let swap = watch(&prober, &vpc_ns, &n1, &all, "swap to vpcnet", || {
                lab.node("n1").swap_cni(NodeCni::Vpcnet).unwrap();
            });
            eprintln!("swapped to vpcnet in {:?}", t0.elapsed());
            assert_eq!(swap.gaps, vec![], "vpcnet's start cut a reply path");
            check_no_outage(&swap);
            let log = std::fs::read_to_string(lab.dir.join("logs/agent-n1.log")).unwrap();
            assert!(
                log.contains("adopted the VPC CNI's checkpoint"),
                "import logged"
            );
            let cp = checkpoint(&n1);
            for (name, ip) in &before {
                let a = cp
                    .assignments
                    .iter()
                    .find(|a| a.ip == *ip)
                    .unwrap_or_else(|| panic!("{name} ({ip}) not adopted: {cp:?}"));
                assert_eq!(&a.name, name, "pod name carried over");
            }
            prober.wait_rounds(2);

            // New pods get addresses no running pod holds.
            prober.mark("scale to 13");
            k.run(&["scale", "deployment", "mig", "--replicas", "13"])
                .unwrap();
            let now = running(lab, "mig", 13);
            for (name, ip) in &now {
                if !before.contains_key(name) {
                    assert!(!ever.contains(ip), "new pod {name} got {ip}, held before");
                    ever.insert(*ip);
                }
            }
            check_no_leak(lab, &n1, &now);

            // DEL of a pod aws-cni set up, through vpcnet-cni.
            let (victim, vip) = before.iter().next().map(|(n, i)| (n.clone(), *i)).unwrap();
            prober.forget(vip);
            prober.mark("delete an aws-cni pod");
            delete_and_check_gone(lab, &n1, &victim, vip, None);
            let now = running(lab, "mig", 13);
            for ip in now.values() {
                ever.insert(*ip);
            }
            check_no_leak(lab, &n1, &now);
            prober.wait_rounds(1);

            // And back: vpcnet → VPC CNI.
            let t0 = Instant::now();
            let still: Vec<Ipv4Addr> = all.iter().copied().filter(|ip| *ip != vip).collect();
            let rollback = watch(
                &prober,
                &vpc_ns,
                &n1,
                &still,
                "roll back to the VPC CNI",
                || {
                    lab.node("n1").swap_cni(NodeCni::VpcCni).unwrap();
                },
            );
            check_vpc_cni_start(&rollback);
            eprintln!("rolled back to the VPC CNI in {:?}", t0.elapsed());
            let rolled = running(lab, "mig", 13);
            assert_eq!(
                agent_assigned(lab, &n1),
                rolled.values().copied().collect(),
                "ipamd adopted every running pod"
            );
            prober.wait_rounds(2);
            prober.mark("scale to 15");
            k.run(&["scale", "deployment", "mig", "--replicas", "15"])
                .unwrap();
            let now = running(lab, "mig", 15);
            for (name, ip) in &now {
                if !rolled.contains_key(name) {
                    assert!(
                        !rolled.values().any(|r| r == ip),
                        "new pod {name} got {ip}, held by a running pod"
                    );
                }
            }
            // DEL of a pod vpcnet-cni set up, through aws-cni.
            let (victim, vip) = rolled
                .iter()
                .find(|(n, _)| !before.contains_key(*n))
                .map(|(n, i)| (n.clone(), *i))
                .unwrap();
            prober.forget(vip);
            prober.mark("delete a vpcnet pod");
            // Both agents number ENI tables alike, so aws-cni's DEL removes the `from` rule too.
            delete_and_check_gone(lab, &n1, &victim, vip, None);
            let now = running(lab, "mig", 15);
            check_no_leak(lab, &n1, &now);
            prober.wait_rounds(2);
            let (rounds, misses) = prober.finish();
            eprintln!(
                "prober: {rounds} rounds over the original pods, {} misses",
                misses.len()
            );
            assert!(rounds >= 10, "the prober ran: {rounds}");
            // A miss is only allowed where the VPC CNI's own start cuts reply paths: a pod on a
            // secondary ENI, while ipamd started (plus the 1 s ping deadline and slack), in a phase whose
            // gaps the kernel recorded, and answering again right after.
            let explained = |m: &reachability::Miss| {
                on_secondary.contains(&m.ip)
                    && m.retry_answered
                    && [&restart, &rollback].iter().any(|p| {
                        !p.gaps.is_empty()
                            && m.at >= p.window.0
                            && m.at <= p.window.1 + Duration::from_secs(3)
                    })
            };
            let unexplained: Vec<(Ipv4Addr, Duration)> = misses
                .iter()
                .filter(|m| !explained(m))
                .map(|m| (m.ip, m.at))
                .collect();
            assert!(
                unexplained.is_empty(),
                "running pods stopped answering: {unexplained:?}"
            );
            let bad = unexpected_failures(&ipamd_requests(lab, "n1"));
            assert!(
                bad.is_empty(),
                "the emulator failed ipamd's calls: {bad:#?}"
            );
        },
    );
}
