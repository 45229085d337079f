//! The table of a peer run: every figure of the VPC CNI node and the vpcnet node side by side,
//! with their ratio.

use std::time::Duration;

use vpcnet_introspection::text::table;

use super::{Args, Figures};
use crate::report::ratio;

pub(super) fn ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
        .unwrap_or("-".into())
}

pub(super) fn render(a: &Args, figs: &[(&'static str, Figures)]) -> String {
    let (theirs, ours) = (&figs[0].1, &figs[1].1);
    let d = |d: Duration| Some(d);
    let secs = |x: Option<Duration>| x.map_or(0.0, |d| d.as_secs_f64());
    let mut rows = vec![vec![
        "FIGURE".to_string(),
        "VPC CNI".to_string(),
        "vpcnet".to_string(),
        "vpcnet / VPC CNI".to_string(),
    ]];
    let mut time_row = |name: String, t: Option<Duration>, o: Option<Duration>| {
        rows.push(vec![name, ms(t), ms(o), ratio(secs(o), secs(t))]);
    };
    time_row(
        "agent restart → servable, ms".into(),
        d(theirs.restart_to_servable),
        d(ours.restart_to_servable),
    );
    time_row(
        "agent start → node Ready (no conflist before), ms".into(),
        d(theirs.start_to_node_ready),
        d(ours.start_to_node_ready),
    );
    time_row(
        format!("burst {} pods → all Ready, ms", theirs.burst_pods),
        d(theirs.burst_all_ready),
        d(ours.burst_all_ready),
    );
    time_row(
        format!("pod create → Running p50 ({} pods), ms", a.singles),
        theirs.add_p50,
        ours.add_p50,
    );
    time_row(
        "pod create → Running p99, ms".into(),
        theirs.add_p99,
        ours.add_p99,
    );
    time_row(
        "pod delete → gone p50, ms".into(),
        theirs.del_p50,
        ours.del_p50,
    );
    time_row(
        "pod delete → gone p99, ms".into(),
        theirs.del_p99,
        ours.del_p99,
    );
    let (tp, op) = (&theirs.plugin, &ours.plugin);
    let us = |d: Option<Duration>| d.map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0));
    let mut plugin_row = |name: String, t: Option<Duration>, o: Option<Duration>| {
        rows.push(vec![
            name,
            us(t).unwrap_or("-".into()),
            us(o).unwrap_or("-".into()),
            ratio(secs(o), secs(t)),
        ]);
    };
    plugin_row(
        "CNI ADD p50 (plugin, under kubelet), ms".into(),
        tp.add_p50,
        op.add_p50,
    );
    plugin_row("CNI ADD p99, ms".into(), tp.add_p99, op.add_p99);
    plugin_row("CNI DEL p50, ms".into(), tp.del_p50, op.del_p50);
    plugin_row("CNI DEL p99, ms".into(), tp.del_p99, op.del_p99);
    let sum = |a: Option<Duration>, b: Option<Duration>| Some(a? + b?);
    plugin_row(
        "CNI ADD + DEL p50, ms".into(),
        sum(tp.add_p50, tp.del_p50),
        sum(op.add_p50, op.del_p50),
    );
    plugin_row(
        "whole chain ADD p50 (conflist), ms".into(),
        tp.chain_add_p50,
        op.chain_add_p50,
    );
    plugin_row(
        "whole chain DEL p50, ms".into(),
        tp.chain_del_p50,
        op.chain_del_p50,
    );
    let mut num_row = |name: String, t: f64, o: f64, digits: usize| {
        rows.push(vec![
            name,
            format!("{t:.digits$}"),
            format!("{o:.digits$}"),
            ratio(o, t),
        ]);
    };
    num_row(
        format!(
            "EC2 mutating calls per pod roll ({} rolls), defaults",
            a.rolls
        ),
        theirs.mutating_per_roll_default,
        ours.mutating_per_roll_default,
        2,
    );
    num_row(
        "… with WARM_IP_TARGET=5 MINIMUM_IP_TARGET=10".into(),
        theirs.mutating_per_roll_warm_ip,
        ours.mutating_per_roll_warm_ip,
        2,
    );
    num_row(
        format!(
            "EC2 calls per 10 idle minutes{}",
            if a.idle_secs == 600 {
                String::new()
            } else {
                format!(" (from {} s)", a.idle_secs)
            }
        ),
        theirs.idle_calls_per_10min,
        ours.idle_calls_per_10min,
        0,
    );
    num_row(
        "agent RSS idle, MiB".into(),
        theirs.rss_idle_kib as f64 / 1024.0,
        ours.rss_idle_kib as f64 / 1024.0,
        1,
    );
    num_row(
        format!("agent RSS at {} pods, MiB", theirs.burst_pods),
        theirs.rss_max_pods_kib as f64 / 1024.0,
        ours.rss_max_pods_kib as f64 / 1024.0,
        1,
    );
    num_row(
        "CNI plugin peak RSS, MiB".into(),
        tp.max_rss_kib as f64 / 1024.0,
        op.max_rss_kib as f64 / 1024.0,
        1,
    );
    num_row(
        "CNI plugin failed invocations".into(),
        tp.failures as f64,
        op.failures as f64,
        0,
    );
    table(&rows)
}
