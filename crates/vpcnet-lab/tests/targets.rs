//! End-to-end acceptance of `vpcnet-targets` in the Kubernetes lab: the real API server,
//! kubelets and kube-proxy, pods networked by vpcnet, the lab cloud's ELBv2 with its HAProxy
//! data plane, the controller run as a lab process (see `vpcnet_lab::kube::targets`). Needs
//! root, the workspace binaries (`cargo build --workspace --all-targets`) and the Kubernetes binaries;
//! fails when not root.

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::{wait_until, with_kube_lab};
use vpcnet_elbv2::HealthState;
use vpcnet_emu::request_log::Api;
use vpcnet_lab::kube::targets::{
    gated_httpd_manifest, httpd_nlb, selected_httpd_manifest, TargetsOptions,
};
use vpcnet_lab::kube::workload::parse_pods;
use vpcnet_lab::lab::Lab;
use vpcnet_lab::procs::ProcRecord;

const GATE: &str = "target-health.elbv2.k8s.aws/web";
const RESYNC: u64 = 10;

/// Pods of app=web: (name, IP, node, gate True, Ready, deleting).
#[derive(Debug, Clone)]
struct WebPod {
    name: String,
    ip: Option<Ipv4Addr>,
    node: String,
    gate: bool,
    ready: bool,
    deleting: bool,
}

fn web_pods(lab: &Lab) -> Vec<WebPod> {
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
fn targets(lab: &Lab) -> Vec<(Ipv4Addr, HealthState)> {
    lab.lbs()
        .target_health("web")
        .unwrap()
        .into_iter()
        .map(|h| (h.target.id.parse().unwrap(), h.state))
        .collect()
}

fn registered(lab: &Lab) -> BTreeSet<Ipv4Addr> {
    targets(lab)
        .into_iter()
        .filter(|(_, s)| *s != HealthState::Draining)
        .map(|(ip, _)| ip)
        .collect()
}

/// Waits until `n` web pods are Ready (gate True) and exactly their IPs are healthy targets;
/// meanwhile checks that no gate is True while its target is not healthy.
fn wait_serving(lab: &Lab, n: usize, timeout: Duration) -> Vec<WebPod> {
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

fn seq(lab: &Lab) -> u64 {
    lab.cloud()
        .requests()
        .unwrap()
        .records
        .last()
        .map(|r| r.seq)
        .unwrap_or(0)
}

/// ELBv2 actions answered after `since`, by name.
fn elbv2_actions(lab: &Lab, since: u64) -> Vec<String> {
    lab.cloud()
        .requests()
        .unwrap()
        .records
        .into_iter()
        .filter(|r| r.seq > since && r.api == Api::Elbv2)
        .map(|r| r.action)
        .collect()
}

fn kill9(p: &ProcRecord) {
    vpcnet_lab::procs::kill_pid(p.pid);
    wait_until("the controller died", Duration::from_secs(5), || !p.alive());
}

/// Lease duration of the lab's replicas: a follower takes over this long after the leader's
/// last renewal.
const LEASE: u64 = 6;

fn start(lab: &Lab, role: &str) -> ProcRecord {
    start_on(lab, role, 61779)
}

fn start_on(lab: &Lab, role: &str, http_port: u16) -> ProcRecord {
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

fn scale(lab: &Lab, n: usize) {
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

#[test]
fn targetgroupbinding_serves_gates_rolls_out_losslessly_restarts_warm_and_repairs_drift() {
    with_kube_lab(
        "tgb",
        |o| o.nodes = 2,
        |lab| {
            let l = new_lb(lab);
            lab.targets_controller().install_crd().unwrap();
            let mut ctl = start(lab, "vpcnet-targets");
            let k = lab.kube().kubectl().unwrap();

            // 1. Four pods over two nodes become healthy targets; gates True only once healthy.
            let t0 = Instant::now();
            k.apply(&gated_httpd_manifest("web", 4, 1, &l.target_group.arn))
                .unwrap();
            let pods = wait_serving(lab, 4, Duration::from_secs(180));
            eprintln!(
                "4 pods serving through the load balancer {:?} after apply",
                t0.elapsed()
            );
            let nodes: BTreeSet<&str> = pods.iter().map(|p| p.node.as_str()).collect();
            assert_eq!(nodes.len(), 2, "pods on two nodes: {pods:?}");
            let r = lab
                .lbs()
                .load("web", "n1", "/", 4, Duration::from_secs(3))
                .unwrap();
            assert_eq!(r.errors, 0, "{r:?}");
            assert_eq!(r.by_responder.len(), 4, "all four answer: {r:?}");
            let b = k
                .json(&["get", "targetgroupbinding", "-n", "default", "web"])
                .unwrap();
            assert_eq!(
                b["status"]["observedGeneration"], b["metadata"]["generation"],
                "{b}"
            );

            // 2. Rolling update under constant load: zero failed requests.
            let loader = {
                let lab = lab.clone();
                std::thread::spawn(move || {
                    lab.lbs()
                        .load("web", "n1", "/", 4, Duration::from_secs(90))
                        .unwrap()
                })
            };
            std::thread::sleep(Duration::from_secs(3));
            let t_roll = Instant::now();
            k.apply(&gated_httpd_manifest("web", 4, 2, &l.target_group.arn))
                .unwrap();
            k.run(&[
                "rollout",
                "status",
                "deployment/web",
                "-n",
                "default",
                "--timeout=150s",
            ])
            .unwrap();
            eprintln!("rollout done in {:?}", t_roll.elapsed());
            let report = loader.join().unwrap();
            eprintln!(
                "rolling update under load: {} requests, {} errors {:?}, p99 {} ms, answered by {:?}",
                report.requests,
                report.errors,
                report.error_kinds,
                report.latency.p99_ms,
                report.by_responder.keys().collect::<Vec<_>>()
            );
            assert_eq!(
                report.errors, 0,
                "failed requests during the rollout: {report:?}"
            );
            assert!(
                report.by_responder.keys().any(|k| k.ends_with(" v2")),
                "the new version served: {report:?}"
            );
            wait_serving(lab, 4, Duration::from_secs(60));

            // 3. Ten targets, kill -9, restart with nothing changed: zero writes.
            scale(lab, 10);
            wait_serving(lab, 10, Duration::from_secs(180));
            let before = seq(lab);
            kill9(&ctl);
            ctl = start(lab, "vpcnet-targets-2");
            wait_until(
                "the restarted controller described its target group",
                Duration::from_secs(LEASE + 20),
                || {
                    elbv2_actions(lab, before)
                        .iter()
                        .any(|a| a == "DescribeTargetHealth")
                },
            );
            std::thread::sleep(Duration::from_secs(3));
            let actions = elbv2_actions(lab, before);
            let writes: Vec<&String> = actions
                .iter()
                .filter(|a| *a == "RegisterTargets" || *a == "DeregisterTargets")
                .collect();
            eprintln!("after a kill -9 restart with 10 targets: ELBv2 calls {actions:?}");
            assert!(writes.is_empty(), "a warm restart wrote {writes:?}");
            assert_eq!(registered(lab).len(), 10);

            // A change made while the controller is down is applied after its sync.
            kill9(&ctl);
            scale(lab, 8);
            wait_until("8 web pods left", Duration::from_secs(60), || {
                web_pods(lab).len() == 8
            });
            let t_sync = Instant::now();
            ctl = start(lab, "vpcnet-targets-3");
            let want: BTreeSet<Ipv4Addr> = web_pods(lab).iter().filter_map(|p| p.ip).collect();
            wait_until(
                "the 2 targets removed during the downtime deregistered",
                Duration::from_secs(LEASE + 30),
                || registered(lab) == want,
            );
            eprintln!(
                "downtime change applied {:?} after restart",
                t_sync.elapsed()
            );

            // 4. A target removed by hand is back within one resync.
            let victim = *want.iter().next().unwrap();
            lab.lbs().deregister("web", &[victim.to_string()]).unwrap();
            let t_drift = Instant::now();
            wait_until(
                "the target removed by hand registered again",
                Duration::from_secs(RESYNC + 5),
                || registered(lab).contains(&victim),
            );
            eprintln!(
                "drift repaired {:?} after the manual DeregisterTargets (resync {RESYNC} s)",
                t_drift.elapsed()
            );
            let metrics = lab_metrics(lab, 61779);
            assert!(
                metrics.contains("vpcnet_targets_registrations_total"),
                "{metrics}"
            );
            drop(ctl);
        },
    );
}

/// `/metrics` of the controller listening on 127.0.0.1:`port` in the VPC namespace.
fn lab_metrics(lab: &Lab, port: u16) -> String {
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
fn metric(text: &str, series: &str) -> f64 {
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

fn new_lb(lab: &Lab) -> vpcnet_lab::lbctl::LabLb {
    new_lb_named(lab, "web")
}

fn new_lb_named(lab: &Lab, name: &str) -> vpcnet_lab::lbctl::LabLb {
    lab.lbs().create_lb(&httpd_nlb(name)).unwrap()
}

/// Seconds from each new pod's creation (its `creationTimestamp`, whole seconds, so an upper
/// bound) to the first poll that saw its target healthy, while `n` pods come up.
fn wait_serving_timed(lab: &Lab, old: &BTreeSet<String>, n: usize, timeout: Duration) -> Vec<f64> {
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

fn pct(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Two replicas: only the leader writes; killing it hands over without a deregistration.
/// Then scaling 4 → 12 → 2 under constant load loses no request; pod-created → serving
/// p50/p90 measured on the 8 new pods.
#[test]
fn two_replicas_hand_over_without_deregistering_and_scaling_under_load_loses_nothing() {
    with_kube_lab(
        "tgb2",
        |o| o.nodes = 2,
        |lab| {
            let l = new_lb(lab);
            lab.targets_controller().install_crd().unwrap();
            let a = start_on(lab, "targets-a", 61781);
            wait_until("targets-a leads", Duration::from_secs(20), || {
                metric(&lab_metrics(lab, 61781), "vpcnet_targets_leader") == 1.0
            });
            let b = start_on(lab, "targets-b", 61782);
            let k = lab.kube().kubectl().unwrap();
            k.apply(&gated_httpd_manifest("web", 4, 1, &l.target_group.arn))
                .unwrap();
            wait_serving(lab, 4, Duration::from_secs(180));
            let (ma, mb) = (lab_metrics(lab, 61781), lab_metrics(lab, 61782));
            assert_eq!(metric(&mb, "vpcnet_targets_leader"), 0.0, "{mb}");
            assert_eq!(
                metric(&ma, "vpcnet_targets_registrations_total"),
                4.0,
                "the leader registered: {ma}"
            );
            assert!(
                !mb.contains("action=\"RegisterTargets\"")
                    && !mb.contains("action=\"DescribeTargetHealth\""),
                "the follower made no ELBv2 call: {mb}"
            );

            // Kill -9 the leader: the follower takes over and deregisters nothing.
            let before = seq(lab);
            let t_kill = Instant::now();
            kill9(&a);
            wait_until("targets-b leads", Duration::from_secs(LEASE + 10), || {
                metric(&lab_metrics(lab, 61782), "vpcnet_targets_leader") == 1.0
            });
            wait_until(
                "targets-b described the target group",
                Duration::from_secs(10),
                || {
                    elbv2_actions(lab, before)
                        .iter()
                        .any(|x| x == "DescribeTargetHealth")
                },
            );
            eprintln!(
                "handover {:?} after kill -9 of the leader",
                t_kill.elapsed()
            );
            std::thread::sleep(Duration::from_secs(2));
            let actions = elbv2_actions(lab, before);
            assert!(
                !actions
                    .iter()
                    .any(|x| x == "DeregisterTargets" || x == "RegisterTargets"),
                "the handover wrote: {actions:?}"
            );
            assert_eq!(registered(lab).len(), 4);

            // Scale 4 -> 12 -> 2 under constant load.
            let load_for = Duration::from_secs(90);
            let loader = {
                let lab = lab.clone();
                std::thread::spawn(move || lab.lbs().load("web", "n1", "/", 4, load_for).unwrap())
            };
            let t_load = Instant::now();
            std::thread::sleep(Duration::from_secs(2));
            let old: BTreeSet<String> = web_pods(lab).into_iter().map(|p| p.name).collect();
            scale(lab, 12);
            let lat = wait_serving_timed(lab, &old, 12, Duration::from_secs(180));
            eprintln!(
                "pod created -> healthy target (serving), {} pods: p50 {:.1} s, p90 {:.1} s, max {:.1} s (creationTimestamp is whole seconds: upper bounds)",
                lat.len(),
                pct(&lat, 0.5),
                pct(&lat, 0.9),
                lat.last().copied().unwrap_or(0.0)
            );
            scale(lab, 2);
            wait_serving(lab, 2, Duration::from_secs(120));
            let done = t_load.elapsed();
            let report = loader.join().unwrap();
            eprintln!(
                "scale 4 -> 12 -> 2 under load (done after {done:?} of {load_for:?}): {} requests, {} errors {:?}, p99 {} ms",
                report.requests, report.errors, report.error_kinds, report.latency.p99_ms
            );
            assert!(done < load_for, "the scaling outlasted the load ({done:?})");
            assert_eq!(
                report.errors, 0,
                "failed requests while scaling: {report:?}"
            );
            drop(b);
        },
    );
}

/// Label-selector mode: pods `app=web` registered as soon as they have an IP, deregistered at
/// their deletion timestamp; a rolling update under constant load loses no request.
#[test]
fn label_selected_pods_roll_out_under_load_without_a_failed_request() {
    with_kube_lab(
        "tgbsel",
        |o| o.nodes = 2,
        |lab| {
            let l = new_lb(lab);
            let role = "targets-sel";
            lab.targets_controller()
                .start(&TargetsOptions {
                    role: role.into(),
                    resync_seconds: RESYNC,
                    http_port: 61783,
                    extra_args: vec![
                        "--leader-elect=false".into(),
                        "--target-group-bindings=false".into(),
                        "--pod-namespace=default".into(),
                        "--pod-selector=app=web".into(),
                        format!("--pod-target-group-arn={}", l.target_group.arn),
                        "--pod-target-port=80".into(),
                    ],
                    ..Default::default()
                })
                .unwrap();
            lab.targets_controller()
                .wait_synced(role, Duration::from_secs(30))
                .unwrap();
            let k = lab.kube().kubectl().unwrap();
            let serving = |n: usize| {
                wait_until(
                    &format!("{n} pods, exactly their IPs healthy"),
                    Duration::from_secs(180),
                    || {
                        let pods = web_pods(lab);
                        let live: BTreeSet<Ipv4Addr> = pods
                            .iter()
                            .filter(|p| !p.deleting)
                            .filter_map(|p| p.ip)
                            .collect();
                        let healthy: BTreeSet<Ipv4Addr> = targets(lab)
                            .into_iter()
                            .filter(|(_, s)| *s == HealthState::Healthy)
                            .map(|(i, _)| i)
                            .collect();
                        live.len() == n && healthy == live
                    },
                )
            };
            k.apply(&selected_httpd_manifest("web", 4, 1)).unwrap();
            serving(4);
            let loader = {
                let lab = lab.clone();
                std::thread::spawn(move || {
                    lab.lbs()
                        .load("web", "n1", "/", 4, Duration::from_secs(120))
                        .unwrap()
                })
            };
            std::thread::sleep(Duration::from_secs(3));
            let t_roll = Instant::now();
            k.apply(&selected_httpd_manifest("web", 4, 2)).unwrap();
            k.run(&[
                "rollout",
                "status",
                "deployment/web",
                "-n",
                "default",
                "--timeout=150s",
            ])
            .unwrap();
            let rolled = t_roll.elapsed();
            let report = loader.join().unwrap();
            eprintln!(
                "label-selector mode, rolling update under load (rollout {rolled:?}): {} requests, {} errors {:?}, p99 {} ms",
                report.requests, report.errors, report.error_kinds, report.latency.p99_ms
            );
            assert!(
                rolled < Duration::from_secs(115),
                "the rollout outlasted the load"
            );
            assert_eq!(
                report.errors, 0,
                "failed requests during the rollout: {report:?}"
            );
            assert!(report.by_responder.keys().any(|k| k.ends_with(" v2")));
            serving(4);
        },
    );
}

/// The healthy targets of load balancer `lb`, `None` when the read itself failed (throttled).
fn healthy_of(lab: &Lab, lb: &str) -> Option<BTreeSet<Ipv4Addr>> {
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

#[test]
fn half_of_all_elbv2_calls_throttled_both_target_groups_still_converge() {
    with_kube_lab(
        "tgbthr",
        |o| o.nodes = 2,
        |lab| {
            let (a, b) = (new_lb_named(lab, "web"), new_lb_named(lab, "web2"));
            let role = "targets-thr";
            lab.targets_controller()
                .start(&TargetsOptions {
                    role: role.into(),
                    resync_seconds: RESYNC,
                    http_port: 61784,
                    extra_args: vec![
                        "--leader-elect=false".into(),
                        "--target-group-bindings=false".into(),
                        "--pod-namespace=default".into(),
                        "--pod-selector=app=web".into(),
                        format!("--pod-target-group-arn={}", a.target_group.arn),
                        format!("--pod-target-group-arn={}", b.target_group.arn),
                        "--pod-target-port=80".into(),
                    ],
                    ..Default::default()
                })
                .unwrap();
            lab.targets_controller()
                .wait_synced(role, Duration::from_secs(30))
                .unwrap();
            // From here on, half of every ELBv2 call the controller makes fails with
            // `Throttling` (the test's own reads too; they are retried).
            let mark = seq(lab);
            for action in [
                "RegisterTargets",
                "DeregisterTargets",
                "DescribeTargetHealth",
            ] {
                let (status, body) = vpcnet_lab::api::request(
                    &vpcnet_lab::daemon::api_socket(&lab.dir),
                    "PUT",
                    &format!("/_emu/faults/actions/elbv2:{action}"),
                    "application/json",
                    br#"{"error": {"rate": 0.5, "code": "Throttling"}}"#,
                )
                .unwrap();
                assert!((200..300).contains(&status), "{status}: {body}");
            }
            let k = lab.kube().kubectl().unwrap();
            let converged = |n: usize| {
                let t0 = Instant::now();
                wait_until(
                    &format!("both target groups exactly the {n} pods, healthy"),
                    Duration::from_secs(240),
                    || {
                        let live: BTreeSet<Ipv4Addr> = web_pods(lab)
                            .iter()
                            .filter(|p| !p.deleting)
                            .filter_map(|p| p.ip)
                            .collect();
                        live.len() == n
                            && ["web", "web2"]
                                .iter()
                                .all(|lb| healthy_of(lab, lb).as_ref() == Some(&live))
                    },
                );
                t0.elapsed()
            };
            k.apply(&selected_httpd_manifest("web", 6, 1)).unwrap();
            let up = converged(6);
            k.run(&["scale", "deployment/web", "-n", "default", "--replicas=2"])
                .unwrap();
            let down = converged(2);
            // Only the controller writes; everyone's reads were throttled as well.
            let calls: Vec<_> = lab
                .cloud()
                .requests()
                .unwrap()
                .records
                .into_iter()
                .filter(|r| r.seq > mark && r.api == Api::Elbv2)
                .collect();
            let throttled = |writes: bool| {
                calls
                    .iter()
                    .filter(|r| r.mutating == writes)
                    .filter(|r| r.error_code.as_deref() == Some("Throttling"))
                    .count()
            };
            let writes = calls.iter().filter(|r| r.mutating).count();
            eprintln!(
                "50 % Throttling: 6 pods in both target groups after {up:?}, 2 after {down:?}; \
                 controller writes {writes} ({} throttled), reads throttled {}",
                throttled(true),
                throttled(false)
            );
            assert!(
                throttled(false) > 0,
                "the fault was not in effect: no Throttling answered"
            );
            assert!(
                writes >= 4,
                "both groups registered and deregistered: {writes} writes"
            );
        },
    );
}
