//! Hook through which metrics see every EC2 request.

use std::time::Duration;

use crate::{Action, Ec2Error};

/// Receives one event per HTTP attempt and one per logical call, so metrics can count EC2
/// requests, errors and latencies by action. Methods must be cheap and must not block. (The
/// shared call loop reports to it through [`vpcnet_aws::Observer`].)
pub trait Ec2Observer: Send + Sync + 'static {
    /// One request was sent to EC2 and answered (or failed/timed out) after `latency`.
    /// `error` is `None` on success. Retries produce one event each.
    fn on_attempt(&self, action: Action, latency: Duration, error: Option<&Ec2Error>);

    /// A logical call finished after `latency` (token-bucket waits, retries and backoff
    /// included) with `error` (`None` on success).
    fn on_call(&self, _action: Action, _latency: Duration, _error: Option<&Ec2Error>) {}

    /// A call waited `waited` on the client-side token bucket before being sent.
    fn on_rate_limited(&self, _action: Action, _waited: Duration) {}
}

/// Observer that ignores every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopObserver;

impl Ec2Observer for NoopObserver {
    fn on_attempt(&self, _: Action, _: Duration, _: Option<&Ec2Error>) {}
}
