//! What `vpcnet plan` and its simulator predict for a fleet of vpcnet nodes, to set beside
//! what the fleet measured: the planner's ENIs and addresses per node ([`vpcnet_capacity::plan`])
//! and the simulated join of the same nodes against the same account buckets
//! ([`vpcnet_capacity::sim::simulate`]). Built from the fleet lab's own subnets, instance type
//! and agent environment, so both answer the same question the fleet did.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde::Serialize;
use vpcnet_capacity::sim::{SimReport, SimSettings};
use vpcnet_capacity::{FleetSpec, NodeGroup, SubnetSpec, WarmSettings};

use crate::lab::FLEET_SUBNETS;

/// The planner's and the simulator's answers for a fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// ENIs and pod addresses the planner says the fleet holds once settled (no pods).
    pub enis: u64,
    pub addresses: u64,
    /// The simulated join of the same nodes.
    pub simulation: SimReport,
}

/// The planner's input for `nodes` empty nodes of `instance_type` in the fleet lab's subnets
/// (`subnet_ids` in [`FLEET_SUBNETS`] order), with the agents' environment `agent_env`. Errors:
/// a variable the planner does not model (say which), an unknown instance type.
pub fn fleet_spec(
    subnet_ids: &[String],
    instance_type: &str,
    nodes: u32,
    agent_env: &[(String, String)],
) -> Result<FleetSpec> {
    let vars: BTreeMap<&str, &str> = agent_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let settings: WarmSettings = serde_json::from_value(serde_json::to_value(&vars)?)
        .context("the planner cannot predict this fleet's agent environment")?;
    let subnets: Vec<SubnetSpec> = FLEET_SUBNETS
        .iter()
        .zip(subnet_ids)
        .map(|((_, cidr, zone), id)| SubnetSpec {
            id: id.clone(),
            cidr: cidr.parse().expect("constant"),
            zone: zone.to_string(),
            available: None,
            tags: BTreeMap::new(),
        })
        .collect();
    Ok(FleetSpec {
        node_groups: vec![NodeGroup {
            name: "fleet".into(),
            instance_type: instance_type.into(),
            count: nodes,
            // No pods: the fleet joins empty.
            pods_per_node: Some(0),
            subnets: subnets.iter().map(|s| s.id.clone()).collect(),
            max_pods: None,
        }],
        subnets,
        settings,
        eni_configs: BTreeMap::new(),
        scale_out: None,
    })
}

/// The planner's and the simulator's answers for `spec` (from [`fleet_spec`]), other tools
/// using `other_tools_share` of every bucket's refill, the simulated nodes booting within
/// `boot_spread_ms` (the fleet's measured spread of first calls).
pub fn predict(
    spec: &FleetSpec,
    other_tools_share: f64,
    boot_spread_ms: u64,
) -> Result<Prediction> {
    let plan = vpcnet_capacity::plan(spec)?;
    let nodes: u32 = spec.node_groups.iter().map(|g| g.count).sum();
    let enis = plan.subnets.iter().map(|s| s.fleet_enis).sum::<u64>();
    // The planner counts ENI primaries among the subnets' addresses; pods use the others.
    let addresses = plan.subnets.iter().map(|s| s.fleet_addresses).sum::<u64>() - enis;
    let empty = FleetSpec {
        node_groups: spec
            .node_groups
            .iter()
            .map(|g| NodeGroup {
                count: 0,
                ..g.clone()
            })
            .collect(),
        ..spec.clone()
    };
    let sim_nodes = vpcnet_capacity::fleet::scale_out_nodes(&empty, nodes)?;
    Ok(Prediction {
        enis,
        addresses,
        simulation: vpcnet_capacity::sim::simulate(
            &sim_nodes,
            &SimSettings {
                other_tools_share,
                boot_spread_ms,
                ..SimSettings::default()
            },
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<String> {
        (0..4).map(|i| format!("subnet-{i}")).collect()
    }

    #[test]
    fn an_empty_m5_large_fleet_holds_one_eni_of_nine_addresses_per_node() {
        let spec = fleet_spec(&ids(), "m5.large", 20, &[]).unwrap();
        let p = predict(&spec, 0.0, 0).unwrap();
        assert_eq!((p.enis, p.addresses), (20, 180));
        assert_eq!(p.simulation.nodes, 20);
        assert_eq!(p.simulation.calls.get("DescribeNetworkInterfaces"), 40);
    }

    #[test]
    fn warm_settings_carry_over_and_other_variables_are_refused() {
        let env = [("WARM_IP_TARGET".to_string(), "3".to_string())];
        let p = predict(&fleet_spec(&ids(), "m5.large", 4, &env).unwrap(), 0.0, 0).unwrap();
        assert_eq!(p.addresses, 12);
        let bad = [("AWS_VPC_K8S_CNI_LOGLEVEL".to_string(), "DEBUG".to_string())];
        let e = fleet_spec(&ids(), "m5.large", 4, &bad).unwrap_err();
        assert!(
            format!("{e:#}").contains("AWS_VPC_K8S_CNI_LOGLEVEL"),
            "{e:#}"
        );
    }
}
