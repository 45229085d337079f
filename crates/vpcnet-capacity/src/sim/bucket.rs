//! A token bucket in virtual time (milliseconds).

use vpcnet_limits::api_rates::BucketSpec;

/// Starts full; `tokens` may go negative for reservations (the agent's client-side buckets
/// hand out a wait instead of refusing).
#[derive(Debug, Clone)]
pub(crate) struct VBucket {
    capacity: f64,
    per_ms: f64,
    tokens: f64,
    at_ms: u64,
}

impl VBucket {
    /// A full bucket of `spec`, its refill scaled by `share` (the part left to this caller).
    pub(crate) fn new(spec: BucketSpec, share: f64) -> Self {
        VBucket {
            capacity: f64::from(spec.capacity),
            per_ms: spec.refill_per_sec * share / 1000.0,
            tokens: f64::from(spec.capacity),
            at_ms: 0,
        }
    }

    fn refill(&mut self, now_ms: u64) {
        if now_ms > self.at_ms {
            let t = self.tokens + (now_ms - self.at_ms) as f64 * self.per_ms;
            self.tokens = t.min(self.capacity);
            self.at_ms = now_ms;
        }
    }

    /// EC2's side: one token now, or refused.
    pub(crate) fn try_take(&mut self, now_ms: u64) -> bool {
        self.refill(now_ms);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The client's side: takes a token, possibly in the future; the wait until it is due.
    pub(crate) fn reserve(&mut self, now_ms: u64) -> u64 {
        self.refill(now_ms);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            0
        } else if self.per_ms <= 0.0 {
            u64::MAX / 4
        } else {
            (-self.tokens / self.per_ms).ceil() as u64
        }
    }

    /// After a throttled call: no saved-up token is left to send a burst with.
    pub(crate) fn drain(&mut self, now_ms: u64) {
        self.refill(now_ms);
        self.tokens = self.tokens.min(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_its_capacity_then_one_per_refill_interval() {
        let mut b = VBucket::new(BucketSpec::new(2, 5.0), 1.0);
        assert!(b.try_take(0) && b.try_take(0) && !b.try_take(0));
        assert!(!b.try_take(199));
        assert!(b.try_take(200));
        let mut c = VBucket::new(BucketSpec::new(1, 5.0), 0.5);
        assert_eq!((c.reserve(0), c.reserve(0), c.reserve(0)), (0, 400, 800));
    }
}
