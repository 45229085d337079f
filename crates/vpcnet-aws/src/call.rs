//! The one resilient call loop of every AWS adapter: a client-side token (Describe or mutating
//! bucket), a deadline per attempt, jittered retries on throttling/5xx/transport faults only,
//! a deadline for the whole call, and an observer that sees every attempt; plus the loop over
//! the pages of a paginated Describe.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{
    error_chain, ActionClass, BucketConfig, CallError, PaceConfig, RateLimiter, RetryPolicy,
};

/// Deadlines, retry policy and rate limits of one client (EC2, ELBv2, EKS).
#[derive(Debug, Clone, PartialEq)]
pub struct CallSettings {
    /// Deadline of one logical call: token-bucket wait, every attempt and every backoff.
    /// Default 30 s.
    pub operation_timeout: Duration,
    /// Deadline of one HTTP attempt. Default 10 s.
    pub attempt_timeout: Duration,
    pub retry: RetryPolicy,
    /// Client-side bucket for Describe actions. Default [`BucketConfig::DESCRIBE`].
    pub describe_bucket: BucketConfig,
    /// Client-side bucket for mutating actions. Default [`BucketConfig::MUTATING`].
    pub mutating_bucket: BucketConfig,
    /// Page size (`MaxResults`) of paginated Describe calls; each adapter caps it at its
    /// service's range (EC2 5..=1000, ELBv2 1..=400). Default 1000.
    pub describe_page_size: u32,
    /// Throttle pacing of both buckets ([`crate::pace`]); a throttled call's retry then
    /// waits for its class's hold instead of its own backoff. Default [`PaceConfig::OFF`]
    /// (the agent turns it on for EC2).
    pub pace: PaceConfig,
}

impl Default for CallSettings {
    fn default() -> Self {
        CallSettings {
            operation_timeout: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            describe_bucket: BucketConfig::DESCRIBE,
            mutating_bucket: BucketConfig::MUTATING,
            describe_page_size: 1000,
            pace: PaceConfig::OFF,
        }
    }
}

/// An action of a service as the call loop sees it: a name to log and a token bucket.
pub trait AwsAction: Copy + fmt::Display + Send + Sync + 'static {
    /// The token bucket the action draws from.
    fn class(self) -> ActionClass;
}

/// An action given by its name, e.g. `"RegisterTargets"`: `Describe*` draws from the
/// Describe bucket, everything else from the mutating one ([`ActionClass::of_name`]).
impl AwsAction for &'static str {
    fn class(self) -> ActionClass {
        ActionClass::of_name(self)
    }
}

/// Sees every request of a [`Caller`], so metrics can count requests, errors and latencies by
/// action. Methods must be cheap and must not block.
pub trait Observer<A, E>: Send + Sync + 'static {
    /// One request was sent and answered (or failed or timed out) after `latency`; `error`
    /// is `None` on success. Retries produce one event each.
    fn on_attempt(&self, _action: A, _latency: Duration, _error: Option<&E>) {}

    /// A logical call finished after `latency` (token-bucket waits, retries and backoff
    /// included) with `error` (`None` on success).
    fn on_call(&self, _action: A, _latency: Duration, _error: Option<&E>) {}

    /// A call waited `waited` on the client-side token bucket before being sent.
    fn on_rate_limited(&self, _action: A, _waited: Duration) {}
}

/// An [`Observer`] that ignores every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl<A, E> Observer<A, E> for NoObserver {}

/// Runs the attempts of one client's calls under its [`CallSettings`]: one per adapter client,
/// cheap to clone; clones share the token buckets.
pub struct Caller<A, E> {
    service: &'static str,
    settings: Arc<CallSettings>,
    limiter: Arc<RateLimiter>,
    observer: Arc<dyn Observer<A, E>>,
}

impl<A, E> Clone for Caller<A, E> {
    fn clone(&self) -> Self {
        Caller {
            service: self.service,
            settings: self.settings.clone(),
            limiter: self.limiter.clone(),
            observer: self.observer.clone(),
        }
    }
}

impl<A, E> fmt::Debug for Caller<A, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Caller")
            .field("service", &self.service)
            .field("settings", &*self.settings)
            .finish_non_exhaustive()
    }
}

impl<A: AwsAction, E: CallError<A>> Caller<A, E> {
    /// A caller for `service` (`EC2`, `ELBv2`, `EKS`, named in logs) with its own token
    /// buckets, reporting to `observer`.
    pub fn new(
        service: &'static str,
        settings: CallSettings,
        observer: Arc<dyn Observer<A, E>>,
    ) -> Self {
        let limiter = Arc::new(RateLimiter::paced(
            settings.describe_bucket,
            settings.mutating_bucket,
            settings.pace,
        ));
        Caller {
            service,
            settings: Arc::new(settings),
            limiter,
            observer,
        }
    }

    /// Deadlines, retries and rate limits in force.
    pub fn settings(&self) -> &CallSettings {
        &self.settings
    }

    /// Run `attempt` until it succeeds, fails with a non-retryable error, runs out of
    /// attempts, or the operation deadline passes. Each attempt first takes a token of the
    /// action's bucket; a throttled attempt drains that bucket; the delay between attempts
    /// is [`RetryPolicy::backoff`] from [`RetryPolicy::initial`], except after a throttle
    /// with pacing on ([`CallSettings::pace`]): then the next attempt waits for the class's
    /// hold, and a hold that would outlast the operation deadline ends the call at once with
    /// the throttle.
    pub async fn run<T, F, Fut>(&self, action: A, mut attempt: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let started = tokio::time::Instant::now();
        let attempts = AtomicU32::new(0);
        let s = &self.settings;
        let looped = async {
            let mut backoff = s.retry.backoff().start();
            loop {
                let n = attempts.fetch_add(1, Ordering::Relaxed) + 1;
                let waited = self.limiter.acquire(action.class()).await;
                if !waited.is_zero() {
                    self.observer.on_rate_limited(action, waited);
                }
                let sent = tokio::time::Instant::now();
                let result = match tokio::time::timeout(s.attempt_timeout, attempt()).await {
                    Ok(r) => r,
                    Err(_) => Err(E::timeout(action, s.attempt_timeout, n)),
                };
                self.observer
                    .on_attempt(action, sent.elapsed(), result.as_ref().err());
                let held = if result.as_ref().is_err_and(E::is_throttle) {
                    self.limiter.penalize(action.class())
                } else {
                    if result.is_ok() {
                        self.limiter.granted(action.class());
                    }
                    Duration::ZERO
                };
                match result {
                    Ok(v) => return Ok(v),
                    Err(e) if e.is_retryable() => {
                        let Some(mut delay) =
                            backoff.next_delay_from(s.retry.initial(e.is_throttle()))
                        else {
                            return Err(e);
                        };
                        if e.is_throttle() && self.limiter.is_paced(action.class()) {
                            // The next attempt's token waits for the class's hold; a hold
                            // beyond the call's deadline ends the call now, with the throttle
                            // (a definitive answer: nothing was applied), not a timeout later.
                            if started.elapsed() + held >= s.operation_timeout {
                                return Err(e);
                            }
                            delay = Duration::ZERO;
                            tracing::debug!(action = %action, attempt = n, ?held, "{} throttled; its calls held", self.service);
                        }
                        tracing::debug!(action = %action, attempt = n, error = %error_chain(&e), ?delay, "retrying {} call", self.service);
                        tokio::time::sleep(delay).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let result = match tokio::time::timeout(s.operation_timeout, looped).await {
            Ok(r) => r,
            Err(_) => Err(E::timeout(
                action,
                s.operation_timeout,
                attempts.load(Ordering::Relaxed),
            )),
        };
        self.observer
            .on_call(action, started.elapsed(), result.as_ref().err());
        result
    }

    /// Every page of a token-paginated Describe, each page one logical call ([`Caller::run`]:
    /// its own deadline and retries). `request(token)` sends the request for the page after
    /// `token` (`None`: the first); `take(page, items)` converts the page's items into `items`
    /// and returns the page's next token. A missing or empty next token ends the listing.
    pub async fn pages<O, T, F, Fut>(
        &self,
        action: A,
        request: F,
        mut take: impl FnMut(O, &mut Vec<T>) -> Result<Option<String>, E>,
    ) -> Result<Vec<T>, E>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self.run(action, || request(token.clone())).await?;
            token = take(page, &mut items)?.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(items);
            }
        }
    }
}

#[cfg(test)]
#[path = "call_tests.rs"]
mod tests;
