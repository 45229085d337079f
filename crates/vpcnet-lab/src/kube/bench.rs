//! Pod start-up benchmark on the lab cluster (`scripts/bench-pods.sh`, `vpcnet lab bench-pods`):
//! a burst (a Deployment of N replicas applied at once: time to all Running and to all Ready)
//! and single pods created one after another (create → Running, create → Ready), timed from a
//! `kubectl get pods --watch` stream with the local monotonic clock (the API server's
//! timestamps have one-second resolution).
//!
//! The same kubelet and containerd run the pods with vpcnet or with Debian's reference
//! `bridge` + `host-local` plugins: [`Lab::use_bridge_cni`] puts a bridge conflist in the node's
//! `/etc/cni/net.d` that sorts before vpcnet's (containerd's CRI uses the first), and removes it
//! again.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::image;
use crate::lab::Lab;

/// File name of the bridge conflist (sorts before `10-vpcnet.conflist`).
pub const BRIDGE_CONFLIST: &str = "05-bench-bridge.conflist";

/// Debian's reference plugins: a Linux bridge `cni0` with the gateway, host-local addresses
/// from a node-local /24, masquerade of pod traffic, portmap (the usual single-node setup).
pub fn bridge_conflist() -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": "bench-bridge",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
             "hairpinMode": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    })
    .to_string()
}

/// When one pod reached Running (every container running) and Ready, after the reference
/// instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PodTimes {
    /// To Running.
    pub running: Option<Duration>,
    /// To Ready.
    pub ready: Option<Duration>,
    /// [`Lab::bench_single`]: `kubectl delete pod --wait` until the pod object is gone (kubelet
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

impl Lab {
    /// Makes the node's containerd use the bridge + host-local conflist (`on`) or vpcnet's
    /// again (`off`), waiting 2 s for containerd to reload its CNI configuration.
    pub fn use_bridge_cni(&self, node_name: &str, on: bool) -> Result<()> {
        let s = self.state()?;
        let path = s.node(node_name)?.cni_conf_dir().join(BRIDGE_CONFLIST);
        if on {
            std::fs::write(&path, bridge_conflist())?;
        } else if path.exists() {
            std::fs::remove_file(&path)?;
        }
        std::thread::sleep(Duration::from_secs(2));
        Ok(())
    }

    fn watch_pods(&self, selector: &str) -> Result<Watch> {
        let mut c = self.kubectl()?.command(&[
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
    pub fn bench_burst(
        &self,
        name: &str,
        replicas: usize,
        node: Option<&str>,
        timeout: Duration,
    ) -> Result<(Duration, Duration)> {
        let placement = super::workload::Placement {
            only_node: node.map(str::to_string),
            ..Default::default()
        };
        let manifest = super::workload::httpd_manifest(name, replicas as u32, &placement);
        let deploy = manifest
            .split("\n---\n")
            .next()
            .unwrap_or_default()
            .to_string();
        let watch = self.watch_pods(&format!("app={name}"))?;
        let k = self.kubectl()?;
        let t0 = Instant::now();
        k.apply(&deploy)?;
        let times = Self::follow(&watch, t0, replicas, timeout)?;
        let max = |f: fn(&PodTimes) -> Option<Duration>| {
            times.values().filter_map(f).max().unwrap_or_default()
        };
        let r = (max(|t| t.running), max(|t| t.ready));
        k.run(&["delete", "deployment", "-n", "default", name, "--wait=true"])?;
        self.wait_pods_gone(&format!("app={name}"), timeout)?;
        Ok(r)
    }

    /// Creates `count` single pods one after another (each deleted before the next; only on
    /// lab node `node` when given), returning each one's create → Running and create → Ready.
    pub fn bench_single(
        &self,
        prefix: &str,
        count: usize,
        node: Option<&str>,
        timeout: Duration,
    ) -> Result<Vec<PodTimes>> {
        let k = self.kubectl()?;
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
                pod["spec"]["nodeSelector"][super::node::NODE_LABEL] = json!(n);
            }
            let watch = self.watch_pods(&format!("bench={prefix}"))?;
            let t0 = Instant::now();
            k.apply(&pod.to_string())?;
            let times = Self::follow(&watch, t0, 1, timeout)?;
            let mut t = times.get(&name).copied().unwrap_or_default();
            let t1 = Instant::now();
            k.run(&["delete", "pod", "-n", "default", &name, "--wait=true"])?;
            t.deleted = Some(t1.elapsed());
            out.push(t);
        }
        Ok(out)
    }

    /// Waits until no pod matches `selector`.
    pub fn wait_pods_gone(&self, selector: &str, timeout: Duration) -> Result<()> {
        crate::wait::wait_for(&format!("pods {selector} to go"), timeout, || {
            Ok(self.pods(selector)?.is_empty().then_some(()))
        })
    }
}

/// The `q`-quantile (0..=1) of `v` by nearest rank; `None` when empty.
pub fn quantile(v: &[Duration], q: f64) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort();
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    Some(s[rank - 1])
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

    #[test]
    fn bridge_conflist_is_a_valid_chain() {
        let v: Value = serde_json::from_str(&bridge_conflist()).unwrap();
        assert_eq!(v["plugins"][0]["type"], "bridge");
        assert_eq!(v["plugins"][0]["ipam"]["type"], "host-local");
    }
}
