//! The declarative NodeConfig file, shaped like nodeadm's `node.eks.aws/v1alpha1` NodeConfig.
//!
//! ```yaml
//! apiVersion: node.eks.aws/v1alpha1
//! kind: NodeConfig
//! spec:
//!   cluster:
//!     name: my-cluster
//!     apiServerEndpoint: https://ABC.gr7.us-west-2.eks.amazonaws.com
//!     certificateAuthority: LS0tLS1CRUdJTi...   # base64 PEM
//!     cidr: 10.100.0.0/16                       # service CIDR, IPv4 or IPv6
//!     enableOutpost: false
//!     id: 0123abcd-...                          # required with enableOutpost
//!   kubelet:
//!     config: { shutdownGracePeriod: 30s }      # merged over the generated kubelet config
//!     flags: ["--node-labels=team=a"]           # extra kubelet flags
//!     maxPodsPolicy:                            # vpcnet extension
//!       useMaxPods: true
//!       customNetworking: false
//!       prefixDelegation: false
//!       maxENI: 4
//!       cap: auto                               # auto | recommended | none
//! ```
//! Unknown fields are errors (a typo must not silently drop a setting); nodeadm's
//! `containerd`, `instance` and `featureGates` sections are accepted and ignored.

use serde::Deserialize;

use crate::args::MaxPodsCap;
use crate::error::BootstrapError;

/// API version accepted in `apiVersion`.
pub const API_VERSION: &str = "node.eks.aws/v1alpha1";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeConfig {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: Option<serde_yaml::Value>,
    #[serde(default)]
    pub spec: NodeConfigSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeConfigSpec {
    #[serde(default)]
    pub cluster: ClusterDetails,
    #[serde(default)]
    pub kubelet: KubeletOptions,
    /// Accepted for nodeadm compatibility, ignored.
    #[serde(default)]
    pub containerd: Option<serde_yaml::Value>,
    /// Accepted for nodeadm compatibility, ignored.
    #[serde(default)]
    pub instance: Option<serde_yaml::Value>,
    /// Accepted for nodeadm compatibility, ignored.
    #[serde(default)]
    pub feature_gates: Option<serde_yaml::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterDetails {
    pub name: Option<String>,
    #[serde(rename = "apiServerEndpoint")]
    pub api_server_endpoint: Option<String>,
    /// Base64-encoded PEM.
    pub certificate_authority: Option<String>,
    /// Service CIDR (IPv4 or IPv6).
    pub cidr: Option<String>,
    pub enable_outpost: Option<bool>,
    pub id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletOptions {
    /// Kubelet configuration fields merged over the generated ones (objects merge key by key).
    #[serde(default)]
    pub config: Option<serde_json::Map<String, serde_json::Value>>,
    /// Extra kubelet flags.
    #[serde(default)]
    pub flags: Vec<String>,
    #[serde(default)]
    pub max_pods_policy: MaxPodsPolicy,
}

/// How max pods is computed (vpcnet's structured counterpart of nodeadm's
/// `maxPodsExpression`; field names follow max-pods-calculator.sh flags).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaxPodsPolicy {
    pub use_max_pods: Option<bool>,
    #[serde(default)]
    pub custom_networking: bool,
    #[serde(default)]
    pub prefix_delegation: bool,
    #[serde(rename = "maxENI")]
    pub max_eni: Option<u32>,
    pub cap: Option<MaxPodsCap>,
}

impl NodeConfig {
    /// Parses a NodeConfig from YAML text; `path` only labels errors.
    ///
    /// Errors: YAML syntax, unknown fields, wrong `apiVersion`/`kind`.
    pub fn parse(path: &str, text: &str) -> Result<Self, BootstrapError> {
        let nc: NodeConfig =
            serde_yaml::from_str(text).map_err(|e| BootstrapError::NodeConfig {
                path: path.into(),
                problem: e.to_string(),
            })?;
        if nc.api_version != API_VERSION || nc.kind != "NodeConfig" {
            return Err(BootstrapError::NodeConfig {
                path: path.into(),
                problem: format!(
                    "apiVersion/kind is {}/{}; expected {API_VERSION}/NodeConfig",
                    nc.api_version, nc.kind
                ),
            });
        }
        Ok(nc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_shape() {
        let nc = NodeConfig::parse(
            "t",
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: c\n    apiServerEndpoint: https://x\n    cidr: 10.0.0.0/16\n  kubelet:\n    flags: [--v=3]\n    maxPodsPolicy:\n      maxENI: 2\n      cap: none\n  containerd:\n    config: x\n",
        )
        .unwrap();
        assert_eq!(nc.spec.cluster.name.as_deref(), Some("c"));
        assert_eq!(nc.spec.kubelet.max_pods_policy.max_eni, Some(2));
        assert_eq!(nc.spec.kubelet.max_pods_policy.cap, Some(MaxPodsCap::None));
    }

    #[test]
    fn rejects_unknown_field_and_kind() {
        let e = NodeConfig::parse(
            "f.yaml",
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    nmae: c\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("nmae"), "{e}");
        let e = NodeConfig::parse("f.yaml", "apiVersion: v1\nkind: Pod\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected node.eks.aws/v1alpha1/NodeConfig"),
            "{e}"
        );
    }
}
