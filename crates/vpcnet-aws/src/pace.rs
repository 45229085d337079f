//! Throttle pacing of one client-side bucket: the part of a fleet-aware EC2 budget a node can
//! do alone. EC2 meters every action per account, so a throttled answer says the account's
//! bucket is empty because of the whole fleet (or other tools), not because of the one call.
//! The node therefore remembers it per bucket, not per call: every throttled answer raises
//! the bucket's level and holds **all** its calls for an equal-jitter wait of
//! `min(max, base × 2^(level − 1))`, whichever call or reconciler pass they belong to; a
//! granted call lowers the level by one. Before this, each call's retries started again from
//! 500 ms and each failed pass restarted them, so a node waiting for the account's refill
//! kept asking several times a second.
//!
//! Pure: time and the random draw are passed in.

use std::time::Duration;

use tokio::time::Instant;

/// The pacing's two figures; [`PaceConfig::OFF`] turns it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaceConfig {
    /// Ceiling of the hold after the first throttled answer (level 1). Zero: no pacing.
    pub base: Duration,
    /// Largest ceiling of a hold.
    pub max: Duration,
}

impl PaceConfig {
    /// No pacing: a throttled call is retried after its own backoff ([`crate::RetryPolicy`]).
    pub const OFF: PaceConfig = PaceConfig {
        base: Duration::ZERO,
        max: Duration::ZERO,
    };

    /// Whether the pacing is on.
    pub fn is_on(&self) -> bool {
        !self.base.is_zero()
    }

    /// The hold's ceiling at `level` (≥ 1): `min(max, base × 2^(level − 1))`.
    pub fn ceiling(&self, level: u32) -> Duration {
        let doublings = level.saturating_sub(1).min(30);
        self.base
            .saturating_mul(1u32 << doublings)
            .min(self.max.max(self.base))
    }
}

/// The pacing state of one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    config: PaceConfig,
    level: u32,
    hold_until: Option<Instant>,
}

impl Pace {
    pub fn new(config: PaceConfig) -> Self {
        Pace {
            config,
            level: 0,
            hold_until: None,
        }
    }

    /// Whether throttled answers hold the bucket.
    pub fn is_on(&self) -> bool {
        self.config.is_on()
    }

    /// Throttled answers not yet offset by granted calls.
    pub fn level(&self) -> u32 {
        self.level
    }

    /// How long a call sent at `now` must wait for the hold (zero when none).
    pub fn hold(&self, now: Instant) -> Duration {
        self.hold_until
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// EC2 throttled a call at `now`: the level rises and the bucket is held for a wait
    /// uniformly in `[ceiling/2, ceiling]` (`unit` the random draw in [0, 1)), unless a longer
    /// hold is already running. Returns the hold from `now`. Off: nothing changes.
    pub fn throttled(&mut self, now: Instant, unit: f64) -> Duration {
        if !self.config.is_on() {
            return Duration::ZERO;
        }
        self.level = self.level.saturating_add(1);
        let ceiling = self.config.ceiling(self.level);
        let wait = ceiling / 2 + (ceiling / 2).mul_f64(unit.clamp(0.0, 1.0));
        let until = now + wait;
        self.hold_until = Some(self.hold_until.map_or(until, |t| t.max(until)));
        self.hold(now)
    }

    /// EC2 granted a call: the level falls by one (the running hold, if any, stays).
    pub fn granted(&mut self) {
        self.level = self.level.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const CFG: PaceConfig = PaceConfig {
        base: Duration::from_secs(1),
        max: Duration::from_secs(60),
    };

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn each_throttle_doubles_the_hold_up_to_the_max() {
        let t0 = Instant::now();
        let mut p = Pace::new(CFG);
        assert_eq!(p.hold(t0), Duration::ZERO);
        // unit 1.0: the whole ceiling.
        assert_eq!(p.throttled(t0, 1.0), s(1));
        assert_eq!(p.throttled(t0, 1.0), s(2));
        assert_eq!(p.throttled(t0, 1.0), s(4));
        for _ in 0..10 {
            p.throttled(t0, 1.0);
        }
        assert_eq!(p.hold(t0), s(60));
        // unit 0: half the ceiling (30 s), but a longer hold already running stays.
        assert_eq!(p.throttled(t0 + s(1), 0.0), s(59));
        assert_eq!(p.throttled(t0 + s(61), 0.0), s(30));
    }

    #[test]
    fn the_hold_runs_out_and_granted_calls_lower_the_level() {
        let t0 = Instant::now();
        let mut p = Pace::new(CFG);
        p.throttled(t0, 1.0);
        p.throttled(t0, 1.0);
        assert_eq!(p.level(), 2);
        assert_eq!(p.hold(t0 + s(1)), s(1));
        assert_eq!(p.hold(t0 + s(3)), Duration::ZERO);
        p.granted();
        assert_eq!(p.level(), 1);
        // Still contended: the next throttle holds 2 s at most, not 4 s.
        assert_eq!(p.throttled(t0 + s(3), 1.0), s(2));
        p.granted();
        p.granted();
        p.granted();
        assert_eq!(p.level(), 0);
        assert_eq!(p.throttled(t0 + s(10), 1.0), s(1));
    }

    #[test]
    fn off_never_holds() {
        let t0 = Instant::now();
        let mut p = Pace::new(PaceConfig::OFF);
        assert_eq!(p.throttled(t0, 1.0), Duration::ZERO);
        assert_eq!((p.level(), p.hold(t0)), (0, Duration::ZERO));
    }

    #[derive(Debug, Clone)]
    enum Event {
        Throttled { after_ms: u64, unit: f64 },
        Granted { after_ms: u64 },
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u64..90_000, 0.0f64..1.0)
                .prop_map(|(after_ms, unit)| Event::Throttled { after_ms, unit }),
            (0u64..90_000).prop_map(|after_ms| Event::Granted { after_ms }),
        ]
    }

    proptest! {
        /// Over any sequence of answers: the level is throttles minus grants (never below
        /// zero), no hold outlasts the max, each throttle's hold is at least half the
        /// ceiling of its level, and the hold never ends earlier than it had promised.
        #[test]
        fn the_pacing_holds_its_bounds(base_ms in 1u64..5_000, extra_ms in 0u64..120_000,
                                       events in proptest::collection::vec(event(), 1..60)) {
            let cfg = PaceConfig { base: Duration::from_millis(base_ms), max: Duration::from_millis(base_ms + extra_ms) };
            let mut p = Pace::new(cfg);
            let mut now = Instant::now();
            let mut level = 0u32;
            let mut promised = now;
            for e in events {
                match e {
                    Event::Throttled { after_ms, unit } => {
                        now += Duration::from_millis(after_ms);
                        level += 1;
                        let hold = p.throttled(now, unit);
                        let ceiling = cfg.ceiling(level);
                        prop_assert!(hold <= cfg.max, "{hold:?} beyond the max");
                        prop_assert!(hold >= ceiling / 2, "{hold:?} below half of {ceiling:?}");
                        prop_assert!(now + hold >= promised, "the hold was shortened");
                        promised = now + hold;
                    }
                    Event::Granted { after_ms } => {
                        now += Duration::from_millis(after_ms);
                        level = level.saturating_sub(1);
                        p.granted();
                        prop_assert_eq!(p.hold(now), promised.saturating_duration_since(now));
                    }
                }
                prop_assert_eq!(p.level(), level);
            }
        }
    }
}
