//! The unmodified aws-load-balancer-controller (built by scripts/build-aws-lbc.sh from
//! lab/aws-load-balancer-controller/go.mod) serves the lab's `TargetGroupBinding` through the
//! lab cloud, as it would through AWS: the binding's pods become healthy targets, their
//! readiness gates turn True, requests flow through the load balancer, a scale-down
//! deregisters, and every EC2/ELBv2 call it made was answered with a success (the emulator's
//! request log, by the access key it signs with). The peer of `vpcnet-targets` in
//! `vpcnet-bench targets`.
//!
//! Needs root, the workspace binaries, the Kubernetes binaries and aws-load-balancer-controller
//! (`VPCNET_AWS_LBC_BIN_DIR`, else the newest build in the cache; scripts/test.sh builds it);
//! fails when not root.

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::{wait_until, with_kube_lab};
use vpcnet_elbv2::HealthState;
use vpcnet_lab::cloud::Api;
use vpcnet_lab::kube::aws_lbc::{self, AwsLbcOptions};
use vpcnet_lab::kube::targets::{gated_httpd_manifest, httpd_nlb};
use vpcnet_lab::lab::Lab;

const KEY: &str = "AKIDTESTAWSLBC";
const GATE: &str = "target-health.elbv2.k8s.aws/web";

/// Live (not deleting) web pods: (IP, Ready, gate True).
fn live_pods(lab: &Lab) -> Vec<(Option<Ipv4Addr>, bool, bool)> {
    let v = lab
        .kube()
        .kubectl()
        .unwrap()
        .json(&["get", "pods", "-n", "default", "-l", "app=web"])
        .unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            let cond = |t: &str| {
                p["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
            };
            (
                p["status"]["podIP"].as_str().and_then(|s| s.parse().ok()),
                cond("Ready"),
                cond(GATE),
            )
        })
        .collect()
}

fn targets(lab: &Lab) -> Vec<(Ipv4Addr, HealthState)> {
    lab.lbs()
        .target_health("web")
        .unwrap()
        .into_iter()
        .map(|h| (h.target.id.parse().unwrap(), h.state))
        .collect()
}

/// `n` live pods, all Ready with their gate True, and exactly their IPs registered (healthy;
/// others at most draining).
fn serving(lab: &Lab, n: usize) -> bool {
    let pods = live_pods(lab);
    let ips: BTreeSet<Ipv4Addr> = pods.iter().filter_map(|p| p.0).collect();
    let t = targets(lab);
    let healthy: BTreeSet<Ipv4Addr> = t
        .iter()
        .filter(|(_, s)| *s == HealthState::Healthy)
        .map(|(i, _)| *i)
        .collect();
    let stale = t
        .iter()
        .any(|(i, s)| !ips.contains(i) && *s != HealthState::Draining);
    pods.len() == n && pods.iter().all(|p| p.1 && p.2) && healthy == ips && !stale
}

/// Prints the tail of the controller's log when the test fails (the lab and its logs are
/// removed afterwards).
struct LogOnPanic(std::path::PathBuf);

impl Drop for LogOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.0).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(80).collect();
            eprintln!(
                "--- {} (last 80 lines)\n{}",
                self.0.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

#[test]
fn aws_load_balancer_controller_registers_the_bindings_pods_as_healthy_targets() {
    with_kube_lab(
        "awslbc",
        |o| o.nodes = 2,
        |lab| {
            let bin = aws_lbc::locate(None).expect(
                "aws-load-balancer-controller for the lab (scripts/test.sh builds it with \
                 scripts/build-aws-lbc.sh)",
            );
            let l = lab.lbs().create_lb(&httpd_nlb("web")).unwrap();
            lab.targets_controller().install_crd().unwrap();
            lab.aws_lbc().install_crds(&bin).unwrap();
            let mut o = AwsLbcOptions::new(bin);
            o.access_key = Some(KEY.into());
            let _log = LogOnPanic(lab.dir.join("logs").join(format!("{}.log", o.role)));
            let _ctl = lab.aws_lbc().start(&o).unwrap();
            lab.aws_lbc()
                .wait_started(&o.role, Duration::from_secs(90))
                .unwrap();

            let k = lab.kube().kubectl().unwrap();
            let t0 = Instant::now();
            k.apply(&gated_httpd_manifest("web", 4, 1, &l.target_group.arn))
                .unwrap();
            wait_until(
                "4 web pods Ready through their gates, exactly their IPs healthy targets",
                Duration::from_secs(240),
                || serving(lab, 4),
            );
            eprintln!(
                "aws-load-balancer-controller: 4 pods serving {:?} after apply",
                t0.elapsed()
            );
            let r = lab
                .lbs()
                .load("web", "n1", "/", 4, Duration::from_secs(3))
                .unwrap();
            assert_eq!(r.errors, 0, "{r:?}");
            assert_eq!(r.by_responder.len(), 4, "all four answer: {r:?}");

            // A scale-down deregisters the removed pods' targets.
            k.run(&["scale", "deployment/web", "-n", "default", "--replicas=2"])
                .unwrap();
            wait_until(
                "2 web pods left, the other targets deregistered",
                Duration::from_secs(120),
                || serving(lab, 2),
            );

            // A write is logged once the lab cloud's data plane applied it, so a target can show
            // `draining` a moment before its DeregisterTargets is in the log.
            let calls = || -> Vec<vpcnet_lab::cloud::RequestRecord> {
                lab.cloud()
                    .requests()
                    .unwrap()
                    .records
                    .into_iter()
                    .filter(|r| r.access_key.as_deref() == Some(KEY))
                    .collect()
            };
            let wanted = [
                "DescribeTargetHealth",
                "RegisterTargets",
                "DeregisterTargets",
            ];
            wait_until(
                "its DescribeTargetHealth, RegisterTargets and DeregisterTargets in the log",
                Duration::from_secs(15),
                || {
                    let c = calls();
                    wanted
                        .iter()
                        .all(|w| c.iter().any(|r| r.api == Api::Elbv2 && r.action == *w))
                },
            );
            let calls = calls();
            let actions: BTreeSet<String> = calls
                .iter()
                .map(|r| format!("{:?} {}", r.api, r.action))
                .collect();
            eprintln!("aws-load-balancer-controller called {actions:?}");
            let failed: Vec<String> = calls
                .iter()
                .filter(|r| !r.ok())
                .map(|r| {
                    format!(
                        "{:?} {} -> {} {}",
                        r.api,
                        r.action,
                        r.status,
                        r.error_code.as_deref().unwrap_or("")
                    )
                })
                .collect();
            assert!(
                failed.is_empty(),
                "calls of aws-load-balancer-controller the lab cloud refused: {failed:?}"
            );
        },
    );
}
