//! Property tests: random sequences of assign / release / clock ticks / EC2 results
//! (success, partial, failure, applied with the reply lost), EC2 changes behind the pool's
//! back, checkpoint writes that fail and restarts from the last written checkpoint.

mod common;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use common::*;
use proptest::prelude::*;
use vpcnet_ipam::*;

#[derive(Debug, Clone)]
enum Op {
    Assign(usize),
    Release(usize),
    Tick(u64),
    /// Execute the current plan; outcome per action, cycled.
    Run(Vec<Outcome>),
    /// EC2 loses the n-th secondary address of the node, then the pool reconciles.
    Steal(usize),
    Gc(Vec<usize>),
    /// ADD whose checkpoint write fails: the agent undoes the assignment and fails the ADD.
    AssignUnpersisted(usize),
    /// DEL whose checkpoint write fails: the release is undone and the DEL fails.
    ReleaseUnpersisted(usize),
    /// A describe: the pool adopts EC2's view (settles unknown outcomes).
    Describe,
    /// The agent restarts from the last checkpoint it managed to write and EC2's view.
    Restart,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        6 => Just(Outcome::Success),
        2 => Just(Outcome::Partial),
        2 => Just(Outcome::Failure),
        2 => Just(Outcome::LostReply),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..40).prop_map(Op::Assign),
        4 => (0usize..40).prop_map(Op::Release),
        3 => (0u64..40_000).prop_map(Op::Tick),
        5 => prop::collection::vec(outcome(), 1..4).prop_map(Op::Run),
        1 => (0usize..64).prop_map(Op::Steal),
        1 => prop::collection::vec(0usize..40, 0..20).prop_map(Op::Gc),
        2 => (0usize..40).prop_map(Op::AssignUnpersisted),
        1 => (0usize..40).prop_map(Op::ReleaseUnpersisted),
        1 => Just(Op::Describe),
        1 => Just(Op::Restart),
    ]
}

fn config() -> impl Strategy<Value = WarmConfig> {
    (
        prop::sample::select(vec!["t3.small", "t3.medium", "m5.large"]),
        0u32..4,
        prop::option::of(0u32..8),
        prop::option::of(0u32..14),
        prop::option::of(1u32..4),
        any::<bool>(),
        0u64..20_000,
        prop::option::of(1u32..3),
    )
        .prop_map(
            |(ty, warm_eni, warm_ip, min_ip, max_eni, prefix, hold, card1)| {
                let mut c = limits(ty);
                c.warm_eni_target = warm_eni;
                c.warm_ip_target = warm_ip;
                c.minimum_ip_target = min_ip;
                c.max_eni = max_eni;
                c.prefix_delegation = prefix;
                c.surplus_hold_ms = hold;
                // ENABLE_MULTI_NIC with a second card of 1 or 2 ENIs.
                if let Some(max_enis) = card1 {
                    c.extra_cards = vec![NetworkCardLimit { index: 1, max_enis }];
                }
                c
            },
        )
}

/// One network card's share of the pool (each card keeps the warm targets, as the VPC CNI's
/// datastore per card does).
#[derive(Debug)]
struct CardCounts {
    /// Addresses on the card's ENIs.
    total: u32,
    assigned: u32,
    /// Neither assigned nor cooling.
    available: u32,
    /// Prefixes none of whose addresses is assigned or cooling.
    whole_free_prefixes: u32,
}

fn card_counts(pool: &Pool, card: u32, now: u64) -> CardCounts {
    let assigned: BTreeSet<Ipv4Addr> = pool.assignments().map(|(_, a)| a.ip).collect();
    let free = |ip: &Ipv4Addr| !assigned.contains(ip) && !pool.is_cooling(*ip, now);
    let enis: Vec<&Eni> = pool
        .enis()
        .filter(|e| e.info.network_card == card && !e.deleting)
        .collect();
    let addrs: Vec<Ipv4Addr> = enis
        .iter()
        .flat_map(|e| e.addresses().map(|(ip, _)| ip).collect::<Vec<_>>())
        .collect();
    CardCounts {
        total: addrs.len() as u32,
        assigned: addrs.iter().filter(|ip| assigned.contains(ip)).count() as u32,
        available: addrs.iter().filter(|ip| free(ip)).count() as u32,
        whole_free_prefixes: enis
            .iter()
            .flat_map(|e| e.prefixes.keys().copied().collect::<Vec<_>>())
            .filter(|p| Eni::prefix_addresses(*p).all(|ip| free(&ip)))
            .count() as u32,
    }
}

struct Model {
    released: BTreeMap<Ipv4Addr, u64>,
    live: BTreeMap<usize, Ipv4Addr>,
}

fn ec2_addresses(ec2: &FakeEc2) -> BTreeSet<Ipv4Addr> {
    ec2.enis
        .values()
        .flat_map(|e| {
            e.secondary_ips
                .iter()
                .copied()
                .chain(e.prefixes.iter().flat_map(|p| Eni::prefix_addresses(*p)))
        })
        .collect()
}

fn check_invariants(
    pool: &Pool,
    ec2: &FakeEc2,
    model: &Model,
    now: u64,
) -> Result<(), TestCaseError> {
    let cfg = pool.config();
    // Never double-assigned.
    let ips: Vec<Ipv4Addr> = pool.assignments().map(|(_, a)| a.ip).collect();
    let uniq: BTreeSet<_> = ips.iter().collect();
    prop_assert_eq!(uniq.len(), ips.len(), "double assignment");
    // Limits.
    for card in cfg.cards() {
        let n = pool.enis().filter(|e| e.info.network_card == card).count() as u32;
        prop_assert!(n <= cfg.for_card(card).max_enis(), "card {card}: {n} ENIs");
    }
    for e in pool.enis() {
        prop_assert!(
            e.slots_used() <= cfg.slots_per_eni(),
            "ENI {} over its IP limit",
            e.info.id
        );
    }
    // The pool holds exactly what EC2 lists (results are fed back as they come), except
    // releases whose reply was lost: those stay in the pool, out of service, until a describe.
    let ours: BTreeSet<Ipv4Addr> = pool
        .enis()
        .flat_map(|e| e.addresses().map(|(ip, _)| ip))
        .collect();
    let theirs = ec2_addresses(ec2);
    if pool.has_unsettled() {
        prop_assert!(theirs.is_subset(&ours), "EC2 lists addresses the pool lost");
    } else {
        prop_assert_eq!(&ours, &theirs);
    }
    // Model agrees with the pool on who holds what.
    for (i, ip) in &model.live {
        prop_assert_eq!(pool.assignment(&key(*i)).map(|a| a.ip), Some(*ip));
    }
    prop_assert_eq!(pool.assignments().count(), model.live.len());
    let s = pool.summary(now);
    prop_assert_eq!(s.assigned_ips as usize, model.live.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn pool_invariants_and_convergence(cfg in config(), ops in prop::collection::vec(op(), 1..120)) {
        let (mut pool, mut ec2) = start(cfg.clone());
        let mut model = Model { released: BTreeMap::new(), live: BTreeMap::new() };
        let mut now = 1_000u64;
        // The last checkpoint written successfully.
        let mut persisted = pool.checkpoint();
        for op in ops {
            let mut write_ok = true;
            match op {
                Op::Assign(i) => {
                    let held_before = model.live.get(&i).copied();
                    let ec2_has = ec2_addresses(&ec2);
                    match pool.assign(key(i), pod(i), now) {
                        Ok(g) => {
                            if let Some(ip) = held_before {
                                prop_assert_eq!(g.ip, ip, "idempotent add changed the address");
                                prop_assert!(g.existing);
                            } else {
                                prop_assert!(ec2_has.contains(&g.ip), "handed out {} which EC2 does not list", g.ip);
                                if let Some(r) = model.released.get(&g.ip) {
                                    prop_assert!(now >= r + cfg.cooldown_ms, "handed out {} during its cooldown", g.ip);
                                }
                                prop_assert!(!model.live.values().any(|ip| *ip == g.ip), "double assignment of {}", g.ip);
                                model.live.insert(i, g.ip);
                            }
                        }
                        Err(AssignError::AtLimit { .. }) => {
                            // Permanent only when truly at capacity.
                            let s = pool.summary(now);
                            prop_assert_eq!(s.total_ips, s.max_ips);
                            prop_assert_eq!(s.assigned_ips - s.orphaned, s.max_ips);
                        }
                        Err(AssignError::PoolEmpty { .. }) => {
                            prop_assert_eq!(pool.summary(now).available_ips, 0);
                        }
                        Err(e @ AssignError::ProvisioningDisabled { .. }) => {
                            prop_assert!(false, "the pool provisions, yet: {}", e);
                        }
                    }
                }
                Op::Release(i) => {
                    let r = pool.release(&key(i), now);
                    prop_assert_eq!(r.as_ref().map(|a| a.ip), model.live.remove(&i));
                    if let Some(a) = r {
                        model.released.insert(a.ip, now);
                    }
                }
                Op::Tick(ms) => now += ms,
                Op::Run(outcomes) => {
                    for (n, a) in pool.plan(now).iter().enumerate() {
                        ec2.execute(&mut pool, a, outcomes[n % outcomes.len()], now);
                    }
                }
                Op::Steal(n) => {
                    let all: Vec<(String, Ipv4Addr)> = ec2.enis.iter().flat_map(|(id, e)| e.secondary_ips.iter().map(move |ip| (id.clone(), *ip))).collect();
                    if !all.is_empty() {
                        let (id, ip) = all[n % all.len()].clone();
                        ec2.enis.get_mut(&id).unwrap().secondary_ips.retain(|x| *x != ip);
                        let report = pool.reconcile(&ec2.view(), UnknownIpPolicy::Free, now);
                        prop_assert!(report.dropped_ips.contains(&ip));
                        // An assigned address stays with its pod, flagged.
                        if let Some((i, _)) = model.live.iter().find(|(_, x)| **x == ip) {
                            prop_assert!(report.orphaned.contains(&(key(*i), ip)));
                        }
                    }
                }
                Op::AssignUnpersisted(i) => {
                    write_ok = false;
                    if let Ok(g) = pool.assign(key(i), pod(i), now) {
                        if !g.existing {
                            // The checkpoint write failed: undo and fail the ADD.
                            let a = pool.unassign(&key(i));
                            prop_assert_eq!(a.map(|a| a.ip), Some(g.ip));
                        } else {
                            prop_assert_eq!(model.live.get(&i).copied(), Some(g.ip));
                        }
                    }
                }
                Op::ReleaseUnpersisted(i) => {
                    // The agent reinstates the assignment and fails the DEL (retried later).
                    write_ok = false;
                    let r = pool.release(&key(i), now);
                    prop_assert_eq!(r.as_ref().map(|a| a.ip), model.live.get(&i).copied());
                    if let Some(a) = r {
                        prop_assert!(pool.reinstate(key(i), a));
                    }
                }
                Op::Describe => {
                    pool.reconcile(&ec2.view(), UnknownIpPolicy::Free, now);
                    prop_assert!(!pool.has_unsettled());
                }
                Op::Restart => {
                    let mut p = Pool::new(cfg.clone());
                    p.restore(&persisted).unwrap();
                    p.reconcile(&ec2.view(), UnknownIpPolicy::Free, now);
                    // No pod loses its address across a restart (else it could be handed
                    // to a second pod).
                    for (i, ip) in &model.live {
                        prop_assert_eq!(p.assignment(&key(*i)).map(|a| a.ip), Some(*ip), "pod {} lost its address across a restart", i);
                    }
                    // Releases that were not written come back; their pods are gone, so the
                    // reclaim frees them.
                    let extra: Vec<PodKey> = p.assignments().map(|(k, _)| k.clone()).filter(|k| {
                        !model.live.contains_key(&k.container_id[1..].parse::<usize>().unwrap())
                    }).collect();
                    for k in extra {
                        if let Some(a) = p.release(&k, now) {
                            model.released.insert(a.ip, now);
                        }
                    }
                    pool = p;
                }
                Op::Gc(valid) => {
                    let valid_keys: BTreeSet<PodKey> = valid.iter().map(|i| key(*i)).collect();
                    let gone = pool.garbage_collect(&valid_keys, now);
                    for (k, a) in gone {
                        let i: usize = k.container_id[1..].parse().unwrap();
                        prop_assert!(!valid.contains(&i));
                        prop_assert_eq!(model.live.remove(&i), Some(a.ip));
                        model.released.insert(a.ip, now);
                    }
                }
            }
            if write_ok {
                persisted = pool.checkpoint();
            }
            check_invariants(&pool, &ec2, &model, now)?;
        }
        // A describe settles unknown outcomes.
        pool.reconcile(&ec2.view(), UnknownIpPolicy::Free, now);
        // Convergence: once EC2 calls succeed and cooldowns/holds pass, the plan empties and
        // the targets hold.
        now += cfg.cooldown_ms + cfg.surplus_hold_ms + 1;
        ec2.settle(&mut pool, now);
        // Orphans are not part of the pool; drop them as their pods would be deleted.
        for (k, _) in pool.orphaned() {
            pool.release(&k, now);
            let i: usize = k.container_id[1..].parse().unwrap();
            model.live.remove(&i);
        }
        ec2.settle(&mut pool, now);
        check_invariants(&pool, &ec2, &model, now)?;
        // Every card keeps its own targets (cards other than 0 one warm and one minimum IP,
        // as the VPC CNI keeps them).
        for card in cfg.cards() {
            let ccfg = cfg.for_card(card);
            let c = card_counts(&pool, card, now);
            let headroom = ccfg.max_ips().saturating_sub(c.assigned);
            match ccfg.mode() {
                WarmMode::Eni { warm_enis } => {
                    prop_assert!(c.available >= (warm_enis * ccfg.ips_per_eni()).min(headroom), "card {card}: {c:?}");
                    // No ENI without pods beyond what the warm target needs.
                    let spare: u32 = c.available.saturating_sub(warm_enis * ccfg.ips_per_eni());
                    for e in pool.enis().filter(|e| !e.info.primary && e.info.network_card == card) {
                        let n = e.addresses().count() as u32;
                        let used = pool.assignments().filter(|(_, a)| a.eni_id == e.info.id).count();
                        prop_assert!(used > 0 || n > spare, "ENI {} is surplus but kept", e.info.id);
                    }
                }
                WarmMode::Ip { warm_ips, minimum_ips } => {
                    prop_assert!(c.available >= warm_ips.min(headroom), "card {card}: {c:?}");
                    prop_assert!(c.total >= minimum_ips.min(ccfg.max_ips()), "card {card}: {c:?}");
                    prop_assert!(c.total <= (c.assigned + warm_ips).max(minimum_ips), "surplus kept on card {card}: {c:?}");
                }
                WarmMode::Prefix { warm_prefixes } => {
                    let used: u32 = pool.enis().filter(|e| e.info.network_card == card).map(|e| e.slots_used()).sum();
                    let slots_left = ccfg.max_enis() * ccfg.slots_per_eni() - used;
                    prop_assert!(c.available >= (warm_prefixes * IPS_PER_PREFIX).min(headroom).min(c.available + slots_left * IPS_PER_PREFIX), "card {card}: {c:?}");
                }
                WarmMode::PrefixIp { warm_ips, minimum_ips } => {
                    prop_assert!(c.available >= warm_ips.min(headroom), "card {card}: {c:?}");
                    prop_assert!(c.total >= minimum_ips.min(ccfg.max_ips()), "card {card}: {c:?}");
                    // No wholly free prefix could be returned without breaking a target.
                    prop_assert!(c.whole_free_prefixes == 0 || c.available < warm_ips + IPS_PER_PREFIX || c.total < minimum_ips + IPS_PER_PREFIX, "surplus kept on card {card}: {c:?}");
                }
            }
        }
    }
}
