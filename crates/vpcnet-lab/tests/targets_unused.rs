//! A TargetGroupBinding on a target group no load balancer uses (blue/green: the inactive
//! group; aws-load-balancer-controller #3753), in the Kubernetes lab: a readiness-gated rollout
//! completes, and the binding, its Events, the controller's log and metrics say why (policy:
//! `vpcnet_targets::core::usage`). Once a load balancer uses the group, the condition turns True
//! and the next rollout waits for healthy targets again. Needs root, the workspace binaries and
//! the Kubernetes binaries (see `targets.rs`).

mod common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::{wait_until, with_kube_lab};
use vpcnet_elbv2::{HealthState, TargetHealth};
use vpcnet_lab::kube::targets::{gated_httpd_manifest, httpd_nlb, TargetsOptions};
use vpcnet_lab::lab::Lab;

const GATE: &str = "target-health.elbv2.k8s.aws/web";
const ROLE: &str = "targets-unused";
const HTTP_PORT: u16 = 61785;

fn health(lab: &Lab, arn: &str) -> Vec<TargetHealth> {
    let arn = arn.to_string();
    lab.lbs()
        .elbv2(move |elb| async move { Ok(elb.target_health(&arn, &[]).await?) })
        .unwrap()
}

/// Live (not terminating) web pods: (name, IP, version, the gate condition).
fn live_pods(lab: &Lab) -> Vec<(String, Option<Ipv4Addr>, String, serde_json::Value)> {
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
            let gate = p["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == GATE).cloned())
                .unwrap_or(serde_json::Value::Null);
            let version = p["spec"]["containers"][0]["env"][0]["value"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["status"]["podIP"].as_str().and_then(|s| s.parse().ok()),
                version,
                gate,
            )
        })
        .collect()
}

fn rollout(lab: &Lab, arn: &str, version: u32, timeout: &str) -> Duration {
    let k = lab.kube().kubectl().unwrap();
    let t0 = Instant::now();
    k.apply(&gated_httpd_manifest("web", 2, version, arn))
        .unwrap();
    k.run(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        "default",
        &format!("--timeout={timeout}"),
    ])
    .unwrap_or_else(|e| {
        panic!(
            "the rollout to v{version} did not complete: {e:#}\npods: {:?}\ntargets: {:?}",
            live_pods(lab),
            health(lab, arn)
        )
    });
    t0.elapsed()
}

fn in_use_condition(lab: &Lab) -> serde_json::Value {
    let b = lab
        .kube()
        .kubectl()
        .unwrap()
        .json(&["get", "targetgroupbinding", "-n", "default", "web"])
        .unwrap();
    b["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "TargetGroupInUse").cloned())
        .unwrap_or(serde_json::Value::Null)
}

/// Events on the binding with `reason` (core v1 view): (type, message).
fn binding_events(lab: &Lab, reason: &str) -> Vec<(String, String)> {
    let v = lab
        .kube()
        .kubectl()
        .unwrap()
        .json(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!(
                "involvedObject.kind=TargetGroupBinding,involvedObject.name=web,reason={reason}"
            ),
        ])
        .unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn metrics(lab: &Lab) -> String {
    use std::io::{Read, Write};
    let vpc = lab.state().unwrap().namespaces[0].clone();
    vpcnet_lab::spawn::in_netns(&vpc, move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", HTTP_PORT))?;
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })
    .unwrap()
}

#[test]
fn a_gated_rollout_on_a_target_group_no_load_balancer_uses_completes_and_says_why() {
    with_kube_lab(
        "tgbunused",
        |_| {},
        |lab| {
            // The inactive group of a blue/green pair: a target group, no load balancer.
            let settings = httpd_nlb("web");
            let tg = lab.lbs().create_target_group(&settings).unwrap();
            assert!(tg.load_balancer_arns.is_empty(), "{tg:?}");
            lab.targets_controller().install_crd().unwrap();
            lab.targets_controller()
                .start(&TargetsOptions {
                    role: ROLE.into(),
                    resync_seconds: 10,
                    http_port: HTTP_PORT,
                    extra_args: vec!["--leader-elect=false".into()],
                    ..Default::default()
                })
                .unwrap();
            lab.targets_controller()
                .wait_synced(ROLE, Duration::from_secs(30))
                .unwrap();

            // 1. The first pods and a rollout to v2 both complete: the gates open although no
            //    target is ever healthy.
            let up = rollout(lab, &tg.arn, 1, "120s");
            let roll = rollout(lab, &tg.arn, 2, "120s");
            eprintln!("unused target group: 2 gated pods up in {up:?}, rollout to v2 in {roll:?}");
            let pods = live_pods(lab);
            assert_eq!(pods.len(), 2, "{pods:?}");
            let h = health(lab, &tg.arn);
            for (name, ip, version, gate) in &pods {
                assert_eq!(version, "2", "{name}");
                assert_eq!(gate["status"], "True", "{name}: {gate}");
                assert_eq!(gate["reason"], "TargetGroupNotInUse", "{name}: {gate}");
                let t = h
                    .iter()
                    .find(|t| t.target.id.parse().ok() == *ip)
                    .unwrap_or_else(|| panic!("{name} ({ip:?}) not registered: {h:?}"));
                assert_eq!(
                    (t.state.clone(), t.reason.as_deref()),
                    (HealthState::Unused, Some("Target.NotInUse")),
                    "{name}"
                );
            }
            assert_eq!(
                h.iter()
                    .filter(|t| t.state != HealthState::Draining)
                    .count(),
                2,
                "the old pods were deregistered: {h:?}"
            );

            // ... never silently: condition, Warning Event, log line, metric.
            let c = in_use_condition(lab);
            assert_eq!(
                (c["status"].as_str(), c["reason"].as_str()),
                (Some("False"), Some("NoLoadBalancer")),
                "{c}"
            );
            assert!(c["message"].as_str().unwrap_or("").contains(&tg.arn), "{c}");
            let ev = binding_events(lab, "TargetGroupNotInUse");
            assert!(
                ev.iter()
                    .any(|(t, note)| t == "Warning" && note.contains("Target.NotInUse")),
                "{ev:?}"
            );
            let log =
                std::fs::read_to_string(lab.dir.join("logs").join(format!("{ROLE}.log"))).unwrap();
            assert!(
                log.contains("target group used by no load balancer"),
                "no log line:\n{log}"
            );
            let m = metrics(lab);
            let series = format!(
                "vpcnet_targets_target_group_not_in_use{{target_group=\"{}\"}} 1",
                tg.arn
            );
            assert!(m.contains(&series), "{m}");

            // 2. A load balancer starts using the group (the switch of a blue/green pair): the
            //    targets turn healthy, the condition True with a Normal Event, and the next
            //    rollout's gates open only on healthy.
            let lb = lab.lbs().create_lb_for(&settings, &tg.arn).unwrap();
            wait_until(
                "the binding's TargetGroupInUse condition True",
                Duration::from_secs(60),
                || in_use_condition(lab)["status"] == "True",
            );
            assert!(
                binding_events(lab, "TargetGroupInUse")
                    .iter()
                    .any(|(t, _)| t == "Normal"),
                "no Normal Event"
            );
            let roll = rollout(lab, &tg.arn, 3, "180s");
            eprintln!("in use: rollout to v3 in {roll:?}");
            let h = health(lab, &tg.arn);
            for (name, ip, version, gate) in live_pods(lab) {
                assert_eq!(version, "3", "{name}");
                assert_eq!(gate["reason"], "Healthy", "{name}: {gate}");
                let t = h.iter().find(|t| t.target.id.parse().ok() == ip);
                assert_eq!(
                    t.map(|t| t.state.clone()),
                    Some(HealthState::Healthy),
                    "{name}: {h:?}"
                );
            }
            let r = lab
                .lbs()
                .load(&lb.lb.name, "n1", "/", 2, Duration::from_secs(2))
                .unwrap();
            assert_eq!(r.errors, 0, "{r:?}");
            assert!(r.by_responder.keys().all(|k| k.ends_with(" v3")), "{r:?}");
        },
    );
}
