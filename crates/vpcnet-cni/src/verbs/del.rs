//! DEL: idempotent. Releases the IP at the agent, then removes the node side of the pod: the /32
//! route and the rules for the IP (from prevResult, else the agent's answer, else the veth
//! provably peered with CNI_IFNAME in CNI_NETNS). Like the VPC CNI's DEL (its routed-eni plugin
//! tears down routes and rules only), it leaves the veth pair to the runtime, whose deletion of
//! the pod network namespace destroys it; deleting it here would make DEL wait for the kernel's
//! synchronous RCU grace period (25-35 ms on a loaded 2-core VM). A same-named veth that outlives
//! its pod is replaced by the next ADD (see `vpcnet_datapath::pod::create_veth`); one that routes
//! another IP belongs to a newer pod with the same name and is never touched. Succeeds with a
//! missing or empty netns and with the agent unreachable (the agent reclaims the IP by
//! reconciling after it restarts). A multi-homed pod's further interfaces (`mNicIf<n>`, from
//! the agent's answer, else from prevResult) lose their node side the same way. When the
//! agent's answer carries a network policy mode (`VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent`),
//! the AWS node agent is told the pod is gone (`DeletePodNp`); its failure is logged, never
//! fails the DEL.

use vpcnet_datapath::{host, netns, nl};
use vpcnet_proto::DelNetworkRequest;

use super::{datapath_error, host_veth, host_veth_of, Invocation};
use crate::agent_client::Agent;
use crate::cni::error::CniError;
use crate::cni::result::{read_prev, read_prev_further};
use crate::node_agent;

pub async fn del(inv: &Invocation) -> Result<(), CniError> {
    let env = &inv.env;
    let veth = host_veth(inv);
    let prev_ip = inv
        .conf
        .prev_result
        .as_ref()
        .and_then(|p| read_prev(p, &env.ifname).ip);

    // Release first: the agent keys on the container ID, so its answer names this container's
    // IP even when the runtime sent no prevResult.
    let req = DelNetworkRequest {
        container_id: env.container_id.clone(),
        if_name: env.ifname.clone(),
        netns: env.netns.clone(),
        k8s_pod_namespace: env.pod_namespace.clone(),
        k8s_pod_name: env.pod_name.clone(),
        ipv4_addr: prev_ip.map(|ip| ip.to_string()).unwrap_or_default(),
    };
    let reply = match Agent::connect(&inv.conf.agent_socket, inv.conf.agent_timeout).await {
        Ok(mut agent) => agent.del(req).await,
        Err(e) => Err(e),
    };
    let (agent_ip, mut further) = match reply {
        Ok(r) => {
            tracing::info!(released = r.released, ip = %r.ipv4_addr, further = r.extra_interfaces.len(), "agent released address");
            if !r.network_policy_mode.is_empty() {
                let pod = node_agent::Pod {
                    name: &env.pod_name,
                    namespace: &env.pod_namespace,
                };
                node_agent::delete(&inv.conf.node_agent_socket, inv.conf.agent_timeout, &pod).await;
            }
            let further: Vec<(u32, std::net::Ipv4Addr)> = r
                .extra_interfaces
                .iter()
                .filter_map(|x| {
                    let n = x
                        .if_name
                        .strip_prefix(crate::conflist::FURTHER_INTERFACE_PREFIX)?
                        .parse()
                        .ok()?;
                    Some((n, x.ipv4_addr.parse().ok()?))
                })
                .collect();
            (r.ipv4_addr.parse().ok(), further)
        }
        Err(e) => {
            tracing::warn!(error = %e, "address not released now; the agent reclaims it when it reconciles");
            (None, Vec::new())
        }
    };
    if further.is_empty() {
        further = inv
            .conf
            .prev_result
            .as_ref()
            .map(read_prev_further)
            .unwrap_or_default();
    }

    let node = netns::connect().map_err(|e| datapath_error("open netlink", e))?;
    for (n, ip) in further {
        let veth = host_veth_of(inv, n);
        let removed = host::remove(&node, &veth, Some(ip), host::VethAction::Keep)
            .await
            .map_err(|e| datapath_error("removing the pod network", e))?;
        tracing::info!(container = %env.container_id, interface = n, ?removed, "datapath of a further interface removed");
    }
    let ip = match prev_ip.or(agent_ip) {
        Some(ip) => Some(ip),
        // Neither prevResult nor agent: the veth's route names the IP, but only trust it when
        // the veth is provably this container's (its peer is CNI_IFNAME in CNI_NETNS); a
        // same-named veth may belong to a newer pod with the same name.
        None => match owned_veth_ip(inv, &node, &veth).await {
            Some(ip) => Some(ip),
            None => {
                tracing::warn!(veth = %veth, "IP unknown (no prevResult, agent unreachable) and the veth is not provably this container's: left to the namespace teardown");
                return Ok(());
            }
        },
    };
    let removed = host::remove(&node, &veth, ip, host::VethAction::Keep)
        .await
        .map_err(|e| datapath_error("removing the pod network", e))?;
    tracing::info!(container = %env.container_id, ?removed, "datapath removed");
    Ok(())
}

/// The IP routed via host veth `veth` when its peer is CNI_IFNAME inside CNI_NETNS.
async fn owned_veth_ip(
    inv: &Invocation,
    node: &rtnetlink::Handle,
    veth: &str,
) -> Option<std::net::Ipv4Addr> {
    let host = nl::link_by_name(node, veth).await.ok()??;
    let path = std::path::Path::new(&inv.env.netns);
    let fd = netns::open(path).ok()?;
    let pod = netns::connect_in(&fd, path).ok()?;
    let peer = nl::link_by_name(&pod, &inv.env.ifname).await.ok()??;
    if host.peer_index != Some(peer.index) || peer.peer_index != Some(host.index) {
        return None;
    }
    host::ip_of_host_veth(node, host.index).await.ok()?
}
