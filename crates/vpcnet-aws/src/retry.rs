//! The retry policy of AWS calls, as a [`vpcnet_backoff::Backoff`] (pure: the random draw is
//! passed in).

use std::time::Duration;

use vpcnet_backoff::{Backoff, Jitter};

/// Retry policy of every AWS call: at most `max_attempts` attempts, with a jittered
/// exponential delay between them; only throttling, 5xx, transport faults and attempt
/// timeouts are retried (see [`crate::CallError::is_retryable`] and [`crate::classify`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (≥ 1). Default 8.
    pub max_attempts: u32,
    /// Base delay after a 5xx/transport fault. Default 100 ms.
    pub base_delay: Duration,
    /// Base delay after throttling (AWS asks for longer pauses). Default 500 ms.
    pub throttle_base_delay: Duration,
    /// Upper bound of any single delay. Default 10 s.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            base_delay: Duration::from_millis(100),
            throttle_base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The policy as the workspace's one backoff type: equal jitter from `base_delay` up to
    /// `max_delay`, at most `max_attempts` attempts. After throttling the caller starts the
    /// growth from `throttle_base_delay` instead ([`RetryPolicy::initial`]).
    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.base_delay, self.max_delay)
            .with_jitter(Jitter::Equal)
            .with_max_attempts(self.max_attempts.max(1))
    }

    /// The first ceiling after a throttled or other retryable failure.
    pub fn initial(&self, throttled: bool) -> Duration {
        if throttled {
            self.throttle_base_delay
        } else {
            self.base_delay
        }
    }

    /// The ceiling of the delay after failed attempt number `attempt` (1-based):
    /// `min(max_delay, base × 2^(attempt-1))`.
    pub fn ceiling(&self, attempt: u32, throttled: bool) -> Duration {
        self.backoff()
            .ceiling_from(self.initial(throttled), attempt)
    }

    /// Delay before the next attempt after failed attempt `attempt` (1-based), "equal jitter":
    /// uniformly in `[ceiling/2, ceiling]` given `unit` drawn uniformly from `[0, 1)`.
    /// Half the ceiling is always waited, so throttled callers really back off; the random
    /// half spreads callers that failed together.
    pub fn delay(&self, attempt: u32, throttled: bool, unit: f64) -> Duration {
        self.backoff()
            .delay_from(self.initial(throttled), attempt, Duration::ZERO, unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_then_caps() {
        let p = RetryPolicy::default();
        assert_eq!(p.ceiling(1, false), Duration::from_millis(100));
        assert_eq!(p.ceiling(2, false), Duration::from_millis(200));
        assert_eq!(p.ceiling(4, false), Duration::from_millis(800));
        assert_eq!(p.ceiling(1, true), Duration::from_millis(500));
        assert_eq!(p.ceiling(5, true), Duration::from_secs(8));
        assert_eq!(p.ceiling(6, true), Duration::from_secs(10));
        assert_eq!(p.ceiling(1000, true), Duration::from_secs(10));
    }

    #[test]
    fn delay_stays_within_half_and_full_ceiling() {
        let p = RetryPolicy::default();
        for attempt in 1..40 {
            for throttled in [false, true] {
                let c = p.ceiling(attempt, throttled);
                for unit in [0.0, 0.25, 0.5, 0.999_999, 1.0] {
                    let d = p.delay(attempt, throttled, unit);
                    assert!(
                        d >= c / 2 && d <= c,
                        "attempt {attempt} unit {unit}: {d:?} vs {c:?}"
                    );
                }
            }
        }
        assert!(p.delay(3, false, 0.0) < p.delay(3, false, 0.9));
    }
}
