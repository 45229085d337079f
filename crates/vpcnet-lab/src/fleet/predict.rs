//! What `vpcnet plan` and its simulator predict for a fleet of vpcnet nodes, to set beside
//! what the fleet measured: the planner's ENIs and addresses per node ([`vpcnet_capacity::plan`])
//! and the simulated join of the same nodes against the same account buckets
//! ([`vpcnet_capacity::sim::simulate`]). Built from the fleet lab's own subnets, instance type
//! and agent environment, so both answer the same question the fleet did.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde::Serialize;
use vpcnet_capacity::sim::{AgentPolicy, SimReport, SimSettings};
use vpcnet_capacity::{FleetSpec, NodeGroup, SubnetSpec, WarmSettings};

use crate::lab::FLEET_SUBNETS;

/// The agent variables `vpcnet plan` models ([`WarmSettings`]' fields).
pub const MODELLED: &[&str] = &[
    "WARM_ENI_TARGET",
    "WARM_IP_TARGET",
    "MINIMUM_IP_TARGET",
    "WARM_PREFIX_TARGET",
    "ENABLE_PREFIX_DELEGATION",
    "MAX_ENI",
    "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG",
    "ENABLE_SUBNET_DISCOVERY",
    "CLUSTER_NAME",
];

/// The agent variables the simulator models besides the planner's: the leaked-ENI sweep's
/// switch (whether each node makes the sweep's describe).
pub const SIMULATED: &[&str] = &["DISABLE_LEAKED_ENI_CLEANUP"];

/// The planner's and the simulator's answers for a fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Agent variables of the fleet the planner and the simulator do not model (they predict
    /// as if unset).
    pub unmodelled: Vec<String>,
    /// ENIs and pod addresses the planner says the fleet holds once settled (no pods).
    pub enis: u64,
    pub addresses: u64,
    /// The simulated join of the same nodes.
    pub simulation: SimReport,
}

/// The planner's input for `nodes` empty nodes of `instance_type` in the fleet lab's subnets
/// (`subnet_ids` in [`FLEET_SUBNETS`] order), with the agents' environment `agent_env` (the
/// [`MODELLED`] variables; the others are returned, to be reported). Errors: a modelled
/// variable's value the planner refuses, an unknown instance type.
pub fn fleet_spec(
    subnet_ids: &[String],
    instance_type: &str,
    nodes: u32,
    agent_env: &[(String, String)],
) -> Result<(FleetSpec, Vec<String>)> {
    let (modelled, unmodelled): (Vec<_>, Vec<_>) = agent_env
        .iter()
        .filter(|(k, _)| !SIMULATED.contains(&k.as_str()))
        .partition(|(k, _)| MODELLED.contains(&k.as_str()));
    let vars: BTreeMap<&str, &str> = modelled
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    // One variable at a time first, so a refused value is named.
    for (k, v) in &vars {
        warm_settings(&[(*k, *v)].into_iter().collect())
            .with_context(|| format!("the planner cannot predict {k}={v:?}"))?;
    }
    let settings = warm_settings(&vars)?;
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
    let spec = FleetSpec {
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
    };
    Ok((
        spec,
        unmodelled.into_iter().map(|(k, _)| k.clone()).collect(),
    ))
}

fn warm_settings(vars: &BTreeMap<&str, &str>) -> Result<WarmSettings> {
    Ok(serde_json::from_value(serde_json::to_value(vars)?)?)
}

/// The planner's and the simulator's answers for `spec` (from [`fleet_spec`], with the
/// variables it did not model), other tools using `other_tools_share` of every bucket's
/// refill, the simulated nodes booting within `boot_spread_ms` (the fleet's measured spread
/// of first calls).
pub fn predict(
    spec: &FleetSpec,
    unmodelled: Vec<String>,
    agent_env: &[(String, String)],
    other_tools_share: f64,
    boot_spread_ms: u64,
) -> Result<Prediction> {
    let mut agent = AgentPolicy::default();
    if let Some((_, v)) = agent_env
        .iter()
        .find(|(k, _)| k == "DISABLE_LEAKED_ENI_CLEANUP")
    {
        // The agent's flag syntax (`true`/`false`, as the VPC CNI reads it).
        agent.sweep = match v.as_str() {
            "true" => false,
            "false" => true,
            other => anyhow::bail!(
                "DISABLE_LEAKED_ENI_CLEANUP={other:?}: the simulator takes true or false"
            ),
        };
    }
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
        unmodelled,
        enis,
        addresses,
        simulation: vpcnet_capacity::sim::simulate(
            &sim_nodes,
            &SimSettings {
                agent,
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
        let (spec, unmodelled) = fleet_spec(&ids(), "m5.large", 20, &[]).unwrap();
        let p = predict(&spec, unmodelled, &[], 0.0, 0).unwrap();
        assert_eq!((p.enis, p.addresses), (20, 180));
        assert_eq!(p.simulation.nodes, 20);
        // A start-up describe and the leaked-ENI sweep's, each node.
        assert_eq!(p.simulation.calls.get("DescribeNetworkInterfaces"), 40);
    }

    #[test]
    fn warm_settings_carry_over_and_other_variables_are_named() {
        let env = [
            ("WARM_IP_TARGET".to_string(), "3".to_string()),
            ("DISABLE_LEAKED_ENI_CLEANUP".to_string(), "true".to_string()),
        ];
        let (spec, unmodelled) = fleet_spec(&ids(), "m5.large", 4, &env).unwrap();
        assert!(unmodelled.is_empty(), "{unmodelled:?}");
        let p = predict(&spec, unmodelled, &env, 0.0, 0).unwrap();
        assert_eq!(p.addresses, 12);
        // No sweep: each node's start-up describe alone.
        assert_eq!(p.simulation.calls.get("DescribeNetworkInterfaces"), 4);
        let other = [("AWS_VPC_K8S_CNI_LOGLEVEL".to_string(), "INFO".to_string())];
        let (_, unmodelled) = fleet_spec(&ids(), "m5.large", 4, &other).unwrap();
        assert_eq!(unmodelled, ["AWS_VPC_K8S_CNI_LOGLEVEL"]);
        let bad = [("WARM_IP_TARGET".to_string(), "many".to_string())];
        let e = fleet_spec(&ids(), "m5.large", 4, &bad).unwrap_err();
        assert!(format!("{e:#}").contains("WARM_IP_TARGET"), "{e:#}");
    }

    #[test]
    fn every_modelled_variable_is_a_planner_setting() {
        for v in MODELLED {
            let value = match *v {
                "CLUSTER_NAME" => "c",
                "ENABLE_PREFIX_DELEGATION" | "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG" => "true",
                "ENABLE_SUBNET_DISCOVERY" => "false",
                _ => "1",
            };
            let one: BTreeMap<&str, &str> = [(*v, value)].into_iter().collect();
            let parsed: Result<WarmSettings, _> =
                serde_json::from_value(serde_json::to_value(one).unwrap());
            assert!(parsed.is_ok(), "{v}: {parsed:?}");
            assert_ne!(
                parsed.unwrap(),
                WarmSettings::default(),
                "{v} changed nothing"
            );
        }
    }
}
