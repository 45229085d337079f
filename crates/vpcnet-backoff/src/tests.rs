//! The policy's arithmetic, and runs on tokio's paused clock (no real sleeping).

use std::sync::atomic::{AtomicU32, Ordering};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn ceiling_doubles_then_caps() {
    let p = Backoff::new(ms(100), Duration::from_secs(10));
    assert_eq!(p.ceiling(1), ms(100));
    assert_eq!(p.ceiling(2), ms(200));
    assert_eq!(p.ceiling(4), ms(800));
    assert_eq!(p.ceiling(8), Duration::from_secs(10));
    assert_eq!(p.ceiling(u32::MAX), Duration::from_secs(10));
    assert_eq!(p.ceiling_from(ms(500), 1), ms(500));
}

#[test]
fn every_jitter_stays_within_its_bounds() {
    let base = Backoff::new(ms(100), Duration::from_secs(10));
    for failures in 1..40 {
        let c = base.ceiling(failures);
        for unit in [0.0, 0.25, 0.5, 0.999_999, 1.0] {
            let none = base.clone().with_jitter(Jitter::None);
            assert_eq!(none.delay(failures, ms(0), unit), c);
            let full = base.clone().with_jitter(Jitter::Full);
            assert!(full.delay(failures, ms(0), unit) <= c);
            let equal = base.clone().with_jitter(Jitter::Equal);
            let d = equal.delay(failures, ms(0), unit);
            assert!(d >= c / 2 && d <= c, "{failures} {unit}: {d:?} vs {c:?}");
            let dec = base.clone().with_jitter(Jitter::Decorrelated);
            let prev = c;
            let d = dec.delay(failures, prev, unit);
            assert!(
                d >= ms(100) && d <= (prev * 3).min(Duration::from_secs(10)),
                "{d:?}"
            );
        }
    }
    let equal = base.with_jitter(Jitter::Equal);
    assert!(equal.delay(3, ms(0), 0.0) < equal.delay(3, ms(0), 0.9));
}

#[tokio::test(start_paused = true)]
async fn delays_of_a_run_are_within_bounds_and_spread() {
    let p = Backoff::new(ms(100), Duration::from_secs(2));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let mut run = p.start();
        for failures in 1..10u32 {
            let d = run.next_delay().unwrap();
            let c = p.ceiling(failures);
            assert!(d >= c / 2 && d <= c, "{failures}: {d:?} vs {c:?}");
            if failures == 3 {
                seen.insert(d);
            }
        }
    }
    assert!(seen.len() > 1, "jitter spreads the delays: {seen:?}");
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_attempts() {
    let p = Backoff::new(ms(10), ms(100)).with_max_attempts(4);
    let n = AtomicU32::new(0);
    let r: Result<(), _> = retry(
        &p,
        &mut Cancel::never(),
        |_: &&str| true,
        |_| async {
            n.fetch_add(1, Ordering::SeqCst);
            Err("throttled")
        },
    )
    .await;
    assert_eq!(
        r,
        Err(RetryError::Exhausted {
            last: "throttled",
            attempts: 4
        })
    );
    assert_eq!(n.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn gives_up_at_the_deadline_and_never_sleeps_past_it() {
    let p = Backoff::new(ms(100), Duration::from_secs(5))
        .with_jitter(Jitter::None)
        .with_deadline(Duration::from_secs(3));
    let t0 = Instant::now();
    let n = AtomicU32::new(0);
    let r: Result<(), _> = retry(
        &p,
        &mut Cancel::never(),
        |_: &&str| true,
        |_| async {
            n.fetch_add(1, Ordering::SeqCst);
            Err("unavailable")
        },
    )
    .await;
    assert!(matches!(r, Err(RetryError::Exhausted { .. })), "{r:?}");
    // 0.1 + 0.2 + 0.4 + 0.8 + 1.6 = 3.1 s > 3 s: the fifth delay is cut to the deadline and
    // the last attempt is made at 3 s.
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    assert_eq!(n.load(Ordering::SeqCst), 6);
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_not_retried() {
    let p = Backoff::new(ms(10), ms(100));
    let n = AtomicU32::new(0);
    let r: Result<(), _> = retry(
        &p,
        &mut Cancel::never(),
        |e: &&str| *e != "InsufficientFreeAddressesInSubnet",
        |_| async {
            n.fetch_add(1, Ordering::SeqCst);
            Err("InsufficientFreeAddressesInSubnet")
        },
    )
    .await;
    assert_eq!(
        r,
        Err(RetryError::Permanent("InsufficientFreeAddressesInSubnet"))
    );
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn succeeds_after_transient_failures() {
    let p = Backoff::new(ms(10), ms(100)).with_max_attempts(5);
    let r = retry(
        &p,
        &mut Cancel::never(),
        |_: &&str| true,
        |attempt| async move {
            if attempt < 3 {
                Err("throttled")
            } else {
                Ok(attempt)
            }
        },
    )
    .await;
    assert_eq!(r, Ok(3));
}

#[tokio::test(start_paused = true)]
async fn stops_on_cancel_during_a_delay() {
    let (tx, rx) = watch::channel(false);
    let p =
        Backoff::new(Duration::from_secs(60), Duration::from_secs(60)).with_jitter(Jitter::None);
    let t0 = Instant::now();
    let task = tokio::spawn(async move {
        retry(
            &p,
            &mut Cancel::from(rx),
            |_: &&str| true,
            |_| async { Err::<(), _>("unavailable") },
        )
        .await
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    tx.send(true).unwrap();
    let r = task.await.unwrap();
    assert_eq!(
        r,
        Err(RetryError::Cancelled {
            last: Some("unavailable")
        })
    );
    assert_eq!(
        t0.elapsed(),
        Duration::from_secs(5),
        "returned at the cancel"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_signal_allows_one_attempt_and_no_retry() {
    let (tx, rx) = watch::channel(false);
    tx.send(true).unwrap();
    let n = AtomicU32::new(0);
    let r: Result<(), _> = retry(
        &Backoff::new(ms(10), ms(10)),
        &mut Cancel::from(rx),
        |_: &&str| true,
        |_| async {
            n.fetch_add(1, Ordering::SeqCst);
            Err("x")
        },
    )
    .await;
    assert_eq!(r, Err(RetryError::Cancelled { last: Some("x") }));
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn reset_starts_the_growth_over() {
    let p = Backoff::new(ms(100), Duration::from_secs(10)).with_jitter(Jitter::None);
    let mut run = p.start();
    assert_eq!(run.next_delay(), Some(ms(100)));
    assert_eq!(run.next_delay(), Some(ms(200)));
    run.reset();
    assert_eq!(run.failures(), 0);
    assert_eq!(run.next_delay(), Some(ms(100)));
}
