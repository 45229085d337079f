//! The VPC CNI settings that decide a node's address footprint, read by their variable names
//! (as in the chart's `env:` values: numbers and booleans may be written as strings).

use serde::{Deserialize, Deserializer, Serialize};
use vpcnet_ipam::{subnet_role, WarmConfig};
use vpcnet_limits::InstanceLimits;

use crate::subnets::SubnetSpec;
use crate::PlanError;

/// The warm-pool settings of the fleet. Every field is a VPC CNI variable; a variable the
/// planner does not know is refused, never ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmSettings {
    /// `WARM_ENI_TARGET` (default 1).
    #[serde(rename = "WARM_ENI_TARGET", default, deserialize_with = "count")]
    pub warm_eni_target: Option<u32>,
    /// `WARM_IP_TARGET` (0 or unset: not used).
    #[serde(rename = "WARM_IP_TARGET", default, deserialize_with = "count")]
    pub warm_ip_target: Option<u32>,
    /// `MINIMUM_IP_TARGET` (0 or unset: not used).
    #[serde(rename = "MINIMUM_IP_TARGET", default, deserialize_with = "count")]
    pub minimum_ip_target: Option<u32>,
    /// `WARM_PREFIX_TARGET` (default 1 in prefix mode).
    #[serde(rename = "WARM_PREFIX_TARGET", default, deserialize_with = "count")]
    pub warm_prefix_target: Option<u32>,
    /// `ENABLE_PREFIX_DELEGATION`: /28 prefixes instead of secondary addresses (Nitro types).
    #[serde(
        rename = "ENABLE_PREFIX_DELEGATION",
        default,
        deserialize_with = "flag"
    )]
    pub enable_prefix_delegation: bool,
    /// `MAX_ENI`: cap on attached ENIs, the primary included.
    #[serde(rename = "MAX_ENI", default, deserialize_with = "count")]
    pub max_eni: Option<u32>,
    /// `AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG`: pods on secondary ENIs in the ENIConfig's subnet
    /// of the node's zone (the fleet's `eni_configs`) only.
    #[serde(
        rename = "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG",
        default,
        deserialize_with = "flag"
    )]
    pub custom_network: bool,
    /// `ENABLE_SUBNET_DISCOVERY` (default true): new ENIs go to the eligible subnet of the
    /// node's zone with the most free addresses.
    #[serde(
        rename = "ENABLE_SUBNET_DISCOVERY",
        default,
        deserialize_with = "opt_flag"
    )]
    pub enable_subnet_discovery: Option<bool>,
    /// `CLUSTER_NAME`: subnets tagged for other clusters are not discovered.
    #[serde(rename = "CLUSTER_NAME", default)]
    pub cluster_name: Option<String>,
}

impl WarmSettings {
    /// Whether subnet discovery is on (its default is true).
    pub fn subnet_discovery(&self) -> bool {
        self.enable_subnet_discovery.unwrap_or(true) && !self.custom_network
    }

    /// Whether pods get addresses of a node's primary ENI in `node_subnet`: not under custom
    /// networking, nor with subnet discovery when the subnet is tagged
    /// `kubernetes.io/role/cni=0` (as the agent decides at start).
    pub fn primary_for_pods(&self, node_subnet: &SubnetSpec) -> bool {
        let excluded = self.subnet_discovery() && subnet_role::role(&node_subnet.tags) == "0";
        !self.custom_network && !excluded
    }

    /// The IPAM core's settings for one instance type, as the agent derives them.
    /// `primary_for_pods`: false under custom networking or when the node's subnet is
    /// tagged `kubernetes.io/role/cni=0`.
    pub fn warm_config(
        &self,
        limits: &InstanceLimits,
        primary_for_pods: bool,
    ) -> Result<WarmConfig, PlanError> {
        let mut c = WarmConfig::for_limits(limits);
        c.warm_eni_target = self.warm_eni_target.unwrap_or(1);
        c.warm_ip_target = self.warm_ip_target.filter(|n| *n > 0);
        c.minimum_ip_target = self.minimum_ip_target.filter(|n| *n > 0);
        c.warm_prefix_target = self.warm_prefix_target.filter(|n| *n > 0).unwrap_or(1);
        c.prefix_delegation = self.enable_prefix_delegation;
        c.max_eni = self.max_eni.filter(|n| *n > 0);
        c.primary_eni_for_pods = primary_for_pods;
        c.validate().map_err(|e| PlanError::Settings {
            instance_type: limits.instance_type.clone(),
            message: e.to_string(),
        })?;
        if c.prefix_delegation && !limits.supports_prefix_delegation() {
            return Err(PlanError::Settings {
                instance_type: limits.instance_type.clone(),
                message: "ENABLE_PREFIX_DELEGATION=true needs a Nitro instance type: use one, or unset ENABLE_PREFIX_DELEGATION".into(),
            });
        }
        Ok(c)
    }
}

/// A number written as a number or a string; `""` is unset.
#[derive(Deserialize)]
#[serde(untagged)]
enum Text {
    Num(i64),
    Bool(bool),
    Str(String),
}

fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    use serde::de::Error;
    let n = match Text::deserialize(d)? {
        Text::Num(n) => n,
        Text::Str(s) if s.trim().is_empty() => return Ok(None),
        Text::Str(s) => s
            .trim()
            .parse()
            .map_err(|_| D::Error::custom(format!("{s:?} is not a whole number")))?,
        Text::Bool(b) => return Err(D::Error::custom(format!("{b} is not a whole number"))),
    };
    if n < 0 {
        return Ok(None);
    }
    u32::try_from(n)
        .map(Some)
        .map_err(|_| D::Error::custom(format!("{n} is too large")))
}

fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(opt_flag(d)?.unwrap_or(false))
}

fn opt_flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    use serde::de::Error;
    match Text::deserialize(d)? {
        Text::Bool(b) => Ok(Some(b)),
        Text::Str(s) if s.trim().is_empty() => Ok(None),
        Text::Str(s) => match s.trim() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            other => Err(D::Error::custom(format!(
                "{other:?} is not a boolean: write true or false"
            ))),
        },
        Text::Num(n) => Err(D::Error::custom(format!(
            "{n} is not a boolean: write true or false"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<WarmSettings, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn numbers_and_flags_as_the_chart_writes_them() {
        let s = parse(r#"{"WARM_IP_TARGET":"5","MINIMUM_IP_TARGET":10,"ENABLE_PREFIX_DELEGATION":"true","WARM_ENI_TARGET":""}"#).unwrap();
        assert_eq!(s.warm_ip_target, Some(5));
        assert_eq!(s.minimum_ip_target, Some(10));
        assert!(s.enable_prefix_delegation);
        assert_eq!(s.warm_eni_target, None);
        assert!(s.subnet_discovery());
    }

    #[test]
    fn unknown_or_bad_values_are_refused() {
        let e = parse(r#"{"WARM_IP_TARGT":"5"}"#).unwrap_err();
        assert!(e.contains("WARM_IP_TARGT"), "{e}");
        let e = parse(r#"{"WARM_IP_TARGET":"five"}"#).unwrap_err();
        assert!(e.contains("not a whole number"), "{e}");
        let e = parse(r#"{"ENABLE_PREFIX_DELEGATION":"yes"}"#).unwrap_err();
        assert!(e.contains("write true or false"), "{e}");
    }

    #[test]
    fn zero_targets_are_unset_as_in_the_agent() {
        let s = parse(r#"{"WARM_IP_TARGET":0,"MINIMUM_IP_TARGET":"0"}"#).unwrap();
        let c = s
            .warm_config(vpcnet_limits::lookup("m5.large").unwrap(), true)
            .unwrap();
        assert_eq!((c.warm_ip_target, c.minimum_ip_target), (None, None));
    }

    #[test]
    fn prefix_delegation_needs_nitro() {
        let s = parse(r#"{"ENABLE_PREFIX_DELEGATION":true}"#).unwrap();
        let e = s
            .warm_config(vpcnet_limits::lookup("m4.large").unwrap(), true)
            .unwrap_err();
        assert!(e.to_string().contains("Nitro"), "{e}");
    }
}
