//! The target-group tasks against vpcnet-emu's ELBv2 through the real SDK: registration and
//! deregistration, a second reconcile writing nothing, a draining target wanted again,
//! deregistrations applied when registrations hit the quota, zone `all` outside the VPC,
//! readiness gates opened only for healthy targets, two groups converging under 50 %
//! `Throttling`, and the task's ELBv2 budget (input changes cost only their writes, gates are
//! re-checked on the group's health check or a fixed interval, and not at all when none waits).

// std's clocks (banned by the workspace clippy.toml): the emulator serves over HTTP on the wall clock.
#![allow(clippy::disallowed_methods)]

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use common::{cloud, ids, input, key, Recorded};
use tokio::sync::watch;
use vpcnet_elbv2::HealthState;
use vpcnet_emu::elbv2::Limits;
use vpcnet_emu::{ActionFaults, Faults};
use vpcnet_targets::core::desired::TargetKey;
use vpcnet_targets::group::{self, Gated, GroupSettings};
use vpcnet_targets::metrics::Metrics;

#[tokio::test]
async fn reconcile_registers_deregisters_and_then_writes_nothing() {
    let c = cloud(1).await;
    let arn = c.group("web", false).await;
    let sink = Recorded::default();
    let m = Metrics::new();
    let s = GroupSettings::default();
    let o = group::reconcile(&c.elb, &arn, &input(&[5, 6, 7]), &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!((o.registered, o.deregistered), (3, 0));
    let o = group::reconcile(&c.elb, &arn, &input(&[6, 7, 8]), &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!((o.registered, o.deregistered), (1, 1));
    assert_eq!(
        ids(&c.registered(&arn).await, None),
        vec!["10.0.1.6", "10.0.1.7", "10.0.1.8"]
    );
    let writes = c.calls("RegisterTargets") + c.calls("DeregisterTargets");
    let o = group::reconcile(&c.elb, &arn, &input(&[6, 7, 8]), &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!((o.registered, o.deregistered), (0, 0));
    assert_eq!(
        c.calls("RegisterTargets") + c.calls("DeregisterTargets"),
        writes,
        "an unchanged reconcile writes nothing"
    );
    assert_eq!(*sink.observed.lock().unwrap(), 3);
}

#[tokio::test]
async fn a_draining_target_wanted_again_is_registered_again() {
    let c = cloud(2).await;
    let arn = c.group("web", true).await;
    let (sink, m, s) = (
        Recorded::default(),
        Metrics::new(),
        GroupSettings::default(),
    );
    group::reconcile(&c.elb, &arn, &input(&[5, 6]), &s, &sink, &m)
        .await
        .unwrap();
    group::reconcile(&c.elb, &arn, &input(&[5]), &s, &sink, &m)
        .await
        .unwrap();
    let r = c.registered(&arn).await;
    assert_eq!(ids(&r, Some(HealthState::Draining)), vec!["10.0.1.6"]);
    // Unwanted and draining: left alone (no second DeregisterTargets).
    let dereg = c.calls("DeregisterTargets");
    group::reconcile(&c.elb, &arn, &input(&[5]), &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!(c.calls("DeregisterTargets"), dereg);
    // Wanted again (the IP went to a new pod): registered, no longer draining.
    let o = group::reconcile(&c.elb, &arn, &input(&[5, 6]), &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!(o.registered, 1);
    let r = c.registered(&arn).await;
    assert!(ids(&r, Some(HealthState::Draining)).is_empty(), "{r:?}");
    assert_eq!(ids(&r, None).len(), 2);
}

#[tokio::test]
async fn deregistrations_are_applied_when_registrations_hit_the_quota() {
    let c = cloud(3).await;
    let arn = c.group("web", false).await;
    let (sink, m, s) = (
        Recorded::default(),
        Metrics::new(),
        GroupSettings::default(),
    );
    group::reconcile(&c.elb, &arn, &input(&[1, 2]), &s, &sink, &m)
        .await
        .unwrap();
    c.emu.set_elbv2_limits(Limits {
        targets_per_target_group: 2,
        ..Limits::default()
    });
    let e = group::reconcile(&c.elb, &arn, &input(&[2, 3, 4]), &s, &sink, &m)
        .await
        .unwrap_err();
    assert_eq!(e.source.code(), "TooManyTargets", "{e}");
    assert_eq!(ids(&c.registered(&arn).await, None), vec!["10.0.1.2"]);
    let events = sink.events.lock().unwrap().clone();
    assert!(
        events.contains(&"FailedRegisterTargets".to_string()),
        "{events:?}"
    );
    assert!(
        events.contains(&"FailedRegisterTarget p3".to_string())
            && events.contains(&"FailedRegisterTarget p4".to_string()),
        "an Event on each pod whose target was refused: {events:?}"
    );
}

#[tokio::test]
async fn targets_outside_the_vpc_get_zone_all() {
    let c = cloud(4).await;
    let arn = c.group("web", false).await;
    let (sink, m) = (Recorded::default(), Metrics::new());
    let mut inp = input(&[5]);
    inp.desired.wanted.insert(TargetKey {
        ip: Ipv4Addr::new(100, 64, 0, 9),
        port: 80,
    });
    // Without the VPC CIDRs the outside address is refused (InvalidTarget) ...
    let e = group::reconcile(&c.elb, &arn, &inp, &GroupSettings::default(), &sink, &m)
        .await
        .unwrap_err();
    assert_eq!(e.source.code(), "InvalidTarget", "{e}");
    // ... with them it goes in as zone all, the inside one without a zone.
    let s = GroupSettings {
        vpc_cidrs: vec!["10.0.0.0/16".parse().unwrap()],
        ..GroupSettings::default()
    };
    group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    let h = c.elb.target_health(&arn, &[]).await.unwrap();
    let zone = |id: &str| {
        h.iter()
            .find(|t| t.target.id == id)
            .and_then(|t| t.target.availability_zone.clone())
    };
    assert_eq!(zone("100.64.0.9").as_deref(), Some("all"));
    assert_eq!(zone("10.0.1.5").as_deref(), Some("us-east-1a"));
}

#[tokio::test]
async fn gates_open_only_for_healthy_targets() {
    let c = cloud(5).await;
    let arn = c.group("web", true).await;
    let (sink, m, s) = (
        Recorded::default(),
        Metrics::new(),
        GroupSettings::default(),
    );
    let mut inp = input(&[5]);
    inp.gated = vec![Gated {
        namespace: "default".into(),
        pod: "p5".into(),
        condition: "target-health.elbv2.k8s.aws/web".into(),
        target: key(5),
    }];
    // No data plane in this emulator: the target stays initial, the gate waits.
    let o = group::reconcile(&c.elb, &arn, &inp, &s, &sink, &m)
        .await
        .unwrap();
    assert_eq!((o.gates_opened, o.gates_waiting), (0, 1));
    assert!(sink.gates.lock().unwrap().is_empty());
}

fn throttle_half() -> Faults {
    let mut f = Faults::default();
    f.actions
        .insert("*".into(), ActionFaults::default().error(0.5, "Throttling"));
    f
}

/// Two target groups, 50 % of every ELBv2 call answered `Throttling`, and a third task whose
/// target group does not exist (every reconcile fails): both real groups converge, the failing
/// one holds up nobody.
#[tokio::test]
async fn two_groups_converge_under_half_throttling_and_a_failing_group_blocks_nobody() {
    let c = cloud(6).await;
    let a = c.group("a", false).await;
    let b = c.group("b", false).await;
    c.emu.set_faults(throttle_half()).unwrap();
    let settings = GroupSettings {
        resync: Duration::from_millis(300),
        backoff: vpcnet_backoff::Backoff::new(
            Duration::from_millis(20),
            Duration::from_millis(200),
        ),
        ..GroupSettings::default()
    };
    let m = Metrics::new();
    let spawn = |arn: &str, wanted: &[u8]| {
        let (tx, rx) = watch::channel(Some(Arc::new(input(wanted))));
        tokio::spawn(group::run(
            c.elb.clone(),
            arn.to_string(),
            rx,
            settings.clone(),
            Recorded::default(),
            m.clone(),
        ));
        tx
    };
    let missing = a.replace("/a/", "/missing/");
    let _tc = spawn(&missing, &[1, 2, 3]);
    let wanted_a: Vec<u8> = (10..30).collect();
    let wanted_b: Vec<u8> = (40..60).collect();
    let _ta = spawn(&a, &wanted_a);
    let _tb = spawn(&b, &wanted_b);
    let count = |arn: &str| {
        c.emu
            .with_elbv2(|e| e.target_group(arn).map(|t| t.targets.len()).unwrap_or(0))
    };
    let t0 = std::time::Instant::now();
    while count(&a) != 20 || count(&b) != 20 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "not converged: a {}/20, b {}/20",
            count(&a),
            count(&b)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "both groups converged under 50 % Throttling in {:?}",
        t0.elapsed()
    );
    // The SDK's own retries absorb most Throttling answers, so the controller's error metric
    // may never see one: the emulator's request log is what proves the faults were answered.
    let throttled = c
        .emu
        .requests(0)
        .records
        .iter()
        .filter(|r| r.error_code.as_deref() == Some("Throttling"))
        .count();
    assert!(throttled > 0, "the emulator answered no Throttling");
    eprintln!("{throttled} calls answered Throttling on the way");
    let text = m.encode();
    assert!(
        text.contains("code=\"TargetGroupNotFound\""),
        "the missing group failed: {text}"
    );
}

#[tokio::test]
async fn target_groups_are_found_by_all_their_tags_across_pages_and_tag_calls() {
    let c = cloud(31).await;
    let t = |k: &str, v: &str| (k.to_string(), v.to_string());
    // 25 target groups: more than one DescribeTags call (20 ARNs each).
    let mut web = Vec::new();
    for i in 0..25 {
        let arn = c.group(&format!("tg{i}"), false).await;
        let tags = match i % 3 {
            0 => vec![t("team", "web"), t("env", "prod")],
            1 => vec![t("team", "web"), t("env", "test")],
            _ => vec![t("team", "api")],
        };
        c.elb
            .add_tags(std::slice::from_ref(&arn), &tags)
            .await
            .unwrap();
        if i % 3 == 0 {
            web.push(arn);
        }
    }
    web.sort();
    let found =
        vpcnet_targets::tagged::target_groups_tagged(&c.elb, &[t("team", "web"), t("env", "prod")])
            .await
            .unwrap();
    assert_eq!(found, web);
    let e = vpcnet_targets::tagged::target_groups_tagged(&c.elb, &[t("team", "nobody")])
        .await
        .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("team=nobody") && msg.contains("of 25 target groups"),
        "{msg}"
    );
}

/// Polls `f` every 20 ms until it holds; fails after 10 s naming `what`.
async fn until(what: &str, f: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn gated(wanted: &[u8], gate: u8) -> group::GroupInput {
    let mut i = input(wanted);
    i.gated = vec![Gated {
        namespace: "default".into(),
        pod: format!("p{gate}"),
        condition: "target-health.elbv2.k8s.aws/web".into(),
        target: key(gate),
    }];
    i
}

/// The ELBv2 budget (`src/core/recheck.rs`): after the first describe, pods that come and go
/// cost only their writes, and a gate on a target registered just now is not asked about
/// before the group's health check could turn it healthy (threshold × interval, at least
/// 10 s): one `DescribeTargetGroups` reads that health check. Before, every input change
/// described the group and a waiting gate re-checked every 2 s.
#[tokio::test]
async fn input_changes_cost_only_their_writes_and_a_new_gate_waits_for_its_health_check() {
    let c = cloud(46).await;
    let arn = c.group("web", true).await;
    let sink = Recorded::default();
    let (tx, rx) = watch::channel(Some(Arc::new(input(&[1]))));
    let task = tokio::spawn(group::run(
        c.elb.clone(),
        arn.clone(),
        rx,
        GroupSettings::default(),
        sink.clone(),
        Metrics::new(),
    ));
    until("1 registered", || c.calls("RegisterTargets") == 1).await;
    // A gated pod comes.
    tx.send(Some(Arc::new(gated(&[1, 2], 2)))).unwrap();
    until("2 registered", || c.calls("RegisterTargets") == 2).await;
    until("the health check read", || {
        c.calls("DescribeTargetGroups") == 1
    })
    .await;
    // The old pod goes.
    tx.send(Some(Arc::new(gated(&[2], 2)))).unwrap();
    until("1 deregistered", || c.calls("DeregisterTargets") == 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        c.calls("DescribeTargetHealth"),
        1,
        "only the first reconcile describes"
    );
    assert_eq!(c.calls("DescribeTargetGroups"), 1);
    assert!(sink.gates.lock().unwrap().is_empty());
    let ids_now: Vec<String> = c
        .registered(&arn)
        .await
        .into_iter()
        .filter(|(_, s)| *s != HealthState::Draining)
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids_now, vec!["10.0.1.2"]);
    drop(tx);
    task.await.unwrap();
}

/// `--gate-recheck-ms` set: a waiting gate is re-checked at that fixed interval whatever the
/// health check; once no gate waits, the group is not described again before the resync.
#[tokio::test]
async fn a_fixed_recheck_asks_while_a_gate_waits_and_stops_when_none_does() {
    let c = cloud(47).await;
    let arn = c.group("web", true).await;
    let settings = GroupSettings {
        gate_recheck: Some(Duration::from_millis(100)),
        ..GroupSettings::default()
    };
    let (tx, rx) = watch::channel(Some(Arc::new(gated(&[1], 1))));
    let task = tokio::spawn(group::run(
        c.elb.clone(),
        arn.clone(),
        rx,
        settings,
        Recorded::default(),
        Metrics::new(),
    ));
    until("5 re-checks", || c.calls("DescribeTargetHealth") >= 5).await;
    assert_eq!(
        c.calls("DescribeTargetGroups"),
        0,
        "a fixed re-check needs no health check"
    );
    // The gate goes (the pod turned Ready another way): no gate waits.
    tx.send(Some(Arc::new(input(&[1])))).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = c.calls("DescribeTargetHealth");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        c.calls("DescribeTargetHealth"),
        settled,
        "no gate waits, no re-check"
    );
    drop(tx);
    task.await.unwrap();
}
