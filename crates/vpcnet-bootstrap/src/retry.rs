//! One bounded retry loop for every wait at boot (IMDS coming up, EC2's private DNS name,
//! EKS DescribeCluster): a total time budget, an optional cap on attempts, doubling waits,
//! a progress line on stderr per retry, and the last real cause kept for the final error.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// How long and how often to try.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Total time for all attempts and waits; a zero budget still makes one attempt.
    pub total: Duration,
    /// Cap on attempts; `None`: only `total` bounds them.
    pub max_attempts: Option<u32>,
    /// First wait; doubles per attempt up to [`MAX_DELAY`].
    pub first_delay: Duration,
}

/// The longest wait between two attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// Deadline of one attempt when the budget is already spent (the first attempt of a zero
/// budget).
const LAST_CHANCE: Duration = Duration::from_secs(10);

/// What one attempt gave.
pub enum Attempt<T, C> {
    /// Success.
    Done(T),
    /// Worth another attempt; `C` says why (shown in the progress line and kept as the cause).
    Retry(C),
    /// Give up at once with this value (e.g. an IAM denial).
    Stop(C),
}

/// How a retry loop ended without success.
#[derive(Debug, Clone, PartialEq)]
pub struct GaveUp<C> {
    /// Attempts made.
    pub attempts: u32,
    /// Seconds spent in total.
    pub seconds: f64,
    /// The cause of the last attempt.
    pub last: C,
    /// The loop stopped on an [`Attempt::Stop`] (not on the budget).
    pub stopped: bool,
}

/// Calls `attempt` until it is done, stops, or the budget runs out. Each call runs under the
/// remaining budget; one that overruns it counts as `on_timeout(limit)`. Before each wait a
/// warning `"{what}: attempt N, retrying in S s ({cause})"` is logged (shown by default).
pub async fn retry<T, C, F, Fut>(
    budget: Budget,
    what: &str,
    on_timeout: impl Fn(Duration) -> C,
    mut attempt: F,
) -> Result<T, GaveUp<C>>
where
    C: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt<T, C>>,
{
    let started = tokio::time::Instant::now();
    let deadline = started + budget.total;
    let mut delay = budget.first_delay;
    let mut n = 0u32;
    loop {
        n += 1;
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let limit = if remaining.is_zero() {
            LAST_CHANCE
        } else {
            remaining
        };
        let cause = match tokio::time::timeout(limit, attempt()).await {
            Ok(Attempt::Done(v)) => return Ok(v),
            Ok(Attempt::Stop(c)) => {
                return Err(GaveUp {
                    attempts: n,
                    seconds: started.elapsed().as_secs_f64(),
                    last: c,
                    stopped: true,
                })
            }
            Ok(Attempt::Retry(c)) => c,
            Err(_) => on_timeout(limit),
        };
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        if remaining.is_zero() || budget.max_attempts.is_some_and(|m| n >= m.max(1)) {
            return Err(GaveUp {
                attempts: n,
                seconds: started.elapsed().as_secs_f64(),
                last: cause,
                stopped: false,
            });
        }
        let wait = delay.min(remaining);
        tracing::warn!(
            "{what}: attempt {n}, retrying in {:.1}s ({cause})",
            wait.as_secs_f64()
        );
        tokio::time::sleep(wait).await;
        delay = (delay * 2).min(MAX_DELAY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn budget(total_ms: u64, max: Option<u32>) -> Budget {
        Budget {
            total: Duration::from_millis(total_ms),
            max_attempts: max,
            first_delay: Duration::from_millis(1),
        }
    }

    #[tokio::test]
    async fn retries_until_done_and_keeps_the_last_cause() {
        let calls = Cell::new(0);
        let r = retry(
            budget(5_000, None),
            "t",
            |_| "timeout",
            || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move {
                    if n < 3 {
                        Attempt::Retry("not yet")
                    } else {
                        Attempt::Done(n)
                    }
                }
            },
        )
        .await;
        assert_eq!(r, Ok(3));

        let r: Result<(), _> = retry(
            budget(5_000, Some(4)),
            "t",
            |_| "timeout",
            || async { Attempt::Retry("still failing") },
        )
        .await;
        let g = r.unwrap_err();
        assert_eq!((g.attempts, g.last, g.stopped), (4, "still failing", false));

        let r: Result<(), _> = retry(
            budget(5_000, None),
            "t",
            |_| "timeout",
            || async { Attempt::Stop("denied") },
        )
        .await;
        let g = r.unwrap_err();
        assert_eq!((g.attempts, g.last, g.stopped), (1, "denied", true));
    }

    #[tokio::test]
    async fn zero_budget_makes_one_attempt_and_a_slow_attempt_times_out() {
        let r: Result<(), _> = retry(
            budget(0, None),
            "t",
            |_| "timeout",
            || async { Attempt::Retry("no") },
        )
        .await;
        assert_eq!(r.unwrap_err().attempts, 1);
        let r: Result<(), _> = retry(
            budget(50, None),
            "t",
            |d| format!("over {d:?}"),
            || async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Attempt::Done(())
            },
        )
        .await;
        assert!(r.unwrap_err().last.starts_with("over"));
    }
}
