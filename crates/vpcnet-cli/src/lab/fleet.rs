//! `vpcnet lab fleet`: N agent-only nodes join at once against one lab cloud with the
//! account's EC2 rate limits on ([`vpcnet_lab::fleet`]); prints the figures and the invariants,
//! and tears the fleet down (always).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use vpcnet_introspection::text::table;
use vpcnet_lab::fleet::{FleetOptions, FleetReport};
use vpcnet_lab::state::NodeCni;

#[derive(ClapArgs)]
pub struct Args {
    /// Lab name (state in /run/vpcnet-lab/<name>).
    #[arg(long, default_value = "fleet")]
    name: String,
    /// How many nodes join (see docs/lab.md, "A fleet", for what bounds it).
    #[arg(long)]
    nodes: usize,
    /// Every node's CNI: `vpcnet` or `vpc-cni` (AWS's VPC CNI, built by scripts/build-k8s.sh).
    #[arg(long, default_value = "vpcnet", value_name = "vpcnet|vpc-cni")]
    cni: String,
    /// EC2 instance type of the nodes.
    #[arg(long, default_value = "m5.large")]
    instance_type: String,
    /// Extra agent environment, KEY=VALUE (e.g. WARM_IP_TARGET=5); repeatable.
    #[arg(long = "agent-env", value_name = "KEY=VALUE")]
    agent_env: Vec<String>,
    /// The account's rate limits: `aws-defaults` (AWS's documented buckets), `off`, or a JSON
    /// file in the shape of the emulator's `PUT /_emu/account-limits` (docs/emulator.md).
    #[arg(
        long,
        default_value = "aws-defaults",
        value_name = "aws-defaults|off|FILE"
    )]
    account_limits: String,
    /// Share (0 to 1) of every account bucket's refill another tool in the account uses while
    /// the fleet joins (its calls are metered, then refused: they change nothing).
    #[arg(long, default_value_t = 0.0, value_name = "SHARE")]
    other_tools_share: f64,
    /// After the join, steady churn: each node replaces this many pods a minute (through its
    /// CNI, the oldest deleted, a new one added).
    #[arg(long, value_name = "K")]
    churn: Option<u32>,
    /// With --churn: pods each node keeps.
    #[arg(long, default_value_t = 5, requires = "churn")]
    churn_population: usize,
    /// With --churn: minutes the churn runs.
    #[arg(long, default_value_t = 2.0, requires = "churn")]
    churn_minutes: f64,
    /// Seconds without any change to ENIs or addresses after which the fleet has settled.
    #[arg(long, default_value_t = 20)]
    quiet: u64,
    /// Seconds after which an unsettled fleet is an error.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Skip the final check that adds and deletes one pod on every node through its CNI.
    #[arg(long)]
    no_pod_check: bool,
    /// Directory of the Kubernetes and VPC CNI binaries (default: the newest build of
    /// scripts/build-k8s.sh in /var/cache/vpcnet).
    #[arg(long, env = "VPCNET_K8S_BIN_DIR", value_name = "DIR")]
    k8s_bin_dir: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Output,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

pub fn run(a: &Args) -> Result<()> {
    let cni = match a.cni.as_str() {
        "vpcnet" => NodeCni::Vpcnet,
        "vpc-cni" => NodeCni::VpcCni,
        other => bail!("--cni {other:?}: use vpcnet or vpc-cni"),
    };
    let mut o = FleetOptions::new(&a.name, a.nodes, cni);
    o.instance_type = a.instance_type.clone();
    o.agent_env = vpcnet_lab::lab::parse_agent_env(&a.agent_env)?;
    o.k8s_bin_dir = a.k8s_bin_dir.clone();
    o.account_limits = account_limits(&a.account_limits)?;
    o.quiet = Duration::from_secs(a.quiet);
    o.timeout = Duration::from_secs(a.timeout);
    o.pod_check = !a.no_pod_check;
    o.other_tools_share = a.other_tools_share;
    if let Some(k) = a.churn {
        if k == 0 || a.churn_population == 0 || a.churn_minutes.is_nan() || a.churn_minutes <= 0.0 {
            bail!("--churn, --churn-population and --churn-minutes must be above 0");
        }
        o.churn = Some(vpcnet_lab::fleet::churn::ChurnOptions {
            population: a.churn_population,
            per_minute: k,
            duration: Duration::from_secs_f64(a.churn_minutes * 60.0),
        });
    }
    let report = vpcnet_lab::fleet::join(&o)?;
    match a.output {
        Output::Text => print!("{}", report_text(&report)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if !report.invariants.hold() {
        bail!("the fleet broke an invariant (see above)");
    }
    if report.churn.as_ref().is_some_and(|c| !c.held()) {
        bail!("the churn broke an invariant (see above)");
    }
    Ok(())
}

fn account_limits(arg: &str) -> Result<vpcnet_lab::fleet::AccountLimits> {
    match arg {
        "aws-defaults" => Ok(vpcnet_lab::fleet::AccountLimits {
            enabled: true,
            ..Default::default()
        }),
        "off" => Ok(vpcnet_lab::fleet::AccountLimits::default()),
        file => {
            let text = std::fs::read_to_string(file).with_context(|| {
                format!("--account-limits {file}: use aws-defaults, off or a JSON file")
            })?;
            serde_json::from_str(&text).with_context(|| format!("--account-limits {file}"))
        }
    }
}

fn secs(ms: u64) -> String {
    format!("{:.1}", ms as f64 / 1000.0)
}

/// The report as text: the join's spread, the floors, calls by action, invariants, memory.
pub fn report_text(r: &FleetReport) -> String {
    let f = &r.figures;
    let n = f.nodes as f64;
    let mut out = format!(
        "{} nodes of {} ({}) joined at once (agents started within {:.1} s)\n",
        f.nodes,
        r.cni,
        r.instance_type,
        r.launch_ms as f64 / 1000.0
    );
    if r.restarts.total() > 0 {
        out += &format!(
            "agents exited and were started again after kubelet's back-off: {} times on {} nodes{}\n",
            r.restarts.total(),
            r.restarts.by_node.len(),
            match &r.restarts.first_exit {
                Some((node, line)) => format!(" (first {node}: {line})"),
                None => String::new(),
            }
        );
    }
    if f.other_tools_share > 0.0 {
        out += &format!(
            "another tool used {:.0} % of every bucket's refill ({} calls)\n",
            100.0 * f.other_tools_share,
            r.other_tool_calls
        );
    }
    out += "\n";
    let floor = |fl: &vpcnet_lab::fleet::Floor| match &fl.limiting_action {
        Some(a) => format!("{:.1} ({a})", fl.seconds),
        None => "0 (within the burst)".into(),
    };
    out += &table(&[
        vec![
            "from the start to".into(),
            "p50 s".into(),
            "p99 s".into(),
            "last s".into(),
            "floor s".into(),
        ],
        vec![
            "first EC2 call".into(),
            secs(f.first_call.p50_ms),
            secs(f.first_call.p99_ms),
            secs(f.first_call.last_ms),
            String::new(),
        ],
        vec![
            "first pod".into(),
            secs(f.first_pod.p50_ms),
            secs(f.first_pod.p99_ms),
            secs(f.first_pod.last_ms),
            floor(&f.floor_first_pod),
        ],
        vec![
            "warm pool full".into(),
            secs(f.warm_full.p50_ms),
            secs(f.warm_full.p99_ms),
            secs(f.warm_full.last_ms),
            floor(&f.floor_all),
        ],
    ]);
    if let Some(x) = f.last_over_floor() {
        out += &format!("last first pod / floor: {x:.2}\n");
    }
    out += "\n";
    let mut rows = vec![vec![
        "EC2 action".to_string(),
        "calls".into(),
        "per node".into(),
        "throttled".into(),
        "other errors".into(),
    ]];
    for (action, c) in &f.calls {
        rows.push(vec![
            action.clone(),
            c.to_string(),
            format!("{:.2}", *c as f64 / n),
            f.throttled.get(action).copied().unwrap_or(0).to_string(),
            f.failed.get(action).copied().unwrap_or(0).to_string(),
        ]);
    }
    rows.push(vec![
        "all".into(),
        f.total_calls().to_string(),
        format!("{:.2}", f.total_calls() as f64 / n),
        format!(
            "{} ({:.1} %)",
            f.total_throttled(),
            100.0 * f.throttled_share()
        ),
        f.failed.values().sum::<u64>().to_string(),
    ]);
    out += &table(&rows);
    out += &format!(
        "\nat the end: {} ENIs, {} pod addresses ({:.1} per node); agents' memory {:.0} MiB ({:.1} MiB the largest)\n",
        f.enis,
        f.addresses,
        f.addresses as f64 / n,
        r.agents_rss_mib,
        r.largest_agent_rss_mib
    );
    let inv = &r.invariants;
    out += &format!(
        "invariants: {} (addresses on two ENIs: {}, unattached ENIs: {}, {})\n",
        if inv.hold() { "hold" } else { "BROKEN" },
        inv.duplicate_addresses.len(),
        inv.unattached_enis.len(),
        if inv.pods_checked {
            format!(
                "nodes failing a pod: {}, pods with another node's address: {}",
                inv.nodes_not_serving.len(),
                inv.foreign_pod_addresses.len()
            )
        } else {
            "pods not checked".into()
        }
    );
    for (node, why) in inv.nodes_not_serving.iter().take(5) {
        out += &format!("  {node}: {why}\n");
    }
    if let Some(p) = &r.prediction {
        let off = |predicted: u64, measured: usize| {
            if predicted == 0 {
                String::new()
            } else {
                format!(
                    " ({:+.1} %)",
                    100.0 * (measured as f64 - predicted as f64) / predicted as f64
                )
            }
        };
        let sim = &p.simulation;
        if !p.unmodelled.is_empty() {
            out += &format!(
                "\n(vpcnet plan does not model {}: predicted as if unset)",
                p.unmodelled.join(", ")
            );
        }
        out += &format!(
            "\nvpcnet plan predicted {} ENIs, {} pod addresses; measured {}{}, {}{}\n\
             simulated join (boot spread {} s): first pod p50 / p99 / last {} / {} / {} s, {} calls ({} throttled)\n",
            p.enis,
            p.addresses,
            f.enis,
            off(p.enis, f.enis),
            f.addresses,
            off(p.addresses, f.addresses),
            secs(sim.boot_spread_ms),
            secs(sim.first_address.p50_ms),
            secs(sim.first_address.p99_ms),
            secs(sim.first_address.last_ms),
            sim.calls.total(),
            sim.throttled.total()
        );
    }
    if let Some(c) = &r.churn {
        out += &format!(
            "\nchurn: {} pods per node, {} replaced per node per minute, {:.0} s: {} added, {} deleted, \
             ADD p50 / p99 {} / {} ms\n",
            c.population,
            c.per_minute,
            c.seconds,
            c.added,
            c.deleted,
            c.add_ms.p50_ms,
            c.add_ms.p99_ms
        );
        let mut rows = vec![vec![
            "EC2 action".to_string(),
            "calls".into(),
            "per minute".into(),
            "per node per minute".into(),
            "throttled".into(),
        ]];
        let per_min = |c2: u64| c2 as f64 * 60.0 / c.seconds.max(1e-9);
        for (action, n2) in &c.calls {
            rows.push(vec![
                action.clone(),
                n2.to_string(),
                format!("{:.1}", per_min(*n2)),
                format!("{:.3}", per_min(*n2) / n),
                c.throttled.get(action).copied().unwrap_or(0).to_string(),
            ]);
        }
        rows.push(vec![
            "all".into(),
            c.calls.values().sum::<u64>().to_string(),
            format!("{:.1}", c.calls_per_minute()),
            format!("{:.3}", c.calls_per_minute() / n),
            c.throttled.values().sum::<u64>().to_string(),
        ]);
        out += &table(&rows);
        out += &format!(
            "churn invariants: {} (failed ADD/DEL: {}, addresses on two live pods: {}, pods with another node's address: {})\n",
            if c.held() { "hold" } else { "BROKEN" },
            c.failure_count,
            c.duplicate_pod_addresses.len(),
            c.foreign_pod_addresses.len()
        );
        for (node, pod, why) in c.failures.iter().take(5) {
            out += &format!("  {node} {pod}: {why}\n");
        }
    }
    if let Some(why) = &r.no_prediction {
        out += &format!("\nno prediction: {why}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use vpcnet_lab::fleet::{figures, Holdings, Invariants, Restarts, Timeline};

    use super::*;

    fn report(invariants: Invariants, restarts: Restarts) -> FleetReport {
        let mut t = Timeline::new(["n1", "n2"]);
        t.observe_serving("n1", 100);
        t.observe_serving("n2", 100);
        let held: BTreeMap<String, Holdings> = ["n1", "n2"]
            .map(|n| {
                (
                    n.to_string(),
                    Holdings {
                        enis: 1,
                        addresses: 9,
                    },
                )
            })
            .into_iter()
            .collect();
        t.observe_cloud(1_500, &held);
        let limits = vpcnet_lab::fleet::AccountLimits {
            enabled: true,
            ..Default::default()
        };
        FleetReport {
            cni: NodeCni::Vpcnet,
            instance_type: "m5.large".into(),
            figures: figures::figures(&t, &[], 0, &BTreeMap::new(), &limits, 0.0),
            invariants,
            launch_ms: 40,
            restarts,
            other_tool_calls: 0,
            agents_rss_mib: 44.0,
            largest_agent_rss_mib: 22.0,
            prediction: None,
            no_prediction: None,
            churn: None,
        }
    }

    #[test]
    fn the_report_gives_the_spread_and_the_invariants() {
        let text = report_text(&report(
            Invariants {
                pods_checked: true,
                ..Default::default()
            },
            Restarts::default(),
        ));
        assert!(text.contains("2 nodes of vpcnet (m5.large)"), "{text}");
        assert!(text.contains("first pod          1.5"), "{text}");
        assert!(text.contains("0 (within the burst)"), "{text}");
        assert!(text.contains("invariants: hold"), "{text}");
        assert!(!text.contains("exited"), "{text}");
    }

    #[test]
    fn a_broken_invariant_and_a_restart_are_said() {
        let mut restarts = Restarts::default();
        restarts.by_node.insert("n2".into(), 1);
        restarts.first_exit = Some(("n2".into(), "Initialization failure".into()));
        let text = report_text(&report(
            Invariants {
                pods_checked: true,
                nodes_not_serving: vec![("n2".into(), "CNI ADD failed".into())],
                ..Default::default()
            },
            restarts,
        ));
        assert!(text.contains("invariants: BROKEN"), "{text}");
        assert!(text.contains("n2: CNI ADD failed"), "{text}");
        assert!(
            text.contains("1 times on 1 nodes (first n2: Initialization failure)"),
            "{text}"
        );
    }
}
