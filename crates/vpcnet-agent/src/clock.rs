//! The agent's clock: the time the IPAM core is handed (it reads no clock itself), on tokio's
//! clock so a paused clock in tests moves cooldowns and timers together.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, the core's clock: the wall clock, moved by how far
/// tokio's clock is ahead of (or behind) the real monotonic clock. In production the two
/// monotonic clocks agree and this is the wall clock; on a paused tokio clock (tests) it is
/// the wall clock at the pause plus the time advanced, so cooldowns, reclaim graces and the
/// leaked-ENI age guard run on the same clock as every timer of the agent.
// The one place the agent reads std's clocks: the wall time is the point, and the skew between
// the two monotonic clocks is what makes it follow a paused tokio clock.
#[allow(clippy::disallowed_methods)]
pub fn now_ms() -> u64 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i128)
        .unwrap_or(0);
    let tokio_now = tokio::time::Instant::now().into_std();
    let real_now = std::time::Instant::now();
    let skew = match tokio_now.checked_duration_since(real_now) {
        Some(ahead) => ahead.as_millis() as i128,
        None => -(real_now.duration_since(tokio_now).as_millis() as i128),
    };
    (wall + skew).max(0) as u64
}

/// [`now_ms`] as a UTC date (the `createdAt` tag of ENIs and the leaked-ENI age guard).
pub fn wall_now() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(now_ms() as i64).unwrap_or_default()
}
