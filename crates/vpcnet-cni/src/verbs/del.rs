//! DEL: idempotent. Removes whatever datapath exists (host veth by its deterministic name, the
//! /32 route, the rules for the IP from prevResult or the veth's route), then releases the IP at
//! the agent. Succeeds with a missing or empty netns and with the agent unreachable (the agent
//! reclaims the IP by reconciling after it restarts).

use vpcnet_datapath::{host, netns};
use vpcnet_proto::DelNetworkRequest;

use super::{datapath_error, host_veth, Invocation};
use crate::agent_client::Agent;
use crate::cni::error::CniError;
use crate::cni::result::read_prev;

pub async fn del(inv: &Invocation) -> Result<(), CniError> {
    let env = &inv.env;
    let veth = host_veth(inv);
    let prev_ip = inv
        .conf
        .prev_result
        .as_ref()
        .and_then(|p| read_prev(p, &env.ifname).ip);
    let node = netns::connect().map_err(|e| datapath_error("open netlink", e))?;
    let removed = host::remove(&node, &veth, prev_ip)
        .await
        .map_err(|e| datapath_error("removing the pod network", e))?;
    tracing::info!(container = %env.container_id, ?removed, "datapath removed");

    let req = DelNetworkRequest {
        container_id: env.container_id.clone(),
        if_name: env.ifname.clone(),
        netns: env.netns.clone(),
        k8s_pod_namespace: env.pod_namespace.clone(),
        k8s_pod_name: env.pod_name.clone(),
        ipv4_addr: removed.ip.map(|ip| ip.to_string()).unwrap_or_default(),
    };
    let reply = match Agent::connect(&inv.conf.agent_socket, inv.conf.agent_timeout).await {
        Ok(mut agent) => agent.del(req).await,
        Err(e) => Err(e),
    };
    match reply {
        Ok(r) => {
            tracing::info!(released = r.released, ip = %r.ipv4_addr, "agent released address");
            // Without prevResult and veth, the agent's answer is the only source of the IP.
            if removed.ip.is_none() {
                if let Ok(ip) = r.ipv4_addr.parse() {
                    host::remove(&node, &veth, Some(ip))
                        .await
                        .map_err(|e| datapath_error("removing the pod's rules", e))?;
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "address not released now; the agent reclaims it when it reconciles")
        }
    }
    Ok(())
}
