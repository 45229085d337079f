//! A target group no load balancer uses, against vpcnet-emu's ELBv2 through the real SDK
//! (policy: `vpcnet_targets::core::usage`): its targets are `unused` / `Target.NotInUse`, gated
//! pods open their gates with the binding's condition False, a Warning Event and the metric;
//! used again, the condition turns True and new gates wait for healthy; a target in a zone the
//! load balancer does not enable keeps its gate shut; a failed `DescribeTargetGroups` keeps
//! gates shut and says why; the task opens the gates of a rollout's new pods on its own.

// std's clocks (banned by the workspace clippy.toml): the emulator serves over HTTP on the wall clock.
#![allow(clippy::disallowed_methods)]

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use common::{cloud, input, key, Recorded};
use tokio::sync::watch;
use vpcnet_elbv2::HealthState;
use vpcnet_emu::elbv2::fault_key;
use vpcnet_emu::{ActionFaults, Faults};
use vpcnet_targets::core::desired::TargetKey;
use vpcnet_targets::core::usage::GateOpen;
use vpcnet_targets::group::{self, Gated, GroupInput, GroupSettings};
use vpcnet_targets::metrics::Metrics;

fn gate(pod: &str, target: TargetKey) -> Gated {
    Gated {
        namespace: "default".into(),
        pod: pod.into(),
        condition: "target-health.elbv2.k8s.aws/web".into(),
        target,
    }
}

/// `input(wanted)` with every target's pod `p<i>` gated.
fn gated_input(wanted: &[u8]) -> GroupInput {
    let mut i = input(wanted);
    i.gated = wanted
        .iter()
        .map(|n| gate(&format!("p{n}"), key(*n)))
        .collect();
    i
}

fn not_in_use_series(arn: &str) -> String {
    format!("vpcnet_targets_target_group_not_in_use{{target_group=\"{arn}\"}}")
}

#[tokio::test]
async fn gates_open_for_a_group_no_load_balancer_uses_with_condition_event_and_metric() {
    let c = cloud(41).await;
    let arn = c.group("web", false).await;
    let (sink, m, s) = (
        Recorded::default(),
        Metrics::new(),
        GroupSettings::default(),
    );
    let mut inp = gated_input(&[5, 6]);

    // First pass: registered, not described yet: nothing is known, the gates wait.
    let o = group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!((o.registered, o.gates_opened, o.gates_waiting), (2, 0, 2));
    assert_eq!(o.in_use, None);
    assert_eq!(c.calls("DescribeTargetGroups"), 0);
    let h = c.elb.target_health(&arn, &[]).await.unwrap();
    assert!(
        h.iter()
            .all(|t| t.state == HealthState::Unused
                && t.reason.as_deref() == Some("Target.NotInUse")),
        "the emulator reports a group no load balancer uses as unused: {h:?}"
    );

    // Second pass: unused, DescribeTargetGroups lists no load balancer: both gates open.
    let o = group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!(o.in_use, Some(false));
    assert_eq!(
        (o.gates_opened, o.gates_opened_not_in_use, o.gates_waiting),
        (2, 2, 0)
    );
    assert_eq!(c.calls("DescribeTargetGroups"), 1);
    assert_eq!(
        sink.opened.lock().unwrap().clone(),
        vec![
            ("p5".to_string(), GateOpen::GroupNotInUse),
            ("p6".to_string(), GateOpen::GroupNotInUse)
        ]
    );
    let conds = sink.conditions.lock().unwrap().clone();
    assert_eq!(conds.len(), 1, "{conds:?}");
    let (binding, in_use, note) = &conds[0];
    assert_eq!((binding.as_str(), *in_use), ("web", false));
    assert!(
        note.contains(&arn) && note.contains("2 target(s)") && note.contains("2 opened"),
        "{note}"
    );
    assert_eq!(
        sink.events.lock().unwrap().clone(),
        vec!["TargetGroupNotInUse".to_string()]
    );
    let text = m.encode();
    assert!(
        text.contains(&format!("{} 1", not_in_use_series(&arn))),
        "{text}"
    );
    assert!(
        text.contains("vpcnet_targets_gates_opened_not_in_use_total 2"),
        "{text}"
    );

    // The binding now carries the condition (as the cache shows it): no repeat.
    inp.owners[0].in_use = Some(false);
    inp.gated.clear();
    group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!(sink.conditions.lock().unwrap().len(), 1);
    assert_eq!(sink.events.lock().unwrap().len(), 1);

    // A load balancer uses the group: condition True, a Normal Event, and a new pod's gate
    // waits for healthy again (the targets are now initial).
    c.use_group("web", &arn).await;
    let mut inp = gated_input(&[5, 6, 7]);
    inp.owners[0].in_use = Some(false);
    inp.gated.retain(|g| g.pod == "p7");
    let o = group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!(o.in_use, Some(true));
    assert_eq!(
        c.calls("DescribeTargetGroups"),
        2,
        "initial targets prove use without asking"
    );
    let o = group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!((o.gates_opened, o.gates_waiting), (0, 1));
    let conds = sink.conditions.lock().unwrap().clone();
    assert_eq!(
        conds.len(),
        3,
        "True written while the cache says False: {conds:?}"
    );
    assert!(conds[1].1 && conds[1].2.contains("again"), "{conds:?}");
    let events = sink.events.lock().unwrap().clone();
    assert_eq!(events[1], "TargetGroupInUse", "{events:?}");
    assert!(
        m.encode()
            .contains(&format!("{} 0", not_in_use_series(&arn))),
        "gauge back to 0"
    );
    assert_eq!(sink.opened.lock().unwrap().len(), 2, "p7 not opened");
}

/// Label-selected mode (no binding, no gate): the same evidence, shown by the metric.
#[tokio::test]
async fn label_selected_mode_reports_the_unused_group_in_the_metric() {
    let c = cloud(42).await;
    let arn = c.group("sel", false).await;
    let (sink, m, s) = (
        Recorded::default(),
        Metrics::new(),
        GroupSettings::default(),
    );
    let mut inp = input(&[5]);
    inp.owners.clear();
    group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    let o = group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!(o.in_use, Some(false));
    assert!(
        m.encode()
            .contains(&format!("{} 1", not_in_use_series(&arn))),
        "{}",
        m.encode()
    );
    assert!(sink.events.lock().unwrap().is_empty());
}

/// A load balancer uses the group but not the target's zone: `Target.NotInUse` too, and the
/// gate stays shut (other targets serve); asked or not, the group counts as used.
#[tokio::test]
async fn a_target_in_a_zone_the_load_balancer_does_not_enable_keeps_its_gate_shut() {
    let c = cloud(43).await;
    c.emu
        .create_subnet(&c.vpc, "10.0.2.0/24".parse().unwrap(), "us-east-1b")
        .unwrap();
    let arn = c.group("web", true).await;
    let (sink, m, s) = (
        Recorded::default(),
        Metrics::new(),
        GroupSettings::default(),
    );
    let far = TargetKey {
        ip: Ipv4Addr::new(10, 0, 2, 7),
        port: 80,
    };
    // Only the far target: every target NotInUse, DescribeTargetGroups names the load balancer.
    let mut inp = input(&[]);
    inp.desired.wanted.insert(far);
    inp.gated = vec![gate("far", far)];
    for _ in 0..2 {
        group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
            .await
            .unwrap();
    }
    let h = c.elb.target_health(&arn, &[]).await.unwrap();
    assert_eq!(h[0].reason.as_deref(), Some("Target.NotInUse"), "{h:?}");
    let o = group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!(o.in_use, Some(true));
    assert_eq!((o.gates_opened, o.gates_waiting), (0, 1));
    assert!(c.calls("DescribeTargetGroups") >= 1);
    // With a target in the enabled zone (initial once described): use is proven without
    // asking.
    inp.desired.wanted.insert(key(5));
    group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    let asked = c.calls("DescribeTargetGroups");
    for _ in 0..2 {
        let o = group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
            .await
            .unwrap();
        assert_eq!((o.in_use, o.gates_opened), (Some(true), 0));
    }
    assert_eq!(c.calls("DescribeTargetGroups"), asked);
    assert!(sink.opened.lock().unwrap().is_empty());
    assert!(sink.conditions.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_failed_describe_target_groups_keeps_gates_shut_and_says_why() {
    let c = cloud(44).await;
    let arn = c.group("web", false).await;
    let (sink, m, s) = (
        Recorded::default(),
        Metrics::new(),
        GroupSettings::default(),
    );
    let inp = gated_input(&[5]);
    group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    let mut f = Faults::default();
    f.actions.insert(
        fault_key("DescribeTargetGroups"),
        ActionFaults::default().error(1.0, "AccessDenied"),
    );
    c.emu.set_faults(f).unwrap();
    let e = group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap_err();
    assert_eq!(e.source.code(), "AccessDenied", "{e}");
    assert!(sink.opened.lock().unwrap().is_empty());
    assert_eq!(
        sink.events.lock().unwrap().clone(),
        vec!["FailedDescribeTargetGroup".to_string()]
    );
}

/// The task on its own: a rollout's new pods in a group no load balancer uses get their gates
/// within a few re-checks, and the old ones are deregistered (no drain: nothing to drain).
#[tokio::test]
async fn the_task_opens_the_gates_of_a_rollout_on_an_unused_group() {
    rollout_on_an_unused_group(GroupSettings {
        gate_recheck: Some(Duration::from_millis(50)),
        ..GroupSettings::default()
    })
    .await;
}

/// The same with the default re-check, which follows the group's health check: a group no load
/// balancer uses is not health-checked, so its gates are not held for threshold × interval
/// (the emulator's default health check: longer than the 10 s this test allows).
#[tokio::test]
async fn the_default_recheck_does_not_wait_out_a_health_check_on_an_unused_group() {
    rollout_on_an_unused_group(GroupSettings::default()).await;
}

async fn rollout_on_an_unused_group(settings: GroupSettings) {
    let c = cloud(45).await;
    let arn = c.group("web", false).await;
    let sink = Recorded::default();
    let (tx, rx) = watch::channel(Some(Arc::new(gated_input(&[1, 2]))));
    let task = tokio::spawn(group::run(
        c.elb.clone(),
        arn.clone(),
        rx,
        settings,
        sink.clone(),
        Metrics::new(),
    ));
    let opened = |n: usize| {
        let sink = sink.clone();
        async move {
            let t0 = std::time::Instant::now();
            while sink.opened.lock().unwrap().len() < n {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "gates opened: {:?}",
                    sink.opened.lock().unwrap()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    opened(2).await;
    // The rollout: new pods 3 and 4 replace 1 and 2.
    tx.send(Some(Arc::new(gated_input(&[3, 4])))).unwrap();
    opened(4).await;
    let pods: Vec<String> = sink
        .opened
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(pods, vec!["p1", "p2", "p3", "p4"]);
    let t0 = std::time::Instant::now();
    while c.registered(&arn).await.len() != 2 {
        assert!(t0.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(tx);
    task.await.unwrap();
}
