//! The reconciler task: woken at once by ADD/DEL, plus a periodic full pass; backs off with
//! jitter after EC2 errors.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use vpcnet_ec2::Ec2;
use vpcnet_ipam::UnknownIpPolicy;

use super::{fill, setup_node_enis, setup_node_firewall, sync_from_ec2};
use crate::state::Shared;

/// Longest backoff after consecutive failures.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The reconciler task.
pub async fn run(shared: Arc<Shared>, ec2: Ec2, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = shared.opts.reconcile_interval;
    let mut next_full = tokio::time::Instant::now() + interval;
    let mut failures: u32 = 0;
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
            next_full = tokio::time::Instant::now() + interval;
            // Datapath self-healing, before the node setup below re-applies ENI tables and the
            // firewall, so their drift is seen and reported.
            crate::datapath_audit::run_pass(&shared).await;
            match sync_from_ec2(&shared, &ec2, UnknownIpPolicy::Free).await {
                Ok(_) => setup_node_enis(&shared).await,
                Err(e) => result = Err(e),
            }
            // The firewall depends on static facts only: repair it even when EC2 fails.
            setup_node_firewall(&shared).await;
        }
        if result.is_ok() {
            result = fill(&shared, &ec2).await;
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
        match result {
            Ok(_) => {
                failures = 0;
                shared.set_error(None);
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(failures, "reconcile pass failed: {e}");
                shared.set_error(Some(e.to_string()));
                let base = Duration::from_millis(50u64.saturating_mul(1 << failures.min(8)))
                    .min(MAX_BACKOFF);
                let jitter = rand::rng().random_range(0.5..1.0);
                tokio::select! {
                    _ = tokio::time::sleep(base.mul_f64(jitter)) => {}
                    _ = stop.changed() => return,
                }
                // Try again right away after the backoff.
                shared.wake.notify_one();
            }
        }
    }
}
