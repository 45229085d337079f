//! When a target group's task next asks `DescribeTargetHealth` for its readiness gates. Pure:
//! time is passed in as offsets from an epoch the caller picks; no clock, no I/O.
//!
//! ELBv2 turns a newly registered target `healthy` only after `HealthyThresholdCount`
//! consecutive passing checks, `HealthCheckIntervalSeconds` apart. Its first check comes at
//! most one interval after the registration, so a target whose app already listens when it is
//! registered (a gated pod is registered only once its containers are ready) is healthy at
//! the latest `threshold × interval` after its registration, and never before
//! `(threshold − 1) × interval`. Asking earlier than the latest moment mostly pays a call to
//! hear `initial`.
//!
//! **Rule** (target group's health check known): each waiting target — registered, not
//! draining, its gate not yet open — is *due* at
//!
//! ```text
//! max(registered + threshold × interval + SETTLE,  last check + interval)
//! ```
//!
//! (a target registered before the task knew it, e.g. before a restart, is due at
//! `last check + interval`), and the task asks once, at the earliest due moment, with one
//! `DescribeTargetHealth` covering every target of the group: a batch. So a gate costs one call
//! when ELBv2 keeps to the bound above, and a target that is not healthy then (app slow to
//! listen, failing checks) is asked about again every interval, never more often: the group
//! makes at most one gate call per health-check interval (a gate due less than an interval
//! after the group's last check waits for that interval to end). No waiting target, no call.
//!
//! With an operator's fixed re-check (`--gate-recheck-ms`), while the health check is unknown
//! (`DescribeTargetGroups` failed), or for a group no load balancer uses (not health-checked:
//! its targets are `unused` at once), a waiting gate is asked about every `fixed` after the
//! last check, whatever the registration time.

use std::time::Duration;

/// Slack after `threshold × interval`: the state of a check that passed reaches
/// `DescribeTargetHealth` a little later (the lab reads HAProxy's check states every 250 ms),
/// and the registration time the task records is when `RegisterTargets` returned.
pub const SETTLE: Duration = Duration::from_secs(1);

/// The part of a target group's health check that decides when a target can turn healthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthTiming {
    /// `HealthCheckIntervalSeconds`.
    pub interval: Duration,
    /// `HealthyThresholdCount`.
    pub healthy_threshold: u32,
}

impl HealthTiming {
    /// From `DescribeTargetGroups`' fields; None when one is missing or zero.
    pub fn from_seconds(interval: Option<u32>, healthy_threshold: Option<u32>) -> Option<Self> {
        let interval = interval.filter(|i| *i > 0)?;
        let healthy_threshold = healthy_threshold.filter(|t| *t > 0)?;
        Some(HealthTiming {
            interval: Duration::from_secs(u64::from(interval)),
            healthy_threshold,
        })
    }

    /// The latest a target listening at registration takes to turn healthy:
    /// `threshold × interval`.
    pub fn to_healthy(&self) -> Duration {
        self.interval * self.healthy_threshold
    }
}

/// How the gates of one target group are re-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cadence {
    /// Follow the target group's health check (module rule).
    HealthCheck(HealthTiming),
    /// Every `fixed` after the last check.
    Fixed(Duration),
}

/// A registered target whose readiness gate waits; `registered` is when this task registered
/// it (None: registered before the task knew it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub registered: Option<Duration>,
}

/// When to ask next for `waiting` gates (module rule), given the last `DescribeTargetHealth`
/// (`last_check`; None: never). None when no gate waits.
pub fn next_check(
    waiting: &[Waiting],
    last_check: Option<Duration>,
    cadence: Cadence,
) -> Option<Duration> {
    let after_last = |step: Duration| last_check.map_or(Duration::ZERO, |l| l + step);
    waiting
        .iter()
        .map(|w| match cadence {
            Cadence::Fixed(step) => after_last(step),
            Cadence::HealthCheck(h) => {
                let earliest = w
                    .registered
                    .map_or(Duration::ZERO, |r| r + h.to_healthy() + SETTLE);
                earliest.max(after_last(h.interval))
            }
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn nlb() -> Cadence {
        Cadence::HealthCheck(HealthTiming {
            interval: S(5),
            healthy_threshold: 2,
        })
    }

    fn reg(at: u64) -> Waiting {
        Waiting {
            registered: Some(S(at)),
        }
    }

    #[test]
    fn no_waiting_gate_no_check() {
        assert_eq!(next_check(&[], Some(S(3)), nlb()), None);
        assert_eq!(next_check(&[], None, Cadence::Fixed(S(2))), None);
    }

    #[test]
    fn a_new_target_is_first_asked_about_once_it_can_be_healthy() {
        // Registered at 100 s, last check at 99 s: 100 + 2 × 5 + 1.
        assert_eq!(next_check(&[reg(100)], Some(S(99)), nlb()), Some(S(111)));
        // Never checked before: the same.
        assert_eq!(next_check(&[reg(100)], None, nlb()), Some(S(111)));
    }

    #[test]
    fn a_target_still_initial_is_asked_about_again_every_interval() {
        // Asked at 111 s, still initial: next at 116 s, then 121 s.
        assert_eq!(next_check(&[reg(100)], Some(S(111)), nlb()), Some(S(116)));
        assert_eq!(next_check(&[reg(100)], Some(S(116)), nlb()), Some(S(121)));
    }

    #[test]
    fn one_call_covers_the_group_at_the_earliest_due_target() {
        let w = [reg(100), reg(103), reg(90)];
        // 90 + 11 = 101 is the earliest, but the last check at 99 s allows 104 s at best.
        assert_eq!(next_check(&w, Some(S(99)), nlb()), Some(S(104)));
        // A target found by a restart (registration unknown) waits one interval.
        let w = [Waiting { registered: None }, reg(200)];
        assert_eq!(next_check(&w, Some(S(150)), nlb()), Some(S(155)));
        assert_eq!(next_check(&w, None, nlb()), Some(S(0)));
    }

    #[test]
    fn a_fixed_cadence_ignores_the_registration() {
        let f = Cadence::Fixed(Duration::from_millis(2000));
        assert_eq!(next_check(&[reg(100)], Some(S(99)), f), Some(S(101)));
        assert_eq!(next_check(&[reg(100)], None, f), Some(S(0)));
    }

    #[test]
    fn the_health_check_needs_both_fields() {
        assert_eq!(
            HealthTiming::from_seconds(Some(10), Some(3)).map(|h| h.to_healthy()),
            Some(S(30))
        );
        assert_eq!(HealthTiming::from_seconds(None, Some(3)), None);
        assert_eq!(HealthTiming::from_seconds(Some(10), Some(0)), None);
    }

    /// Simulates a group's task on virtual time: targets registered at `regs` (seconds),
    /// each turning healthy `offset` after registration, ELBv2's first check coming within
    /// one interval of it (`offset` in [(threshold − 1) × interval, threshold × interval]).
    /// Returns the checks' times and each gate's opening time.
    fn simulate(
        h: HealthTiming,
        targets: &[(Duration, Duration)],
    ) -> (Vec<Duration>, Vec<Option<Duration>>) {
        let mut checks = Vec::new();
        let mut opened: Vec<Option<Duration>> = vec![None; targets.len()];
        let mut last = None;
        let mut now = Duration::ZERO;
        // Registrations are events: the task recomputes its schedule at each.
        let mut events: Vec<Duration> = targets.iter().map(|(r, _)| *r).collect();
        events.sort();
        for _ in 0..10_000 {
            let waiting: Vec<(usize, Waiting)> = targets
                .iter()
                .enumerate()
                .filter(|(i, (r, _))| *r <= now && opened[*i].is_none())
                .map(|(i, (r, _))| {
                    (
                        i,
                        Waiting {
                            registered: Some(*r),
                        },
                    )
                })
                .collect();
            let w: Vec<Waiting> = waiting.iter().map(|(_, w)| *w).collect();
            let due = next_check(&w, last, Cadence::HealthCheck(h)).map(|d| d.max(now));
            let event = events.iter().copied().find(|e| *e > now);
            match (due, event) {
                (None, None) => break,
                (Some(d), e) if e.is_none_or(|e| d <= e) => {
                    now = d;
                    checks.push(d);
                    last = Some(d);
                    for (i, _) in &waiting {
                        let (r, off) = targets[*i];
                        if r + off <= d {
                            opened[*i] = Some(d);
                        }
                    }
                }
                (_, Some(e)) => now = e,
                (Some(_), None) => unreachable!(),
            }
        }
        (checks, opened)
    }

    proptest! {
        /// With ELBv2 keeping to its bound, every gate opens by its first due moment: SETTLE
        /// after the latest moment its target can turn healthy, or, when the group's previous
        /// check was less than an interval before that, one interval after that check (so less
        /// than one interval later); checks are at least one interval apart, and each check
        /// opens at least one gate (so a group makes at most one call per gate).
        #[test]
        fn gates_open_promptly_at_one_call_per_gate_at_most(
            interval in 5u64..=30,
            threshold in 2u32..=10,
            targets in proptest::collection::vec((0u64..600_000, 0u64..=1000), 1..20),
        ) {
            let h = HealthTiming { interval: S(interval), healthy_threshold: threshold };
            let ts: Vec<(Duration, Duration)> = targets
                .iter()
                .map(|(r, f)| {
                    let min = h.interval * (threshold - 1);
                    (Duration::from_millis(*r), min + h.interval * (*f as u32) / 1000)
                })
                .collect();
            let (checks, opened) = simulate(h, &ts);
            for w in checks.windows(2) {
                prop_assert!(w[1] >= w[0] + h.interval, "checks {:?}", checks);
            }
            for (i, o) in opened.iter().enumerate() {
                let (r, _) = ts[i];
                let o = o.expect("every gate opens");
                let earliest = r + h.to_healthy() + SETTLE;
                let before = checks.iter().copied().filter(|c| *c < earliest).max();
                let due = before.map_or(earliest, |c| earliest.max(c + h.interval));
                // A check made for another gate may find it healthy sooner.
                prop_assert!(o <= due, "gate {} at {:?}, registered {:?}, checks {:?}", i, o, r, checks);
                prop_assert!(o < earliest + h.interval);
            }
            prop_assert!(checks.len() <= ts.len(), "{} checks for {} gates", checks.len(), ts.len());
        }

        /// Whatever ELBv2 does, a waiting gate is asked about again within one interval of the
        /// last check once its first due moment has passed, and never sooner.
        #[test]
        fn a_waiting_gate_is_never_starved_nor_asked_too_often(
            regs in proptest::collection::vec(proptest::option::of(0u64..1000), 1..10),
            last in proptest::option::of(0u64..2000),
        ) {
            let h = HealthTiming { interval: S(5), healthy_threshold: 3 };
            let w: Vec<Waiting> = regs.iter().map(|r| Waiting { registered: r.map(S) }).collect();
            let next = next_check(&w, last.map(S), Cadence::HealthCheck(h)).unwrap();
            if let Some(l) = last {
                prop_assert!(next >= S(l) + h.interval);
            }
            let bound = w
                .iter()
                .map(|w| w.registered.map_or(Duration::ZERO, |r| r + h.to_healthy() + SETTLE))
                .min()
                .unwrap()
                .max(last.map_or(Duration::ZERO, |l| S(l) + h.interval));
            prop_assert_eq!(next, bound);
        }
    }
}
