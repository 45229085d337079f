//! The reconciler task: woken at once by ADD/DEL, plus a periodic full pass; backs off with
//! jitter after EC2 errors; at the stop signal, lets EC2 work in flight finish for at most
//! `shutdown_timeout`, then drops it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use vpcnet_backoff::{Backoff, Cancel, Wait};
use vpcnet_ec2::Ec2Error;
use vpcnet_ipam::UnknownIpPolicy;

use super::{fill, setup_node_enis, setup_node_firewall, sync_from_ec2};
use crate::cloud::Ec2Api;
use crate::errors::chain;
use crate::state::Shared;

/// Backoff after consecutive failed passes: 100 ms doubling to 10 s, equal jitter, for as
/// long as EC2 keeps failing (each pass is bounded by the EC2 call deadlines).
pub fn pass_backoff() -> Backoff {
    Backoff::new(Duration::from_millis(100), Duration::from_secs(10))
}

/// The reconciler task.
pub async fn run(
    shared: Arc<Shared>,
    ec2: Arc<dyn Ec2Api>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let interval = shared.opts.reconcile_interval;
    let mut next_full = tokio::time::Instant::now() + interval;
    let mut backoff = pass_backoff().start();
    let mut cancel = Cancel::from(stop.clone());
    loop {
        let full = tokio::select! {
            _ = shared.wake.notified() => false,
            _ = tokio::time::sleep_until(next_full) => true,
            _ = stop.changed() => return,
        };
        // An EC2 outcome was unknown: describe before planning again.
        let full = full
            || shared.need_describe.swap(false, Ordering::AcqRel)
            || shared.pool().has_unsettled();
        if full {
            next_full = tokio::time::Instant::now() + interval;
        }
        let pass = pass(&shared, ec2.as_ref(), full);
        tokio::pin!(pass);
        let result = tokio::select! {
            r = &mut pass => r,
            _ = cancel.cancelled() => {
                finish_at_stop(&shared, pass).await;
                return;
            }
        };
        match result {
            Ok(_) => {
                backoff.reset();
                shared.set_error(None);
            }
            Err(e) => {
                let e = chain(&e);
                tracing::warn!(
                    failures = backoff.failures() + 1,
                    "reconcile pass failed: {e}"
                );
                shared.set_error(Some(e));
                if backoff.wait(&mut cancel).await == Wait::Cancelled {
                    return;
                }
                // Try again right away after the backoff.
                shared.wake.notify_one();
            }
        }
    }
}

/// One pass: with `full`, describe and adopt EC2's view and repair node setup first; then
/// plan and execute until the pool is on target.
async fn pass(shared: &Arc<Shared>, ec2: &dyn Ec2Api, full: bool) -> Result<bool, Ec2Error> {
    let timer = shared.metrics.action(if full {
        "reconcilePool"
    } else {
        "increaseIPPool"
    });
    shared
        .metrics
        .inc_reconcile(if full { "periodic" } else { "add" });
    let mut result = Ok(false);
    if full {
        // Datapath self-healing, before the node setup below re-applies ENI tables and the
        // firewall, so their drift is seen and reported.
        crate::datapath_audit::run_pass(shared).await;
        match sync_from_ec2(shared, ec2, UnknownIpPolicy::Free).await {
            Ok(_) => setup_node_enis(shared).await,
            Err(e) => result = Err(e),
        }
        // The firewall depends on static facts only: repair it even when EC2 fails.
        setup_node_firewall(shared).await;
    }
    if result.is_ok() {
        result = fill(shared, ec2).await;
    }
    drop(timer);
    if result.is_err() {
        shared.metrics.inc_ipamd_error(if full {
            "reconcilePool"
        } else {
            "increaseIPPool"
        });
    }
    shared.update_gauges();
    result
}

/// The stop signal came during a pass: its EC2 work may finish (retries and polls inside it
/// see the signal and stop early) within `shutdown_timeout`; then it is dropped. What a
/// dropped pass leaves is safe: the checkpoint holds only assignments and cooldowns (written
/// again at shutdown), an address being released is settled by the next start's describe, an
/// ENI attached is adopted by it, and an ENI created but never attached keeps its tags for
/// the leaked-ENI sweep.
async fn finish_at_stop<F>(shared: &Shared, pass: std::pin::Pin<&mut F>)
where
    F: std::future::Future<Output = Result<bool, Ec2Error>>,
{
    let bound = shared.opts.shutdown_timeout;
    match tokio::time::timeout(bound, pass).await {
        Ok(Ok(_)) => tracing::info!("EC2 work in flight at the stop signal finished"),
        Ok(Err(e)) => tracing::info!(
            "EC2 work in flight at the stop signal ended: {}",
            chain(&e)
        ),
        Err(_) => tracing::warn!(
            ?bound,
            "EC2 work in flight dropped at the shutdown timeout (VPCNET_SHUTDOWN_TIMEOUT); an ENI created but not attached is left for the leaked-ENI sweep"
        ),
    }
}
