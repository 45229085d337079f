//! Pod rolls against the core: a Deployment whose pods are deleted one at a time, each
//! replacement created before its predecessor's DEL (as a ReplicaSet does), the pool planned
//! after every ADD and DEL and on the agent's periodic pass. A roll keeps the pod count, so
//! once the pool has grown to cover the addresses cooling down, it needs no EC2 call at all.

mod common;
use common::*;
use vpcnet_ipam::*;

const S: u64 = 1_000;

/// Runs `rolls` rolls of a `replicas`-pod Deployment (a replacement ADD every `period_ms`,
/// the old pod's DEL `del_after_ms` later), planning on every event and every 30 s. Returns
/// the mutating EC2 calls of the rolls, and the pool and EC2 after them.
fn roll(
    cfg: WarmConfig,
    replicas: usize,
    rolls: usize,
    period_ms: u64,
    del_after_ms: u64,
) -> (u32, Pool, FakeEc2, u64) {
    let (mut pool, mut ec2) = start(cfg);
    let mut now = 0;
    ec2.settle(&mut pool, now);
    for i in 0..replicas {
        pool.assign(key(i), pod(i), now).unwrap();
        ec2.settle(&mut pool, now);
    }
    // Settle fully (cooldowns, surplus hold) before counting.
    let mut next_periodic = 30 * S;
    let mut advance = |pool: &mut Pool, ec2: &mut FakeEc2, now: &mut u64, to: u64| {
        while next_periodic <= to {
            *now = next_periodic;
            ec2.settle(pool, *now);
            next_periodic += 30 * S;
        }
        *now = to;
    };
    advance(&mut pool, &mut ec2, &mut now, 300 * S);
    let before = ec2.mutating_calls;
    for oldest in 0..rolls {
        let next = replicas + oldest;
        let t = now + period_ms;
        advance(&mut pool, &mut ec2, &mut now, t);
        // The replacement's ADD (retried after a fill while nothing is free, as the agent's
        // ADD waits for the pool to grow).
        if pool.assign(key(next), pod(next), now).is_err() {
            ec2.settle(&mut pool, now);
            pool.assign(key(next), pod(next), now).unwrap();
        }
        ec2.settle(&mut pool, now);
        let t = now + del_after_ms;
        advance(&mut pool, &mut ec2, &mut now, t);
        pool.release(&key(oldest), now).unwrap();
        ec2.settle(&mut pool, now);
    }
    let calls = ec2.mutating_calls - before;
    (calls, pool, ec2, now)
}

#[test]
fn rolls_with_warm_ip_target_stop_calling_ec2_once_the_pool_covers_the_cooldowns() {
    let mut cfg = limits("m5.large");
    cfg.warm_ip_target = Some(5);
    cfg.minimum_ip_target = Some(10);
    for (period, del_after) in [(6 * S, 5 * S), (3 * S, 2 * S), (15 * S, 5 * S)] {
        let (calls, mut pool, mut ec2, mut now) = roll(cfg.clone(), 10, 100, period, del_after);
        // Growing to cover the addresses cooling down takes a few assigns; after that, a roll
        // hands out an address that has cooled down and needs nothing from EC2.
        assert!(
            calls <= 10,
            "{calls} mutating EC2 calls for 100 rolls (one every {period} ms)"
        );
        // Once the rolls stop, the surplus is returned: back to the targets.
        for _ in 0..6 {
            now += 30 * S;
            ec2.settle(&mut pool, now);
        }
        let s = pool.summary(now);
        assert_eq!(s.assigned_ips, 10);
        assert_eq!(s.total_ips, 15, "{s:?}");
        assert_eq!(s.available_ips, 5, "{s:?}");
    }
}

#[test]
fn a_lasting_surplus_is_still_returned_after_the_hold() {
    let mut cfg = limits("m5.large");
    cfg.warm_ip_target = Some(2);
    cfg.minimum_ip_target = Some(2);
    let (mut pool, mut ec2) = start(cfg.clone());
    ec2.settle(&mut pool, 0);
    for i in 0..12 {
        pool.assign(key(i), pod(i), 0).unwrap_or_else(|_| {
            ec2.settle(&mut pool, 0);
            pool.assign(key(i), pod(i), 0).unwrap()
        });
        ec2.settle(&mut pool, 0);
    }
    for i in 0..12 {
        pool.release(&key(i), S).unwrap();
    }
    // The two addresses never handed out have been free for the hold: returned. The twelve
    // released ones need their cooldown (30 s) plus the hold (30 s).
    ec2.settle(&mut pool, 59 * S);
    assert_eq!(pool.summary(59 * S).total_ips, 12);
    ec2.settle(&mut pool, 61 * S);
    let s = pool.summary(61 * S);
    assert_eq!((s.total_ips, s.available_ips), (2, 2), "{s:?}");
}
