//! The fleet-aware budget against the agent before it (`docs/benchmarks.md`, fleet joins):
//! empty `m5.large` nodes with subnet discovery joining at once, as `vpcnet plan --simulate`
//! plays them, under three policies: the agent before the budget (`AgentPolicy::unpaced`),
//! the agent now (`AgentPolicy::default`), and the agent now with a cluster-wide slot
//! dispenser (`SimSettings::slots`, not built). One markdown table row per run.
//!
//! `cargo run --release -p vpcnet-capacity --example fleet_budget [-- SHARE [N,N,...]]`
//! (`SHARE`: the other tools' share of every bucket's refill, default 0). Environment
//! `PACE_MAX_MS` (comma-separated) adds runs of the agent with other largest holds.

use vpcnet_capacity::sim::{simulate, AgentPolicy, SimNode, SimSettings, ThrottlePace};
use vpcnet_ipam::WarmConfig;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let share: f64 = args.get(1).map_or(0.0, |s| s.parse().expect("a share"));
    let sizes: Vec<usize> = args.get(2).map_or(vec![100, 200, 300, 1_000, 5_000], |s| {
        s.split(',').map(|n| n.parse().expect("a size")).collect()
    });
    let cfg = WarmConfig::for_limits(vpcnet_limits::lookup("m5.large").expect("m5.large"));
    let mut runs: Vec<(String, AgentPolicy, bool)> = vec![
        ("before".into(), AgentPolicy::unpaced(), false),
        ("now".into(), AgentPolicy::default(), false),
        ("now + slots".into(), AgentPolicy::default(), true),
    ];
    if let Ok(v) = std::env::var("PACE_MAX_MS") {
        for max_ms in v
            .split(',')
            .map(|m| m.parse::<u64>().expect("milliseconds"))
        {
            let mut p = AgentPolicy::default();
            p.pace = p.pace.map(|pace| ThrottlePace { max_ms, ..pace });
            runs.push((format!("now, max {max_ms} ms"), p, false));
        }
    }
    println!("| agent | nodes | other tools | first pod p50 / p99 / last | floor | last / floor | EC2 calls per node | throttled |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, agent, slots) in &runs {
        for &n in &sizes {
            let nodes = vec![
                SimNode {
                    cfg: cfg.clone(),
                    subnet_discovery: true,
                };
                n
            ];
            let r = simulate(
                &nodes,
                &SimSettings {
                    agent: agent.clone(),
                    other_tools_share: share,
                    slots: *slots,
                    ..SimSettings::default()
                },
            );
            let s = |ms: u64| ms as f64 / 1000.0;
            let floor = r.floor_first_address.seconds;
            let ratio = if floor > 0.0 {
                format!("{:.2}", s(r.first_address.last_ms) / floor)
            } else {
                "–".into()
            };
            println!(
                "| {name} | {n} | {:.0} % | {:.1} / {:.1} / {:.1} s | {floor:.1} s | {ratio} | {:.1} | {:.1} %{} |",
                share * 100.0,
                s(r.first_address.p50_ms),
                s(r.first_address.p99_ms),
                s(r.first_address.last_ms),
                r.calls.total() as f64 / n as f64,
                100.0 * r.throttled.total() as f64 / r.calls.total() as f64,
                if r.unfinished > 0 { format!(" ({} unfinished)", r.unfinished) } else { String::new() },
            );
        }
    }
}
