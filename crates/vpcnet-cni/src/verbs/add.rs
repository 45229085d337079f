//! ADD: get an IP from the agent, build the datapath, answer the result. All or nothing: on any
//! failure after the agent assigned an IP, the datapath is rolled back and the IP released.
//! A multi-homed pod (annotated `k8s.amazonaws.com/nicConfig: multi-nic-attachment`, passed
//! by the runtime in `runtimeConfig`) gets one more interface per further network card the
//! agent manages, `mNicIf<n>`, built and rolled back the same way. When the agent's answer
//! carries a network policy mode (`VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent`), the AWS
//! node agent is asked to enforce the pod's policies once the datapath is built; its failure
//! undoes the datapath and gives the address back too.

use serde_json::Value;
use vpcnet_datapath::{host, names::format_mac, netns, pod};
use vpcnet_proto::{AddNetworkRequest, DelNetworkRequest};

use super::{datapath_error, host_veth, host_veth_of, netns_path, Invocation};
use crate::agent_client::Agent;
use crate::cni::error::{code, CniError};
use crate::cni::result::{self, PodResult};
use crate::conflist::DEFAULT_MTU;
use crate::node_agent;

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
            requires_multi_nic_attachment: inv.conf.multi_nic_attachment,
        })
        .await?;
    tracing::info!(container = %env.container_id, ip = %reply.ipv4_addr, eni = %reply.eni_id,
        table = reply.route_table, "agent assigned address");

    let Ok(ip) = reply.ipv4_addr.parse() else {
        release(&mut agent, inv, reply.ipv4_addr.clone()).await;
        return Err(invalid_address(&reply.ipv4_addr, &env.ifname));
    };
    let mtu = inv
        .conf
        .mtu
        .or((reply.mtu != 0).then_some(reply.mtu))
        .unwrap_or(DEFAULT_MTU);
    let mut specs = vec![pod::PodSpec {
        ip,
        host_veth: host_veth(inv),
        container_ifname: env.ifname.clone(),
        mtu,
        route_table: reply.route_table,
        interface: 0,
    }];
    for (i, x) in reply.extra_interfaces.iter().enumerate() {
        let Ok(further) = x.ipv4_addr.parse() else {
            release(&mut agent, inv, reply.ipv4_addr.clone()).await;
            return Err(invalid_address(&x.ipv4_addr, &x.if_name));
        };
        let n = i as u32 + 1;
        specs.push(pod::PodSpec {
            ip: further,
            host_veth: host_veth_of(inv, n),
            container_ifname: x.if_name.clone(),
            mtu,
            route_table: x.route_table,
            interface: n,
        });
    }
    let built = match pending.connect() {
        Ok(pod_handle) => build(&node, &pod_ns, &pod_handle, &specs).await,
        Err(e) => Err(e),
    };
    let built = match built {
        Ok(links) if !reply.network_policy_mode.is_empty() => {
            // As the VPC CNI's plugin: after the datapath, before the result.
            let pod = node_agent::Pod {
                name: &env.pod_name,
                namespace: &env.pod_namespace,
            };
            match node_agent::enforce(
                &inv.conf.node_agent_socket,
                inv.conf.agent_timeout,
                &pod,
                &reply.network_policy_mode,
                specs.len(),
            )
            .await
            {
                Ok(()) => Ok(links),
                Err(e) => {
                    tracing::error!(error = %e, "the node agent failed; removing the pod network and releasing {ip}");
                    undo(&node, &specs).await;
                    release(&mut agent, inv, ip.to_string()).await;
                    return Err(e);
                }
            }
        }
        other => other,
    };
    match built {
        Ok(links) => {
            let pods: Vec<PodResult> = specs
                .iter()
                .zip(&links)
                .map(|(spec, l)| PodResult {
                    host_veth: spec.host_veth.clone(),
                    host_mac: format_mac(&l.host_mac),
                    pod_ifname: spec.container_ifname.clone(),
                    pod_mac: format_mac(&l.pod_mac),
                    netns: env.netns.clone(),
                    ip: spec.ip,
                    mtu,
                })
                .collect();
            Ok(result::render_all(
                &pods,
                &inv.conf.cni_version,
                inv.conf.prev_result.as_ref(),
            ))
        }
        Err(e) => {
            tracing::error!(error = %e, "datapath setup failed; releasing {ip}");
            release(&mut agent, inv, ip.to_string()).await;
            Err(datapath_error("building the pod network", e))
        }
    }
}

/// The agent answered something that is not an IPv4 address for interface `ifname`.
fn invalid_address(addr: &str, ifname: &str) -> CniError {
    CniError::new(
        code::GENERIC,
        format!("the agent returned an invalid address {addr:?} for {ifname}"),
        "this is a vpcnet-agent bug: report it with the agent log",
    )
}

/// Builds each interface's datapath in turn ([`pod::setup_with`], all or nothing per
/// interface); when one fails, those built before it are removed again.
async fn build(
    node: &rtnetlink::Handle,
    pod_ns: &std::os::fd::OwnedFd,
    pod_handle: &rtnetlink::Handle,
    specs: &[pod::PodSpec],
) -> vpcnet_datapath::Result<Vec<pod::PodLinks>> {
    let mut links = Vec::with_capacity(specs.len());
    for spec in specs {
        match pod::setup_with(node, pod_ns, pod_handle, spec).await {
            Ok(l) => links.push(l),
            Err(e) => {
                undo(node, &specs[..links.len()]).await;
                return Err(e);
            }
        }
    }
    Ok(links)
}

/// Removes the datapath of `specs`, built by this ADD, after a later step failed (best effort:
/// logged).
async fn undo(node: &rtnetlink::Handle, specs: &[pod::PodSpec]) {
    for done in specs {
        let gone = host::remove(
            node,
            &done.host_veth,
            Some(done.ip),
            host::VethAction::Delete,
        )
        .await;
        if let Err(re) = gone {
            tracing::warn!(error = %re, veth = %done.host_veth, "rollback after failed setup");
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
