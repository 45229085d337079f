//! Sweeps for what a crash or a missed call leaves behind: addresses whose pod datapath is
//! gone (DEL ran while the agent was down) and detached ENIs this instance created.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use vpcnet_ec2::{NetworkInterface, Tags};
use vpcnet_ipam::UNKNOWN_POD_PREFIX;

use super::eni::delete_with_retry;
use crate::clock::{now_ms, wall_now};
use crate::cloud::Ec2Api;
use crate::errors::chain;
use crate::options::{ENI_DESCRIPTION_PREFIX, TAG_CREATED_AT, TAG_INSTANCE_ID};
use crate::state::Shared;

/// Consecutive pod-datapath checks that must miss a pod before its address is reclaimed.
pub const POD_RECLAIM_MISSES: u32 = 2;

/// The addresses whose pod still has a trace on the node: a main-table /32 route to the
/// address, a pod rule (512) to it, or the pod's host veth (named from its namespace and name
/// as the plugin names it, else from its container ID). Holds of unknown pods have only the
/// route and the rule as evidence.
pub async fn pods_present(shared: &Shared) -> anyhow::Result<BTreeSet<Ipv4Addr>> {
    let Some(node) = shared.node_network() else {
        return Ok(BTreeSet::new());
    };
    let (routed, ruled, links) =
        tokio::try_join!(node.pod_route_ips(), node.pod_rule_ips(), node.link_names())?;
    let prefix = &shared.opts.conflist.veth_prefix;
    let mut present = routed;
    present.extend(ruled);
    for (k, a) in shared.pool().assignments() {
        if k.container_id.starts_with(UNKNOWN_POD_PREFIX) {
            continue;
        }
        let veth = if a.pod.namespace.is_empty() && a.pod.name.is_empty() {
            vpcnet_datapath::names::host_veth_name_for_container(prefix, &k.container_id)
        } else {
            vpcnet_datapath::names::host_veth_name(prefix, &a.pod.namespace, &a.pod.name)
        };
        if links.contains(&veth) {
            present.insert(a.ip);
        }
    }
    Ok(present)
}

/// Releases assignments whose pod has no datapath on the node any more (no /32 route to its
/// address and no host veth, at [`POD_RECLAIM_MISSES`] consecutive checks): the plugin's DEL
/// ran while the agent was unreachable, so the address would leak. Only when the agent
/// manages the node datapath; assignments younger than `pod_reclaim_grace` are kept (an ADD
/// may be building the datapath right now).
pub async fn reclaim_unrouted(shared: &Shared) {
    if shared.node_network().is_none() {
        return;
    }
    let present = match pods_present(shared).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("listing pod routes and links failed: {e:#}; no reclaim this time");
            return;
        }
    };
    let released = shared.pool().reclaim_unrouted(
        &present,
        shared.opts.pod_reclaim_grace.as_millis() as u64,
        POD_RECLAIM_MISSES,
        now_ms(),
    );
    if released.is_empty() {
        return;
    }
    let prefix = &shared.opts.conflist.veth_prefix;
    for (key, a) in &released {
        // The evidence checked: the route and rule to the address, and for a known pod its
        // host veth.
        let veth = if key.container_id.starts_with(UNKNOWN_POD_PREFIX) {
            "no host veth known (held for an unknown pod)".to_string()
        } else {
            format!(
                "no host veth {}",
                crate::datapath_audit::host_veth_of(prefix, key, &a.pod)
            )
        };
        tracing::warn!(
            ip = %a.ip,
            container = %key.container_id,
            pod = %format!("{}/{}", a.pod.namespace, a.pod.name),
            "pod datapath is gone: no /32 route to {}, no pod rule to it and {veth}, at {POD_RECLAIM_MISSES} consecutive checks after the grace; the pod's DEL ran while the agent was unreachable or its sandbox is gone: address reclaimed into cooldown",
            a.ip
        );
        shared.metrics().inc_del_ip_req("PodDatapathGone");
    }
    // A failed write is logged by persist; the next change writes the release.
    let _ = shared.persist().await;
    shared.update_gauges();
    shared.pool_state().wake_reconciler();
    shared.pool_state().wake_conntrack();
}

/// Whether a detached ENI of ours is old enough to delete: its `createdAt` tag (RFC 3339) is
/// at least `min_age` before `now`. `None` when the tag is missing or unreadable (the caller
/// tags it now, so it is swept once it has aged, as the VPC CNI does).
pub fn old_enough(
    ni: &NetworkInterface,
    min_age: Duration,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<bool> {
    let created = ni.tags.get(TAG_CREATED_AT)?;
    let created = chrono::DateTime::parse_from_rfc3339(created).ok()?;
    let age = now.signed_duration_since(created.with_timezone(&chrono::Utc));
    Some(age.to_std().is_ok_and(|a| a >= min_age))
}

/// Deletes ENIs this instance created that are no longer attached (a crash between create
/// and attach, a failed cleanup, a delete whose reply was lost), skipping those younger than
/// `leaked_eni_min_age`. Holds the ENI lifecycle lock for the whole pass, so an ENI the
/// reconciler is creating and attaching right now is never seen half-way.
pub async fn sweep_leaked(shared: &Shared, ec2: &dyn Ec2Api) {
    let _lifecycle = shared.enis().lifecycle().await;
    let leaked = match ec2
        .describe_network_interfaces_by_tag(
            TAG_INSTANCE_ID,
            &shared.facts.instance_id,
            Some("available"),
        )
        .await
    {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %chain(&e), "leaked-ENI sweep failed; retried at the next sweep");
            return;
        }
    };
    let now = wall_now();
    for ni in leaked
        .iter()
        .filter(|n| n.description.starts_with(ENI_DESCRIPTION_PREFIX) && n.attachment.is_none())
    {
        match old_enough(ni, shared.opts.leaked_eni_min_age, now) {
            Some(true) => {
                tracing::warn!(eni = %ni.eni_id, "deleting leaked ENI of this instance");
                delete_with_retry(shared.stop(), ec2, &ni.eni_id).await;
            }
            Some(false) => {
                tracing::info!(eni = %ni.eni_id, "detached ENI of this instance is younger than the minimum age; left for a later sweep");
            }
            None => {
                let mut tags = Tags::new();
                tags.insert(
                    TAG_CREATED_AT.into(),
                    now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                );
                tracing::info!(eni = %ni.eni_id, "detached ENI of this instance has no createdAt tag; tagged now, swept once it has aged");
                if let Err(e) = ec2
                    .create_tags(std::slice::from_ref(&ni.eni_id), &tags)
                    .await
                {
                    tracing::warn!(eni = %ni.eni_id, error = %chain(&e), "tagging the leaked ENI failed");
                }
            }
        }
    }
}

/// Share of the sweep interval added at random to each wait (0 to 10 %), so the nodes of a
/// fleet started together do not sweep in step.
pub const SWEEP_JITTER: f64 = 0.1;

/// The wait before the next sweep: `interval` stretched by `unit` × [`SWEEP_JITTER`]
/// (`unit` in [0, 1), the random draw).
pub fn sweep_wait(interval: Duration, unit: f64) -> Duration {
    interval.mul_f64(1.0 + SWEEP_JITTER * unit.clamp(0.0, 1.0))
}

/// The agent's first sweep comes at a random time within this much of its start (at most the
/// sweep interval): a fleet that boots together would otherwise spend a describe per node of
/// the account's burst (100, then 20 a second) on it just when the nodes need their first
/// addresses. Spread over 15 minutes, 5,000 nodes describe 5.6 times a second.
pub const FIRST_SWEEP_SPREAD: Duration = Duration::from_secs(900);

/// The wait before the first sweep: `spread` × `unit` (the random draw in [0, 1)).
pub fn first_sweep_wait(spread: Duration, unit: f64) -> Duration {
    spread.mul_f64(unit.clamp(0.0, 1.0))
}

/// The sweep after [`first_sweep_wait`] and then every `leaked_eni_sweep_interval`
/// (jittered, [`sweep_wait`]), until `stop`.
pub async fn sweep_leaked_periodically(
    shared: std::sync::Arc<Shared>,
    ec2: std::sync::Arc<dyn Ec2Api>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    tokio::select! {
        _ = tokio::time::sleep(first_sweep_wait(
            shared.opts.leaked_eni_first_sweep_spread,
            rand::random::<f64>(),
        )) => {}
        _ = stop.changed() => return,
    }
    loop {
        tokio::select! {
            _ = sweep_leaked(&shared, ec2.as_ref()) => {}
            _ = stop.changed() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(sweep_wait(
                shared.opts.leaked_eni_sweep_interval,
                rand::random::<f64>(),
            )) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_sweep_comes_within_the_spread() {
        let spread = FIRST_SWEEP_SPREAD;
        assert_eq!(first_sweep_wait(spread, 0.0), Duration::ZERO);
        assert_eq!(first_sweep_wait(spread, 0.5), Duration::from_secs(450));
        assert!(first_sweep_wait(spread, 0.999_999) < spread);
        assert_eq!(first_sweep_wait(spread, 3.0), spread);
        assert_eq!(first_sweep_wait(Duration::ZERO, 0.7), Duration::ZERO);
    }

    #[test]
    fn the_sweep_wait_is_the_interval_stretched_by_at_most_the_jitter() {
        let hour = Duration::from_secs(3600);
        assert_eq!(sweep_wait(hour, 0.0), hour);
        assert_eq!(sweep_wait(hour, 0.5), Duration::from_secs(3780));
        assert!(sweep_wait(hour, 0.999_999) < Duration::from_secs(3960));
        assert_eq!(sweep_wait(hour, 7.0), Duration::from_secs(3960));
    }
}
