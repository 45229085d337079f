//! The resilient call loop shared by every EC2 action: token bucket, per-attempt timeout,
//! jittered retry on throttling/5xx/transport faults only, and an overall deadline.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{Action, BucketConfig, Ec2Error, Ec2Observer, RateLimiter, RetryPolicy};

/// Deadlines, retry policy and rate limits of an [`crate::Ec2`] client.
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
    /// Page size (`MaxResults`) of paginated Describe calls, 5..=1000. Default 1000.
    pub describe_page_size: u32,
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
        }
    }
}

/// Runs attempts of one action under [`CallSettings`]. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Caller {
    pub(crate) settings: Arc<CallSettings>,
    pub(crate) limiter: Arc<RateLimiter>,
    pub(crate) observer: Arc<dyn Ec2Observer>,
}

impl Caller {
    pub(crate) fn new(settings: CallSettings, observer: Arc<dyn Ec2Observer>) -> Self {
        let limiter = Arc::new(RateLimiter::new(
            settings.describe_bucket,
            settings.mutating_bucket,
        ));
        Caller {
            settings: Arc::new(settings),
            limiter,
            observer,
        }
    }

    /// Run `attempt` until it succeeds, fails with a non-retryable error, runs out of
    /// attempts, or the operation deadline passes.
    pub(crate) async fn run<T, F, Fut>(&self, action: Action, mut attempt: F) -> Result<T, Ec2Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Ec2Error>>,
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
                    Err(_) => Err(Ec2Error::Timeout {
                        action,
                        after: s.attempt_timeout,
                        attempts: n,
                    }),
                };
                self.observer
                    .on_attempt(action, sent.elapsed(), result.as_ref().err());
                if result.as_ref().is_err_and(Ec2Error::is_throttle) {
                    self.limiter.penalize(action.class());
                }
                match result {
                    Ok(v) => return Ok(v),
                    Err(e) if e.is_retryable() => {
                        let Some(delay) = backoff.next_delay_from(s.retry.initial(e.is_throttle()))
                        else {
                            return Err(e);
                        };
                        tracing::debug!(action = %action, attempt = n, error = %crate::error_chain(&e), ?delay, "retrying EC2 call");
                        tokio::time::sleep(delay).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let result = match tokio::time::timeout(s.operation_timeout, looped).await {
            Ok(r) => r,
            Err(_) => Err(Ec2Error::Timeout {
                action,
                after: s.operation_timeout,
                attempts: attempts.load(Ordering::Relaxed),
            }),
        };
        self.observer
            .on_call(action, started.elapsed(), result.as_ref().err());
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Instant;

    #[derive(Default)]
    struct Recorder {
        attempts: Mutex<Vec<(Action, Option<String>)>>,
        calls: Mutex<Vec<(Action, Option<String>)>>,
    }

    impl Ec2Observer for Recorder {
        fn on_attempt(&self, a: Action, _: Duration, e: Option<&Ec2Error>) {
            self.attempts
                .lock()
                .unwrap()
                .push((a, e.map(|e| e.code().to_string())));
        }
        fn on_call(&self, a: Action, _: Duration, e: Option<&Ec2Error>) {
            self.calls
                .lock()
                .unwrap()
                .push((a, e.map(|e| e.code().to_string())));
        }
    }

    fn fast() -> CallSettings {
        CallSettings {
            operation_timeout: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(1),
            retry: RetryPolicy {
                max_attempts: 4,
                base_delay: Duration::from_millis(1),
                throttle_base_delay: Duration::from_millis(2),
                max_delay: Duration::from_millis(20),
            },
            describe_bucket: BucketConfig::DESCRIBE,
            mutating_bucket: BucketConfig::MUTATING,
            describe_page_size: 1000,
        }
    }

    const A: Action = Action::AssignPrivateIpAddresses;

    #[tokio::test]
    async fn throttling_is_retried_until_success() {
        let rec = Arc::new(Recorder::default());
        let caller = Caller::new(fast(), rec.clone());
        let n = AtomicU32::new(0);
        let r = caller
            .run(A, || async {
                match n.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(Ec2Error::api(
                        A,
                        "RequestLimitExceeded",
                        "slow down",
                        Some(503),
                    )),
                    1 => Err(Ec2Error::api(A, "InternalError", "oops", Some(500))),
                    _ => Ok(42),
                }
            })
            .await;
        assert_eq!(r.unwrap(), 42);
        assert_eq!(n.load(Ordering::SeqCst), 3);
        let attempts = rec.attempts.lock().unwrap().clone();
        assert_eq!(
            attempts,
            vec![
                (A, Some("RequestLimitExceeded".into())),
                (A, Some("InternalError".into())),
                (A, None)
            ]
        );
        assert_eq!(rec.calls.lock().unwrap().clone(), vec![(A, None)]);
    }

    #[tokio::test]
    async fn client_errors_are_not_retried() {
        let rec = Arc::new(Recorder::default());
        let caller = Caller::new(fast(), rec.clone());
        let n = AtomicU32::new(0);
        let r: Result<(), _> = caller
            .run(A, || async {
                n.fetch_add(1, Ordering::SeqCst);
                Err(Ec2Error::api(
                    A,
                    "PrivateIpAddressLimitExceeded",
                    "full",
                    Some(400),
                ))
            })
            .await;
        assert!(r.unwrap_err().is_limit());
        assert_eq!(n.load(Ordering::SeqCst), 1);
        assert_eq!(
            rec.calls.lock().unwrap()[0].1.as_deref(),
            Some("PrivateIpAddressLimitExceeded")
        );
    }

    #[tokio::test]
    async fn gives_up_after_max_attempts_with_last_error() {
        let caller = Caller::new(fast(), Arc::new(crate::NoopObserver));
        let n = AtomicU32::new(0);
        let r: Result<(), _> = caller
            .run(A, || async {
                n.fetch_add(1, Ordering::SeqCst);
                Err(Ec2Error::api(A, "RequestLimitExceeded", "", Some(503)))
            })
            .await;
        assert!(r.unwrap_err().is_throttle());
        assert_eq!(n.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn attempt_timeout_is_retried_and_operation_deadline_fires() {
        let mut s = fast();
        s.attempt_timeout = Duration::from_millis(50);
        s.operation_timeout = Duration::from_millis(120);
        s.retry.max_attempts = 100;
        let caller = Caller::new(s, Arc::new(crate::NoopObserver));
        let n = AtomicU32::new(0);
        let t0 = Instant::now();
        let r: Result<(), _> = caller
            .run(A, || async {
                n.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok(())
            })
            .await;
        let e = r.unwrap_err();
        assert!(
            matches!(e, Ec2Error::Timeout { after, .. } if after == Duration::from_millis(120)),
            "{e}"
        );
        assert!(
            n.load(Ordering::SeqCst) >= 2,
            "attempt timeouts are retried"
        );
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn rate_limit_delays_calls() {
        let mut s = fast();
        s.mutating_bucket = BucketConfig {
            capacity: 1,
            refill_per_sec: 20.0,
        };
        let caller = Caller::new(s, Arc::new(crate::NoopObserver));
        let t0 = Instant::now();
        for _ in 0..3 {
            caller
                .run(A, || async { Ok::<_, Ec2Error>(()) })
                .await
                .unwrap();
        }
        // 1 immediate + 2 × 50 ms.
        assert!(
            t0.elapsed() >= Duration::from_millis(95),
            "{:?}",
            t0.elapsed()
        );
    }
}
