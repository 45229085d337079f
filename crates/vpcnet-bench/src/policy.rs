//! `vpcnet-bench policy`: the agent's NetworkPolicy enforcement at cluster scale, on one lab
//! node with vpcnet installed by its chart (`enableNetworkPolicy=true`), against the real API
//! server (scripts/bench-policy.sh).
//!
//! The cluster is filled with `--pods` pods in `--namespaces` namespaces and `--policies`
//! NetworkPolicies. The pods are API objects only: they name a scheduler that does not exist,
//! so they stay Pending and no kubelet runs them, and their addresses come from the
//! `vpc.amazonaws.com/pod-ips` annotation the agent reads as the VPC CNI writes it
//! ([`filler`]). One real pod on the node (`bench-target`) is selected by policies whose peers
//! are a fifth of all pods, so its rules hold thousands of addresses. Measured:
//!
//! - the agent's resident memory idle, once its model holds the whole cluster, and after
//!   rounds of job-like churn (`--churn` pods created and deleted per round), which must not
//!   grow it (aws-network-policy-agent #416);
//! - propagation: from the `kubectl` call that creates a NetworkPolicy selecting the local
//!   pod until its rule is in the node's nftables chain, and from the one that creates a peer
//!   pod until its address is in the rule's set; the same for their deletion. Read from the
//!   kernel (`nft`), not from the agent.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Args as ClapArgs;
use serde_json::{json, Value};
use vpcnet_introspection::text::table;
use vpcnet_lab::kube::workload::{httpd_manifest, Placement};
use vpcnet_lab::lab::{parse_agent_env, progress, with_lab, KubeProxyMode, Lab, UpOptions};
use vpcnet_lab::state::AgentInstall;

use crate::pod_timing::quantile;

#[derive(ClapArgs)]
pub struct Args {
    /// Lab name.
    #[arg(long, default_value = "bench-policy")]
    name: String,
    /// Pods in the cluster (API objects only, see the module doc).
    #[arg(long, default_value_t = 5000)]
    pods: usize,
    /// NetworkPolicies in the cluster.
    #[arg(long, default_value_t = 500)]
    policies: usize,
    /// Namespaces the pods and policies spread over.
    #[arg(long, default_value_t = 50)]
    namespaces: usize,
    /// Pods created and then deleted in each churn round.
    #[arg(long, default_value_t = 1000)]
    churn: usize,
    /// Churn rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Propagation samples of each kind.
    #[arg(long, default_value_t = 20)]
    samples: usize,
    /// Extra agent environment, KEY=VALUE; repeatable.
    #[arg(long = "agent-env", value_name = "KEY=VALUE")]
    agent_env: Vec<String>,
}

/// The scheduler the filler pods name; none runs, so they stay Pending and unbound.
pub const NO_SCHEDULER: &str = "vpcnet-bench-unscheduled";
/// Label values the filler pods take (`role=r0` … `r4`, `app=a0` … `a99`).
const ROLES: usize = 5;
const APPS: usize = 100;
/// Namespace teams (`team=t0` … `t9`).
const TEAMS: usize = 10;
/// Objects per `kubectl create` call.
const CHUNK: usize = 250;

/// The address of filler pod `i` (10.128.0.0/9, outside the lab's VPC: never routed, only
/// matched).
pub fn filler_ip(i: usize) -> Ipv4Addr {
    let i = i as u32;
    Ipv4Addr::from(0x0a80_0000 | (i & 0x007f_ffff))
}

/// The `i`th filler namespace.
pub fn filler_namespace(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": format!("bench-{i}"), "labels": {"team": format!("t{}", i % TEAMS)}},
    })
}

/// Filler pod `i` in namespace `bench-<i mod namespaces>` (`name_prefix` + `i`), labels
/// `app`, `role` (from `i`), `bench=<group>`, a named port `http` (8080), its address in the pod-ips
/// annotation, and a scheduler that does not exist.
pub fn filler(i: usize, namespaces: usize, name_prefix: &str, group: &str, ip: Ipv4Addr) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{name_prefix}{i}"),
            "namespace": format!("bench-{}", i % namespaces),
            "labels": {"app": format!("a{}", i % APPS), "role": format!("r{}", i % ROLES), "bench": group},
            "annotations": {"vpc.amazonaws.com/pod-ips": ip.to_string()},
        },
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "none", "ports": [{"name": "http", "containerPort": 8080}]}],
        },
    })
}

/// Filler policy `j` in namespace `bench-<j mod namespaces>`: selects one app, admits one
/// role from the namespaces of one team on the named port, and lets the app reach one
/// ipBlock with an exception and DNS.
pub fn filler_policy(j: usize, namespaces: usize) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": format!("p{j}"), "namespace": format!("bench-{}", j % namespaces)},
        "spec": {
            "podSelector": {"matchLabels": {"app": format!("a{}", j % APPS)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{
                "from": [{
                    "namespaceSelector": {"matchLabels": {"team": format!("t{}", j % TEAMS)}},
                    "podSelector": {"matchLabels": {"role": format!("r{}", j % ROLES)}},
                }],
                "ports": [{"port": "http"}],
            }],
            "egress": [
                {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": [format!("10.{}.0.0/16", j % 256)]}}]},
                {"ports": [{"port": 53, "protocol": "UDP"}]},
            ],
        },
    })
}

/// A policy in `default` selecting the local pod, admitting `role=<role>` from every
/// namespace on port 80.
pub fn target_policy(name: &str, role: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "bench-target"}},
            "ingress": [{
                "from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"role": role}}}],
                "ports": [{"port": 80}],
            }],
        },
    })
}

fn list(items: Vec<Value>) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// `kubectl create` of `items` in chunks, with progress.
fn create_all(lab: &Lab, what: &str, items: Vec<Value>) -> Result<Duration> {
    let k = lab.kube().kubectl()?;
    let started = Instant::now();
    let total = items.len();
    let mut done = 0;
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        let chunk: Vec<Value> = items.by_ref().take(CHUNK).collect();
        done += chunk.len();
        let out = k.output(&["create", "-f", "-", "-o", "name"], Some(&list(chunk)))?;
        if !out.status.success() {
            bail!(
                "creating {what}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if done % 1000 < CHUNK || done == total {
            progress(&format!("{what}: {done}/{total} created"));
        }
    }
    Ok(started.elapsed())
}

/// The value of the gauge `name{label="value"}` in Prometheus text.
pub fn gauge(metrics: &str, name: &str, labels: &str) -> Option<f64> {
    let head = format!("{name}{{{labels}}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&head))
        .and_then(|v| v.trim().parse().ok())
}

/// The node's agent process: the `vpcnet-agent` in the node's network namespace (the chart's
/// `aws-node` pod is host-network).
fn agent_pid(lab: &Lab, node: &str) -> Result<i32> {
    let netns = lab.state()?.node(node)?.netns.clone();
    vpcnet_lab::netns::pids_in(&netns)
        .into_iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "vpcnet-agent")
        })
        .with_context(|| format!("no vpcnet-agent process in {node}'s network namespace"))
}

/// Waits until the agent's model holds `pods` pods and `policies` policies
/// (`vpcnet_network_policy_cluster_objects`); how long that took.
fn wait_model(lab: &Lab, node: &str, pods: usize, policies: usize) -> Result<Duration> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    loop {
        let m = lab.node(node).agent_metrics()?;
        let have = |kind: &str| {
            gauge(
                &m,
                "vpcnet_network_policy_cluster_objects",
                &format!("kind=\"{kind}\""),
            )
            .unwrap_or(-1.0)
        };
        if have("pods") == pods as f64 && have("policies") == policies as f64 {
            return Ok(started.elapsed());
        }
        ensure!(
            Instant::now() < deadline,
            "the agent's model did not reach {pods} pods and {policies} policies in 600 s \
             (it holds {} pods, {} policies)",
            have("pods"),
            have("policies")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `nft <args>` in the node's network namespace.
fn nft(netns: &str, args: &[&str]) -> Result<std::process::Output> {
    Ok(std::process::Command::new("ip")
        .args(["netns", "exec", netns, "nft"])
        .args(args)
        .output()?)
}

/// Runs `act` (a kubectl call), then polls `done` every 5 ms; the time from before `act` to
/// `done` first true, and how long `act` alone took.
fn time_until(
    act: impl FnOnce() -> Result<()>,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<(Duration, Duration)> {
    let t0 = Instant::now();
    act()?;
    let call = t0.elapsed();
    let deadline = t0 + Duration::from_secs(60);
    while !done()? {
        ensure!(Instant::now() < deadline, "not propagated within 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok((t0.elapsed(), call))
}

/// Figures of one run.
#[derive(Default)]
struct Figures {
    create_pods: Duration,
    model_sync: Duration,
    rss_idle: u64,
    rss_full: u64,
    rss_churn: Vec<u64>,
    hwm: u64,
    /// Programs of the node's rules for API changes while the cluster filled, and their
    /// total milliseconds.
    fill_programs: (f64, f64),
    /// (kind, samples of (propagation, kubectl call)).
    propagation: Vec<(&'static str, Vec<(Duration, Duration)>)>,
}

pub fn run(a: &Args) -> Result<()> {
    ensure!(
        a.namespaces > 0 && a.pods > 0,
        "--pods and --namespaces must be at least 1"
    );
    let mut o = UpOptions::new(&a.name);
    o.instance_type = "m5.xlarge".into();
    o.agent_install = AgentInstall::Chart;
    o.kube_proxy_mode = KubeProxyMode::DaemonSet;
    o.agent_env = parse_agent_env(&a.agent_env)?;
    o.agent_env
        .push(("VPCNET_ENABLE_NETWORK_POLICY".into(), "true".into()));
    let f = with_lab(&o, |lab| measure(lab, a))?;
    print!("{}", render(a, &f));
    Ok(())
}

fn measure(lab: &Lab, a: &Args) -> Result<Figures> {
    let mut f = Figures::default();
    let state = lab.state()?;
    let node = state.nodes[0].name.clone();
    let netns = state.nodes[0].netns.clone();
    let k = lab.kube().kubectl()?;
    let only = Placement {
        only_node: Some(node.clone()),
        ..Default::default()
    };
    k.apply(&httpd_manifest("bench-target", 1, &only))?;
    let target = lab
        .workloads()
        .wait_pods_ready("app=bench-target", 1, Duration::from_secs(300))?
        .remove(0);
    let veth = vpcnet_datapath::names::host_veth_name("eni", &target.namespace, &target.name);
    let base = |kind: &str| -> Result<usize> {
        let m = lab.node(&node).agent_metrics()?;
        Ok(gauge(
            &m,
            "vpcnet_network_policy_cluster_objects",
            &format!("kind=\"{kind}\""),
        )
        .context("the agent exports no vpcnet_network_policy_cluster_objects: is network policy enabled?")?
            as usize)
    };
    let pid = agent_pid(lab, &node)?;
    std::thread::sleep(Duration::from_secs(5));
    f.rss_idle = vpcnet_lab::procs::memory_kib(pid)?.0;
    let (pods0, policies0) = (base("pods")?, base("policies")?);
    let programs = |m: &str| {
        let g = |n: &str| gauge(m, n, "trigger=\"API change\"").unwrap_or(0.0);
        (
            g("vpcnet_network_policy_program_ms_count"),
            g("vpcnet_network_policy_program_ms_sum"),
        )
    };
    let before = programs(&lab.node(&node).agent_metrics()?);

    progress(&format!(
        "filling the cluster: {} namespaces, {} pods, {} policies",
        a.namespaces, a.pods, a.policies
    ));
    create_all(
        lab,
        "namespaces",
        (0..a.namespaces).map(filler_namespace).collect(),
    )?;
    // The standing policy whose set holds every role=r0 pod, and the peer set it makes.
    create_all(
        lab,
        "policies",
        std::iter::once(target_policy("bench-peers", "r0"))
            .chain((0..a.policies).map(|j| filler_policy(j, a.namespaces)))
            .collect(),
    )?;
    f.create_pods = create_all(
        lab,
        "pods",
        (0..a.pods)
            .map(|i| filler(i, a.namespaces, "f", "filler", filler_ip(i)))
            .collect(),
    )?;
    let (pods, policies) = (pods0 + a.pods, policies0 + a.policies + 1);
    f.model_sync = wait_model(lab, &node, pods, policies)?;
    let after = programs(&lab.node(&node).agent_metrics()?);
    f.fill_programs = (after.0 - before.0, after.1 - before.1);
    std::thread::sleep(Duration::from_secs(10));
    f.rss_full = vpcnet_lab::procs::memory_kib(pid)?.0;
    progress(&format!(
        "the agent's model holds the cluster ({} after the last pod was created); RSS {} MiB",
        fmt_ms(f.model_sync),
        f.rss_full / 1024
    ));

    for round in 0..a.rounds {
        let what = format!("churn round {}/{}", round + 1, a.rounds);
        let first_ip = a.pods + round * a.churn;
        create_all(
            lab,
            &format!("{what}: pods"),
            (0..a.churn)
                .map(|i| {
                    filler(
                        i,
                        a.namespaces,
                        &format!("churn{round}-"),
                        "churn",
                        filler_ip(first_ip + i),
                    )
                })
                .collect(),
        )?;
        wait_model(lab, &node, pods + a.churn, policies)?;
        k.run(&[
            "delete",
            "pods",
            "--all-namespaces",
            "-l",
            "bench=churn",
            "--wait=false",
        ])?;
        wait_model(lab, &node, pods, policies)?;
        std::thread::sleep(Duration::from_secs(5));
        let rss = vpcnet_lab::procs::memory_kib(pid)?.0;
        progress(&format!("{what}: RSS {} MiB", rss / 1024));
        f.rss_churn.push(rss);
    }

    progress(&format!("propagation: {} samples of each kind", a.samples));
    let chain = format!("in_{veth}");
    let chain_has = |needle: &str| -> Result<bool> {
        let out = nft(&netns, &["list", "chain", "inet", "vpcnet_policy", &chain])?;
        Ok(String::from_utf8_lossy(&out.stdout).contains(needle))
    };
    // The set of the standing policy's rule: `ip saddr @p_… … comment "default/bench-peers"`.
    let listing = nft(&netns, &["list", "chain", "inet", "vpcnet_policy", &chain])?;
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let set = listing
        .lines()
        .find(|l| l.contains("\"default/bench-peers\""))
        .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix('@')))
        .with_context(|| format!("no rule of default/bench-peers in chain {chain}:\n{listing}"))?
        .to_string();
    let set_has = |ip: Ipv4Addr| -> Result<bool> {
        let element = format!("{{ {ip} }}");
        Ok(nft(
            &netns,
            &["get", "element", "inet", "vpcnet_policy", &set, &element],
        )?
        .status
        .success())
    };
    let (mut add_policy, mut del_policy, mut add_peer, mut del_peer) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for n in 0..a.samples {
        let name = format!("prop-{n}");
        let comment = format!("\"default/{name}\"");
        add_policy.push(time_until(
            || k.apply(&target_policy(&name, &format!("r{}", n % ROLES)).to_string()),
            || chain_has(&comment),
        )?);
        del_policy.push(time_until(
            || {
                k.run(&[
                    "delete",
                    "networkpolicy",
                    "-n",
                    "default",
                    &name,
                    "--wait=false",
                ])
                .map(|_| ())
            },
            || Ok(!chain_has(&comment)?),
        )?);
        let ip = filler_ip(a.pods + a.rounds * a.churn + n);
        // role=r0 at index 0 of its name: `filler` takes the role from the index.
        let peer = filler(0, a.namespaces, &format!("peer{n}-"), "peer", ip);
        let peer_name = format!("peer{n}-0");
        add_peer.push(time_until(|| k.apply(&peer.to_string()), || set_has(ip))?);
        del_peer.push(time_until(
            || {
                k.run(&["delete", "pod", "-n", "bench-0", &peer_name, "--wait=false"])
                    .map(|_| ())
            },
            || Ok(!set_has(ip)?),
        )?);
    }
    f.propagation = vec![
        ("policy created → its rule in the chain", add_policy),
        ("policy deleted → its rule gone", del_policy),
        ("peer pod created → its address in the set", add_peer),
        ("peer pod deleted → its address gone", del_peer),
    ];
    f.hwm = vpcnet_lab::procs::memory_kib(pid)?.1;
    Ok(f)
}

fn fmt_ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn render(a: &Args, f: &Figures) -> String {
    let mut out = format!(
        "cluster: {} pods in {} namespaces, {} NetworkPolicies (+1 selecting the local pod); \
         one m5.xlarge node, vpcnet by its chart with enableNetworkPolicy=true\n\n",
        a.pods, a.namespaces, a.policies
    );
    let mut m = vec![vec!["AGENT MEMORY".to_string(), "MiB".into()]];
    m.push(vec!["RSS idle (one local pod)".into(), mib(f.rss_idle)]);
    m.push(vec![
        "RSS with the whole cluster in its model".into(),
        mib(f.rss_full),
    ]);
    for (n, rss) in f.rss_churn.iter().enumerate() {
        m.push(vec![
            format!(
                "RSS after churn round {} ({} pods created and deleted)",
                n + 1,
                a.churn
            ),
            mib(*rss),
        ]);
    }
    m.push(vec!["peak RSS (VmHWM) over the run".into(), mib(f.hwm)]);
    out += &table(&m);
    out += &format!(
        "\npods created in {} ({} per kubectl call); the agent's model held them all {} after \
         the last create returned; it programmed the node's rules {} times for API changes \
         meanwhile, {:.0} ms in all\n\n",
        fmt_ms(f.create_pods),
        CHUNK,
        fmt_ms(f.model_sync),
        f.fill_programs.0,
        f.fill_programs.1
    );
    let mut t = vec![vec![
        "PROPAGATION (from the kubectl call)".to_string(),
        "p50 ms".into(),
        "p99 ms".into(),
        "max ms".into(),
        "kubectl call p50 ms".into(),
        "AFTER IT RETURNED p50 ms".into(),
        "p99 ms".into(),
    ]];
    let ms = |d: Option<Duration>| {
        d.map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
            .unwrap_or("-".into())
    };
    for (what, samples) in &f.propagation {
        let total: Vec<Duration> = samples.iter().map(|s| s.0).collect();
        let call: Vec<Duration> = samples.iter().map(|s| s.1).collect();
        let after: Vec<Duration> = samples.iter().map(|s| s.0.saturating_sub(s.1)).collect();
        t.push(vec![
            what.to_string(),
            ms(quantile(&total, 0.5)),
            ms(quantile(&total, 0.99)),
            ms(total.iter().max().copied()),
            ms(quantile(&call, 0.5)),
            ms(quantile(&after, 0.5)),
            ms(quantile(&after, 0.99)),
        ]);
    }
    out += &table(&t);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_addresses_are_distinct_and_outside_the_labs_vpc() {
        let ips: std::collections::BTreeSet<Ipv4Addr> = (0..20_000).map(filler_ip).collect();
        assert_eq!(ips.len(), 20_000);
        assert!(ips
            .iter()
            .all(|ip| ip.octets()[0] == 10 && ip.octets()[1] >= 128));
    }

    #[test]
    fn fillers_are_unschedulable_pods_the_agent_reads_an_address_from() {
        let p = filler(7, 5, "f", "filler", filler_ip(7));
        assert_eq!(p["metadata"]["name"], "f7");
        assert_eq!(p["metadata"]["namespace"], "bench-2");
        assert_eq!(p["metadata"]["labels"]["role"], "r2");
        assert_eq!(p["spec"]["schedulerName"], NO_SCHEDULER);
        assert_eq!(p["spec"]["containers"][0]["ports"][0]["name"], "http");
        let k8s: k8s_openapi::api::core::v1::Pod = serde_json::from_value(p).unwrap();
        let pod = vpcnet_policy::k8s::pod(&k8s).unwrap();
        assert_eq!(pod.ips, vec![filler_ip(7)]);
    }

    #[test]
    fn policies_convert_without_warnings() {
        for v in [filler_policy(3, 50), target_policy("x", "r0")] {
            let p: k8s_openapi::api::networking::v1::NetworkPolicy =
                serde_json::from_value(v).unwrap();
            let c = vpcnet_policy::k8s::policy(&p);
            assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        }
    }

    #[test]
    fn gauges_are_read_by_name_and_labels() {
        let m = "# HELP x\nvpcnet_network_policy_cluster_objects{kind=\"pods\"} 5001\n\
                 vpcnet_network_policy_cluster_objects{kind=\"policies\"} 501\n";
        let g = |k: &str| {
            gauge(
                m,
                "vpcnet_network_policy_cluster_objects",
                &format!("kind=\"{k}\""),
            )
        };
        assert_eq!(g("pods"), Some(5001.0));
        assert_eq!(g("policies"), Some(501.0));
        assert_eq!(g("namespaces"), None);
    }
}
