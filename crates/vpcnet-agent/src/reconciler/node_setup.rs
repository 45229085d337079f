//! Node-side setup from the pool and the static facts: secondary ENIs (interface, MTU, route
//! table) and the node firewall (SNAT, connmark), when the agent manages the node datapath.

use vpcnet_ipam::EniInfo;

use crate::node::{NodeEni, NodeFirewall};
use crate::options::AgentOptions;
use crate::state::{NodeFacts, Shared};

/// The node's view of a secondary ENI.
pub(crate) fn node_eni(e: &EniInfo, mtu: u32) -> NodeEni {
    NodeEni {
        mac: e.mac.clone(),
        device_number: e.device_number,
        network_card: e.network_card,
        subnet: e.subnet_cidr,
        primary_ip: e.primary_ip,
        mtu,
    }
}

/// Node setup (interface, MTU, route table N) of every secondary ENI that has an interface
/// (not [`vpcnet_ipam::Pool::interface_gone`]), when enabled.
/// Idempotent; failures are logged and retried at the next periodic pass.
pub async fn setup_node_enis(shared: &Shared) {
    let Some(node) = shared.node_network() else {
        return;
    };
    // An ENI whose interface vanished is skipped: waiting for it would stall the pass.
    let enis: Vec<EniInfo> = {
        let pool = shared.pool();
        pool.enis()
            .filter(|e| !e.info.primary && !e.deleting && !pool.interface_gone(&e.info.id))
            .map(|e| e.info.clone())
            .collect()
    };
    for e in enis {
        if let Err(err) = node.setup_eni(&node_eni(&e, shared.opts.mtu)).await {
            tracing::error!(eni = %e.id, "node setup failed: {err:#}");
        }
    }
}

/// The node firewall (SNAT to the primary IP, connmark for the primary ENI) from the static
/// facts and the options, when the node datapath is enabled. Idempotent (re-applied on each
/// periodic pass to repair drift); failures are logged and retried at the next pass.
pub async fn setup_node_firewall(shared: &Shared) {
    let Some(node) = shared.node_network() else {
        return;
    };
    let fw = node_firewall(&shared.opts, &shared.facts);
    if let Err(err) = node.setup_node_firewall(&fw).await {
        tracing::error!("node firewall (SNAT, connmark) setup failed: {err:#}");
    }
}

/// The node firewall from the static facts and the options.
pub(crate) fn node_firewall(o: &AgentOptions, facts: &NodeFacts) -> NodeFirewall {
    NodeFirewall {
        primary_mac: facts.primary_mac.clone(),
        primary_ip: facts.primary_ip,
        vpc_cidrs: facts.vpc_cidrs.clone(),
        exclude_snat_cidrs: o.exclude_snat_cidrs.clone(),
        randomize_snat: o.randomize_snat,
        external_snat: o.external_snat,
        node_port_support: o.node_port_support,
        veth_prefix: o.conflist.veth_prefix.clone(),
    }
}
