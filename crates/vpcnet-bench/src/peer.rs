//! `vpcnet-bench peer`: vpcnet against AWS's VPC CNI (v1.23.2, unmodified) in one
//! Kubernetes lab, one run: two nodes of the same instance type against the same emulated EC2,
//! `n1` on the VPC CNI, `n2` on vpcnet; each figure is taken on both nodes the same way
//! (scripts/bench-peer.sh). EC2 calls come from the lab cloud's request log, per instance.
//! CNI plugin figures come from the timing shim the lab puts in front of every plugin of both
//! conflists ([`UpOptions::cni_timing`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use vpcnet_lab::cloud::Api;
use vpcnet_lab::kube::workload::{httpd_manifest, Placement};
use vpcnet_lab::lab::{progress, with_lab, CniTiming as Record, Lab, UpOptions, CONFLIST};
use vpcnet_lab::state::NodeCni;
use vpcnet_lab::vpc_cni::VPC_CNI_CONFLIST;
use vpcnet_lab::wait::wait_for;

use crate::pod_timing::{self, quantile};
use table::render;

mod table;

#[derive(ClapArgs)]
pub struct Args {
    /// Lab name.
    #[arg(long, default_value = "bench-peer")]
    name: String,
    /// EC2 instance type of both nodes.
    #[arg(long, default_value = "m5.large")]
    instance_type: String,
    /// Single pods created and deleted one after another per node (CNI ADD and DEL as
    /// kubelet drives them). The burst is the node's max pods with VPC addresses (ENIs ×
    /// (addresses per ENI − 1)).
    #[arg(long, default_value_t = 200)]
    singles: usize,
    /// Pod rolls (delete one pod of a 10-pod Deployment, wait for its replacement) per node
    /// and warm-pool setting.
    #[arg(long, default_value_t = 100)]
    rolls: usize,
    /// Idle window in seconds for the idle EC2 calls (reported per 10 minutes).
    #[arg(long, default_value_t = 600)]
    idle_secs: u64,
    /// Write the kernel state one pod leaves on each node (`ip rule`, `ip route show table
    /// all`, `ip neigh`, `iptables-save`, vpcnet's nftables table; with and without the pod)
    /// to DIR/<node>.txt.
    #[arg(long, value_name = "DIR")]
    kernel_state: Option<std::path::PathBuf>,
    /// Write every CNI plugin invocation the timing shim logged during the single pods
    /// (plugin, command, container, wall time µs, peak RSS KiB, exit code) to
    /// DIR/<node>-cni-timing.jsonl.
    #[arg(long, value_name = "DIR")]
    timings: Option<std::path::PathBuf>,
}

/// One agent's figures.
#[derive(Default)]
struct Figures {
    restart_to_servable: Duration,
    start_to_node_ready: Duration,
    burst_pods: usize,
    burst_all_ready: Duration,
    add_p50: Option<Duration>,
    add_p99: Option<Duration>,
    del_p50: Option<Duration>,
    del_p99: Option<Duration>,
    plugin: PluginFigures,
    mutating_per_roll_default: f64,
    mutating_per_roll_warm_ip: f64,
    idle_calls_per_10min: f64,
    rss_idle_kib: u64,
    rss_max_pods_kib: u64,
}

/// The node's CNI plugin as the runtime ran it during the single pods (timing shim records).
#[derive(Default)]
struct PluginFigures {
    add_p50: Option<Duration>,
    add_p99: Option<Duration>,
    del_p50: Option<Duration>,
    del_p99: Option<Duration>,
    /// The whole chain's ADD per pod (every plugin of the conflist), p50.
    chain_add_p50: Option<Duration>,
    /// The whole chain's DEL per invocation round, p50.
    chain_del_p50: Option<Duration>,
    /// Peak RSS of the main plugin over all its invocations, KiB.
    max_rss_kib: u64,
    /// Failed invocations of the main plugin.
    failures: usize,
}

/// The main plugin of each peer's conflist.
fn main_plugin(cni: NodeCni) -> &'static str {
    match cni {
        NodeCni::VpcCni => "aws-cni",
        NodeCni::Vpcnet => "vpcnet-cni",
    }
}

/// Plugin-level figures from the timing shim's records: the main plugin's ADD and DEL, the
/// chain's ADD and DEL per container (the wall times of all plugins of one command summed).
fn plugin_figures(records: &[Record], main: &str) -> PluginFigures {
    let walls = |cmd: &str| -> Vec<Duration> {
        records
            .iter()
            .filter(|r| r.plugin == main && r.command == cmd)
            .map(|r| Duration::from_micros(r.wall_us))
            .collect()
    };
    // One chain run = consecutive records of one container and command.
    let chain = |cmd: &str| -> Vec<Duration> {
        let mut runs: Vec<(String, Duration)> = Vec::new();
        let mut last: Option<(&str, &str)> = None;
        for r in records {
            let d = Duration::from_micros(r.wall_us);
            if last == Some((&r.container_id, &r.command)) {
                if let Some(run) = runs.last_mut() {
                    run.1 += d;
                }
            } else {
                runs.push((r.command.clone(), d));
            }
            last = Some((&r.container_id, &r.command));
        }
        runs.into_iter()
            .filter(|(c, _)| c == cmd)
            .map(|(_, d)| d)
            .collect()
    };
    let (add, del) = (walls("ADD"), walls("DEL"));
    PluginFigures {
        add_p50: quantile(&add, 0.5),
        add_p99: quantile(&add, 0.99),
        del_p50: quantile(&del, 0.5),
        del_p99: quantile(&del, 0.99),
        chain_add_p50: quantile(&chain("ADD"), 0.5),
        chain_del_p50: quantile(&chain("DEL"), 0.5),
        max_rss_kib: records
            .iter()
            .filter(|r| r.plugin == main)
            .map(|r| r.max_rss_kib)
            .max()
            .unwrap_or(0),
        failures: records
            .iter()
            .filter(|r| r.plugin == main && r.exit_code != 0)
            .count(),
    }
}

const PEERS: [(&str, &str, NodeCni); 2] = [
    ("VPC CNI", "n1", NodeCni::VpcCni),
    ("vpcnet", "n2", NodeCni::Vpcnet),
];

pub fn run(a: &Args) -> Result<()> {
    let mut o = UpOptions::new(&a.name);
    o.instance_type = a.instance_type.clone();
    o.nodes = 2;
    o.cni = vec![("n1".into(), NodeCni::VpcCni)];
    o.cni_timing = true;
    let figs = with_lab(&o, |lab| measure(lab, a))?;
    print!("{}", render(a, &figs));
    Ok(())
}

/// Resident set of the node's agent process (kB, `VmRSS`).
fn agent_rss_kib(lab: &Lab, node: &str) -> Result<u64> {
    let role = format!("agent {node}");
    let p = lab
        .state()?
        .processes
        .into_iter()
        .find(|p| p.role == role)
        .with_context(|| format!("no {role} process"))?;
    Ok(vpcnet_lab::procs::memory_kib(p.pid)?.0)
}

/// The newest request-log sequence number.
fn log_mark(lab: &Lab) -> Result<u64> {
    Ok(lab.cloud().requests()?.records.last().map_or(0, |r| r.seq))
}

/// EC2 calls of `node`'s instance after `mark`: (all, mutating).
fn ec2_calls_since(lab: &Lab, node: &str, mark: u64) -> Result<(usize, usize)> {
    let r: Vec<_> = lab
        .node(node)
        .requests()?
        .into_iter()
        .filter(|r| r.seq > mark && r.api == Api::Ec2)
        .collect();
    Ok((r.len(), r.iter().filter(|r| r.mutating).count()))
}

/// The node's rules, routes of every table, neighbours and iptables rules.
fn node_state(lab: &Lab, node: &str) -> Result<String> {
    let ns = lab.state()?.node(node)?.netns.clone();
    let mut out = String::new();
    for cmd in [
        &["ip", "rule", "show"][..],
        &["ip", "route", "show", "table", "all"],
        &["ip", "neigh", "show"],
        &["iptables-save"],
        &["nft", "list", "table", "ip", "vpcnet"],
    ] {
        let o = std::process::Command::new("ip")
            .args(["netns", "exec", &ns])
            .args(cmd)
            .output()
            .with_context(|| format!("{cmd:?} in {ns}"))?;
        out += &format!(
            "$ {}\n{}\n",
            cmd.join(" "),
            String::from_utf8_lossy(&o.stdout)
        );
    }
    Ok(out)
}

fn only(node: &str) -> Placement {
    Placement {
        only_node: Some(node.into()),
        ..Default::default()
    }
}

/// Deletes `count` pods of `app` one at a time, each time waiting until `replicas` pods are
/// Ready again. Returns the mutating EC2 calls per roll of `node`'s instance.
fn rolls(lab: &Lab, node: &str, app: &str, replicas: usize, count: usize) -> Result<f64> {
    let timeout = Duration::from_secs(180);
    let k = lab.kube().kubectl()?;
    let selector = format!("app={app}");
    lab.workloads()
        .wait_pods_ready(&selector, replicas, timeout)?;
    let mark = log_mark(lab)?;
    let mut seen = BTreeSet::new();
    for i in 0..count {
        let pods = lab
            .workloads()
            .wait_pods_ready(&selector, replicas, timeout)?;
        let victim = pods
            .iter()
            .find(|p| !seen.contains(&p.name))
            .unwrap_or(&pods[0])
            .name
            .clone();
        seen.insert(victim.clone());
        k.run(&["delete", "pod", "-n", "default", &victim, "--wait=true"])?;
        if (i + 1) % 10 == 0 {
            progress(&format!("{node}: {} rolls", i + 1));
        }
    }
    lab.workloads()
        .wait_pods_ready(&selector, replicas, timeout)?;
    let (_, mutating) = ec2_calls_since(lab, node, mark)?;
    Ok(mutating as f64 / count.max(1) as f64)
}

fn restart(lab: &Lab, node: &str, env: &[(String, String)]) -> Result<Duration> {
    lab.node(node).stop_agent()?;
    lab.node(node).set_agent_env(env)?;
    let t0 = Instant::now();
    lab.node(node).start_agent()?;
    Ok(t0.elapsed())
}

/// Agent start → the Node turns Ready, on a node without a conflist (the agent stopped and
/// its conflist removed, kubelet reporting the Node NotReady first): what a new node waits
/// for. Includes kubelet's runtime-status poll and Node status update cadence, the same for
/// both agents.
fn start_to_node_ready(lab: &Lab, node: &str) -> Result<Duration> {
    lab.node(node).stop_agent()?;
    let n = lab.state()?.node(node)?.clone();
    for f in [CONFLIST, VPC_CNI_CONFLIST] {
        let _ = std::fs::remove_file(n.cni_conf_dir().join(f));
    }
    let ready = |want: bool| -> Result<Option<()>> {
        Ok(lab
            .kube()
            .node_statuses()?
            .iter()
            .any(|s| s.name == n.k8s_name && s.ready == want)
            .then_some(()))
    };
    wait_for(
        &format!("{node} NotReady without a conflist"),
        Duration::from_secs(180),
        || ready(false),
    )?;
    let t0 = Instant::now();
    lab.node(node).start_agent()?;
    wait_for(&format!("{node} Ready"), Duration::from_secs(180), || {
        ready(true)
    })?;
    Ok(t0.elapsed())
}

fn measure(lab: &Lab, a: &Args) -> Result<Vec<(&'static str, Figures)>> {
    let timeout = Duration::from_secs(600);
    let k = lab.kube().kubectl()?;
    let m = vpcnet_limits::lookup(&a.instance_type).context("instance type")?;
    // The most pods with VPC addresses the node can hold (secondary addresses of every ENI;
    // max-pods adds 2 for host-network pods, which this lab does not run).
    let max_pods = (m.eni_limit * (m.ipv4_per_eni - 1)) as usize;
    if let Some(dir) = &a.kernel_state {
        std::fs::create_dir_all(dir)?;
        for (label, node, _) in PEERS {
            let mut text = format!("# {label} ({node})\n\n## without pods\n\n");
            text += &node_state(lab, node)?;
            let app = format!("state-{node}");
            k.apply(&httpd_manifest(&app, 1, &only(node)))?;
            let pod = lab
                .workloads()
                .wait_pods_ready(&format!("app={app}"), 1, timeout)?
                .remove(0);
            text += &format!(
                "\n## with one pod ({} {})\n\n",
                pod.name,
                pod.ip.map(|i| i.to_string()).unwrap_or_default()
            );
            text += &node_state(lab, node)?;
            k.run(&["delete", "deployment", "-n", "default", &app, "--wait=true"])?;
            lab.workloads()
                .wait_pods_gone(&format!("app={app}"), timeout)?;
            std::fs::write(dir.join(format!("{node}.txt")), text)?;
        }
    }
    let mut out = Vec::new();
    for (label, node, cni) in PEERS {
        let mut f = Figures::default();
        let tag = node;
        progress(&format!("{label} ({node}): agent restart → servable"));
        f.restart_to_servable = restart(lab, node, &[])?;
        progress(&format!("{label} ({node}): agent start → node Ready"));
        f.start_to_node_ready = start_to_node_ready(lab, node)?;
        std::thread::sleep(Duration::from_secs(5));
        f.rss_idle_kib = agent_rss_kib(lab, node)?;

        progress(&format!("{label} ({node}): burst of {max_pods} pods"));
        let app = format!("burst-{tag}");
        let t0 = Instant::now();
        k.apply(&httpd_manifest(&app, max_pods as u32, &only(node)))?;
        lab.workloads()
            .wait_pods_ready(&format!("app={app}"), max_pods, timeout)?;
        f.burst_all_ready = t0.elapsed();
        f.burst_pods = max_pods;
        f.rss_max_pods_kib = agent_rss_kib(lab, node)?;
        k.run(&["delete", "deployment", "-n", "default", &app, "--wait=true"])?;
        lab.workloads()
            .wait_pods_gone(&format!("app={app}"), timeout)?;

        progress(&format!("{label} ({node}): {} single pods", a.singles));
        let seen = lab.node(node).cni_timings()?.len();
        let singles = pod_timing::singles(
            lab,
            &format!("single-{tag}"),
            a.singles,
            Some(node),
            timeout,
        )?;
        let running: Vec<Duration> = singles.iter().filter_map(|t| t.running).collect();
        let deleted: Vec<Duration> = singles.iter().filter_map(|t| t.deleted).collect();
        f.add_p50 = quantile(&running, 0.5);
        f.add_p99 = quantile(&running, 0.99);
        f.del_p50 = quantile(&deleted, 0.5);
        f.del_p99 = quantile(&deleted, 0.99);
        let records = lab.node(node).cni_timings()?.split_off(seen);
        anyhow::ensure!(
            !records.is_empty(),
            "no plugin invocations logged on {node}: is the timing shim installed (cni_timing)?"
        );
        f.plugin = plugin_figures(&records, main_plugin(cni));
        if let Some(dir) = &a.timings {
            std::fs::create_dir_all(dir)?;
            let lines: Vec<String> = records
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<_, _>>()?;
            std::fs::write(
                dir.join(format!("{node}-cni-timing.jsonl")),
                lines.join("\n") + "\n",
            )?;
        }

        out.push((label, f));
    }
    // Pod rolls: both nodes at once (each figure is its own instance's calls in the request
    // log, so the other node's rolls do not enter it), each warm-pool setting in turn.
    for (warm, env) in [
        (false, vec![]),
        (
            true,
            vec![
                ("WARM_IP_TARGET".to_string(), "5".to_string()),
                ("MINIMUM_IP_TARGET".to_string(), "10".to_string()),
            ],
        ),
    ] {
        let app = |node: &str| format!("roll-{node}-{}", if warm { "w" } else { "d" });
        for (label, node, _) in PEERS {
            progress(&format!(
                "{label} ({node}): {} pod rolls{}",
                a.rolls,
                if warm {
                    " with WARM_IP_TARGET=5 MINIMUM_IP_TARGET=10"
                } else {
                    ""
                }
            ));
            restart(lab, node, &env)?;
            k.apply(&httpd_manifest(&app(node), 10, &only(node)))?;
        }
        let per: Vec<Result<f64>> = std::thread::scope(|s| {
            let running: Vec<_> = PEERS
                .iter()
                .map(|(_, node, _)| {
                    let app = app(node);
                    s.spawn(move || rolls(lab, node, &app, 10, a.rolls))
                })
                .collect();
            running
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a roll thread panicked")))
                })
                .collect()
        });
        for (i, per) in per.into_iter().enumerate() {
            let per = per?;
            if warm {
                out[i].1.mutating_per_roll_warm_ip = per;
            } else {
                out[i].1.mutating_per_roll_default = per;
            }
        }
        for (_, node, _) in PEERS {
            let app = app(node);
            k.run(&["delete", "deployment", "-n", "default", &app, "--wait=true"])?;
            lab.workloads()
                .wait_pods_gone(&format!("app={app}"), timeout)?;
        }
    }
    for (_, node, _) in PEERS {
        restart(lab, node, &[])?;
    }
    // The idle window opens once both agents have finished their start-up and pool-shrinking
    // calls: no EC2 call from either instance for a minute (at most 10 minutes of waiting).
    settle(lab, Duration::from_secs(60), Duration::from_secs(600))?;
    progress(&format!(
        "both nodes idle for {} s (EC2 calls per instance)",
        a.idle_secs
    ));
    let mark = log_mark(lab)?;
    std::thread::sleep(Duration::from_secs(a.idle_secs));
    for (i, (_, node, _)) in PEERS.iter().enumerate() {
        let (all, _) = ec2_calls_since(lab, node, mark)?;
        out[i].1.idle_calls_per_10min = all as f64 * 600.0 / a.idle_secs.max(1) as f64;
    }
    Ok(out)
}

/// Waits until neither node's instance has made an EC2 call for `quiet`, or `limit` passed
/// (then says so and goes on: the idle row shows the calls).
fn settle(lab: &Lab, quiet: Duration, limit: Duration) -> Result<()> {
    progress(&format!(
        "waiting for both agents to settle (no EC2 call for {} s)",
        quiet.as_secs()
    ));
    let t0 = Instant::now();
    let mut mark = log_mark(lab)?;
    let mut since = Instant::now();
    while since.elapsed() < quiet {
        if t0.elapsed() > limit {
            progress(&format!(
                "agents still calling EC2 after {} s; opening the idle window anyway",
                limit.as_secs()
            ));
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(5));
        let now = log_mark(lab)?;
        let calls: usize = PEERS
            .iter()
            .map(|(_, node, _)| ec2_calls_since(lab, node, mark).map(|c| c.0))
            .sum::<Result<usize>>()?;
        if calls > 0 {
            since = Instant::now();
        }
        mark = now;
    }
    progress(&format!("settled after {} s", t0.elapsed().as_secs()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(plugin: &str, command: &str, id: &str, ms: u64) -> Record {
        Record {
            plugin: plugin.into(),
            command: command.into(),
            container_id: id.into(),
            wall_us: ms * 1000,
            max_rss_kib: ms,
            exit_code: 0,
        }
    }

    #[test]
    fn plugin_figures_take_the_main_plugin_and_sum_each_chain_run() {
        let r = vec![
            rec("aws-cni", "ADD", "a", 10),
            rec("egress-cni", "ADD", "a", 2),
            rec("portmap", "ADD", "a", 3),
            rec("portmap", "DEL", "a", 1),
            rec("egress-cni", "DEL", "a", 1),
            rec("aws-cni", "DEL", "a", 4),
            rec("aws-cni", "ADD", "b", 20),
            rec("portmap", "ADD", "b", 3),
        ];
        let f = plugin_figures(&r, "aws-cni");
        let ms = Duration::from_millis;
        assert_eq!(f.add_p50, Some(ms(10)));
        assert_eq!(f.add_p99, Some(ms(20)));
        assert_eq!(f.del_p50, Some(ms(4)));
        // Chains: a = 15, b = 23 for ADD; a = 6 for DEL.
        assert_eq!(f.chain_add_p50, Some(ms(15)));
        assert_eq!(f.chain_del_p50, Some(ms(6)));
        assert_eq!(f.max_rss_kib, 20);
        assert_eq!(f.failures, 0);
    }
}
