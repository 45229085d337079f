//! Which plugins the install step puts on the node: exactly those the agent's conflist can
//! chain (`vpcnet-cni-config`): `vpcnet-cni` and `portmap` always, `bandwidth` with
//! `ENABLE_BANDWIDTH_PLUGIN=true`, `tuning` with `DISABLE_POD_V6=true`.

use crate::flags::{bool_setting, BadBool};

/// vpcnet's plugin.
pub const VPCNET_CNI: &str = "vpcnet-cni";

/// The settings that decide the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Chain {
    /// `ENABLE_BANDWIDTH_PLUGIN`
    pub bandwidth: bool,
    /// `DISABLE_POD_V6`
    pub disable_pod_v6: bool,
}

impl Chain {
    /// Reads `ENABLE_BANDWIDTH_PLUGIN` and `DISABLE_POD_V6` (both default false).
    pub fn from_env(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, BadBool> {
        Ok(Self {
            bandwidth: bool_setting(lookup, "ENABLE_BANDWIDTH_PLUGIN", false)?,
            disable_pod_v6: bool_setting(lookup, "DISABLE_POD_V6", false)?,
        })
    }

    /// The plugin binaries to install, in the conflist's order.
    pub fn binaries(&self) -> Vec<&'static str> {
        let mut b = vec![VPCNET_CNI, "portmap"];
        if self.bandwidth {
            b.push("bandwidth");
        }
        if self.disable_pod_v6 {
            b.push("tuning");
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portmap_always_bandwidth_and_tuning_when_asked() {
        let none = |_: &str| None;
        assert_eq!(
            Chain::from_env(&none).unwrap().binaries(),
            ["vpcnet-cni", "portmap"]
        );
        let both = |n: &str| {
            matches!(n, "ENABLE_BANDWIDTH_PLUGIN" | "DISABLE_POD_V6").then(|| "true".to_string())
        };
        assert_eq!(
            Chain::from_env(&both).unwrap().binaries(),
            ["vpcnet-cni", "portmap", "bandwidth", "tuning"]
        );
        let bad = |n: &str| (n == "ENABLE_BANDWIDTH_PLUGIN").then(|| "on".to_string());
        assert!(Chain::from_env(&bad).is_err());
    }
}
