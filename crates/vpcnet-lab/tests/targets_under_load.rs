//! `vpcnet-targets` under load in the Kubernetes lab: two replicas handing over leadership,
//! scaling and rolling updates while a load generator runs through the load balancer, and half
//! of all ELBv2 calls throttled. The same lab as `targets.rs` (see there); needs root, the
//! workspace binaries and the Kubernetes binaries; fails when not root.

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::targets::*;
use common::{wait_until, with_kube_lab};
use vpcnet_elbv2::HealthState;
use vpcnet_emu::request_log::Api;
use vpcnet_lab::kube::targets::{gated_httpd_manifest, selected_httpd_manifest, TargetsOptions};

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
