//! Deleting the node's connection-tracking entries of released addresses before they are
//! handed out again (VPC CNI issue #3634): the pool says which addresses are due
//! ([`vpcnet_ipam::Pool::conntrack_due`]: at the release, and again once the cooldown has
//! ended), the node network deletes their entries ([`crate::node::NodeNetwork::flush_conntrack`])
//! and this task records the outcome, which clears them for reuse.
//!
//! It runs off the ADD path: an ADD never waits for a flush; the flush at the end of a cooldown
//! runs as the cooldown ends, so in the common case the address is assignable a few
//! milliseconds later. A flush that fails is logged and counted, and its addresses stay out of
//! service (the plan counts them as cooling, so the pool grows around them) until a retry,
//! every [`RETRY_MIN`] doubling up to [`RETRY_MAX`], succeeds: a stale entry would hand an old
//! flow to the new pod, a held address costs one EC2 address for a while.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::now_ms;
use crate::state::Shared;

/// First retry after a failed flush.
pub const RETRY_MIN: Duration = Duration::from_secs(1);
/// Longest wait between retries of a failing flush.
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// The task looks at the pool at least this often (releases it was not woken for).
const POLL: Duration = Duration::from_secs(1);

/// How one round went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// Nothing was due, or the flush succeeded.
    Done,
    /// The flush failed; its addresses stay due.
    Failed,
}

/// Flushes the entries of every address due now and records the outcome in the pool. Called
/// at start (before the pool is filled: addresses restored from the checkpoint whose cooldown
/// is over are flushed before any can be handed out) and by [`run`].
pub async fn flush_due(shared: &Shared) -> Round {
    let Some(node) = shared.node_network().cloned() else {
        return Round::Done;
    };
    let started = now_ms();
    let due: BTreeSet<_> = shared.pool().conntrack_due(started).into_iter().collect();
    if due.is_empty() {
        return Round::Done;
    }
    match node.flush_conntrack(&due).await {
        Ok(report) => {
            shared
                .metrics()
                .add_conntrack_flushed_entries(report.deleted);
            let ips: Vec<_> = due.iter().copied().collect();
            let cleared = shared.pool().conntrack_flushed(&ips, started);
            if report.deleted > 0 {
                tracing::info!(addresses = ?ips, deleted = report.deleted, vanished = report.vanished, "deleted conntrack entries of released addresses");
            } else {
                tracing::debug!(addresses = ?ips, tracking = report.tracking, "no conntrack entries of released addresses");
            }
            if !cleared.is_empty() {
                tracing::debug!(addresses = ?cleared, "conntrack flushed after the cooldown: addresses may be handed out again");
                shared.update_gauges();
                // An ADD waiting on the pool or a plan counting these as cooling may go on.
                shared.pool_state().wake_reconciler();
            }
            Round::Done
        }
        Err(e) => {
            shared.metrics().inc_conntrack_flush_failure();
            shared.update_gauges();
            tracing::error!(addresses = ?due, error = format!("{e:#}"), "deleting conntrack entries of released addresses failed: they are not handed out until a retry succeeds");
            Round::Failed
        }
    }
}

/// The flush task: wakes at each release ([`Shared::conntrack_wake`]), at the end of the next
/// cooldown that needs a flush, and every second; retries a failing flush with backoff.
pub async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut retry = RETRY_MIN;
    loop {
        let wait = match flush_due(&shared).await {
            Round::Done => {
                retry = RETRY_MIN;
                let next = shared.pool().next_conntrack_due_ms();
                let now = now_ms();
                next.map_or(POLL, |t| {
                    Duration::from_millis(t.saturating_sub(now)).min(POLL)
                })
            }
            Round::Failed => {
                let w = retry;
                retry = (retry * 2).min(RETRY_MAX);
                w
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            // A release is due at once, unless the last flush failed (then wait out the backoff).
            _ = shared.pool_state().conntrack_woken(), if retry == RETRY_MIN => {}
            _ = stop.changed() => return,
        }
    }
}
