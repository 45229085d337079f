//! Waiting for lab components: polling with a deadline, and quoting the end of a component's
//! log when it fails, so an error names what failed and shows why.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// Polls `check` every 100 ms until it returns `Some`, an error, or `timeout` passes (then the
/// error says what was awaited and for how long).
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if t0.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last 15 lines of the log at `path` (empty if unreadable).
pub fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
