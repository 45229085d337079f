//! Sweeps for what a crash or a missed call leaves behind: addresses whose pod datapath is
//! gone (DEL ran while the agent was down) and detached ENIs this instance created.

use std::time::Duration;

use vpcnet_ec2::Ec2;

use super::eni::delete_with_retry;
use crate::options::{ENI_DESCRIPTION_PREFIX, TAG_INSTANCE_ID};
use crate::state::{now_ms, Shared};

/// Age an assignment must reach before a missing pod route gets it reclaimed.
pub const POD_RECLAIM_GRACE: Duration = Duration::from_secs(5);
/// Period of the pod-route check (a netlink route dump; cheap).
pub const POD_RECLAIM_INTERVAL: Duration = Duration::from_secs(5);

/// Releases assignments whose pod has no datapath on the node any more (no /32 route to its
/// address): the plugin's DEL ran while the agent was unreachable, so the address would leak.
/// Only when the agent manages the node datapath; assignments younger than
/// [`POD_RECLAIM_GRACE`] are kept (an ADD may be building the datapath right now).
pub async fn reclaim_unrouted(shared: &Shared) {
    let Some(node) = &shared.opts.node_network else {
        return;
    };
    let routed = match node.pod_route_ips().await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("listing pod routes failed: {e:#}; no reclaim this time");
            return;
        }
    };
    let released =
        shared
            .pool()
            .reclaim_unrouted(&routed, POD_RECLAIM_GRACE.as_millis() as u64, now_ms());
    if released.is_empty() {
        return;
    }
    for (key, a) in &released {
        tracing::warn!(
            ip = %a.ip,
            container = %key.container_id,
            pod = %format!("{}/{}", a.pod.namespace, a.pod.name),
            "pod datapath is gone (DEL ran while the agent was down): address reclaimed into cooldown"
        );
        shared.metrics.inc_del_ip_req("PodDatapathGone");
    }
    shared.persist().await;
    shared.update_gauges();
    shared.wake.notify_one();
}

/// Deletes ENIs this instance created that are no longer attached (a crash between
/// create and attach, or a failed cleanup).
pub async fn sweep_leaked(shared: &Shared, ec2: &Ec2) {
    match ec2
        .describe_network_interfaces_by_tag(
            TAG_INSTANCE_ID,
            &shared.facts.instance_id,
            Some("available"),
        )
        .await
    {
        Ok(leaked) => {
            for ni in leaked
                .iter()
                .filter(|n| n.description.starts_with(ENI_DESCRIPTION_PREFIX))
            {
                tracing::warn!(eni = %ni.eni_id, "deleting leaked ENI of this instance");
                delete_with_retry(ec2, &ni.eni_id).await;
            }
        }
        Err(e) => tracing::warn!("leaked-ENI sweep failed: {e}"),
    }
}
