//! The emulator's request-token bucket, EC2's and ELBv2's algorithm: it starts full, refills at
//! its rate up to its capacity ([`BucketSpec::refilled`]), and a call takes one token or is
//! refused (a refused call takes none). The injected throttle faults ([`crate::faults`]) and
//! the account's rate limits ([`crate::account_limits`]) both meter with it.

use std::time::Instant;

use vpcnet_limits::api_rates::BucketSpec;

#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    pub(crate) spec: BucketSpec,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `spec` at `now`.
    pub(crate) fn full(spec: BucketSpec, now: Instant) -> Self {
        TokenBucket {
            spec,
            tokens: f64::from(spec.capacity),
            last: now,
        }
    }

    /// Tokens in the bucket at `now`.
    pub(crate) fn level(&self, now: Instant) -> f64 {
        self.spec
            .refilled(self.tokens, now.saturating_duration_since(self.last))
    }

    /// One token at `now`, or false (throttled) when the bucket holds less than one.
    pub(crate) fn try_take(&mut self, now: Instant) -> bool {
        self.tokens = self.level(now);
        self.last = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}
