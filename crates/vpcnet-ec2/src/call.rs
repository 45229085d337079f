//! EC2 on the shared call loop ([`vpcnet_aws::Caller`]): [`Ec2Error`] as its error, the
//! [`Ec2Observer`] as its observer.

use std::sync::Arc;
use std::time::Duration;

use vpcnet_aws::{CallError, CallSettings};

use crate::{Action, Ec2Error, Ec2Observer};

/// The call loop of an [`crate::Ec2`] client.
pub(crate) type Caller = vpcnet_aws::Caller<Action, Ec2Error>;

/// A caller under `settings` reporting to `observer`.
pub(crate) fn caller(settings: CallSettings, observer: Arc<dyn Ec2Observer>) -> Caller {
    Caller::new("EC2", settings, Arc::new(Observe(observer)))
}

impl CallError<Action> for Ec2Error {
    fn is_retryable(&self) -> bool {
        Ec2Error::is_retryable(self)
    }

    fn is_throttle(&self) -> bool {
        Ec2Error::is_throttle(self)
    }

    fn timeout(action: Action, after: Duration, attempts: u32) -> Self {
        Ec2Error::Timeout {
            action,
            after,
            attempts,
        }
    }
}

/// An [`Ec2Observer`] as the call loop's observer.
struct Observe(Arc<dyn Ec2Observer>);

impl vpcnet_aws::Observer<Action, Ec2Error> for Observe {
    fn on_attempt(&self, action: Action, latency: Duration, error: Option<&Ec2Error>) {
        self.0.on_attempt(action, latency, error);
    }

    fn on_call(&self, action: Action, latency: Duration, error: Option<&Ec2Error>) {
        self.0.on_call(action, latency, error);
    }

    fn on_rate_limited(&self, action: Action, waited: Duration) {
        self.0.on_rate_limited(action, waited);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;
    use tokio::time::Instant;
    use vpcnet_aws::{BucketConfig, RetryPolicy};

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
            pace: crate::PaceConfig::OFF,
        }
    }

    const A: Action = Action::AssignPrivateIpAddresses;

    #[tokio::test(start_paused = true)]
    async fn throttling_is_retried_until_success() {
        let rec = Arc::new(Recorder::default());
        let caller = caller(fast(), rec.clone());
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

    #[tokio::test(start_paused = true)]
    async fn client_errors_are_not_retried() {
        let rec = Arc::new(Recorder::default());
        let caller = caller(fast(), rec.clone());
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

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_attempts_with_last_error() {
        let caller = caller(fast(), Arc::new(crate::NoopObserver));
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

    #[tokio::test(start_paused = true)]
    async fn attempt_timeout_is_retried_and_operation_deadline_fires() {
        let mut s = fast();
        s.attempt_timeout = Duration::from_millis(50);
        s.operation_timeout = Duration::from_millis(120);
        s.retry.max_attempts = 100;
        let caller = caller(s, Arc::new(crate::NoopObserver));
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
        assert_eq!(
            e.to_string(),
            format!(
                "EC2 AssignPrivateIpAddresses did not complete within 120ms ({} attempt(s)); \
                 raise the EC2 operation timeout or check connectivity to the EC2 endpoint",
                n.load(Ordering::SeqCst)
            )
        );
        assert!(
            n.load(Ordering::SeqCst) >= 2,
            "attempt timeouts are retried"
        );
        assert_eq!(t0.elapsed(), Duration::from_millis(120));
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limit_delays_calls() {
        let mut s = fast();
        s.mutating_bucket = BucketConfig {
            capacity: 1,
            refill_per_sec: 20.0,
        };
        let caller = caller(s, Arc::new(crate::NoopObserver));
        let t0 = Instant::now();
        for _ in 0..3 {
            caller
                .run(A, || async { Ok::<_, Ec2Error>(()) })
                .await
                .unwrap();
        }
        // 1 immediate + 2 × 50 ms (each with at most 10 % jitter).
        assert!(
            t0.elapsed() >= Duration::from_millis(100)
                && t0.elapsed() <= Duration::from_millis(110),
            "{:?}",
            t0.elapsed()
        );
    }
}
