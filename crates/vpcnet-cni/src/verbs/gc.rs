//! GC (CNI 1.1.0): the agent releases every assignment not in `cni.dev/valid-attachments`; then
//! host veths with our prefix that route one of the released addresses are removed with their
//! rules. Unlike DEL, GC deletes the veth itself: the runtime no longer knows these attachments,
//! so no namespace teardown can be counted on to destroy them.

use vpcnet_datapath::{host, names, netns, nl};
use vpcnet_proto::Attachment;

use super::{datapath_error, Invocation};
use crate::agent_client::Agent;
use crate::cni::error::{code, CniError};

pub async fn gc(inv: &Invocation) -> Result<(), CniError> {
    let valid = inv.conf.valid_attachments.clone().ok_or_else(|| {
        CniError::new(
            code::INVALID_CONFIG,
            "GC without cni.dev/valid-attachments",
            "the runtime must list the attachments still in use",
        )
    })?;
    let mut agent = Agent::connect(&inv.conf.agent_socket, inv.conf.agent_timeout).await?;
    let reply = agent
        .gc(valid
            .into_iter()
            .map(|a| Attachment {
                container_id: a.container_id,
                if_name: a.ifname,
            })
            .collect())
        .await?;
    tracing::info!(released = ?reply.released, "agent garbage-collected addresses");
    let released: Vec<std::net::Ipv4Addr> = reply
        .released
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    if released.is_empty() {
        return Ok(());
    }
    let node = netns::connect().map_err(|e| datapath_error("open netlink", e))?;
    let links = nl::links(&node)
        .await
        .map_err(|e| datapath_error("listing links", e))?;
    for l in links
        .iter()
        .filter(|l| names::is_host_veth_name(&inv.conf.veth_prefix, &l.name))
    {
        let ip = host::ip_of_host_veth(&node, l.index)
            .await
            .map_err(|e| datapath_error("reading routes", e))?;
        if let Some(ip) = ip.filter(|ip| released.contains(ip)) {
            host::remove(&node, &l.name, Some(ip), host::VethAction::Delete)
                .await
                .map_err(|e| datapath_error("removing a stale pod network", e))?;
            tracing::info!(veth = %l.name, %ip, "removed stale host veth");
        }
    }
    Ok(())
}
