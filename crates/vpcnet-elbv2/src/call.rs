//! The call loop of every ELBv2 action, in vpcnet-ec2's style and with its parts
//! ([`CallSettings`], its token buckets and jittered backoff): a client-side token (Describe or
//! mutating bucket), a deadline per attempt, retries on throttling/5xx/transport faults only,
//! and a deadline for the whole call.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rand::Rng;
use vpcnet_ec2::{ActionClass, CallSettings, RateLimiter};

use crate::Elbv2Error;

/// The bucket an ELBv2 action draws from: `Describe*` actions the Describe bucket, the rest
/// the mutating one.
pub fn class(action: &str) -> ActionClass {
    if action.starts_with("Describe") {
        ActionClass::Describe
    } else {
        ActionClass::Mutating
    }
}

#[derive(Clone)]
pub(crate) struct Caller {
    pub(crate) settings: Arc<CallSettings>,
    limiter: Arc<RateLimiter>,
}

impl Caller {
    pub(crate) fn new(settings: CallSettings) -> Self {
        let limiter = Arc::new(RateLimiter::new(
            settings.describe_bucket,
            settings.mutating_bucket,
        ));
        Caller {
            settings: Arc::new(settings),
            limiter,
        }
    }

    /// Run `attempt` until it succeeds, fails for good, runs out of attempts or the call's
    /// deadline passes.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        action: &'static str,
        mut attempt: F,
    ) -> Result<T, Elbv2Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Elbv2Error>>,
    {
        let s = &self.settings;
        let n = AtomicU32::new(0);
        let tries = async {
            loop {
                let k = n.fetch_add(1, Ordering::Relaxed) + 1;
                self.limiter.acquire(class(action)).await;
                let e = match tokio::time::timeout(s.attempt_timeout, attempt()).await {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(e)) => e,
                    Err(_) => Elbv2Error::Timeout {
                        action,
                        after: s.attempt_timeout,
                        attempts: k,
                    },
                };
                if !e.is_retryable() || k >= s.retry.max_attempts.max(1) {
                    return Err(e);
                }
                if e.is_throttle() {
                    self.limiter.penalize(class(action));
                }
                let delay = s.retry.delay(k, e.is_throttle(), rand::rng().random());
                tracing::debug!(action, attempt = k, error = %e, ?delay, "retrying ELBv2 call");
                tokio::time::sleep(delay).await;
            }
        };
        tokio::time::timeout(s.operation_timeout, tries)
            .await
            .unwrap_or_else(|_| {
                Err(Elbv2Error::Timeout {
                    action,
                    after: s.operation_timeout,
                    attempts: n.load(Ordering::Relaxed),
                })
            })
    }
}
