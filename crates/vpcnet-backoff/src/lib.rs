//! The one retry/backoff type of vpcnet (docs/architecture.md, principle 4: every external call
//! has a deadline, a retry policy and a budget).
//!
//! - [`Backoff`]: the policy. Exponential growth from `initial` (doubling) capped at `max`,
//!   spread by a [`Jitter`], bounded by `max_attempts` and/or a deadline (`max_elapsed`).
//!   [`Backoff::delay`] is pure (the random draw is passed in).
//! - [`Attempts`]: one run of the policy (failures so far, the previous delay, when it
//!   started). [`Attempts::wait`] sleeps the next delay on tokio's clock (so tests run on a
//!   paused clock), and returns early when the [`Cancel`] signal fires.
//! - [`retry`]: runs an operation under a policy until it succeeds, fails for good, runs out
//!   of attempts or time, or is cancelled.
//!
//! No I/O besides tokio's timer; no dependency on any cloud SDK.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

/// How a delay is spread below its ceiling `c = min(max, initial × 2^(failures-1))`, given a
/// draw `u` uniform in `[0, 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Exactly the ceiling (deterministic polls).
    None,
    /// "Full jitter": `u × c`. Spreads callers most; may retry almost at once.
    Full,
    /// "Equal jitter": `c/2 + u × c/2`. Half the ceiling is always waited, so throttled
    /// callers really back off; the random half spreads callers that failed together.
    Equal,
    /// "Decorrelated jitter": `min(max, initial + u × (3 × previous − initial))`; grows
    /// from the previous delay rather than from the failure count.
    Decorrelated,
}

/// A retry policy. See the crate docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the delay after the first failure (> 0).
    pub initial: Duration,
    /// Upper bound of any single delay.
    pub max: Duration,
    pub jitter: Jitter,
    /// Attempts in total, the first included; `None` = unbounded.
    pub max_attempts: Option<u32>,
    /// Deadline counted from the first attempt: no attempt starts after it, and no delay
    /// runs past it; `None` = unbounded.
    pub max_elapsed: Option<Duration>,
}

impl Backoff {
    /// Unbounded exponential backoff from `initial` up to `max` with equal jitter.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            jitter: Jitter::Equal,
            max_attempts: None,
            max_elapsed: None,
        }
    }

    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// At most `n` attempts in total (≥ 1).
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n.max(1));
        self
    }

    /// Give up once `d` has passed since the first attempt.
    pub fn with_deadline(mut self, d: Duration) -> Self {
        self.max_elapsed = Some(d);
        self
    }

    /// The ceiling after `failures` consecutive failures (1-based) with first ceiling
    /// `initial`: `min(max, initial × 2^(failures-1))`.
    pub fn ceiling_from(&self, initial: Duration, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1).min(30))
            .unwrap_or(u32::MAX);
        initial.saturating_mul(factor).min(self.max)
    }

    /// The ceiling after `failures` consecutive failures (1-based).
    pub fn ceiling(&self, failures: u32) -> Duration {
        self.ceiling_from(self.initial, failures)
    }

    /// The delay after `failures` consecutive failures (1-based), starting from `initial`
    /// (normally [`Backoff::initial`]; callers may start higher, e.g. after throttling),
    /// given the previous delay and a draw `unit` in `[0, 1)` (clamped). Pure.
    pub fn delay_from(
        &self,
        initial: Duration,
        failures: u32,
        previous: Duration,
        unit: f64,
    ) -> Duration {
        let unit = unit.clamp(0.0, 1.0);
        match self.jitter {
            Jitter::None => self.ceiling_from(initial, failures),
            Jitter::Full => self.ceiling_from(initial, failures).mul_f64(unit),
            Jitter::Equal => {
                let c = self.ceiling_from(initial, failures);
                c / 2 + c.mul_f64(unit / 2.0)
            }
            Jitter::Decorrelated => {
                let top = previous.saturating_mul(3).max(initial);
                (initial + (top - initial).mul_f64(unit)).min(self.max)
            }
        }
    }

    /// [`Backoff::delay_from`] with [`Backoff::initial`].
    pub fn delay(&self, failures: u32, previous: Duration, unit: f64) -> Duration {
        self.delay_from(self.initial, failures, previous, unit)
    }

    /// A fresh run of this policy, starting now (tokio's clock).
    pub fn start(&self) -> Attempts {
        Attempts {
            policy: self.clone(),
            failures: 0,
            previous: Duration::ZERO,
            started: Instant::now(),
        }
    }
}

/// Why [`Attempts::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The delay passed: attempt again.
    Retry,
    /// The policy's attempts or deadline are used up: give up.
    Exhausted,
    /// The cancel signal fired: stop now.
    Cancelled,
}

/// One run of a [`Backoff`] policy.
#[derive(Debug, Clone)]
pub struct Attempts {
    policy: Backoff,
    failures: u32,
    previous: Duration,
    started: Instant,
}

impl Attempts {
    /// Consecutive failures recorded so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Time since the run started (or was reset), on tokio's clock.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Starts over (after a success, in a loop that runs forever).
    pub fn reset(&mut self) {
        self.failures = 0;
        self.previous = Duration::ZERO;
        self.started = Instant::now();
    }

    /// Records a failure and returns the delay before the next attempt (starting from
    /// `initial`), or `None` when the policy gives up: `max_attempts` reached, or the
    /// deadline passed. A delay never runs past the deadline (the last attempt is made at
    /// the deadline).
    pub fn next_delay_from(&mut self, initial: Duration) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        if self.policy.max_attempts.is_some_and(|n| self.failures >= n) {
            return None;
        }
        let unit: f64 = rand::rng().random();
        let mut d = self
            .policy
            .delay_from(initial, self.failures, self.previous, unit);
        if let Some(limit) = self.policy.max_elapsed {
            let left = limit.checked_sub(self.started.elapsed())?;
            if left.is_zero() {
                return None;
            }
            d = d.min(left);
        }
        self.previous = d;
        Some(d)
    }

    /// [`Attempts::next_delay_from`] with the policy's `initial`.
    pub fn next_delay(&mut self) -> Option<Duration> {
        self.next_delay_from(self.policy.initial)
    }

    /// Records a failure and sleeps the next delay, unless the policy gives up or `cancel`
    /// fires first.
    pub async fn wait(&mut self, cancel: &mut Cancel) -> Wait {
        self.wait_from(self.policy.initial, cancel).await
    }

    /// [`Attempts::wait`] with the delay starting from `initial`.
    pub async fn wait_from(&mut self, initial: Duration, cancel: &mut Cancel) -> Wait {
        if cancel.is_cancelled() {
            return Wait::Cancelled;
        }
        let Some(d) = self.next_delay_from(initial) else {
            return Wait::Exhausted;
        };
        tokio::select! {
            _ = tokio::time::sleep(d) => Wait::Retry,
            _ = cancel.cancelled() => Wait::Cancelled,
        }
    }
}

/// A stop signal: a `watch` channel that flips to `true` (the agent's stop), or never.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Option<watch::Receiver<bool>>);

impl Cancel {
    /// A signal that never fires.
    pub fn never() -> Self {
        Cancel(None)
    }

    /// Whether the signal has fired.
    pub fn is_cancelled(&self) -> bool {
        self.0.as_ref().is_some_and(|r| *r.borrow())
    }

    /// Resolves once the signal fires (or its sender is gone while not fired: never).
    pub async fn cancelled(&mut self) {
        match &mut self.0 {
            Some(r) => {
                if r.wait_for(|v| *v).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }
}

impl From<watch::Receiver<bool>> for Cancel {
    fn from(r: watch::Receiver<bool>) -> Self {
        Cancel(Some(r))
    }
}

/// How [`retry`] ended without a success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryError<E> {
    /// The operation failed with an error the caller does not retry.
    Permanent(E),
    /// Attempts or deadline used up; the last error.
    Exhausted { last: E, attempts: u32 },
    /// Cancelled; the last error, if an attempt had failed.
    Cancelled { last: Option<E> },
}

impl<E> RetryError<E> {
    /// The last error of the operation, if any attempt failed.
    pub fn into_last(self) -> Option<E> {
        match self {
            RetryError::Permanent(e) | RetryError::Exhausted { last: e, .. } => Some(e),
            RetryError::Cancelled { last } => last,
        }
    }
}

impl<E: std::fmt::Display> std::fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetryError::Permanent(e) => write!(f, "{e}"),
            RetryError::Exhausted { last, attempts } => {
                write!(f, "gave up after {attempts} attempt(s): {last}")
            }
            RetryError::Cancelled { last: Some(e) } => write!(f, "cancelled (last error: {e})"),
            RetryError::Cancelled { last: None } => write!(f, "cancelled"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RetryError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RetryError::Permanent(e) | RetryError::Exhausted { last: e, .. } => Some(e),
            RetryError::Cancelled { last } => last.as_ref().map(|e| e as _),
        }
    }
}

/// Runs `op` (given the 1-based attempt number) until it succeeds, fails with an error
/// `retryable` rejects, the policy gives up, or `cancel` fires. Cancelling stops the
/// retrying, not the work: the first attempt is always made (so cleanup still gets one try
/// at shutdown), an attempt in flight is not interrupted, and a delay ends at the signal.
pub async fn retry<T, E, F, Fut>(
    policy: &Backoff,
    cancel: &mut Cancel,
    retryable: impl Fn(&E) -> bool,
    mut op: F,
) -> Result<T, RetryError<E>>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut run = policy.start();
    let mut last = None;
    loop {
        if last.is_some() && cancel.is_cancelled() {
            return Err(RetryError::Cancelled { last });
        }
        match op(run.failures() + 1).await {
            Ok(v) => return Ok(v),
            Err(e) if !retryable(&e) => return Err(RetryError::Permanent(e)),
            Err(e) => {
                let attempts = run.failures() + 1;
                match run.wait(cancel).await {
                    Wait::Retry => last = Some(e),
                    Wait::Exhausted => return Err(RetryError::Exhausted { last: e, attempts }),
                    Wait::Cancelled => return Err(RetryError::Cancelled { last: Some(e) }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
