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
//!     maxPodsExpression: "max_pods + 2"         # nodeadm's CEL expression (see max_pods_expr)
//!     maxPodsPolicy:                            # vpcnet extension
//!       useMaxPods: true
//!       customNetworking: false
//!       prefixDelegation: false
//!       maxENI: 4
//!       cap: auto                               # auto | recommended | none
//!   featureGates:
//!     InstanceIdNodeName: true                  # node named by instance ID, not private DNS name
//! ```
//! Unknown fields are errors (a typo must not silently drop a setting); nodeadm's
//! `containerd` and `instance` sections are accepted and ignored (with a warning).
//!
//! Several documents (the `application/node.eks.aws` parts of a MIME multi-part user data)
//! merge in order as nodeadm merges them ([`NodeConfig::merge`]): later values win, objects
//! (`kubelet.config`, `featureGates`) merge key by key, `kubelet.flags` accumulate.

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
    /// nodeadm feature gates: `InstanceIdNodeName` (node named by its instance ID) is
    /// honoured; others are accepted with a warning.
    #[serde(default)]
    pub feature_gates: std::collections::BTreeMap<String, bool>,
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
    /// nodeadm's CEL expression for max pods over `default_enis`, `ips_per_eni`, `max_pods`.
    #[serde(default)]
    pub max_pods_expression: Option<String>,
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
        nc.check(path)?;
        Ok(nc)
    }

    /// Parses every document (label, YAML text) and merges them in order (module docs).
    ///
    /// Errors: a document that does not parse on its own (named by its label); no documents.
    pub fn merge(docs: &[(String, String)]) -> Result<Self, BootstrapError> {
        let mut merged: Option<serde_json::Value> = None;
        for (label, text) in docs {
            Self::parse(label, text)?;
            let v: serde_json::Value =
                serde_yaml::from_str(text).map_err(|e| BootstrapError::NodeConfig {
                    path: label.clone(),
                    problem: e.to_string(),
                })?;
            match &mut merged {
                None => merged = Some(v),
                Some(m) => merge_value(m, v, &mut Vec::new()),
            }
        }
        let label = docs
            .iter()
            .map(|(l, _)| l.as_str())
            .collect::<Vec<_>>()
            .join(" + ");
        let merged = merged.ok_or_else(|| BootstrapError::NodeConfig {
            path: label.clone(),
            problem: "no NodeConfig document".into(),
        })?;
        let nc: NodeConfig =
            serde_json::from_value(merged).map_err(|e| BootstrapError::NodeConfig {
                path: label.clone(),
                problem: format!("the merged documents: {e}"),
            })?;
        nc.check(&label)?;
        Ok(nc)
    }

    fn check(&self, path: &str) -> Result<(), BootstrapError> {
        let nc = self;
        if nc.api_version != API_VERSION || nc.kind != "NodeConfig" {
            return Err(BootstrapError::NodeConfig {
                path: path.into(),
                problem: format!(
                    "apiVersion/kind is {}/{}; expected {API_VERSION}/NodeConfig",
                    nc.api_version, nc.kind
                ),
            });
        }
        Ok(())
    }
}

/// nodeadm's merge of `over` into `base` (mergo with override): objects key by key, null and
/// empty strings never override, `spec.kubelet.flags` appended, other arrays replaced.
fn merge_value(base: &mut serde_json::Value, over: serde_json::Value, path: &mut Vec<String>) {
    use serde_json::Value;
    match (base, over) {
        (_, Value::Null) => {}
        (_, Value::String(s)) if s.is_empty() => {}
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                path.push(k.clone());
                match b.get_mut(&k) {
                    Some(slot) => merge_value(slot, v, path),
                    None => {
                        b.insert(k, v);
                    }
                }
                path.pop();
            }
        }
        (Value::Array(b), Value::Array(o)) if path.as_slice() == ["spec", "kubelet", "flags"] => {
            b.extend(o)
        }
        (b, o) => *b = o,
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
    fn merges_like_nodeadm() {
        let a = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: a\n    cidr: 10.0.0.0/16\n  kubelet:\n    flags: [--v=2]\n    config: {maxPods: 10, featureGates: {A: true}}\n";
        let b = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: b\n    cidr: ''\n  kubelet:\n    flags: [--x=1]\n    config: {featureGates: {B: false}}\n  featureGates: {InstanceIdNodeName: true}\n";
        let nc = NodeConfig::merge(&[("a".into(), a.into()), ("b".into(), b.into())]).unwrap();
        assert_eq!(nc.spec.cluster.name.as_deref(), Some("b"));
        assert_eq!(nc.spec.cluster.cidr.as_deref(), Some("10.0.0.0/16"));
        assert_eq!(nc.spec.kubelet.flags, vec!["--v=2", "--x=1"]);
        let cfg = serde_json::Value::Object(nc.spec.kubelet.config.unwrap());
        assert_eq!(
            cfg,
            serde_json::json!({"maxPods": 10, "featureGates": {"A": true, "B": false}})
        );
        assert_eq!(nc.spec.feature_gates.get("InstanceIdNodeName"), Some(&true));
        // A part that is wrong on its own is named.
        let bad = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelt: {}\n";
        let e = NodeConfig::merge(&[("a".into(), a.into()), ("part 2".into(), bad.into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("part 2") && e.contains("kubelt"), "{e}");
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
