//! The VPC CNI's documented examples (docs/eni-and-ip-target.md, "Some example cases"):
//! instance type, targets, pods → attached ENIs, secondary IPs, unused IPs, IPs per ENI.

mod common;
use common::*;
use vpcnet_ipam::*;

struct Case {
    ty: &'static str,
    warm_ip: Option<u32>,
    min_ip: Option<u32>,
    /// (pods, ENIs, secondary IPs, unused IPs, IPs per ENI)
    rows: &'static [(usize, usize, u32, u32, &'static [usize])],
}

fn run(case: &Case) {
    let mut cfg = limits(case.ty);
    cfg.warm_ip_target = case.warm_ip;
    cfg.minimum_ip_target = case.min_ip;
    let (mut pool, mut ec2) = start(cfg);
    ec2.settle(&mut pool, 0);
    let mut pods = 0;
    for &(want_pods, enis, ips, unused, per_eni) in case.rows {
        while pods < want_pods {
            pool.assign(key(pods), pod(pods), 1).unwrap();
            pods += 1;
            ec2.settle(&mut pool, 1);
        }
        let s = pool.summary(1);
        let what = format!(
            "{} warm_ip={:?} min_ip={:?} pods={want_pods}",
            case.ty, case.warm_ip, case.min_ip
        );
        assert_eq!(s.enis as usize, enis, "ENIs for {what}");
        assert_eq!(s.total_ips, ips, "secondary IPs for {what}");
        assert_eq!(s.available_ips, unused, "unused IPs for {what}");
        assert_eq!(ec2.ips_per_eni(), per_eni, "IPs per ENI for {what}");
    }
}

#[test]
fn t3_small_warm_eni_1() {
    run(&Case {
        ty: "t3.small",
        warm_ip: None,
        min_ip: None,
        rows: &[
            (0, 1, 3, 3, &[3]),
            (5, 3, 9, 4, &[3, 3, 3]),
            (9, 3, 9, 0, &[3, 3, 3]),
        ],
    });
}

#[test]
fn t3_small_warm_ip_1_min_1() {
    run(&Case {
        ty: "t3.small",
        warm_ip: Some(1),
        min_ip: Some(1),
        rows: &[
            (0, 1, 1, 1, &[1]),
            (5, 2, 6, 1, &[3, 3]),
            (9, 3, 9, 0, &[3, 3, 3]),
        ],
    });
}

#[test]
fn t3_small_warm_ip_2_min_5() {
    // The VPC CNI's table lists the 0-pod row's IPs per ENI as "2,3"; vpcnet fills the primary
    // ENI first (3,2): same ENIs, same totals.
    run(&Case {
        ty: "t3.small",
        warm_ip: Some(2),
        min_ip: Some(5),
        rows: &[
            (0, 2, 5, 5, &[3, 2]),
            (5, 3, 7, 2, &[3, 3, 1]),
            (9, 3, 9, 0, &[3, 3, 3]),
        ],
    });
}

#[test]
fn p3dn_warm_eni_1() {
    run(&Case {
        ty: "p3dn.24xlarge",
        warm_ip: None,
        min_ip: None,
        rows: &[
            (0, 1, 49, 49, &[49]),
            (3, 2, 98, 95, &[49, 49]),
            (95, 3, 147, 52, &[49, 49, 49]),
        ],
    });
}

#[test]
fn p3dn_warm_ip_5_min_10() {
    run(&Case {
        ty: "p3dn.24xlarge",
        warm_ip: Some(5),
        min_ip: Some(10),
        rows: &[
            (0, 1, 10, 10, &[10]),
            (7, 1, 12, 5, &[12]),
            (15, 1, 20, 5, &[20]),
            (45, 2, 50, 5, &[49, 1]),
        ],
    });
}

#[test]
fn m5_large_defaults_fill_then_limit() {
    // m5.large: 3 ENIs × 10 IPv4 (9 for pods each). WARM_ENI_TARGET=1: a fresh node holds the
    // primary ENI with 9 secondary IPs; the first pod makes 8 free < 9 → a 2nd ENI with 9;
    // the 10th pod (8 free again) → a 3rd ENI; 27 pods fill all 27; the 28th is refused as
    // the ENI/IP limit.
    let (mut pool, mut ec2) = start(limits("m5.large"));
    ec2.settle(&mut pool, 0);
    assert_eq!((pool.summary(0).enis, pool.summary(0).total_ips), (1, 9));
    for i in 0..27 {
        pool.assign(key(i), pod(i), 1).unwrap();
        ec2.settle(&mut pool, 1);
        let s = pool.summary(1);
        let want = if i < 9 { (2, 18) } else { (3, 27) };
        assert_eq!((s.enis, s.total_ips), want, "after pod {}", i + 1);
    }
    match pool.assign(key(27), pod(27), 1) {
        Err(AssignError::AtLimit {
            max_enis: 3,
            ips_per_eni: 9,
            assigned: 27,
            ..
        }) => {}
        other => panic!("28th pod: {other:?}"),
    }
}

#[test]
fn minimum_alone_keeps_growing() {
    // VPC CNI #2650: MINIMUM_IP_TARGET without WARM_IP_TARGET stopped at the floor.
    let mut cfg = limits("m5.large");
    cfg.minimum_ip_target = Some(3);
    let (mut pool, mut ec2) = start(cfg);
    ec2.settle(&mut pool, 0);
    assert_eq!(pool.summary(0).total_ips, 3);
    for i in 0..6 {
        pool.assign(key(i), pod(i), 1).unwrap();
        ec2.settle(&mut pool, 1);
    }
    let s = pool.summary(1);
    assert_eq!((s.assigned_ips, s.available_ips), (6, 1));
}

#[test]
fn cooling_ips_are_unavailable_and_pool_grows() {
    // VPC CNI #2896: cooling IPs counted as free, so the pool never grew under churn.
    let mut cfg = limits("m5.large");
    cfg.warm_ip_target = Some(1);
    let (mut pool, mut ec2) = start(cfg);
    ec2.settle(&mut pool, 0);
    let first = pool.assign(key(0), pod(0), 10).unwrap().ip;
    ec2.settle(&mut pool, 10);
    pool.release(&key(0), 20);
    ec2.settle(&mut pool, 20);
    let second = pool.assign(key(1), pod(1), 21).unwrap().ip;
    assert_ne!(first, second, "a cooling IP was handed out");
    ec2.settle(&mut pool, 21);
    assert!(pool.summary(21).available_ips >= 1);
    // After the cooldown the first address is usable again.
    pool.assign(key(2), pod(2), 20 + DEFAULT_COOLDOWN_MS)
        .unwrap();
}

#[test]
fn one_call_per_shortfall() {
    // WARM_IP_TARGET=5 MINIMUM=10 from empty: one AssignIps of 10 on the primary ENI.
    let mut cfg = limits("m5.xlarge");
    cfg.warm_ip_target = Some(5);
    cfg.minimum_ip_target = Some(10);
    let (pool, _ec2) = start(cfg);
    assert_eq!(
        pool.plan(0),
        vec![Action::AssignIps {
            eni_id: "eni-0".into(),
            count: 10
        }]
    );
}

#[test]
fn new_pods_pack_onto_fullest_eni_and_empty_eni_is_freed() {
    // VPC CNI #1635: an ENI with one pod could never be freed.
    let mut cfg = limits("t3.small");
    cfg.warm_ip_target = Some(1);
    cfg.surplus_hold_ms = 0;
    let (mut pool, mut ec2) = start(cfg);
    ec2.settle(&mut pool, 0);
    for i in 0..5 {
        pool.assign(key(i), pod(i), 1).unwrap();
        ec2.settle(&mut pool, 1);
    }
    assert_eq!(pool.summary(1).enis, 2);
    // Release the pods on the primary ENI; new pods go to the fuller ENI.
    let on_primary: Vec<usize> = (0..5)
        .filter(|i| pool.assignment(&key(*i)).unwrap().eni_id == "eni-0")
        .collect();
    for i in &on_primary {
        pool.release(&key(*i), 2);
    }
    let g = pool.assign(key(9), pod(9), 3).unwrap();
    assert_ne!(g.eni_id, "eni-0", "new pod not packed onto the fullest ENI");
    // Release everything: after cooldown the secondary ENI is deleted, never the primary.
    for i in 0..10 {
        pool.release(&key(i), 4);
    }
    let later = 4 + DEFAULT_COOLDOWN_MS;
    ec2.settle(&mut pool, later);
    assert_eq!(pool.summary(later).enis, 1);
    assert!(ec2.enis.contains_key("eni-0"));
    assert_eq!(pool.summary(later).total_ips, 1);
}

#[test]
fn idempotent_add_and_unknown_del() {
    let (mut pool, mut ec2) = start(limits("m5.large"));
    ec2.settle(&mut pool, 0);
    let a = pool.assign(key(1), pod(1), 1).unwrap();
    let b = pool.assign(key(1), pod(1), 2).unwrap();
    assert_eq!(a.ip, b.ip);
    assert!(b.existing);
    assert_eq!(pool.summary(2).assigned_ips, 1);
    assert!(pool.release(&key(7), 3).is_none());
}

#[test]
fn empty_pool_is_retryable_not_limit() {
    let (mut pool, _ec2) = start(limits("m5.large"));
    assert!(matches!(
        pool.assign(key(0), pod(0), 0),
        Err(AssignError::PoolEmpty { .. })
    ));
}

#[test]
fn reconcile_adopts_ec2_and_flags_orphans() {
    let (mut pool, mut ec2) = start(limits("m5.large"));
    ec2.settle(&mut pool, 0);
    let g = pool.assign(key(0), pod(0), 1).unwrap();
    ec2.settle(&mut pool, 1);
    let before = pool.summary(1).total_ips;
    // Behind our back: the assigned IP and one free IP are unassigned, one new IP appears.
    let free_ip = pool
        .eni("eni-0")
        .unwrap()
        .ips
        .keys()
        .copied()
        .find(|ip| *ip != g.ip)
        .unwrap();
    let e = ec2.enis.get_mut("eni-0").unwrap();
    e.secondary_ips.retain(|ip| *ip != g.ip && *ip != free_ip);
    e.secondary_ips.push("10.0.200.1".parse().unwrap());
    let r = pool.reconcile(&ec2.view(), UnknownIpPolicy::Free, 2);
    assert_eq!(r.orphaned, vec![(key(0), g.ip)]);
    assert!(r.dropped_ips.contains(&free_ip));
    assert_eq!(
        r.added_ips,
        vec!["10.0.200.1".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert_eq!(pool.summary(2).total_ips, before - 1);
    // The pod keeps its (orphaned) assignment; releasing it does not return it to the pool.
    assert_eq!(pool.assignment(&key(0)).unwrap().ip, g.ip);
    pool.release(&key(0), 3);
    assert!(pool.eni_of(g.ip).is_none());
    for i in 1..30 {
        if let Ok(x) = pool.assign(key(i), pod(i), 4) {
            assert_ne!(x.ip, g.ip);
            assert_ne!(x.ip, free_ip);
        }
    }
}

#[test]
fn checkpoint_roundtrip_keeps_assignments_and_cooldowns() {
    let (mut pool, mut ec2) = start(limits("m5.large"));
    ec2.settle(&mut pool, 0);
    let a = pool.assign(key(0), pod(0), 1).unwrap();
    let b = pool.assign(key(1), pod(1), 1).unwrap();
    pool.release(&key(1), 1000);
    let json = pool.checkpoint().to_json();
    let cp = Checkpoint::from_json(&json).unwrap();
    let mut restored = Pool::new(pool.config().clone());
    restored.restore(&cp).unwrap();
    let r = restored.reconcile(&ec2.view(), UnknownIpPolicy::Free, 6000);
    assert!(r.orphaned.is_empty());
    assert_eq!(restored.assignment(&key(0)).unwrap().ip, a.ip);
    assert!(restored.is_cooling(b.ip, 6000));
    // 9 IPs: 1 assigned, 1 cooling → exactly 7 can be handed out, none of them the cooling one.
    for i in 2..9 {
        let g = restored.assign(key(i), pod(i), 6000).unwrap();
        assert_ne!(g.ip, b.ip);
    }
    assert!(matches!(
        restored.assign(key(9), pod(9), 6000),
        Err(AssignError::PoolEmpty { cooling: 1, .. })
    ));
    assert_eq!(
        restored
            .assign(key(9), pod(9), 1000 + DEFAULT_COOLDOWN_MS)
            .unwrap()
            .ip,
        b.ip
    );
}

#[test]
fn checkpoint_rejects_bad_input() {
    assert!(matches!(
        Checkpoint::from_json("{not json"),
        Err(CheckpointError::Parse(_))
    ));
    assert!(matches!(
        Checkpoint::from_json(r#"{"version":9,"assignments":[],"cooldowns":[]}"#),
        Err(CheckpointError::Version { found: 9, .. })
    ));
    let dup = r#"{"version":1,"assignments":[
        {"container_id":"a","if_name":"eth0","ip":"10.0.0.5","eni_id":"eni-0","assigned_at_ms":1},
        {"container_id":"b","if_name":"eth0","ip":"10.0.0.5","eni_id":"eni-0","assigned_at_ms":1}],"cooldowns":[]}"#;
    assert!(matches!(
        Checkpoint::from_json(dup),
        Err(CheckpointError::DuplicateIp { .. })
    ));
}

#[test]
fn rebuild_policy_cools_unknown_ips() {
    let (mut pool, mut ec2) = start(limits("m5.large"));
    ec2.settle(&mut pool, 0);
    let mut rebuilt = Pool::new(pool.config().clone());
    rebuilt.reconcile(&ec2.view(), UnknownIpPolicy::Cooling { settle_ms: 0 }, 100);
    assert_eq!(rebuilt.summary(100).cooling_ips, 9);
    assert!(matches!(
        rebuilt.assign(key(0), pod(0), 100),
        Err(AssignError::PoolEmpty { .. })
    ));
    assert!(
        rebuilt.plan(100).iter().any(|a| a.grows()),
        "pool grows around cooling IPs"
    );
}

#[test]
fn rebuild_policy_settles_before_the_cooldown_starts() {
    let (mut pool, mut ec2) = start(limits("m5.large"));
    ec2.settle(&mut pool, 0);
    let cooldown = pool.config().cooldown_ms;
    let mut rebuilt = Pool::new(pool.config().clone());
    rebuilt.reconcile(
        &ec2.view(),
        UnknownIpPolicy::Cooling { settle_ms: 60_000 },
        100,
    );
    // Neither after the cooldown alone nor one millisecond before settle + cooldown.
    for now in [100 + cooldown, 100 + 60_000 + cooldown - 1] {
        assert_eq!(rebuilt.summary(now).cooling_ips, 9, "at {now}");
        assert!(rebuilt.assign(key(0), pod(0), now).is_err(), "at {now}");
    }
    let now = 100 + 60_000 + cooldown;
    assert_eq!(rebuilt.summary(now).cooling_ips, 0);
    assert!(rebuilt.assign(key(0), pod(0), now).is_ok());
}

#[test]
fn prefix_mode_assigns_prefixes() {
    let mut cfg = limits("m5.large");
    cfg.prefix_delegation = true;
    let (mut pool, mut ec2) = start(cfg);
    assert_eq!(
        pool.plan(0),
        vec![Action::AssignPrefixes {
            eni_id: "eni-0".into(),
            count: 1
        }]
    );
    ec2.settle(&mut pool, 0);
    assert_eq!(pool.summary(0).total_ips, 16);
    let g = pool.assign(key(0), pod(0), 1).unwrap();
    assert!(pool
        .eni("eni-0")
        .unwrap()
        .prefixes
        .keys()
        .any(|p| p.contains(&g.ip)));
    // One address used: no wholly free prefix → one more prefix (WARM_PREFIX_TARGET=1).
    assert_eq!(
        pool.plan(1),
        vec![Action::AssignPrefixes {
            eni_id: "eni-0".into(),
            count: 1
        }]
    );
}

#[test]
fn unrouted_assignments_are_reclaimed_after_grace() {
    let (mut pool, mut ec2) = start(limits("m5.large"));
    ec2.settle(&mut pool, 0);
    let a = pool.assign(key(1), pod(1), 1_000).unwrap();
    let b = pool.assign(key(2), pod(2), 1_000).unwrap();
    let c = pool.assign(key(3), pod(3), 9_000).unwrap();
    // The node routes a and c; b's datapath is gone; c is younger than the grace.
    let routed: std::collections::BTreeSet<_> = [a.ip].into_iter().collect();
    // First miss: nothing is freed yet (one route dump is not proof).
    assert!(pool.reclaim_unrouted(&routed, 5_000, 2, 9_500).is_empty());
    // A check that sees the pod again resets its count.
    let all: std::collections::BTreeSet<_> = [a.ip, b.ip, c.ip].into_iter().collect();
    assert!(pool.reclaim_unrouted(&all, 5_000, 2, 9_700).is_empty());
    assert!(pool.reclaim_unrouted(&routed, 5_000, 2, 9_800).is_empty());
    // Second consecutive miss: b is released.
    let released = pool.reclaim_unrouted(&routed, 5_000, 2, 10_000);
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].1.ip, b.ip);
    assert!(pool.assignment(&key(2)).is_none());
    assert!(pool.assignment(&key(1)).is_some());
    assert!(pool.assignment(&key(3)).is_some(), "inside the grace: kept");
    // b cools down before reuse.
    assert!(pool.cooldowns().any(|(ip, t)| ip == b.ip && t == 10_000));
    assert_eq!(pool.summary(10_000).assigned_ips, 2);
    let _ = c;
}

#[test]
fn undone_assignment_is_free_again_without_cooldown() {
    let (mut pool, mut ec2) = start(limits("m5.large"));
    ec2.settle(&mut pool, 0);
    let free_before = pool.summary(1_000).available_ips;
    let g = pool.assign(key(1), pod(1), 1_000).unwrap();
    let a = pool.unassign(&key(1)).unwrap();
    assert_eq!(a.ip, g.ip);
    assert!(pool.assignment(&key(1)).is_none());
    assert!(!pool.is_cooling(g.ip, 1_000));
    assert_eq!(pool.summary(1_000).available_ips, free_before);
    assert!(pool.unassign(&key(1)).is_none());
}

/// An m5.large pool holding 5 free addresses over `WARM_IP_TARGET=1` (cooldown 1 s, no
/// surplus hold), and the release of the surplus it plans at 10 s (with its addresses).
fn pool_releasing_surplus() -> (Pool, FakeEc2, Action, Vec<std::net::Ipv4Addr>) {
    let mut cfg = limits("m5.large");
    cfg.warm_ip_target = Some(1);
    cfg.minimum_ip_target = Some(1);
    cfg.surplus_hold_ms = 0;
    cfg.cooldown_ms = 1_000;
    let (mut pool, mut ec2) = start(cfg);
    ec2.enis.get_mut("eni-0").unwrap().secondary_ips = (10..15)
        .map(|i| std::net::Ipv4Addr::new(10, 0, 9, i))
        .collect();
    pool.reconcile(&ec2.view(), UnknownIpPolicy::Free, 0);
    let plan = pool.plan(10_000);
    let Some(a @ Action::UnassignIps { ips, .. }) = plan.first() else {
        panic!("{plan:?}")
    };
    (pool, ec2, a.clone(), ips.clone())
}

#[test]
fn lost_reply_on_unassign_keeps_addresses_out_until_a_describe() {
    let (mut pool, mut ec2, a, ips) = pool_releasing_surplus();
    // EC2 applies the release but the reply is lost.
    ec2.execute(&mut pool, &a, Outcome::LostReply, 10_000);
    for _ in 0..20 {
        let g = pool.assign(key(99), pod(99), 10_000);
        if let Ok(g) = g {
            assert!(
                !ips.contains(&g.ip),
                "handed out {} before a describe",
                g.ip
            );
            pool.release(&key(99), 10_000);
        }
    }
    assert!(pool.has_unsettled());
    assert!(
        pool.plan(10_000).iter().all(|p| *p != a),
        "the same release planned again"
    );
    // The describe settles it: EC2 no longer lists them, so they are gone.
    pool.reconcile(&ec2.view(), UnknownIpPolicy::Free, 11_000);
    assert!(!pool.has_unsettled());
    for ip in &ips {
        assert!(pool.eni_of(*ip).is_none());
    }
}

#[test]
fn unknown_outcome_of_an_unapplied_release_comes_back_after_cooldown() {
    let (mut pool, ec2, a, ips) = pool_releasing_surplus();
    // The call timed out and EC2 did not apply it.
    pool.begin(&a);
    pool.unsettle(&a);
    pool.reconcile(&ec2.view(), UnknownIpPolicy::Free, 11_000);
    assert!(!pool.has_unsettled());
    for ip in ips {
        assert!(pool.eni_of(ip).is_some());
        assert!(pool.is_cooling(ip, 11_500), "back through a cooldown");
        assert!(!pool.is_cooling(ip, 12_000));
    }
}

#[test]
fn addresses_of_unknown_pods_are_held_until_their_route_is_gone() {
    let (mut pool, mut ec2) = start(limits("m5.large"));
    ec2.settle(&mut pool, 0);
    let ip = pool
        .eni("eni-0")
        .unwrap()
        .ips
        .keys()
        .next()
        .copied()
        .unwrap();
    assert!(pool.hold_unknown(ip, 1_000));
    assert!(!pool.hold_unknown(ip, 1_000), "held once");
    assert!(
        !pool.hold_unknown(std::net::Ipv4Addr::new(192, 0, 2, 1), 1_000),
        "not ours"
    );
    for i in 0..40 {
        if let Ok(g) = pool.assign(key(i), pod(i), 1_000) {
            assert_ne!(g.ip, ip, "held address handed out");
        }
    }
    // Survives a restart through the checkpoint.
    let cp = pool.checkpoint();
    assert!(cp
        .assignments
        .iter()
        .any(|a| a.ip == ip && a.container_id.starts_with(UNKNOWN_POD_PREFIX)));
    // CNI GC cannot vouch for a pod whose container ID is unknown: the hold stays.
    assert!(pool
        .garbage_collect(&Default::default(), 2_000)
        .iter()
        .all(|(_, a)| a.ip != ip));
    let routed: std::collections::BTreeSet<_> = [ip].into_iter().collect();
    assert!(pool.reclaim_unrouted(&routed, 0, 2, 5_000).is_empty());
    let none = std::collections::BTreeSet::new();
    assert!(pool.reclaim_unrouted(&none, 0, 2, 6_000).is_empty());
    let released = pool.reclaim_unrouted(&none, 0, 2, 7_000);
    assert!(released
        .iter()
        .any(|(k, a)| a.ip == ip && *k == Pool::unknown_pod_key(ip)));
}
