//! `vpcnet-bench targets`: vpcnet-targets against aws-load-balancer-controller (unmodified,
//! built by scripts/build-aws-lbc.sh) in one Kubernetes lab, one run, one controller at a time
//! (scripts/bench-targets.sh). Each controller gets the same work: its own network load
//! balancer (same health check and deregistration delay), the same gated `httpd` Deployment +
//! Service + `TargetGroupBinding` ([`gated_httpd_manifest`]), a rolling update under constant
//! load through the load balancer, then a scale-up under the same load. ELBv2 calls come from
//! the lab cloud's request log, told apart by the access key each controller signs with (the
//! bench's own target-health polls sign with the lab's key).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use vpcnet_elbv2::HealthState;
use vpcnet_introspection::text::table;
use vpcnet_lab::cloud::Api;
use vpcnet_lab::kube::aws_lbc::{self, AwsLbcOptions};
use vpcnet_lab::kube::targets::{gated_httpd_manifest, httpd_nlb, TargetsOptions};
use vpcnet_lab::lab::{progress, with_lab, Lab, UpOptions};
use vpcnet_lab::procs::ProcRecord;

use crate::pod_timing::quantile;
use crate::report::ratio;

#[derive(ClapArgs)]
pub struct Args {
    /// Lab name.
    #[arg(long, default_value = "bench-targets")]
    name: String,
    /// Replicas of the Deployment that rolls.
    #[arg(long, default_value_t = 4)]
    replicas: u32,
    /// After the rollout, scale to this many replicas under the same load (more
    /// pod-created → serving samples); no scale-up when not above --replicas.
    #[arg(long, default_value_t = 12)]
    scale_to: u32,
    /// Concurrent connections of the load generator.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Longest constant load, in seconds: it runs from 3 s before the rollout until 2 s after
    /// the scale-up served (the rollout and the scale-up must end within it).
    #[arg(long, default_value_t = 400)]
    max_load_secs: u64,
    /// Copy both controllers' logs to DIR (<tag>.log) before the lab is torn down.
    #[arg(long, value_name = "DIR")]
    logs: Option<PathBuf>,
    /// Directory of aws-load-balancer-controller (default: $VPCNET_AWS_LBC_BIN_DIR, else the
    /// newest build of scripts/build-aws-lbc.sh).
    #[arg(long)]
    aws_lbc_bin_dir: Option<PathBuf>,
}

/// The two controllers, in the order they run: label, tag (app and role names), access key.
const PEERS: [(&str, &str, &str); 2] = [
    ("aws-load-balancer-controller", "lbc", "AKIDBENCHAWSLBC"),
    ("vpcnet-targets", "vpcnet", "AKIDBENCHVPCNET"),
];

/// One controller's figures.
#[derive(Debug, Default)]
struct Figures {
    requests: u64,
    load_seconds: f64,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    p99_ms: f64,
    rollout: Duration,
    /// Pod created → its target healthy, every new pod of the rollout and the scale-up, sorted.
    serving: Vec<Duration>,
    /// The same pods' app listening (its container started: httpd listens at once) → its
    /// target healthy, sorted.
    listening: Vec<Duration>,
    /// ELBv2 calls from the rollout's start until it settled: (action, count).
    calls: BTreeMap<String, usize>,
    rss_peak_kib: u64,
    rss_end_kib: u64,
}

impl Figures {
    fn reads(&self) -> usize {
        self.calls
            .iter()
            .filter(|(a, _)| is_read(a))
            .map(|(_, n)| n)
            .sum()
    }
    fn writes(&self) -> usize {
        self.calls
            .iter()
            .filter(|(a, _)| !is_read(a))
            .map(|(_, n)| n)
            .sum()
    }
}

/// ELBv2 read actions (`Describe*`); every other action writes.
fn is_read(action: &str) -> bool {
    action.starts_with("Describe")
}

pub fn run(a: &Args) -> Result<()> {
    if a.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    let lbc = aws_lbc::locate(a.aws_lbc_bin_dir.as_deref())?;
    let mut o = UpOptions::new(&a.name);
    o.nodes = 2;
    let figs = with_lab(&o, |lab| {
        lab.targets_controller().install_crd()?;
        lab.aws_lbc().install_crds(&lbc)?;
        let mut out = Vec::new();
        for (label, tag, key) in PEERS {
            progress(&format!("{label}: rollout and scale-up under load"));
            let f =
                measure(lab, a, &lbc, tag, key).with_context(|| format!("benchmarking {label}"))?;
            progress(&format!("{label}: {f:?}"));
            out.push((label, f));
        }
        Ok(out)
    })?;
    print!("{}", render(a, &figs));
    Ok(())
}

fn start(lab: &Lab, lbc: &std::path::Path, tag: &str, key: &str) -> Result<ProcRecord> {
    let role = format!("bench-{tag}");
    if tag == "lbc" {
        let mut o = AwsLbcOptions::new(lbc.to_path_buf());
        o.role = role.clone();
        o.access_key = Some(key.into());
        let p = lab.aws_lbc().start(&o)?;
        lab.aws_lbc().wait_started(&role, Duration::from_secs(90))?;
        Ok(p)
    } else {
        let p = lab.targets_controller().start(&TargetsOptions {
            role: role.clone(),
            access_key: Some(key.into()),
            ..Default::default()
        })?;
        lab.targets_controller()
            .wait_synced(&role, Duration::from_secs(60))?;
        Ok(p)
    }
}

/// `VmRSS` and `VmHWM` (peak) of `pid`, kB.
fn rss_kib(pid: i32) -> Result<(u64, u64)> {
    vpcnet_lab::procs::memory_kib(pid)
        .with_context(|| format!("the controller (pid {pid}) is gone"))
}

/// A pod of the app: name, IP, creation time, its container's start, Ready, deleting.
struct Pod {
    name: String,
    ip: Option<Ipv4Addr>,
    created: chrono::DateTime<chrono::Utc>,
    /// `status.containerStatuses[0].state.running.startedAt` (whole seconds, as `created`).
    started: Option<chrono::DateTime<chrono::Utc>>,
    ready: bool,
    deleting: bool,
}

fn pods(lab: &Lab, app: &str) -> Result<Vec<Pod>> {
    let v = lab.kube().kubectl()?.json(&[
        "get",
        "pods",
        "-n",
        "default",
        "-l",
        &format!("app={app}"),
    ])?;
    let items = v["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .map(|p| {
            Ok(Pod {
                name: p["metadata"]["name"].as_str().unwrap_or_default().into(),
                ip: p["status"]["podIP"].as_str().and_then(|s| s.parse().ok()),
                created: p["metadata"]["creationTimestamp"]
                    .as_str()
                    .context("a pod without creationTimestamp")?
                    .parse()?,
                started: p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
                    .as_str()
                    .and_then(|s| s.parse().ok()),
                ready: p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                }),
                deleting: !p["metadata"]["deletionTimestamp"].is_null(),
            })
        })
        .collect()
}

/// The target group's targets by state.
fn targets(lab: &Lab, app: &str) -> Result<Vec<(Ipv4Addr, HealthState)>> {
    Ok(lab
        .lbs()
        .target_health(app)?
        .into_iter()
        .filter_map(|h| Some((h.target.id.parse().ok()?, h.state)))
        .collect())
}

/// Created → healthy and listening → healthy of each pod, by name.
type Serving = BTreeMap<String, (Duration, Option<Duration>)>;

/// Records `p`'s times in `serving` the first time its target is seen healthy at `now`.
fn record(p: &Pod, now: chrono::DateTime<chrono::Utc>, serving: &mut Serving) {
    if !serving.contains_key(&p.name) {
        let since = |t: chrono::DateTime<chrono::Utc>| (now - t).to_std().unwrap_or_default();
        serving.insert(p.name.clone(), (since(p.created), p.started.map(since)));
    }
}

/// Polls until `n` live pods, none of them in `old`, are Ready with exactly their IPs healthy
/// and no other target left but draining ones; records each new pod's created → healthy and
/// listening → healthy times into `serving` and samples the controller's RSS. Returns when
/// done or errs after `timeout`.
fn watch(
    lab: &Lab,
    app: &str,
    old: &BTreeSet<String>,
    n: usize,
    pid: i32,
    serving: &mut Serving,
    timeout: Duration,
) -> Result<()> {
    let t0 = Instant::now();
    loop {
        rss_kib(pid)?;
        let ps = pods(lab, app)?;
        let ts = targets(lab, app)?;
        let healthy: BTreeSet<Ipv4Addr> = ts
            .iter()
            .filter(|(_, s)| *s == HealthState::Healthy)
            .map(|(i, _)| *i)
            .collect();
        let now = chrono::Utc::now();
        for p in ps.iter().filter(|p| !old.contains(&p.name)) {
            if p.ip.is_some_and(|ip| healthy.contains(&ip)) {
                record(p, now, serving);
            }
        }
        let live: Vec<&Pod> = ps.iter().filter(|p| !p.deleting).collect();
        let ips: BTreeSet<Ipv4Addr> = live.iter().filter_map(|p| p.ip).collect();
        let stale = ts
            .iter()
            .any(|(i, s)| !ips.contains(i) && *s != HealthState::Draining);
        if live.len() == n
            && live.iter().all(|p| p.ready && !old.contains(&p.name))
            && healthy == ips
            && !stale
        {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            bail!(
                "{app}: not {n} new pods serving after {timeout:?}: pods {:?}, targets {ts:?}",
                live.iter()
                    .map(|p| (&p.name, p.ip, p.ready))
                    .collect::<Vec<_>>()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn log_mark(lab: &Lab) -> Result<u64> {
    Ok(lab.cloud().requests()?.records.last().map_or(0, |r| r.seq))
}

fn measure(lab: &Lab, a: &Args, lbc: &std::path::Path, tag: &str, key: &str) -> Result<Figures> {
    let app = format!("web-{tag}");
    let n = a.replicas as usize;
    let l = lab.lbs().create_lb(&httpd_nlb(&app))?;
    let ctl = start(lab, lbc, tag, key)?;
    let k = lab.kube().kubectl()?;
    k.apply(&gated_httpd_manifest(
        &app,
        a.replicas,
        1,
        &l.target_group.arn,
    ))?;
    let mut serving = Serving::new();
    watch(
        lab,
        &app,
        &BTreeSet::new(),
        n,
        ctl.pid,
        &mut serving,
        Duration::from_secs(300),
    )?;
    serving.clear();
    // Let the controller finish what the first rollout queued before counting.
    std::thread::sleep(Duration::from_secs(5));

    let mut f = Figures::default();
    let load_for = Duration::from_secs(a.max_load_secs);
    let stop = Arc::new(AtomicBool::new(false));
    let loader = {
        let (lab, app, conns, stop) = (lab.clone(), app.clone(), a.connections, stop.clone());
        std::thread::spawn(move || lab.lbs().load_until(&app, "n1", "/", conns, load_for, stop))
    };
    let t_load = Instant::now();
    std::thread::sleep(Duration::from_secs(3));

    // Rolling update: every pod replaced.
    let old: BTreeSet<String> = pods(lab, &app)?.into_iter().map(|p| p.name).collect();
    let mark = log_mark(lab)?;
    let t_roll = Instant::now();
    k.apply(&gated_httpd_manifest(
        &app,
        a.replicas,
        2,
        &l.target_group.arn,
    ))?;
    watch(
        lab,
        &app,
        &old,
        n,
        ctl.pid,
        &mut serving,
        Duration::from_secs(300),
    )?;
    f.rollout = t_roll.elapsed();
    progress(&format!(
        "{app}: rollout done in {:.1} s",
        f.rollout.as_secs_f64()
    ));
    // Old targets drain (deregistration delay 5 s); count the calls made meanwhile too.
    std::thread::sleep(Duration::from_secs(6));
    for r in lab.cloud().requests()?.records {
        if r.seq > mark && r.api == Api::Elbv2 && r.access_key.as_deref() == Some(key) {
            *f.calls.entry(r.action).or_default() += 1;
        }
    }

    // Scale-up under the same load.
    if a.scale_to > a.replicas {
        // The live pods (the rollout's old pods may still be terminating).
        let old: BTreeSet<String> = pods(lab, &app)?
            .into_iter()
            .filter(|p| !p.deleting)
            .map(|p| p.name)
            .collect();
        k.run(&[
            "scale",
            &format!("deployment/{app}"),
            "-n",
            "default",
            &format!("--replicas={}", a.scale_to),
        ])?;
        let mut up = Serving::new();
        // `watch` wants every live pod new; the old ones stay, so wait for the count instead.
        let t0 = Instant::now();
        loop {
            rss_kib(ctl.pid)?;
            let ps = pods(lab, &app)?;
            let healthy: BTreeSet<Ipv4Addr> = targets(lab, &app)?
                .into_iter()
                .filter(|(_, s)| *s == HealthState::Healthy)
                .map(|(i, _)| i)
                .collect();
            let now = chrono::Utc::now();
            for p in ps.iter().filter(|p| !old.contains(&p.name)) {
                if p.ip.is_some_and(|ip| healthy.contains(&ip)) {
                    record(p, now, &mut up);
                }
            }
            if up.len() + old.len() >= a.scale_to as usize {
                break;
            }
            if t0.elapsed() > Duration::from_secs(300) {
                bail!(
                    "{app}: only {} new pods serving after the scale-up",
                    up.len()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        serving.extend(up);
    }
    std::thread::sleep(Duration::from_secs(2));
    let done = t_load.elapsed();
    stop.store(true, Ordering::Relaxed);
    let report = loader
        .join()
        .map_err(|_| anyhow::anyhow!("the load thread panicked"))??;
    if done >= load_for {
        bail!(
            "the rollout and scale-up took {done:?}, longer than the load ({load_for:?}): \
             raise --max-load-secs"
        );
    }
    (f.rss_end_kib, f.rss_peak_kib) = rss_kib(ctl.pid)?;
    f.requests = report.requests;
    f.load_seconds = report.seconds;
    f.errors = report.errors;
    f.error_kinds = report.error_kinds;
    f.p99_ms = report.latency.p99_ms;
    f.serving = serving.values().map(|(c, _)| *c).collect();
    f.serving.sort();
    f.listening = serving.values().filter_map(|(_, l)| *l).collect();
    f.listening.sort();

    // Leave the lab to the next controller: stop this one, remove its workload (its
    // finalizer on the binding, if any, goes with it: nobody serves it any more).
    lab.processes().stop_role(&ctl.role)?;
    if let Some(dir) = &a.logs {
        std::fs::create_dir_all(dir)?;
        let log = lab.dir.join("logs").join(format!("{}.log", ctl.role));
        std::fs::copy(&log, dir.join(format!("{tag}.log")))
            .with_context(|| format!("copying {}", log.display()))?;
    }
    k.run(&[
        "patch",
        "targetgroupbinding",
        &app,
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])?;
    for kind in ["targetgroupbinding", "service", "deployment"] {
        k.run(&["delete", kind, &app, "-n", "default", "--wait=true"])?;
    }
    lab.workloads()
        .wait_pods_gone(&format!("app={app}"), Duration::from_secs(120))?;
    Ok(f)
}

fn render(a: &Args, figs: &[(&'static str, Figures)]) -> String {
    let (theirs, ours) = (&figs[0].1, &figs[1].1);
    let mut rows = vec![vec![
        "FIGURE".to_string(),
        "aws-load-balancer-controller".to_string(),
        "vpcnet-targets".to_string(),
        "vpcnet / aws-lbc".to_string(),
    ]];
    let mut row = |name: String, t: f64, o: f64, digits: usize| {
        rows.push(vec![
            name,
            format!("{t:.digits$}"),
            format!("{o:.digits$}"),
            ratio(o, t),
        ]);
    };
    let scale = if a.scale_to > a.replicas {
        format!(" + scale {} → {}", a.replicas, a.scale_to)
    } else {
        String::new()
    };
    row(
        format!("failed requests (rollout{scale} under load)"),
        theirs.errors as f64,
        ours.errors as f64,
        0,
    );
    rows.push(vec![
        "requests sent (seconds of load)".into(),
        format!("{} ({:.0})", theirs.requests, theirs.load_seconds),
        format!("{} ({:.0})", ours.requests, ours.load_seconds),
        String::new(),
    ]);
    let mut row = |name: String, t: f64, o: f64, digits: usize| {
        rows.push(vec![
            name,
            format!("{t:.digits$}"),
            format!("{o:.digits$}"),
            ratio(o, t),
        ]);
    };
    row("request p99, ms".into(), theirs.p99_ms, ours.p99_ms, 1);
    row(
        format!("rollout of {} pods, s", a.replicas),
        theirs.rollout.as_secs_f64(),
        ours.rollout.as_secs_f64(),
        1,
    );
    let q = |f: &Figures, p: f64| quantile(&f.serving, p).unwrap_or_default().as_secs_f64();
    row(
        format!(
            "pod created → serving p50 ({} / {} pods), s",
            theirs.serving.len(),
            ours.serving.len()
        ),
        q(theirs, 0.5),
        q(ours, 0.5),
        1,
    );
    row(
        "pod created → serving p90, s".into(),
        q(theirs, 0.9),
        q(ours, 0.9),
        1,
    );
    let l = |f: &Figures, p: f64| quantile(&f.listening, p).unwrap_or_default().as_secs_f64();
    row(
        format!(
            "pod app listening → serving p50 ({} / {} pods), s",
            theirs.listening.len(),
            ours.listening.len()
        ),
        l(theirs, 0.5),
        l(ours, 0.5),
        1,
    );
    row(
        "pod app listening → serving p90, s".into(),
        l(theirs, 0.9),
        l(ours, 0.9),
        1,
    );
    row(
        "ELBv2 calls per rollout".into(),
        (theirs.reads() + theirs.writes()) as f64,
        (ours.reads() + ours.writes()) as f64,
        0,
    );
    row(
        "… of which writes".into(),
        theirs.writes() as f64,
        ours.writes() as f64,
        0,
    );
    row(
        "controller RSS peak, MiB".into(),
        theirs.rss_peak_kib as f64 / 1024.0,
        ours.rss_peak_kib as f64 / 1024.0,
        1,
    );
    row(
        "controller RSS at end, MiB".into(),
        theirs.rss_end_kib as f64 / 1024.0,
        ours.rss_end_kib as f64 / 1024.0,
        1,
    );
    let mut out = table(&rows);
    for (label, f) in figs {
        out += &format!("{label}: ELBv2 calls per rollout by action {:?}", f.calls);
        if !f.error_kinds.is_empty() {
            out += &format!("; failed requests by kind {:?}", f.error_kinds);
        }
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_describes_and_everything_else_writes() {
        let f = Figures {
            calls: [
                ("DescribeTargetHealth".to_string(), 5),
                ("DescribeTargetGroups".to_string(), 1),
                ("RegisterTargets".to_string(), 4),
                ("DeregisterTargets".to_string(), 3),
            ]
            .into(),
            ..Default::default()
        };
        assert_eq!((f.reads(), f.writes()), (6, 7));
        assert_eq!(ratio(0.0, 0.0), "=");
        assert_eq!(ratio(2.0, 4.0), "0.50");
    }
}
