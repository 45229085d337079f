//! End-to-end acceptance of `vpcnet-targets` in the Kubernetes lab: the real API server,
//! kubelets and kube-proxy, pods networked by vpcnet, the lab cloud's ELBv2 with its HAProxy
//! data plane, the controller run as a lab process (see `vpcnet_lab::kube::targets`). Needs
//! root, the workspace binaries (`cargo build --workspace --all-targets`) and the Kubernetes binaries;
//! fails when not root.

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::targets::*;
use common::{wait_until, with_kube_lab};
use vpcnet_lab::kube::targets::gated_httpd_manifest;

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
