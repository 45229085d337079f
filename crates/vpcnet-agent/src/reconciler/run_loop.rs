//! The reconciler task: woken at once by ADD/DEL, plus a periodic full pass that describes in
//! EC2 only when IMDS disagrees with the pool ([`super::drift`]), an EC2 outcome is unknown,
//! or the safety interval passed; backs off with jitter after EC2 errors; at the stop signal, lets EC2 work in flight finish for at most
//! `shutdown_timeout`, then drops it.

use std::sync::Arc;
use std::time::Duration;

use vpcnet_backoff::{Backoff, Cancel, Wait};
use vpcnet_ec2::Ec2Error;
use vpcnet_ipam::UnknownIpPolicy;

use super::drift::{imds_drift, DescribeReason};
use super::{fill, setup_node_enis, setup_node_firewall, sync_from_ec2};
use crate::cloud::{Ec2Api, MetadataApi};
use crate::errors::chain;
use crate::state::Shared;

/// Backoff after consecutive failed passes: 100 ms doubling to 10 s, equal jitter, for as
/// long as EC2 keeps failing (each pass is bounded by the EC2 call deadlines).
pub fn pass_backoff() -> Backoff {
    Backoff::new(Duration::from_millis(100), Duration::from_secs(10))
}

/// The reconciler task. `imds` serves the periodic drift check.
pub async fn run(
    shared: Arc<Shared>,
    ec2: Arc<dyn Ec2Api>,
    imds: Arc<dyn MetadataApi>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let interval = shared.opts.reconcile_interval;
    let mut next_periodic = tokio::time::Instant::now() + interval;
    // Start-up has just described the instance's ENIs.
    let mut next_describe = tokio::time::Instant::now() + shared.opts.ec2_reconcile_interval;
    let mut backoff = pass_backoff().start();
    let mut cancel = Cancel::from(stop.clone());
    loop {
        let periodic = tokio::select! {
            _ = shared.pool_state().reconciler_woken() => false,
            _ = tokio::time::sleep_until(next_periodic) => true,
            _ = stop.changed() => return,
        };
        if periodic {
            next_periodic = tokio::time::Instant::now() + interval;
        }
        // An EC2 outcome was unknown: describe before planning again.
        let unsettled = shared.enis().take_describe_request() || shared.pool().has_unsettled();
        let kind = match (periodic, unsettled) {
            (_, true) => Kind::Full(Some(DescribeReason::Unsettled)),
            (true, false) if tokio::time::Instant::now() >= next_describe => {
                Kind::Full(Some(DescribeReason::SafetyInterval))
            }
            (true, false) => Kind::Full(None),
            (false, false) => Kind::Fill,
        };
        let pass = pass(
            &shared,
            ec2.as_ref(),
            imds.as_ref(),
            kind,
            &mut next_describe,
        );
        tokio::pin!(pass);
        let result = tokio::select! {
            r = &mut pass => r,
            _ = cancel.cancelled() => {
                finish_at_stop(shared.opts.shutdown_timeout, pass).await;
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
                shared.pool_state().wake_reconciler();
            }
        }
    }
}

/// What a pass does besides planning.
#[derive(Debug)]
enum Kind {
    /// Woken by ADD/DEL: plan and execute only.
    Fill,
    /// Periodic (or forced by an unknown EC2 outcome): datapath audit, EC2 describe when the
    /// reason is given or the IMDS drift check finds one, node setup, firewall, then plan.
    Full(Option<DescribeReason>),
}

/// Whether a full pass describes: the reason it was given, else the IMDS drift check's.
async fn describe_reason(
    shared: &Shared,
    imds: &dyn MetadataApi,
    given: Option<DescribeReason>,
) -> Option<DescribeReason> {
    if given.is_some() {
        return given;
    }
    match imds_drift(shared, imds).await {
        Ok(None) => None,
        Ok(Some(d)) => Some(DescribeReason::Drift(d)),
        Err(e) => {
            tracing::warn!(error = %chain(&e), "reading the attached ENIs from IMDS failed; describing them in EC2 instead");
            Some(DescribeReason::ImdsUnreadable)
        }
    }
}

/// One pass ([`Kind`]): a full one may describe and adopt EC2's view and repairs node setup
/// first; then plan and execute until the pool is on target. A describe moves
/// `next_describe` to a safety interval from now.
async fn pass(
    shared: &Arc<Shared>,
    ec2: &dyn Ec2Api,
    imds: &dyn MetadataApi,
    kind: Kind,
    next_describe: &mut tokio::time::Instant,
) -> Result<bool, Ec2Error> {
    let full = matches!(kind, Kind::Full(_));
    let timer = shared.metrics().action(if full {
        "reconcilePool"
    } else {
        "increaseIPPool"
    });
    shared
        .metrics()
        .inc_reconcile(if full { "periodic" } else { "add" });
    let mut result = Ok(false);
    if let Kind::Full(given) = kind {
        // Datapath self-healing, before the node setup below re-applies ENI tables and the
        // firewall, so their drift is seen and reported.
        crate::datapath_audit::run_pass(shared).await;
        if let Some(reason) = describe_reason(shared, imds, given).await {
            match &reason {
                DescribeReason::Drift(d) => {
                    tracing::info!(drift = ?d, "IMDS disagrees with the pool; describing the instance's ENIs in EC2")
                }
                r => tracing::debug!(reason = r.label(), "describing the instance's ENIs"),
            }
            shared.metrics().inc_ec2_describe(reason.label());
            *next_describe = tokio::time::Instant::now() + shared.opts.ec2_reconcile_interval;
            if let Err(e) = sync_from_ec2(shared, ec2, UnknownIpPolicy::Free).await {
                result = Err(e);
            }
        }
        if result.is_ok() {
            setup_node_enis(shared).await;
        }
        // The firewall depends on static facts only: repair it even when EC2 fails.
        setup_node_firewall(shared).await;
    }
    if result.is_ok() {
        result = fill(shared, ec2).await;
    }
    drop(timer);
    if result.is_err() {
        shared.metrics().inc_ipamd_error(if full {
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
/// the leaked-ENI sweep. `bound` is `shutdown_timeout`.
async fn finish_at_stop<F>(bound: Duration, pass: std::pin::Pin<&mut F>)
where
    F: std::future::Future<Output = Result<bool, Ec2Error>>,
{
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
