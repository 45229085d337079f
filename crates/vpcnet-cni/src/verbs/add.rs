//! ADD: get an IP from the agent, build the datapath, answer the result. All or nothing: on any
//! failure after the agent assigned an IP, the datapath is rolled back and the IP released.

use serde_json::Value;
use vpcnet_datapath::{names::format_mac, netns, pod};
use vpcnet_proto::{AddNetworkRequest, DelNetworkRequest};

use super::{datapath_error, host_veth, netns_path, Invocation};
use crate::agent_client::Agent;
use crate::cni::error::{code, CniError};
use crate::cni::result::{self, PodResult};
use crate::conflist::DEFAULT_MTU;

pub async fn add(inv: &Invocation) -> Result<Value, CniError> {
    let env = &inv.env;
    let path = netns_path(inv);
    let pod_ns = netns::open(path).map_err(|e| {
        CniError::new(
            code::INVALID_ENV,
            format!("CNI_NETNS {} cannot be opened", env.netns),
            format!("{e}; the runtime must pass the path of the pod's network namespace"),
        )
    })?;
    // The pod-side netlink socket is opened by a helper thread while we talk to the agent.
    let pending =
        netns::socket_in(&pod_ns, path).map_err(|e| datapath_error("open pod netlink", e))?;
    let node = netns::connect().map_err(|e| datapath_error("open netlink", e))?;
    let mut agent = Agent::connect(&inv.conf.agent_socket, inv.conf.agent_timeout).await?;
    tracing::debug!("agent connected");
    let reply = agent
        .add(AddNetworkRequest {
            container_id: env.container_id.clone(),
            if_name: env.ifname.clone(),
            netns: env.netns.clone(),
            k8s_pod_namespace: env.pod_namespace.clone(),
            k8s_pod_name: env.pod_name.clone(),
            network_name: inv.conf.name.clone(),
        })
        .await?;
    tracing::info!(container = %env.container_id, ip = %reply.ipv4_addr, eni = %reply.eni_id,
        table = reply.route_table, "agent assigned address");

    let Ok(ip) = reply.ipv4_addr.parse() else {
        release(&mut agent, inv, reply.ipv4_addr.clone()).await;
        return Err(CniError::new(
            code::GENERIC,
            format!(
                "the agent returned an invalid address {:?}",
                reply.ipv4_addr
            ),
            "this is a vpcnet-agent bug: report it with the agent log",
        ));
    };
    let mtu = inv
        .conf
        .mtu
        .or((reply.mtu != 0).then_some(reply.mtu))
        .unwrap_or(DEFAULT_MTU);
    let spec = pod::PodSpec {
        ip,
        host_veth: host_veth(inv),
        container_ifname: env.ifname.clone(),
        mtu,
        route_table: reply.route_table,
    };
    let built = match pending.connect() {
        Ok(pod_handle) => pod::setup_with(&node, &pod_ns, &pod_handle, &spec).await,
        Err(e) => Err(e),
    };
    match built {
        Ok(links) => Ok(result::render(
            &PodResult {
                host_veth: spec.host_veth,
                host_mac: format_mac(&links.host_mac),
                pod_ifname: spec.container_ifname,
                pod_mac: format_mac(&links.pod_mac),
                netns: env.netns.clone(),
                ip,
                mtu,
            },
            &inv.conf.cni_version,
            inv.conf.prev_result.as_ref(),
        )),
        Err(e) => {
            tracing::error!(error = %e, "datapath setup failed; releasing {ip}");
            release(&mut agent, inv, ip.to_string()).await;
            Err(datapath_error("building the pod network", e))
        }
    }
}

/// Gives the address back after a failed ADD (best effort: the agent's reconcile reclaims it
/// otherwise).
async fn release(agent: &mut Agent, inv: &Invocation, ip: String) {
    let env = &inv.env;
    let req = DelNetworkRequest {
        container_id: env.container_id.clone(),
        if_name: env.ifname.clone(),
        netns: env.netns.clone(),
        k8s_pod_namespace: env.pod_namespace.clone(),
        k8s_pod_name: env.pod_name.clone(),
        ipv4_addr: ip,
    };
    if let Err(e) = agent.del(req).await {
        tracing::error!(error = %e, "releasing the address after a failed ADD");
    }
}
