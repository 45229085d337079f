//! The call loop and the pagination on tokio's paused clock: every delay is exact virtual time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::{classify, Retry};

/// An adapter's error in miniature.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum TestError {
    #[error("{0} failed: {1}")]
    Api(&'static str, String, Option<u16>),
    #[error("{action} timed out after {after:?} ({attempts} attempt(s))")]
    Timeout {
        action: &'static str,
        after: Duration,
        attempts: u32,
    },
}

impl TestError {
    fn api(code: &str, status: u16) -> Self {
        TestError::Api(A, code.into(), Some(status))
    }
    fn code(&self) -> &str {
        match self {
            TestError::Api(_, c, _) => c,
            TestError::Timeout { .. } => "Timeout",
        }
    }
}

impl CallError<&'static str> for TestError {
    fn is_retryable(&self) -> bool {
        match self {
            TestError::Api(_, c, s) => classify(c, *s) != Retry::Never,
            TestError::Timeout { .. } => true,
        }
    }
    fn is_throttle(&self) -> bool {
        matches!(self, TestError::Api(_, c, s) if classify(c, *s) == Retry::Throttle)
    }
    fn timeout(action: &'static str, after: Duration, attempts: u32) -> Self {
        TestError::Timeout {
            action,
            after,
            attempts,
        }
    }
}

type Events = Mutex<Vec<(&'static str, Option<String>)>>;

#[derive(Default)]
struct Recorder {
    attempts: Events,
    calls: Events,
    rate_limited: Mutex<Vec<Duration>>,
}

impl Observer<&'static str, TestError> for Recorder {
    fn on_attempt(&self, a: &'static str, _: Duration, e: Option<&TestError>) {
        let code = e.map(|e| e.code().to_string());
        self.attempts.lock().unwrap().push((a, code));
    }
    fn on_call(&self, a: &'static str, _: Duration, e: Option<&TestError>) {
        let code = e.map(|e| e.code().to_string());
        self.calls.lock().unwrap().push((a, code));
    }
    fn on_rate_limited(&self, _: &'static str, waited: Duration) {
        self.rate_limited.lock().unwrap().push(waited);
    }
}

fn fast() -> CallSettings {
    CallSettings {
        operation_timeout: Duration::from_secs(5),
        attempt_timeout: Duration::from_secs(1),
        retry: RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(10),
            throttle_base_delay: Duration::from_millis(40),
            max_delay: Duration::from_millis(200),
        },
        describe_bucket: BucketConfig::DESCRIBE,
        mutating_bucket: BucketConfig::MUTATING,
        describe_page_size: 1000,
        pace: PaceConfig::OFF,
    }
}

const A: &str = "AssignPrivateIpAddresses";
const D: &str = "DescribeNetworkInterfaces";

fn caller(s: CallSettings, rec: &Arc<Recorder>) -> Caller<&'static str, TestError> {
    Caller::new("TEST", s, rec.clone())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn throttling_and_5xx_are_retried_after_jittered_backoff() {
    let rec = Arc::new(Recorder::default());
    let caller = caller(fast(), &rec);
    let n = AtomicU32::new(0);
    let t0 = Instant::now();
    let r = caller
        .run(A, || async {
            match n.fetch_add(1, Ordering::SeqCst) {
                0 => Err(TestError::api("RequestLimitExceeded", 503)),
                1 => Err(TestError::api("InternalError", 500)),
                _ => Ok(42),
            }
        })
        .await;
    assert_eq!(r.unwrap(), 42);
    assert_eq!(n.load(Ordering::SeqCst), 3);
    // After the throttle: equal jitter below 40 ms, i.e. 20..=40 ms; after the 5xx (second
    // failure): below 10 ms × 2, i.e. 10..=20 ms (tokio's timer adds up to 1 ms a sleep).
    // The throttle drained the mutating bucket (19 tokens saved), so both later attempts
    // waited for a refill: 200 ms at 5/s, minus what the backoff refilled, plus at most 10 %
    // jitter.
    let waits = rec.rate_limited.lock().unwrap().clone();
    assert_eq!(waits.len(), 2, "a throttle drains the bucket: {waits:?}");
    for w in &waits {
        assert!(*w >= ms(160) && *w <= ms(220), "{waits:?}");
    }
    let backoff = t0.elapsed() - waits.iter().sum::<Duration>();
    assert!(backoff >= ms(30) && backoff <= ms(64), "{backoff:?}");
    assert_eq!(
        rec.attempts.lock().unwrap().clone(),
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
    let caller = caller(fast(), &rec);
    let n = AtomicU32::new(0);
    let t0 = Instant::now();
    let r: Result<(), _> = caller
        .run(A, || async {
            n.fetch_add(1, Ordering::SeqCst);
            Err(TestError::api("PrivateIpAddressLimitExceeded", 400))
        })
        .await;
    assert_eq!(r.unwrap_err().code(), "PrivateIpAddressLimitExceeded");
    assert_eq!(n.load(Ordering::SeqCst), 1);
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(
        rec.calls.lock().unwrap()[0].1.as_deref(),
        Some("PrivateIpAddressLimitExceeded")
    );
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_attempts_with_the_last_error() {
    let rec = Arc::new(Recorder::default());
    let caller = caller(fast(), &rec);
    let n = AtomicU32::new(0);
    let r: Result<(), _> = caller
        .run(D, || async {
            n.fetch_add(1, Ordering::SeqCst);
            Err(TestError::api("InternalError", 500))
        })
        .await;
    assert_eq!(r.unwrap_err(), TestError::api("InternalError", 500));
    assert_eq!(n.load(Ordering::SeqCst), 4);
    assert_eq!(rec.attempts.lock().unwrap().len(), 4);
    assert_eq!(rec.calls.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn attempt_timeouts_are_retried_until_the_operation_deadline() {
    let mut s = fast();
    s.attempt_timeout = ms(50);
    s.operation_timeout = ms(120);
    s.retry.max_attempts = 100;
    let rec = Arc::new(Recorder::default());
    let caller = caller(s, &rec);
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
        matches!(e, TestError::Timeout { after, attempts, .. } if after == ms(120) && attempts >= 2),
        "{e}"
    );
    assert!(
        n.load(Ordering::SeqCst) >= 2,
        "attempt timeouts are retried"
    );
    assert_eq!(
        t0.elapsed(),
        ms(120),
        "the deadline is exact on tokio's clock"
    );
    let attempts = rec.attempts.lock().unwrap().clone();
    assert_eq!(attempts[0], (A, Some("Timeout".into())));
    assert_eq!(
        rec.calls.lock().unwrap().clone(),
        vec![(A, Some("Timeout".into()))]
    );
}

#[tokio::test(start_paused = true)]
async fn the_token_bucket_paces_calls_of_its_class_only() {
    let mut s = fast();
    s.mutating_bucket = BucketConfig {
        capacity: 1,
        refill_per_sec: 20.0,
    };
    let rec = Arc::new(Recorder::default());
    let caller = caller(s, &rec);
    let t0 = Instant::now();
    for _ in 0..3 {
        caller.run(A, || async { Ok(()) }).await.unwrap();
    }
    // 1 immediate + 2 × 50 ms, each wait with at most 10 % jitter.
    assert!(
        t0.elapsed() >= ms(100) && t0.elapsed() <= ms(110),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(rec.rate_limited.lock().unwrap().len(), 2);
    let t1 = Instant::now();
    caller.run(D, || async { Ok(()) }).await.unwrap();
    assert_eq!(t1.elapsed(), Duration::ZERO, "Describe has its own bucket");
}

#[tokio::test(start_paused = true)]
async fn pages_follow_next_tokens_until_none_or_empty() {
    let rec = Arc::new(Recorder::default());
    let caller = caller(fast(), &rec);
    let seen = Mutex::new(Vec::new());
    let throttled_once = AtomicU32::new(0);
    let items = caller
        .pages(
            D,
            |token: Option<String>| {
                seen.lock().unwrap().push(token.clone());
                let throttle = token.as_deref() == Some("p2")
                    && throttled_once.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    if throttle {
                        return Err(TestError::api("Throttling", 400));
                    }
                    Ok(match token.as_deref() {
                        None => (vec![1, 2], Some("p2")),
                        Some("p2") => (vec![3], Some("p3")),
                        _ => (vec![4, 5], Some("")),
                    })
                }
            },
            |(page, next), items| {
                items.extend(page);
                Ok(next.map(str::to_string))
            },
        )
        .await
        .unwrap();
    assert_eq!(items, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        seen.into_inner().unwrap(),
        vec![
            None,
            Some("p2".into()),
            Some("p2".into()),
            Some("p3".into())
        ],
        "a throttled page is retried with the same token"
    );
    assert_eq!(
        rec.calls.lock().unwrap().len(),
        3,
        "one logical call per page"
    );
}

#[tokio::test(start_paused = true)]
async fn a_page_that_cannot_be_converted_ends_the_listing_with_its_error() {
    let caller = Caller::<&'static str, TestError>::new("TEST", fast(), Arc::new(NoObserver));
    let requests = AtomicU32::new(0);
    let r: Result<Vec<u8>, _> = caller
        .pages(
            D,
            |_| {
                requests.fetch_add(1, Ordering::SeqCst);
                async { Ok(()) }
            },
            |(), _| Err(TestError::api("InvalidResponse", 200)),
        )
        .await;
    assert_eq!(r.unwrap_err().code(), "InvalidResponse");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}

#[test]
fn actions_named_describe_draw_from_the_describe_bucket() {
    assert_eq!(
        AwsAction::class("DescribeTargetHealth"),
        ActionClass::Describe
    );
    assert_eq!(AwsAction::class("DescribeCluster"), ActionClass::Describe);
    assert_eq!(AwsAction::class("RegisterTargets"), ActionClass::Mutating);
}

/// Paced: a throttled answer holds every later call of its class (not only the call's own
/// retry), doubling per throttle; a granted call lowers the level, and the other class is
/// untouched.
#[tokio::test(start_paused = true)]
async fn paced_throttles_hold_every_call_of_the_class() {
    let rec = Arc::new(Recorder::default());
    let mut s = fast();
    s.pace = PaceConfig {
        base: ms(1000),
        max: ms(4000),
    };
    // A large bucket, so that its refill after the drain never outlasts the hold.
    s.mutating_bucket = BucketConfig {
        capacity: 100,
        refill_per_sec: 1000.0,
    };
    let caller = caller(s, &rec);
    let n = AtomicU32::new(0);
    let t0 = Instant::now();
    // Throttled twice, then granted: holds of 0.5..=1 s and 1..=2 s.
    let r = caller
        .run(A, || async {
            match n.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(TestError::api("RequestLimitExceeded", 503)),
                _ => Ok(1),
            }
        })
        .await;
    assert_eq!(r.unwrap(), 1);
    let first = t0.elapsed();
    assert!(first >= ms(1500) && first <= ms(3300), "{first:?}");

    // Another call of the class, throttled once: the level is 1 (2 throttles, 1 grant), so
    // its hold is 2 s at most (level 2), at least 1 s; its own backoff would be 20..=40 ms.
    let t1 = Instant::now();
    let m = AtomicU32::new(0);
    let r = caller
        .run("ModifyNetworkInterfaceAttribute", || async {
            match m.fetch_add(1, Ordering::SeqCst) {
                0 => Err(TestError::api("RequestLimitExceeded", 503)),
                _ => Ok(2),
            }
        })
        .await;
    assert_eq!(r.unwrap(), 2);
    let second = t1.elapsed();
    assert!(second >= ms(1000) && second <= ms(2300), "{second:?}");

    // A describe meanwhile is not held.
    let t2 = Instant::now();
    caller
        .run("DescribeNetworkInterfaces", || async {
            Ok::<_, TestError>(3)
        })
        .await
        .unwrap();
    assert!(t2.elapsed() < ms(2), "{:?}", t2.elapsed());
}

/// Paced: a throttle whose hold outlasts the call's deadline ends the call at once with the
/// throttle (nothing applied), instead of a timeout after waiting.
#[tokio::test(start_paused = true)]
async fn a_hold_beyond_the_deadline_ends_the_call_with_the_throttle() {
    let rec = Arc::new(Recorder::default());
    let mut s = fast();
    s.operation_timeout = ms(1500);
    s.pace = PaceConfig {
        base: ms(4000),
        max: ms(4000),
    };
    let caller = caller(s, &rec);
    let t0 = Instant::now();
    let r = caller
        .run(A, || async {
            Err::<u32, _>(TestError::api("RequestLimitExceeded", 503))
        })
        .await;
    assert_eq!(r.unwrap_err().code(), "RequestLimitExceeded");
    assert!(t0.elapsed() < ms(2), "{:?}", t0.elapsed());
    assert_eq!(rec.attempts.lock().unwrap().len(), 1);
    // The hold stays for the class's next calls.
    assert!(caller.limiter.is_paced(ActionClass::of_name(A)));
}
