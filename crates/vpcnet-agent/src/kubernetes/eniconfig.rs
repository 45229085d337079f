//! The ENIConfig resource (custom networking) and the pure choice of a node's ENIConfig.
//!
//! Resource: `eniconfigs.crd.k8s.amazonaws.com`, version `v1alpha1`, kind `ENIConfig`,
//! cluster-scoped, as the VPC CNI defines it (its CRD is `charts/vpcnet/crds/eniconfig.yaml`):
//! `spec.subnet` (subnet ID, required) and `spec.securityGroups` (security group IDs).
//!
//! Choice per node, as the VPC CNI makes it: the Node annotation `k8s.amazonaws.com/eniConfig`
//! (key from `ENI_CONFIG_ANNOTATION_DEF`), else the Node label named by `ENI_CONFIG_LABEL_DEF`
//! (e.g. `topology.kubernetes.io/zone` for one ENIConfig per zone), else the ENIConfig named
//! `default`. Unlike the VPC CNI, a malformed annotation or label value (empty, not an object
//! name) is an error naming the node, the key and the fix, never skipped silently.

use std::collections::BTreeMap;
use std::fmt;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Annotations or labels of a Node: key → value.
pub type NodeMeta = BTreeMap<String, String>;

/// The ENIConfig chosen when neither the annotation nor the label names one.
pub const DEFAULT_ENICONFIG: &str = "default";

/// `spec` of an ENIConfig. Both fields default to empty when absent, so one odd object never
/// breaks the list of all of them; [`resolve`] rejects an empty subnet by name.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[kube(
    group = "crd.k8s.amazonaws.com",
    version = "v1alpha1",
    kind = "ENIConfig",
    root = "EniConfig",
    plural = "eniconfigs",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct EniConfigSpec {
    /// ID of the subnet new secondary ENIs are created in (`subnet-...`).
    #[serde(default)]
    pub subnet: String,
    /// IDs of the security groups of those ENIs (`sg-...`); empty = the VPC's default group,
    /// as EC2 `CreateNetworkInterface` does without groups.
    #[serde(default)]
    pub security_groups: Vec<String>,
}

/// The Node metadata keys the choice reads: `ENI_CONFIG_ANNOTATION_DEF` and
/// `ENI_CONFIG_LABEL_DEF`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectionKeys {
    /// Annotation key (default `k8s.amazonaws.com/eniConfig`).
    pub annotation: String,
    /// Label key (default `k8s.amazonaws.com/eniConfig`).
    pub label: String,
}

impl Default for SelectionKeys {
    fn default() -> Self {
        SelectionKeys {
            annotation: "k8s.amazonaws.com/eniConfig".into(),
            label: "k8s.amazonaws.com/eniConfig".into(),
        }
    }
}

/// How the node's ENIConfig was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectedBy {
    /// The Node annotation with this key.
    Annotation(String),
    /// The Node label with this key.
    Label(String),
    /// Neither: the ENIConfig named [`DEFAULT_ENICONFIG`].
    Default,
}

impl fmt::Display for SelectedBy {
    /// `annotation <key>`, `label <key>` or `default`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectedBy::Annotation(k) => write!(f, "annotation {k}"),
            SelectedBy::Label(k) => write!(f, "label {k}"),
            SelectedBy::Default => f.write_str("default"),
        }
    }
}

/// The name of the node's ENIConfig and how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// ENIConfig name.
    pub name: String,
    /// Where the name came from.
    pub by: SelectedBy,
}

/// A Node annotation or label that names an ENIConfig with a value that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Node {node}: {kind} {key}={value:?} is not a valid ENIConfig name ({problem}); set it to \
     the name of an existing ENIConfig (lowercase letters, digits, '-' and '.', at most 253 \
     characters, starting and ending with a letter or digit){}",
    if *kind == "annotation" {
        ", or remove the annotation to choose by label or the ENIConfig named default"
    } else {
        ", or remove the label to use the ENIConfig named default"
    }
)]
pub struct SelectionError {
    /// The Node.
    pub node: String,
    /// `annotation` or `label`.
    pub kind: &'static str,
    /// The annotation or label key.
    pub key: String,
    /// The value found.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Why `name` cannot be the name of a cluster-scoped object (a DNS subdomain, RFC 1123, as
/// the API server requires of CRD objects): `None` when it can.
pub fn invalid_object_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("empty".into());
    }
    if name.len() > 253 {
        return Some(format!("{} characters, more than 253", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Some(format!("contains {c:?}"));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge(name.chars().next()) || !edge(name.chars().last()) {
        return Some("must start and end with a letter or digit".into());
    }
    if name.split('.').any(str::is_empty) {
        return Some("has an empty part between dots".into());
    }
    None
}

/// The node's ENIConfig name from its annotations and labels: the annotation `keys.annotation`
/// beats the label `keys.label`, which beats [`DEFAULT_ENICONFIG`]. A present but malformed
/// value is an error (it is not skipped in favour of the next source).
pub fn select(
    node: &str,
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    keys: &SelectionKeys,
) -> Result<Selection, SelectionError> {
    let check = |kind: &'static str, key: &str, value: &str| match invalid_object_name(value) {
        None => Ok(value.to_string()),
        Some(problem) => Err(SelectionError {
            node: node.to_string(),
            kind,
            key: key.to_string(),
            value: value.to_string(),
            problem,
        }),
    };
    if let Some(v) = annotations.get(&keys.annotation) {
        return Ok(Selection {
            name: check("annotation", &keys.annotation, v)?,
            by: SelectedBy::Annotation(keys.annotation.clone()),
        });
    }
    if let Some(v) = labels.get(&keys.label) {
        return Ok(Selection {
            name: check("label", &keys.label, v)?,
            by: SelectedBy::Label(keys.label.clone()),
        });
    }
    Ok(Selection {
        name: DEFAULT_ENICONFIG.into(),
        by: SelectedBy::Default,
    })
}

/// The node's valid ENIConfig: where its secondary ENIs go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniConfigChoice {
    /// ENIConfig name.
    pub name: String,
    /// How it was chosen.
    pub by: SelectedBy,
    /// `spec.subnet`, never empty.
    pub subnet: String,
    /// `spec.securityGroups`.
    pub security_groups: Vec<String>,
}

/// Why a node has no valid ENIConfig. The `reason` strings are those of the Node condition,
/// the Event and `/v1/eniconfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// The Kubernetes API has not been reached (yet), or its first list is not complete.
    ApiUnavailable(String),
    /// The agent's Node (`MY_NODE_NAME`) is not registered, or `MY_NODE_NAME` is unset.
    NodeNotFound(String),
    /// The annotation or label value cannot be an ENIConfig name.
    InvalidSelection(SelectionError),
    /// The chosen ENIConfig does not exist.
    NotFound(Selection),
    /// The chosen ENIConfig exists but cannot be used (empty `spec.subnet`).
    Invalid {
        selection: Selection,
        problem: String,
    },
    /// Listing or watching failed before the first complete list (e.g. the CRD is missing
    /// or the agent may not list ENIConfigs).
    WatchFailed(String),
}

impl Unresolved {
    /// CamelCase reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Unresolved::ApiUnavailable(_) => "APIUnavailable",
            Unresolved::NodeNotFound(_) => "NodeNotFound",
            Unresolved::InvalidSelection(_) => "InvalidSelection",
            Unresolved::NotFound(_) => "ENIConfigNotFound",
            Unresolved::Invalid { .. } => "InvalidENIConfig",
            Unresolved::WatchFailed(_) => "WatchFailed",
        }
    }

    /// The chosen ENIConfig's name, when the choice got that far.
    pub fn name(&self) -> Option<&Selection> {
        match self {
            Unresolved::NotFound(s) | Unresolved::Invalid { selection: s, .. } => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for Unresolved {
    /// What is wrong and how to fix it; always says that no ENI is created meanwhile.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unresolved::ApiUnavailable(why) => write!(
                f,
                "the node's ENIConfig is not known yet: {why}; custom networking creates no ENI until it is (the addresses the node has keep serving)"
            )?,
            Unresolved::NodeNotFound(why) => write!(f, "{why}")?,
            Unresolved::InvalidSelection(e) => write!(f, "{e}")?,
            Unresolved::NotFound(s) => write!(
                f,
                "ENIConfig {name:?} (chosen by {by}) does not exist: create it (kind ENIConfig, \
                 apiVersion crd.k8s.amazonaws.com/v1alpha1, spec.subnet and \
                 spec.securityGroups for this node's zone){hint}",
                name = s.name,
                by = s.by,
                hint = match &s.by {
                    SelectedBy::Annotation(k) =>
                        format!(", or set the Node annotation {k} to an existing ENIConfig"),
                    SelectedBy::Label(k) =>
                        format!(", or annotate the Node with an existing ENIConfig's name (the annotation beats the label {k})"),
                    SelectedBy::Default => ", or annotate or label the Node with an existing ENIConfig's name (ENI_CONFIG_ANNOTATION_DEF, ENI_CONFIG_LABEL_DEF)".into(),
                }
            )?,
            Unresolved::Invalid { selection, problem } => write!(
                f,
                "ENIConfig {:?} (chosen by {}) cannot be used: {problem}",
                selection.name, selection.by
            )?,
            Unresolved::WatchFailed(why) => write!(
                f,
                "cannot list the Node and the ENIConfigs: {why}; install the ENIConfig CRD (charts/vpcnet/crds/eniconfig.yaml) and let the agent's service account get, list and watch nodes and eniconfigs.crd.k8s.amazonaws.com"
            )?,
        }
        if !matches!(self, Unresolved::ApiUnavailable(_)) {
            f.write_str("; until then no ENI is created (no fallback to the node's subnet) and pods beyond the addresses the node has stay ContainerCreating")?;
        }
        Ok(())
    }
}

/// The node's ENIConfig from the Node's annotations and labels (`None`: the Node is not
/// registered) and the ENIConfigs by name: [`select`], then the ENIConfig must exist and have
/// a non-empty `spec.subnet`.
pub fn resolve(
    node_name: &str,
    node: Option<(&NodeMeta, &NodeMeta)>,
    configs: &BTreeMap<String, EniConfigSpec>,
    keys: &SelectionKeys,
) -> Result<EniConfigChoice, Unresolved> {
    let Some((annotations, labels)) = node else {
        return Err(Unresolved::NodeNotFound(format!(
            "Node {node_name} (MY_NODE_NAME) is not registered: the ENIConfig is chosen by the Node's annotation or label once kubelet has registered it"
        )));
    };
    let selection =
        select(node_name, annotations, labels, keys).map_err(Unresolved::InvalidSelection)?;
    let Some(spec) = configs.get(&selection.name) else {
        return Err(Unresolved::NotFound(selection));
    };
    if spec.subnet.trim().is_empty() {
        let problem = format!(
            "spec.subnet is empty: set spec.subnet of ENIConfig {:?} to the ID of a subnet (subnet-...) in the node's availability zone",
            selection.name
        );
        return Err(Unresolved::Invalid { selection, problem });
    }
    Ok(EniConfigChoice {
        name: selection.name,
        by: selection.by,
        subnet: spec.subnet.trim().to_string(),
        security_groups: spec.security_groups.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn zone_keys() -> SelectionKeys {
        SelectionKeys {
            label: "topology.kubernetes.io/zone".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_annotation_beats_the_label_which_beats_default() {
        let k = zone_keys();
        let ann = map(&[("k8s.amazonaws.com/eniConfig", "pods-b")]);
        let lab = map(&[("topology.kubernetes.io/zone", "us-east-1a")]);
        let s = select("n1", &ann, &lab, &k).unwrap();
        assert_eq!(s.name, "pods-b");
        assert_eq!(
            s.by,
            SelectedBy::Annotation("k8s.amazonaws.com/eniConfig".into())
        );
        let s = select("n1", &map(&[]), &lab, &k).unwrap();
        assert_eq!(s.name, "us-east-1a");
        assert_eq!(s.by.to_string(), "label topology.kubernetes.io/zone");
        let s = select("n1", &map(&[]), &map(&[("other", "x")]), &k).unwrap();
        assert_eq!(
            s,
            Selection {
                name: "default".into(),
                by: SelectedBy::Default
            }
        );
    }

    #[test]
    fn the_keys_are_the_configured_ones() {
        let k = SelectionKeys {
            annotation: "example.com/eni".into(),
            label: "example.com/eni-label".into(),
        };
        // The default keys are not read when others are configured.
        let defaults = map(&[("k8s.amazonaws.com/eniConfig", "ignored")]);
        assert_eq!(
            select("n", &defaults, &defaults, &k).unwrap().name,
            "default"
        );
        let s = select("n", &map(&[("example.com/eni", "a")]), &map(&[]), &k).unwrap();
        assert_eq!(s.name, "a");
    }

    #[test]
    fn a_malformed_annotation_is_an_error_naming_node_key_and_fix() {
        let k = zone_keys();
        let lab = map(&[("topology.kubernetes.io/zone", "us-east-1a")]);
        for bad in ["", "Pods_B", "-a", "a..b", &"a".repeat(254)] {
            let e = select(
                "ip-10-0-1-5",
                &map(&[("k8s.amazonaws.com/eniConfig", bad)]),
                &lab,
                &k,
            )
            .unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("Node ip-10-0-1-5"), "{msg}");
            assert!(
                msg.contains("annotation k8s.amazonaws.com/eniConfig"),
                "{msg}"
            );
            assert!(
                msg.contains("set it to the name of an existing ENIConfig"),
                "{msg}"
            );
            assert_eq!(e.kind, "annotation");
        }
        // A malformed label value is an error too, not a silent `default`.
        let e = select(
            "n1",
            &map(&[]),
            &map(&[("topology.kubernetes.io/zone", "")]),
            &k,
        )
        .unwrap_err();
        assert!(e.to_string().contains("label topology.kubernetes.io/zone"));
    }

    #[test]
    fn object_names_follow_rfc_1123_subdomains() {
        for ok in ["default", "us-east-1a", "a.b-c", "0"] {
            assert_eq!(invalid_object_name(ok), None, "{ok}");
        }
        for bad in ["", "A", "a_b", "a.", ".a", "a b"] {
            assert!(invalid_object_name(bad).is_some(), "{bad}");
        }
    }

    fn cfg(subnet: &str, sgs: &[&str]) -> EniConfigSpec {
        EniConfigSpec {
            subnet: subnet.into(),
            security_groups: sgs.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn resolution_needs_the_node_an_existing_eniconfig_and_a_subnet() {
        let k = SelectionKeys::default();
        let (ann, lab) = (map(&[]), map(&[]));
        let mut configs = BTreeMap::new();
        let e = resolve("n1", None, &configs, &k).unwrap_err();
        assert_eq!(e.reason(), "NodeNotFound");
        let e = resolve("n1", Some((&ann, &lab)), &configs, &k).unwrap_err();
        assert_eq!(e.reason(), "ENIConfigNotFound");
        let msg = e.to_string();
        assert!(
            msg.contains("ENIConfig \"default\" (chosen by default) does not exist"),
            "{msg}"
        );
        assert!(msg.contains("no fallback to the node's subnet"), "{msg}");
        configs.insert("default".to_string(), cfg(" ", &["sg-1"]));
        let e = resolve("n1", Some((&ann, &lab)), &configs, &k).unwrap_err();
        assert_eq!(e.reason(), "InvalidENIConfig");
        let msg = e.to_string();
        assert!(
            msg.contains("ENIConfig \"default\"") && msg.contains("spec.subnet is empty"),
            "{msg}"
        );
        configs.insert("default".to_string(), cfg("subnet-1", &["sg-1", "sg-2"]));
        let c = resolve("n1", Some((&ann, &lab)), &configs, &k).unwrap();
        assert_eq!(
            c,
            EniConfigChoice {
                name: "default".into(),
                by: SelectedBy::Default,
                subnet: "subnet-1".into(),
                security_groups: vec!["sg-1".into(), "sg-2".into()],
            }
        );
        let bad = map(&[("k8s.amazonaws.com/eniConfig", "")]);
        let e = resolve("n1", Some((&bad, &lab)), &configs, &k).unwrap_err();
        assert_eq!(e.reason(), "InvalidSelection");
    }

    #[test]
    fn the_spec_reads_the_vpc_cni_field_names() {
        let o: EniConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "crd.k8s.amazonaws.com/v1alpha1",
            "kind": "ENIConfig",
            "metadata": {"name": "us-east-1a"},
            "spec": {"subnet": "subnet-0a", "securityGroups": ["sg-1"]},
            "status": {}
        }))
        .unwrap();
        assert_eq!(o.spec, cfg("subnet-0a", &["sg-1"]));
        let o: EniConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "crd.k8s.amazonaws.com/v1alpha1",
            "kind": "ENIConfig",
            "metadata": {"name": "odd"},
            "spec": {}
        }))
        .unwrap();
        assert_eq!(o.spec, EniConfigSpec::default());
    }

    /// The CRD file the lab installs and operators apply names the same resource as the Rust
    /// type the agent watches.
    #[test]
    fn the_crd_file_matches_the_rust_type() {
        let text = include_str!("../../../../charts/vpcnet/crds/eniconfig.yaml");
        let crd: serde_json::Value = serde_yaml::from_str(text).unwrap();
        let spec = &crd["spec"];
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        assert_eq!(spec["group"], EniConfig::group(&()).as_ref());
        assert_eq!(spec["names"]["kind"], EniConfig::kind(&()).as_ref());
        assert_eq!(spec["names"]["plural"], EniConfig::plural(&()).as_ref());
        assert_eq!(
            crd["metadata"]["name"],
            format!("{}.{}", EniConfig::plural(&()), EniConfig::group(&()))
        );
        assert_eq!(spec["scope"], "Cluster");
        // Cluster-scoped in Rust too (checked by the compiler).
        fn cluster_scoped<T: Resource<Scope = k8s_openapi::ClusterResourceScope>>() {}
        cluster_scoped::<EniConfig>();
        let versions = spec["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1);
        assert_eq!(versions[0]["name"], EniConfig::version(&()).as_ref());
        let schema = &versions[0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["x-kubernetes-preserve-unknown-fields"], true);
        let s = &schema["properties"]["spec"];
        assert_eq!(s["required"], serde_json::json!(["subnet"]));
        assert_eq!(s["properties"]["subnet"]["type"], "string");
        assert_eq!(s["properties"]["securityGroups"]["type"], "array");
        assert_eq!(s["properties"]["securityGroups"]["items"]["type"], "string");
        assert_eq!(schema["properties"]["status"]["type"], "object");
    }
}
