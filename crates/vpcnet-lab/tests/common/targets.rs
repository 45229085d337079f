//! Helpers of the `vpcnet-targets` end-to-end tests (`targets.rs`, `targets_under_load.rs`):
//! the web pods and their readiness gate, the target group's view, the controller started as a
//! lab process, its metrics, load balancers per test.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use vpcnet_elbv2::HealthState;
use vpcnet_emu::request_log::Api;
use vpcnet_lab::kube::targets::{httpd_nlb, TargetsOptions};
use vpcnet_lab::kube::workload::parse_pods;
use vpcnet_lab::lab::Lab;
use vpcnet_lab::procs::ProcRecord;

use super::wait_until;

pub const GATE: &str = "target-health.elbv2.k8s.aws/web";
pub const RESYNC: u64 = 10;

/// Pods of app=web: (name, IP, node, gate True, Ready, deleting).
#[derive(Debug, Clone)]
pub struct WebPod {
    pub name: String,
    pub ip: Option<Ipv4Addr>,
    pub node: String,
    pub gate: bool,
    pub ready: bool,
    pub deleting: bool,
}

pub fn web_pods(lab: &Lab) -> Vec<WebPod> {
    let v = lab
        .kube()
        .kubectl()
        .unwrap()
        .json(&["get", "pods", "-n", "default", "-l", "app=web"])
        .unwrap();
    let infos = parse_pods(&v);
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .zip(infos)
        .map(|(p, i)| WebPod {
            name: i.name,
            ip: i.ip,
            node: i.node,
            gate: p["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == GATE && c["status"] == "True")
            }),
            ready: i.ready,
            deleting: !p["metadata"]["deletionTimestamp"].is_null(),
        })
        .collect()
}

/// Target IP → state.
pub fn targets(lab: &Lab) -> Vec<(Ipv4Addr, HealthState)> {
    lab.lbs()
        .target_health("web")
        .unwrap()
        .into_iter()
        .map(|h| (h.target.id.parse().unwrap(), h.state))
        .collect()
}

pub fn registered(lab: &Lab) -> BTreeSet<Ipv4Addr> {
    targets(lab)
        .into_iter()
        .filter(|(_, s)| *s != HealthState::Draining)
        .map(|(ip, _)| ip)
        .collect()
}

/// Waits until `n` web pods are Ready (gate True) and exactly their IPs are healthy targets;
/// meanwhile checks that no gate is True while its target is not healthy.
pub fn wait_serving(lab: &Lab, n: usize, timeout: Duration) -> Vec<WebPod> {
    let t0 = Instant::now();
    loop {
        let pods = web_pods(lab);
        let t = targets(lab);
        for p in pods.iter().filter(|p| p.gate && !p.deleting) {
            let ip = p.ip.unwrap();
            let st = t.iter().find(|(i, _)| *i == ip).map(|(_, s)| s.clone());
            assert!(
                matches!(st, Some(HealthState::Healthy) | Some(HealthState::Draining)),
                "pod {} has its gate True but its target {ip} is {st:?}",
                p.name
            );
        }
        let live: Vec<WebPod> = pods.iter().filter(|p| !p.deleting).cloned().collect();
        let healthy: BTreeSet<Ipv4Addr> = t
            .iter()
            .filter(|(_, s)| *s == HealthState::Healthy)
            .map(|(i, _)| *i)
            .collect();
        let ips: BTreeSet<Ipv4Addr> = live.iter().filter_map(|p| p.ip).collect();
        if live.len() == n && live.iter().all(|p| p.ready && p.gate) && healthy == ips {
            return live;
        }
        assert!(
            t0.elapsed() < timeout,
            "not serving after {timeout:?}: pods {live:?}, targets {t:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

pub fn seq(lab: &Lab) -> u64 {
    lab.cloud()
        .requests()
        .unwrap()
        .records
        .last()
        .map(|r| r.seq)
        .unwrap_or(0)
}

/// ELBv2 actions answered after `since`, by name.
pub fn elbv2_actions(lab: &Lab, since: u64) -> Vec<String> {
    lab.cloud()
        .requests()
        .unwrap()
        .records
        .into_iter()
        .filter(|r| r.seq > since && r.api == Api::Elbv2)
        .map(|r| r.action)
        .collect()
}

pub fn kill9(p: &ProcRecord) {
    vpcnet_lab::procs::kill_pid(p.pid);
    wait_until("the controller died", Duration::from_secs(5), || !p.alive());
}

/// Lease duration of the lab's replicas: a follower takes over this long after the leader's
/// last renewal.
pub const LEASE: u64 = 6;

pub fn start(lab: &Lab, role: &str) -> ProcRecord {
    start_on(lab, role, 61779)
}

pub fn start_on(lab: &Lab, role: &str, http_port: u16) -> ProcRecord {
    let p = lab
        .targets_controller()
        .start(&TargetsOptions {
            role: role.into(),
            resync_seconds: RESYNC,
            http_port,
            extra_args: vec!["--lease-duration-seconds".into(), LEASE.to_string()],
            ..Default::default()
        })
        .unwrap();
    lab.targets_controller()
        .wait_synced(role, Duration::from_secs(30))
        .unwrap();
    p
}

pub fn scale(lab: &Lab, n: usize) {
    lab.kube()
        .kubectl()
        .unwrap()
        .run(&[
            "scale",
            "deployment/web",
            "-n",
            "default",
            &format!("--replicas={n}"),
        ])
        .unwrap();
}

/// `/metrics` of the controller listening on 127.0.0.1:`port` in the VPC namespace.
pub fn lab_metrics(lab: &Lab, port: u16) -> String {
    use std::io::{Read, Write};
    let vpc = lab.state().unwrap().namespaces[0].clone();
    vpcnet_lab::spawn::in_netns(&vpc, move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })
    .unwrap()
}

/// The value of the series `line_prefix` (e.g. `vpcnet_targets_leader`) in metrics `text`.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

pub fn new_lb(lab: &Lab) -> vpcnet_lab::lbctl::LabLb {
    new_lb_named(lab, "web")
}

pub fn new_lb_named(lab: &Lab, name: &str) -> vpcnet_lab::lbctl::LabLb {
    lab.lbs().create_lb(&httpd_nlb(name)).unwrap()
}

/// Seconds from each new pod's creation (its `creationTimestamp`, whole seconds, so an upper
/// bound) to the first poll that saw its target healthy, while `n` pods come up.
pub fn wait_serving_timed(
    lab: &Lab,
    old: &BTreeSet<String>,
    n: usize,
    timeout: Duration,
) -> Vec<f64> {
    let mut seen: std::collections::BTreeMap<String, f64> = Default::default();
    let t0 = Instant::now();
    loop {
        let v = lab
            .kube()
            .kubectl()
            .unwrap()
            .json(&["get", "pods", "-n", "default", "-l", "app=web"])
            .unwrap();
        let healthy: BTreeSet<Ipv4Addr> = targets(lab)
            .into_iter()
            .filter(|(_, s)| *s == HealthState::Healthy)
            .map(|(i, _)| i)
            .collect();
        let now = chrono::Utc::now();
        for p in v["items"].as_array().unwrap() {
            let name = p["metadata"]["name"].as_str().unwrap().to_string();
            let ip: Option<Ipv4Addr> = p["status"]["podIP"].as_str().and_then(|s| s.parse().ok());
            if old.contains(&name) || seen.contains_key(&name) {
                continue;
            }
            if ip.is_some_and(|ip| healthy.contains(&ip)) {
                let created: chrono::DateTime<chrono::Utc> = p["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                seen.insert(name, (now - created).num_milliseconds() as f64 / 1000.0);
            }
        }
        if seen.len() + old.len() >= n {
            break;
        }
        assert!(
            t0.elapsed() < timeout,
            "only {} new pods serving: {seen:?}",
            seen.len()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    wait_serving(lab, n, timeout);
    let mut v: Vec<f64> = seen.into_values().collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

pub fn pct(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Two replicas: only the leader writes; killing it hands over without a deregistration.
/// Then scaling 4 → 12 → 2 under constant load loses no request; pod-created → serving
/// p50/p90 measured on the 8 new pods.
/// The healthy targets of load balancer `lb`, `None` when the read itself failed (throttled).
pub fn healthy_of(lab: &Lab, lb: &str) -> Option<BTreeSet<Ipv4Addr>> {
    Some(
        lab.lbs()
            .target_health(lb)
            .ok()?
            .into_iter()
            .filter(|h| h.state == HealthState::Healthy)
            .map(|h| h.target.id.parse().unwrap())
            .collect(),
    )
}
