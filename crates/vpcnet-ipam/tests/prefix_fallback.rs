//! Prefix delegation on a fragmented subnet ([`Pool::fall_back_to_ips`]): after
//! `InsufficientCidrBlocks` the plan grows with secondary /32s until the retry time, then asks
//! for a prefix again; a prefix that arrives ends the fallback and the free /32s go back.

mod common;
use common::*;
use vpcnet_ipam::*;

fn prefix_mode(ty: &str) -> WarmConfig {
    let mut cfg = limits(ty);
    cfg.prefix_delegation = true;
    cfg
}

/// Executes `plan` with every call succeeding; prefix requests fail as on a fragmented
/// subnet (the pool falls back) while `fragmented`. Returns whether a prefix request failed.
fn run(pool: &mut Pool, ec2: &mut FakeEc2, now: u64, fragmented: bool) -> bool {
    let mut refused = false;
    for a in pool.plan(now) {
        let asks_prefixes = matches!(
            a,
            Action::AssignPrefixes { .. } | Action::CreateEni { prefixes: 1.., .. }
        );
        if fragmented && asks_prefixes {
            ec2.execute(pool, &a, Outcome::Failure, now);
            pool.fall_back_to_ips(now);
            refused = true;
            break;
        }
        ec2.execute(pool, &a, Outcome::Success, now);
    }
    refused
}

fn secondary_ips(ec2: &FakeEc2) -> usize {
    ec2.enis.values().map(|e| e.secondary_ips.len()).sum()
}

fn prefixes(ec2: &FakeEc2) -> usize {
    ec2.enis.values().map(|e| e.prefixes.len()).sum()
}

#[test]
fn a_fragmented_subnet_makes_prefix_mode_grow_with_ips_until_a_prefix_arrives() {
    let (mut pool, mut ec2) = start(prefix_mode("m5.large"));
    assert_eq!(
        pool.plan(0),
        vec![Action::AssignPrefixes {
            eni_id: "eni-0".into(),
            count: 1
        }]
    );
    assert!(run(&mut pool, &mut ec2, 0, true), "the prefix was refused");
    let f = pool.prefix_fallback().expect("falling back");
    assert_eq!((f.since_ms, f.failures, f.retry_at_ms), (0, 1, 120_000));

    // WARM_PREFIX_TARGET=1 becomes 16 warm addresses: 9 /32s fill the primary ENI's slots
    // (m5.large: 10 addresses per ENI), a new ENI brings the other 7.
    assert_eq!(
        pool.plan(0),
        vec![
            Action::AssignIps {
                eni_id: "eni-0".into(),
                count: 9
            },
            Action::CreateEni {
                ips: 7,
                prefixes: 0,
                network_card: 0
            }
        ]
    );
    assert!(!run(&mut pool, &mut ec2, 0, true));
    assert!(pool.plan(0).is_empty(), "16 addresses warm: on target");
    assert_eq!((secondary_ips(&ec2), prefixes(&ec2)), (16, 0));

    // Pods start from the /32s; growth stays in /32s before the retry time.
    for i in 0..8 {
        pool.assign(key(i), pod(i), 1_000).expect("an address");
    }
    let plan = pool.plan(1_000);
    assert!(!plan.is_empty());
    assert!(
        plan.iter().all(|a| matches!(
            a,
            Action::AssignIps { .. } | Action::CreateEni { prefixes: 0, .. }
        )),
        "{plan:?}"
    );
    assert!(!run(&mut pool, &mut ec2, 1_000, true));
    assert_eq!(pool.summary(1_000).available_ips, 16);
    assert!(pool.summary(1_000).prefix_fallback.is_some());

    // At the retry time a prefix is asked for again; refused, the wait doubles.
    assert!(pool
        .plan(120_000)
        .iter()
        .any(|a| matches!(a, Action::AssignPrefixes { .. })));
    assert!(run(&mut pool, &mut ec2, 120_000, true));
    let f = pool.prefix_fallback().unwrap();
    assert_eq!((f.since_ms, f.failures, f.retry_at_ms), (0, 2, 360_000));
    assert!(pool.plan(359_999).is_empty());

    // The subnet has /28 blocks again: the prefix arrives and ends the fallback.
    assert!(!run(&mut pool, &mut ec2, 360_000, false));
    assert_eq!(pool.prefix_fallback(), None);
    assert!(prefixes(&ec2) >= 1);

    // As the pods go, their /32s are returned and the node is back on prefixes alone.
    for i in 0..8 {
        pool.release(&key(i), 400_000);
    }
    ec2.settle(&mut pool, 500_000);
    assert_eq!(secondary_ips(&ec2), 0, "every free /32 went back");
    assert!(prefixes(&ec2) >= 1);
    assert_eq!(pool.summary(500_000).prefix_fallback, None);
}

#[test]
fn warm_ip_targets_with_prefixes_fall_back_to_exactly_the_addresses_needed() {
    let mut cfg = prefix_mode("m5.xlarge");
    cfg.warm_ip_target = Some(5);
    let (mut pool, mut ec2) = start(cfg);
    assert!(run(&mut pool, &mut ec2, 0, true));
    assert_eq!(
        pool.plan(0),
        vec![Action::AssignIps {
            eni_id: "eni-0".into(),
            count: 5
        }],
        "5 addresses, not a prefix's 16"
    );
}

#[test]
fn the_retry_wait_doubles_up_to_sixteen_times_the_base() {
    let (mut pool, _ec2) = start(prefix_mode("m5.large"));
    let mut waits = Vec::new();
    for n in 0..7u64 {
        let now = n * 10_000_000;
        pool.fall_back_to_ips(now);
        waits.push((pool.prefix_fallback().unwrap().retry_at_ms - now) / 60_000);
    }
    assert_eq!(waits, vec![2, 4, 8, 16, 32, 32, 32]);
    assert_eq!(pool.prefix_fallback().unwrap().failures, 7);
}

#[test]
fn without_prefix_delegation_there_is_nothing_to_fall_back_from() {
    let (mut pool, _ec2) = start(limits("m5.large"));
    let before = pool.plan(0);
    pool.fall_back_to_ips(0);
    assert_eq!(pool.prefix_fallback(), None);
    assert_eq!(pool.plan(0), before);
}

#[test]
fn with_every_slot_a_secondary_ip_the_return_to_prefixes_frees_a_slot_first() {
    let (mut pool, mut ec2) = start(prefix_mode("m5.large"));
    assert!(run(&mut pool, &mut ec2, 0, true));
    ec2.settle(&mut pool, 0);
    for range in [0..16, 16..20] {
        for i in range {
            pool.assign(key(i), pod(i), 1_000).expect("an address");
        }
        ec2.settle(&mut pool, 1_000);
    }
    // m5.large: 3 ENIs × 9 slots, all /32s now; 7 of them free.
    assert_eq!((secondary_ips(&ec2), prefixes(&ec2)), (27, 0));

    let plan = pool.plan(200_000);
    match plan.as_slice() {
        [Action::UnassignIps { ips, .. }] => assert_eq!(ips.len(), 1),
        other => panic!("expected one free /32 returned, got {other:?}"),
    }
    assert!(!run(&mut pool, &mut ec2, 200_000, false));
    assert!(matches!(
        pool.plan(200_000).as_slice(),
        [Action::AssignPrefixes { count: 1, .. }]
    ));
    assert!(!run(&mut pool, &mut ec2, 200_000, false));
    assert_eq!(pool.prefix_fallback(), None);
    assert_eq!(prefixes(&ec2), 1);
}

#[test]
fn at_the_limit_in_fallback_the_error_says_the_limit_is_lower_for_now() {
    let (mut pool, mut ec2) = start(prefix_mode("m5.large"));
    assert!(run(&mut pool, &mut ec2, 0, true));
    let mut i = 0;
    loop {
        ec2.settle(&mut pool, 1_000);
        match pool.assign(key(i), pod(i), 1_000) {
            Ok(_) => i += 1,
            Err(e) => {
                // 3 ENIs × 9 slots, every one a /32.
                assert_eq!(i, 27);
                let AssignError::AtLimit {
                    prefix_fallback, ..
                } = &e
                else {
                    panic!("{e:?}")
                };
                assert!(prefix_fallback);
                let text = e.to_string();
                assert!(
                    text.contains("the limit is lower for now")
                        && text.contains("vpcnet.io/PrefixBlocksAvailable"),
                    "{text}"
                );
                break;
            }
        }
    }
}
