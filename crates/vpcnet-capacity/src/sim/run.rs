//! The event loop of [`simulate`].

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vpcnet_ipam::{Action, WarmConfig};
use vpcnet_limits::api_rates::{ec2_category, ec2_default, is_describe};

use super::bucket::VBucket;
use super::{SimNode, SimReport, SimSettings, Spread};
use crate::calls::{self, CallCount, ATTACH_POLL};
use crate::node::{NodePool, NOW_MS};
use crate::rates::floor_shared;

/// Plans per pass before the filler yields, as the agent's `fill`.
const PLANS_PER_PASS: u32 = 16;
/// The attachment polls: 20 ms doubling to 500 ms, equal jitter (the agent's `attach_polls`).
const POLL_BASE_MS: u64 = 20;
const POLL_MAX_MS: u64 = 500;
/// A run ends at this virtual time whatever is left (a day).
const HORIZON_MS: u64 = 86_400_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Start a plan pass.
    Plan,
    /// Send the node's current call through its client-side bucket.
    Send,
    /// The call reaches EC2.
    Arrive,
    /// EC2 answers: granted or throttled.
    Reply { ok: bool },
    /// The leaked-ENI sweep's describe, beside the node's other calls (it draws on the
    /// describe bucket, and is retried on throttling as a call is).
    Sweep { attempt: u32 },
}

/// A client-side bucket's throttle pacing ([`super::ThrottlePace`]).
#[derive(Debug, Clone, Copy, Default)]
struct Pace {
    level: u32,
    hold_until: u64,
}

struct Node {
    pool: NodePool,
    /// Calls left of the current step (start-up, or an action of the plan).
    calls: VecDeque<&'static str>,
    step: Option<Action>,
    /// Calls of the current step already answered.
    done: usize,
    actions: VecDeque<Action>,
    plans: u32,
    attempt: u32,
    pass_failures: u32,
    polls: u32,
    attached_at: u64,
    first: Option<u64>,
    full: Option<u64>,
    describe: VBucket,
    mutating: VBucket,
    describe_pace: Pace,
    mutating_pace: Pace,
    /// When the current call was first sent (its deadline counts from there).
    call_started: u64,
}

/// Simulates `nodes` joining the account together (see the module docs).
pub fn simulate(nodes: &[SimNode], s: &SimSettings) -> SimReport {
    let mut rng = ChaCha8Rng::seed_from_u64(s.seed);
    let share = (1.0 - s.other_tools_share).clamp(0.0, 1.0);
    let mut account: BTreeMap<(&'static str, bool), VBucket> = BTreeMap::new();
    let mut made = CallCount::default();
    let mut throttled = CallCount::default();
    let mut first_calls = CallCount::default();
    let mut settled: Vec<(WarmConfig, bool, CallCount)> = Vec::new();
    let mut queue: BinaryHeap<Reverse<(u64, u64, usize, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BinaryHeap<_>, at: u64, n: usize, ev: Ev| {
        seq += 1;
        q.push(Reverse((at, seq, n, ev)));
    };
    let mut fleet: Vec<Node> = Vec::with_capacity(nodes.len());
    let boots: Vec<u64> = (0..nodes.len())
        .map(|_| {
            if s.boot_spread_ms > 0 {
                rng.random_range(0..=s.boot_spread_ms)
            } else {
                0
            }
        })
        .collect();
    // The coordinator's slots (`slots`): by boot order, `burst` at once, then one per refill.
    // A node's describes (start-up) and its mutating calls each get a slot.
    let mut slot_of = vec![(0u64, 0u64); nodes.len()];
    if s.slots {
        let slot = |action: &str, rank: usize| {
            let b = ec2_default(ec2_category(action, true));
            let beyond = (rank as f64 + 1.0 - f64::from(b.capacity)).max(0.0);
            (beyond * 1000.0 / (b.refill_per_sec * share)).ceil() as u64
        };
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by_key(|&i| (boots[i], i));
        let mut last = (0u64, 0u64);
        for (rank, &i) in order.iter().enumerate() {
            let describe = slot("DescribeNetworkInterfaces", rank);
            let mutating = slot("AssignPrivateIpAddresses", rank);
            last = (
                last.0.max(describe).max(boots[i]),
                last.1.max(mutating).max(boots[i]),
            );
            slot_of[i] = last;
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        // One settle per distinct node (a fleet has few): its calls to a first address.
        let first = match settled
            .iter()
            .find(|(c, d, _)| *c == n.cfg && *d == n.subnet_discovery)
        {
            Some((_, _, calls)) => calls.clone(),
            None => {
                let calls = crate::node::settle(&n.cfg, 0, n.subnet_discovery)
                    .map(|fp| fp.calls_to_first_address)
                    .unwrap_or_default();
                settled.push((n.cfg.clone(), n.subnet_discovery, calls.clone()));
                calls
            }
        };
        first_calls.add_all(&first, 1);
        if s.agent.sweep && s.agent.sweep_at_start {
            first_calls.add(calls::SWEEP, 1);
        }
        let boot = boots[i];
        let mut startup: Vec<&'static str> = calls::start_up(n.subnet_discovery)
            .iter()
            .flat_map(|(a, k)| std::iter::repeat_n(a, k as usize))
            .collect();
        if !s.agent.sweep {
            // DISABLE_LEAKED_ENI_CLEANUP: no sweep's describe at all.
        } else if s.agent.sweep_at_start {
            startup.insert(1, calls::SWEEP);
        } else {
            let at = boot + rng.random_range(0..=super::FIRST_SWEEP_SPREAD_MS);
            push(&mut queue, at, i, Ev::Sweep { attempt: 0 });
        }
        fleet.push(Node {
            pool: NodePool::new(n.cfg.clone()),
            calls: startup.into(),
            step: None,
            done: 0,
            actions: VecDeque::new(),
            plans: 0,
            attempt: 0,
            pass_failures: 0,
            polls: 0,
            attached_at: 0,
            first: None,
            full: None,
            describe: VBucket::new(s.agent.describe_bucket, 1.0),
            mutating: VBucket::new(s.agent.mutating_bucket, 1.0),
            describe_pace: Pace {
                level: 0,
                hold_until: slot_of[i].0,
            },
            mutating_pace: Pace {
                level: 0,
                hold_until: slot_of[i].1,
            },
            call_started: 0,
        });
        push(&mut queue, boot, i, Ev::Send);
    }

    let jitter = |rng: &mut ChaCha8Rng, ceil: u64| ceil / 2 + rng.random_range(0..=ceil / 2);
    while let Some(Reverse((now, _, i, ev))) = queue.pop() {
        if now > HORIZON_MS {
            break;
        }
        let node = &mut fleet[i];
        match ev {
            Ev::Plan => {
                node.pool.now_ms = NOW_MS + now;
                let actions = node.pool.pool.plan(NOW_MS + now);
                if actions.is_empty() || node.plans >= PLANS_PER_PASS {
                    node.plans = 0;
                    if actions.is_empty() {
                        node.full.get_or_insert(now);
                    } else {
                        push(&mut queue, now, i, Ev::Plan);
                    }
                    continue;
                }
                node.plans += 1;
                for a in &actions {
                    node.pool.pool.begin(a);
                }
                node.actions = actions.into();
                next_step(node, now, i, &mut queue, &mut push);
            }
            Ev::Send => {
                let Some(action) = node.calls.front().copied() else {
                    continue;
                };
                if node.attempt == 0 {
                    node.call_started = now;
                }
                let (bucket, pace) = if is_describe(action) {
                    (&mut node.describe, node.describe_pace)
                } else {
                    (&mut node.mutating, node.mutating_pace)
                };
                let mut wait = bucket.reserve(now).max(pace.hold_until.saturating_sub(now));
                if wait > 0 {
                    // The agent adds up to 10 % (at most 100 ms) so nodes throttled together
                    // do not send in lockstep.
                    wait += rng.random_range(0..=(wait / 10).min(100));
                }
                push(&mut queue, now + wait, i, Ev::Arrive);
            }
            Ev::Arrive => {
                let action = *node.calls.front().expect("a call in flight");
                made.add(action, 1);
                let spec = ec2_default(ec2_category(action, true));
                let ok = account
                    .entry((action, true))
                    .or_insert_with(|| VBucket::new(spec, share))
                    .try_take(now);
                if !ok {
                    throttled.add(action, 1);
                }
                push(&mut queue, now + s.latency.of(action), i, Ev::Reply { ok });
            }
            Ev::Sweep { attempt } => {
                made.add(calls::SWEEP, 1);
                let spec = ec2_default(ec2_category(calls::SWEEP, true));
                let ok = account
                    .entry((calls::SWEEP, true))
                    .or_insert_with(|| VBucket::new(spec, share))
                    .try_take(now);
                if !ok {
                    throttled.add(calls::SWEEP, 1);
                    if attempt + 1 < s.agent.max_attempts {
                        let ceil =
                            (s.agent.throttle_base_ms << attempt.min(20)).min(s.agent.max_delay_ms);
                        let d = jitter(&mut rng, ceil);
                        push(
                            &mut queue,
                            now + d,
                            i,
                            Ev::Sweep {
                                attempt: attempt + 1,
                            },
                        );
                    }
                }
            }
            Ev::Reply { ok: true } => {
                let action = node.calls.front().copied().expect("a call in flight");
                node.attempt = 0;
                let pace = if is_describe(action) {
                    &mut node.describe_pace
                } else {
                    &mut node.mutating_pace
                };
                pace.level = pace.level.saturating_sub(1);
                let polling = action == ATTACH_POLL
                    && node
                        .step
                        .as_ref()
                        .is_some_and(|a| matches!(a, Action::CreateEni { .. }))
                    && node.attached_at > now;
                if polling {
                    let ceil = (POLL_BASE_MS << node.polls.min(10)).min(POLL_MAX_MS);
                    node.polls += 1;
                    let d = jitter(&mut rng, ceil);
                    push(&mut queue, now + d, i, Ev::Send);
                    continue;
                }
                node.calls.pop_front();
                node.done += 1;
                if action == "AttachNetworkInterface" {
                    node.attached_at = now + s.latency.attach_complete_ms;
                    node.polls = 0;
                    let d = jitter(&mut rng, POLL_BASE_MS);
                    push(&mut queue, now + d, i, Ev::Send);
                    continue;
                }
                if !node.calls.is_empty() {
                    push(&mut queue, now, i, Ev::Send);
                    continue;
                }
                if let Some(a) = node.step.take() {
                    node.pool.now_ms = NOW_MS + now;
                    node.pool.apply(&a);
                    if node.first.is_none()
                        && node.pool.pool.summary(NOW_MS + now).available_ips > 0
                    {
                        node.first = Some(now);
                    }
                }
                next_step(node, now, i, &mut queue, &mut push);
            }
            Ev::Reply { ok: false } => {
                let action = node.calls.front().copied().expect("a call in flight");
                if is_describe(action) {
                    node.describe.drain(now);
                } else {
                    node.mutating.drain(now);
                }
                node.attempt += 1;
                if let Some(p) = s.agent.pace {
                    let pace = if is_describe(action) {
                        &mut node.describe_pace
                    } else {
                        &mut node.mutating_pace
                    };
                    pace.level += 1;
                    let ceil = (p.base_ms << (pace.level - 1).min(20)).min(p.max_ms);
                    pace.hold_until = pace.hold_until.max(now + jitter(&mut rng, ceil));
                }
                // Paced: the retry waits for the bucket's hold; else for its own backoff.
                let retry_at = if s.agent.pace.is_some() {
                    let pace = if is_describe(action) {
                        node.describe_pace
                    } else {
                        node.mutating_pace
                    };
                    pace.hold_until.max(now)
                } else if node.attempt < s.agent.max_attempts {
                    let ceil = (s.agent.throttle_base_ms << (node.attempt - 1).min(20))
                        .min(s.agent.max_delay_ms);
                    now + jitter(&mut rng, ceil)
                } else {
                    now
                };
                let deadline = node.call_started + s.agent.operation_timeout_ms;
                let in_time = s.agent.pace.is_none() || retry_at < deadline;
                if node.attempt < s.agent.max_attempts && in_time {
                    push(&mut queue, retry_at, i, Ev::Send);
                    continue;
                }
                // Every attempt throttled, or (paced) the hold outlasts the call's deadline: the
                // call fails with the throttle at once, the step fails, the pass ends and the filler backs
                // off before planning again (a start-up describe is retried the same way).
                node.attempt = 0;
                if let Some(a) = node.step.take() {
                    node.pool.pool.abort(&a);
                    for rest in node.actions.drain(..) {
                        node.pool.pool.abort(&rest);
                    }
                    // An ENI created but not set up is deleted, as the agent does (detached
                    // first once attached); those calls go before the next plan.
                    let cleanup: &[&'static str] = match (&a, node.done) {
                        (Action::CreateEni { .. }, 2) => &["DeleteNetworkInterface"],
                        (Action::CreateEni { .. }, d) if d > 2 => &[
                            "DetachNetworkInterface",
                            "DescribeNetworkInterfaces",
                            "DeleteNetworkInterface",
                        ],
                        _ => &[],
                    };
                    node.calls = cleanup.iter().copied().collect();
                    node.done = 0;
                }
                node.plans = 0;
                node.pass_failures += 1;
                let ceil = (s.agent.pass_base_ms << (node.pass_failures - 1).min(20))
                    .min(s.agent.pass_max_ms);
                let d = jitter(&mut rng, ceil);
                let ev = if node.calls.is_empty() {
                    Ev::Plan
                } else {
                    Ev::Send
                };
                push(&mut queue, now + d, i, ev);
            }
        }
    }

    let n = fleet.len() as u64;
    let unfinished = fleet.iter().filter(|f| f.full.is_none()).count() as u64;
    SimReport {
        nodes: n,
        boot_spread_ms: s.boot_spread_ms,
        first_address: Spread::of(fleet.iter().filter_map(|f| f.first).collect()),
        warm_full: Spread::of(fleet.iter().filter_map(|f| f.full).collect()),
        unfinished,
        calls: made,
        throttled,
        floor_first_address: floor_shared(&first_calls, s.other_tools_share),
    }
}

/// Starts the node's next step: the next action of the plan, or (none left) the next plan.
fn next_step(
    node: &mut Node,
    now: u64,
    i: usize,
    queue: &mut BinaryHeap<Reverse<(u64, u64, usize, Ev)>>,
    push: &mut impl FnMut(&mut BinaryHeap<Reverse<(u64, u64, usize, Ev)>>, u64, usize, Ev),
) {
    match node.actions.pop_front() {
        Some(a) => {
            node.calls = calls::sequence(&a).iter().copied().collect();
            node.done = 0;
            node.step = Some(a);
            push(queue, now, i, Ev::Send);
        }
        None => {
            // The start-up calls, or a whole plan, went through.
            node.pass_failures = 0;
            push(queue, now, i, Ev::Plan);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    fn nodes(n: usize, t: &str) -> Vec<SimNode> {
        let cfg = WarmConfig::for_limits(vpcnet_limits::lookup(t).unwrap());
        vec![
            SimNode {
                cfg,
                subnet_discovery: true,
            };
            n
        ]
    }

    #[test]
    fn one_node_is_as_fast_as_the_latencies_allow() {
        let r = simulate(&nodes(1, "m5.large"), &SimSettings::default());
        // Start-up: a describe and a DescribeSubnets (100 ms each), then one assign; the
        // leaked-ENI sweep's describe comes later.
        assert_eq!(r.first_address.last_ms, 400, "{r:?}");
        assert_eq!(r.throttled.total(), 0);
        assert_eq!(r.unfinished, 0);
        // The filled primary ENI is the default warm pool (9 free).
        assert_eq!(r.warm_full.last_ms, 400, "{r:?}");
        assert_eq!(
            r.calls.get("DescribeNetworkInterfaces"),
            2,
            "the sweep's too"
        );
        // DISABLE_LEAKED_ENI_CLEANUP: the start-up describe alone.
        let mut no_sweep = SimSettings::default();
        no_sweep.agent.sweep = false;
        let r = simulate(&nodes(1, "m5.large"), &no_sweep);
        assert_eq!(r.calls.get("DescribeNetworkInterfaces"), 1, "{r:?}");
        assert_eq!(r.first_address.last_ms, 400, "{r:?}");

        // Two warm ENIs: then a second ENI, placed (100 ms), created (300 ms), attached
        // (100 ms, attached 2 s later, seen by the next poll) and modified (100 ms).
        let mut two = nodes(1, "m5.large");
        two[0].cfg.warm_eni_target = 2;
        let r = simulate(&two, &SimSettings::default());
        assert_eq!(r.first_address.last_ms, 400, "{r:?}");
        let full = r.warm_full.last_ms;
        assert!((3_000..3_700).contains(&full), "{r:?}");
        assert_eq!(r.calls.get("CreateNetworkInterface"), 1);
    }

    #[test]
    fn a_burst_beyond_the_buckets_waits_for_their_refill() {
        let r = simulate(&nodes(400, "m5.large"), &SimSettings::default());
        assert_eq!(r.unfinished, 0, "{r:?}");
        // 400 first assigns: 100 at once, then 5 a second: at least 60 s for the last.
        assert_eq!(r.floor_first_address.seconds, 60.0);
        assert!(r.first_address.last_ms >= 60_000, "{r:?}");
        assert!(r.throttled.total() > 0, "{r:?}");
        let same = simulate(&nodes(400, "m5.large"), &SimSettings::default());
        assert_eq!(r, same, "a run reproduces");
    }

    #[test]
    fn an_eni_whose_set_up_fails_is_deleted_not_forgotten() {
        // Two warm ENIs each: 300 attaches against a burst of 50 and 5 a second; some fail
        // every attempt.
        let mut v = nodes(300, "m5.large");
        v.iter_mut().for_each(|n| n.cfg.warm_eni_target = 2);
        let r = simulate(&v, &SimSettings::default());
        let ok = |a: &str| r.calls.get(a) - r.throttled.get(a);
        assert!(
            ok("DeleteNetworkInterface") > 0,
            "some set-up failed: {r:?}"
        );
        assert_eq!(
            ok("CreateNetworkInterface"),
            ok("ModifyNetworkInterfaceAttribute") + ok("DeleteNetworkInterface"),
            "every ENI created is set up or deleted: {r:?}"
        );
    }

    #[test]
    fn the_fleet_budget_throttles_less_than_the_agent_before_it_and_keeps_the_pace() {
        let share = |r: &SimReport| r.throttled.total() as f64 / r.calls.total() as f64;
        for n in [100, 200, 1_000] {
            let before = simulate(
                &nodes(n, "m5.large"),
                &SimSettings {
                    agent: AgentPolicy::unpaced(),
                    ..SimSettings::default()
                },
            );
            let now = simulate(&nodes(n, "m5.large"), &SimSettings::default());
            assert!(
                share(&now) < share(&before) && now.calls.total() < before.calls.total(),
                "{n}: throttled {} vs {}, calls {} vs {}",
                share(&now),
                share(&before),
                now.calls.total(),
                before.calls.total()
            );
            if n == 100 {
                // Every call fits the account's bursts: the describes no longer overflow.
                assert_eq!(now.throttled.total(), 0, "{now:?}");
                assert!(share(&before) > 0.3, "{before:?}");
                continue;
            }
            let floor = now.floor_first_address.seconds * 1000.0;
            assert!(
                (now.first_address.last_ms as f64) < 1.2 * floor,
                "{n}: last {} ms vs floor {floor} ms",
                now.first_address.last_ms
            );
            assert_eq!(now.unfinished, 0);
        }
    }

    #[test]
    fn a_coordinators_slots_leave_next_to_no_throttle() {
        let r = simulate(
            &nodes(300, "m5.large"),
            &SimSettings {
                slots: true,
                ..SimSettings::default()
            },
        );
        assert!(r.throttled.total() * 100 < r.calls.total() * 5, "{r:?}");
        assert!(
            (r.first_address.last_ms as f64) < 1.1 * r.floor_first_address.seconds * 1000.0 + 500.0,
            "{r:?}"
        );
    }

    #[test]
    fn other_tools_in_the_account_slow_the_fleet() {
        let alone = simulate(&nodes(300, "m5.large"), &SimSettings::default());
        let shared = simulate(
            &nodes(300, "m5.large"),
            &SimSettings {
                other_tools_share: 0.5,
                ..SimSettings::default()
            },
        );
        assert!(
            shared.first_address.last_ms > alone.first_address.last_ms,
            "{alone:?} {shared:?}"
        );
    }
}
