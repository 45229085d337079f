//! Client-side token buckets, one per action class, so a client rate-limits itself before
//! the service has to (EC2 itself meters every account with the same algorithm). Time is
//! tokio's clock ([`tokio::time::Instant`]), so the buckets run on a paused clock in tests.

use std::time::Duration;

use tokio::time::Instant;

use crate::pace::{Pace, PaceConfig};

/// Which client-side token bucket an action draws from, mirroring EC2's request-token
/// model (non-mutating "Describe" actions and mutating actions have separate buckets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionClass {
    /// Non-mutating actions (`Describe*`).
    Describe,
    /// Actions that change state (create, attach, assign, tag, ...).
    Mutating,
}

impl ActionClass {
    /// The class of an action by its name: `Describe*` actions the Describe bucket, every
    /// other action the mutating one.
    pub fn of_name(action: &str) -> ActionClass {
        if action.starts_with("Describe") {
            ActionClass::Describe
        } else {
            ActionClass::Mutating
        }
    }
}

/// Size and refill rate of one token bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketConfig {
    /// Burst size: tokens the bucket holds when full (≥ 1).
    pub capacity: u32,
    /// Tokens added per second (> 0).
    pub refill_per_sec: f64,
}

impl BucketConfig {
    /// Default for Describe actions: burst 100, refill 20/s (EC2's non-mutating request-token
    /// bucket).
    pub const DESCRIBE: BucketConfig = BucketConfig {
        capacity: 100,
        refill_per_sec: 20.0,
    };
    /// Default for mutating actions: burst 20, refill 5/s (a node's share of EC2's mutating
    /// bucket, whose refill rate is 5/s per account).
    pub const MUTATING: BucketConfig = BucketConfig {
        capacity: 20,
        refill_per_sec: 5.0,
    };
}

/// A token bucket that hands out reservations: every caller takes a token at once, possibly
/// driving the balance negative, and is told how long to wait until its token exists. Callers
/// are thus served in arrival order without polling. Pure: time is passed in.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    capacity: f64,
    refill_per_sec: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`. Capacity is raised to at least 1 and the refill rate to at least
    /// 0.001/s, so a bad configuration slows callers down but never deadlocks them.
    pub fn new(config: BucketConfig, now: Instant) -> Self {
        let capacity = f64::from(config.capacity.max(1));
        TokenBucket {
            capacity,
            refill_per_sec: config.refill_per_sec.max(0.001),
            tokens: capacity,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.refill_per_sec).min(self.capacity);
        self.last = self.last.max(now);
    }

    /// Reserve one token at `now`; returns how long the caller must wait before sending
    /// (zero when a token was available).
    pub fn reserve(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.refill_per_sec)
        }
    }

    /// The service throttled us anyway (other nodes share the account's bucket): drop the tokens
    /// saved up, so the next callers wait for refills instead of bursting into the throttle.
    /// Outstanding reservations are kept.
    pub fn drain(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = self.tokens.min(0.0);
    }

    /// Tokens available at `now` (negative while reservations are outstanding).
    pub fn available(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens
    }
}

/// One class's bucket and its throttle pacing.
#[derive(Debug)]
struct Metered {
    bucket: TokenBucket,
    pace: Pace,
}

/// The two buckets of one client (a [`crate::Caller`]), shared by all its calls, each with
/// its throttle pacing ([`crate::pace`]).
#[derive(Debug)]
pub struct RateLimiter {
    describe: std::sync::Mutex<Metered>,
    mutating: std::sync::Mutex<Metered>,
}

impl RateLimiter {
    /// Buckets without throttle pacing.
    pub fn new(describe: BucketConfig, mutating: BucketConfig) -> Self {
        RateLimiter::paced(describe, mutating, PaceConfig::OFF)
    }

    /// Buckets whose throttled answers hold every call of their class ([`Pace`]).
    pub fn paced(describe: BucketConfig, mutating: BucketConfig, pace: PaceConfig) -> Self {
        let now = Instant::now();
        let metered = |b| {
            std::sync::Mutex::new(Metered {
                bucket: TokenBucket::new(b, now),
                pace: Pace::new(pace),
            })
        };
        RateLimiter {
            describe: metered(describe),
            mutating: metered(mutating),
        }
    }

    fn bucket(&self, class: ActionClass) -> std::sync::MutexGuard<'_, Metered> {
        let bucket = match class {
            ActionClass::Describe => &self.describe,
            ActionClass::Mutating => &self.mutating,
        };
        bucket.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until a token of `class` is available; returns the time waited. A wait gets up to
    /// 10 % (at most 100 ms) of random jitter, so nodes that were throttled together do not
    /// send in lockstep.
    /// The class's throttle hold, if one runs, is waited too.
    pub async fn acquire(&self, class: ActionClass) -> Duration {
        let wait = {
            let now = Instant::now();
            let mut m = self.bucket(class);
            m.bucket.reserve(now).max(m.pace.hold(now))
        };
        if wait.is_zero() {
            return wait;
        }
        let unit: f64 = rand::Rng::random(&mut rand::rng());
        let wait = wait + (wait / 10).min(Duration::from_millis(100)).mul_f64(unit);
        tokio::time::sleep(wait).await;
        wait
    }

    /// Drain the saved-up tokens of `class` after the service throttled a call (see
    /// [`TokenBucket::drain`]) and, paced, hold the class ([`Pace::throttled`]). Returns the
    /// hold (zero unpaced).
    pub fn penalize(&self, class: ActionClass) -> Duration {
        let now = Instant::now();
        let mut m = self.bucket(class);
        m.bucket.drain(now);
        m.pace.throttled(now, rand::Rng::random(&mut rand::rng()))
    }

    /// The service granted a call of `class`: its pacing level falls ([`Pace::granted`]).
    pub fn granted(&self, class: ActionClass) {
        self.bucket(class).pace.granted();
    }

    /// Whether throttled answers hold the class ([`PaceConfig::is_on`]).
    pub fn is_paced(&self, class: ActionClass) -> bool {
        self.bucket(class).pace.is_on()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn burst_then_refill_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            BucketConfig {
                capacity: 3,
                refill_per_sec: 2.0,
            },
            t0,
        );
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        // Bucket empty: the next reservations queue up at 0.5 s intervals.
        assert_eq!(b.reserve(t0), ms(500));
        assert_eq!(b.reserve(t0), ms(1000));
        // 1 s later two tokens have been refilled, both already promised.
        assert_eq!(b.reserve(t0 + ms(1000)), ms(500));
    }

    #[test]
    fn never_exceeds_capacity_after_idle() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            BucketConfig {
                capacity: 2,
                refill_per_sec: 10.0,
            },
            t0,
        );
        let later = t0 + Duration::from_secs(60);
        assert_eq!(b.available(later), 2.0);
        assert_eq!(b.reserve(later), Duration::ZERO);
        assert_eq!(b.reserve(later), Duration::ZERO);
        assert_eq!(b.reserve(later), ms(100));
    }

    #[test]
    fn long_run_rate_matches_refill() {
        // Over 10 s at 5/s with burst 20, exactly 20 + 50 reservations are immediate-or-due.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(BucketConfig::MUTATING, t0);
        let mut served_by_10s = 0;
        for _ in 0..200 {
            if b.reserve(t0) <= Duration::from_secs(10) {
                served_by_10s += 1;
            }
        }
        assert_eq!(served_by_10s, 70);
    }

    #[test]
    fn drain_drops_saved_tokens_but_keeps_reservations() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            BucketConfig {
                capacity: 10,
                refill_per_sec: 10.0,
            },
            t0,
        );
        b.drain(t0);
        assert_eq!(b.reserve(t0), ms(100));
        b.drain(t0);
        assert_eq!(b.available(t0), -1.0);
        assert_eq!(b.reserve(t0), ms(200));
    }

    #[test]
    fn zero_config_is_clamped_not_deadlocked() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            BucketConfig {
                capacity: 0,
                refill_per_sec: 0.0,
            },
            t0,
        );
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert!(b.reserve(t0) > Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn penalize_makes_the_next_caller_wait_for_a_refill() {
        let l = RateLimiter::new(
            BucketConfig {
                capacity: 5,
                refill_per_sec: 10.0,
            },
            BucketConfig::MUTATING,
        );
        assert_eq!(l.acquire(ActionClass::Describe).await, Duration::ZERO);
        l.penalize(ActionClass::Describe);
        let t0 = Instant::now();
        let w = l.acquire(ActionClass::Describe).await;
        // One refill (100 ms) plus at most 10 ms of jitter, on tokio's (paused) clock.
        assert!(w >= ms(100) && w <= ms(110), "{w:?}");
        // Slept on tokio's clock, whose timer rounds up to the next millisecond.
        assert!(t0.elapsed() >= w && t0.elapsed() <= w + ms(1), "{w:?}");
        assert_eq!(l.acquire(ActionClass::Mutating).await, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn limiter_separates_classes() {
        let l = RateLimiter::new(
            BucketConfig {
                capacity: 1,
                refill_per_sec: 1000.0,
            },
            BucketConfig {
                capacity: 1,
                refill_per_sec: 0.5,
            },
        );
        assert_eq!(l.acquire(ActionClass::Mutating).await, Duration::ZERO);
        // Mutating is now empty for 2 s, but Describe is unaffected.
        assert_eq!(l.acquire(ActionClass::Describe).await, Duration::ZERO);
        let w = l.acquire(ActionClass::Describe).await;
        assert!(w >= ms(1) && w <= Duration::from_micros(1100), "{w:?}");
        let w = l.acquire(ActionClass::Mutating).await;
        // 2 s from the first reservation, 1 ms of which has passed; plus at most 100 ms jitter.
        assert!(w >= ms(1998) && w <= ms(2100), "{w:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_are_served_in_arrival_order_at_the_refill_rate() {
        let l = std::sync::Arc::new(RateLimiter::new(
            BucketConfig {
                capacity: 1,
                refill_per_sec: 10.0,
            },
            BucketConfig::MUTATING,
        ));
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                tokio::spawn(async move {
                    l.acquire(ActionClass::Describe).await;
                    t0.elapsed()
                })
            })
            .collect();
        let mut done = Vec::new();
        for t in tasks {
            done.push(t.await.unwrap());
        }
        // Reservations at 0, 100, 200 and 300 ms, each with at most 10 % jitter.
        for (i, at) in done.iter().enumerate() {
            let due = ms(100 * i as u64);
            assert!(*at >= due && *at <= due + due / 10, "caller {i}: {at:?}");
        }
    }
}
