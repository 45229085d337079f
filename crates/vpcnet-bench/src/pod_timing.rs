//! Pod start-up on the lab cluster, timed from a `kubectl get pods --watch` stream with the
//! local monotonic clock (the API server's timestamps have one-second resolution): a burst (a
//! Deployment of N replicas applied at once: time to all Running and to all Ready, [`burst`])
//! and single pods created one after another (create → Running, create → Ready, delete → gone,
//! [`singles`]). Used by `pods` and `peer`.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use vpcnet_lab::image;
use vpcnet_lab::kube::node::NODE_LABEL;
use vpcnet_lab::kube::workload::{httpd_manifest, Placement};
use vpcnet_lab::lab::Lab;

/// When one pod reached Running (every container running) and Ready, after the reference
/// instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PodTimes {
    /// To Running.
    pub running: Option<Duration>,
    /// To Ready.
    pub ready: Option<Duration>,
    /// [`singles`]: `kubectl delete pod --wait` until the pod object is gone (kubelet
    /// stopped it, CNI DEL ran, the sandbox was removed).
    pub deleted: Option<Duration>,
}

/// Updates `times` of the pod in one watch `event` seen at `at` (relative to `t0`).
pub fn observe(times: &mut BTreeMap<String, PodTimes>, event: &Value, at: Duration) {
    let pod = &event["object"];
    let Some(name) = pod["metadata"]["name"].as_str() else {
        return;
    };
    if event["type"] == "DELETED" {
        return;
    }
    let t = times.entry(name.to_string()).or_default();
    let running = pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|cs| {
                !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object())
            });
    if running && t.running.is_none() {
        t.running = Some(at);
    }
    let ready = pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    if ready && t.ready.is_none() {
        t.ready = Some(at);
    }
}

/// A running `kubectl get pods --watch` whose events arrive, timestamped, on a channel.
struct Watch {
    child: std::process::Child,
    events: mpsc::Receiver<(Instant, Value)>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn watch_pods(lab: &Lab, selector: &str) -> Result<Watch> {
    let mut c = lab.kube().kubectl()?.command(&[
        "get",
        "pods",
        "-n",
        "default",
        "-l",
        selector,
        "--watch",
        "--output-watch-events",
        "-o",
        "json",
    ])?;
    c.stdout(Stdio::piped())
        .stderr(Stdio::null())
        .stdin(Stdio::null());
    let mut child = c.spawn().context("starting kubectl --watch")?;
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let stream =
            serde_json::Deserializer::from_reader(BufReader::new(out)).into_iter::<Value>();
        for v in stream.flatten() {
            if tx.send((Instant::now(), v)).is_err() {
                break;
            }
        }
    });
    // Let the watch be established before anything is created.
    std::thread::sleep(Duration::from_millis(1500));
    Ok(Watch { child, events: rx })
}

/// Follows `watch` until `count` pods are Ready (or `timeout`), timing from `t0`.
fn follow(
    watch: &Watch,
    t0: Instant,
    count: usize,
    timeout: Duration,
) -> Result<BTreeMap<String, PodTimes>> {
    let mut times = BTreeMap::new();
    let deadline = t0 + timeout;
    loop {
        let ready = times
            .values()
            .filter(|t: &&PodTimes| t.ready.is_some())
            .count();
        if ready >= count {
            return Ok(times);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("only {ready} of {count} pods Ready after {timeout:?}");
        }
        match watch.events.recv_timeout(left) {
            Ok((at, ev)) => observe(&mut times, &ev, at.saturating_duration_since(t0)),
            Err(_) => bail!("only {ready} of {count} pods Ready after {timeout:?}"),
        }
    }
}

/// Applies a Deployment `name` of `replicas` busybox httpd pods (readiness probe on port
/// 80; only on lab node `node` when given) and returns (all Running, all Ready) measured
/// from the apply; then deletes it and waits until its pods are gone.
pub fn burst(
    lab: &Lab,
    name: &str,
    replicas: usize,
    node: Option<&str>,
    timeout: Duration,
) -> Result<(Duration, Duration)> {
    let placement = Placement {
        only_node: node.map(str::to_string),
        ..Default::default()
    };
    let manifest = httpd_manifest(name, replicas as u32, &placement);
    let deploy = manifest
        .split("\n---\n")
        .next()
        .unwrap_or_default()
        .to_string();
    let watch = watch_pods(lab, &format!("app={name}"))?;
    let k = lab.kube().kubectl()?;
    let t0 = Instant::now();
    k.apply(&deploy)?;
    let times = follow(&watch, t0, replicas, timeout)?;
    let max = |f: fn(&PodTimes) -> Option<Duration>| {
        times.values().filter_map(f).max().unwrap_or_default()
    };
    let r = (max(|t| t.running), max(|t| t.ready));
    k.run(&["delete", "deployment", "-n", "default", name, "--wait=true"])?;
    lab.workloads()
        .wait_pods_gone(&format!("app={name}"), timeout)?;
    Ok(r)
}

/// Creates `count` single pods one after another (each deleted before the next; only on
/// lab node `node` when given), returning each one's create → Running and create → Ready.
pub fn singles(
    lab: &Lab,
    prefix: &str,
    count: usize,
    node: Option<&str>,
    timeout: Duration,
) -> Result<Vec<PodTimes>> {
    let k = lab.kube().kubectl()?;
    let mut out = Vec::new();
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"bench": prefix}},
            "spec": {
                "containers": [{
                    "name": "httpd", "image": image::IMAGE_REF, "imagePullPolicy": "Never",
                    "command": ["httpd", "-f", "-p", "80", "-h", "/"],
                    "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 1},
                }],
                "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": false,
            },
        });
        let mut pod = pod;
        if let Some(n) = node {
            pod["spec"]["nodeSelector"][NODE_LABEL] = json!(n);
        }
        let watch = watch_pods(lab, &format!("bench={prefix}"))?;
        let t0 = Instant::now();
        k.apply(&pod.to_string())?;
        let times = follow(&watch, t0, 1, timeout)?;
        let mut t = times.get(&name).copied().unwrap_or_default();
        let t1 = Instant::now();
        k.run(&["delete", "pod", "-n", "default", &name, "--wait=true"])?;
        t.deleted = Some(t1.elapsed());
        out.push(t);
    }
    Ok(out)
}

/// The `q`-quantile (0..=1) of `v` by nearest rank; `None` when empty.
pub fn quantile(v: &[Duration], q: f64) -> Option<Duration> {
    let mut s = v.to_vec();
    s.sort();
    (!s.is_empty()).then(|| vpcnet_lab::load::quantile(&s, q))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, name: &str, phase: &str, running: bool, ready: bool) -> Value {
        json!({"type": kind, "object": {"metadata": {"name": name}, "status": {
            "phase": phase,
            "containerStatuses": [{"state": if running { json!({"running": {}}) } else { json!({"waiting": {}}) }}],
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        }}})
    }

    #[test]
    fn first_running_and_first_ready_are_kept() {
        let mut t = BTreeMap::new();
        let ms = Duration::from_millis;
        observe(&mut t, &ev("ADDED", "a", "Pending", false, false), ms(10));
        observe(
            &mut t,
            &ev("MODIFIED", "a", "Running", true, false),
            ms(500),
        );
        observe(&mut t, &ev("MODIFIED", "a", "Running", true, true), ms(900));
        observe(
            &mut t,
            &ev("MODIFIED", "a", "Running", true, true),
            ms(1500),
        );
        assert_eq!(
            t["a"],
            PodTimes {
                running: Some(ms(500)),
                ready: Some(ms(900)),
                deleted: None,
            }
        );
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<Duration> = (1..=20).map(Duration::from_millis).collect();
        assert_eq!(quantile(&v, 0.5), Some(Duration::from_millis(10)));
        assert_eq!(quantile(&v, 0.9), Some(Duration::from_millis(18)));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
