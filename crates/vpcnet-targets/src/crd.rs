//! The `TargetGroupBinding` resource (`targetgroupbindings.elbv2.k8s.aws`, version
//! `v1beta1`, namespaced), with the spec fields aws-load-balancer-controller defines, so
//! existing bindings work unchanged; its CRD is `charts/vpcnet-targets/crds/targetgroupbinding.yaml`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The readiness-gate condition type of binding `name`: pods listing it in
/// `spec.readinessGates` turn Ready only once the controller sets it True, which it does when
/// the pod's target is `healthy`, or `unused` in a target group no load balancer uses
/// ([`crate::core::usage`]) (aws-load-balancer-controller's name).
pub fn gate_condition(binding: &str) -> String {
    format!("target-health.elbv2.k8s.aws/{binding}")
}

/// The binding's status condition saying whether a load balancer uses its target group:
/// `False` (reason `NoLoadBalancer`) while none does, so readiness gates of its pods open
/// without a health check (policy: [`crate::core::usage`]); `True` (reason `InUse`) once one
/// does again. Absent until the controller has seen the target group unused.
pub const IN_USE_CONDITION: &str = "TargetGroupInUse";

/// `reason` of [`IN_USE_CONDITION`] for `in_use`.
pub fn in_use_reason(in_use: bool) -> &'static str {
    if in_use {
        "InUse"
    } else {
        "NoLoadBalancer"
    }
}

/// `spec` of a TargetGroupBinding.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "elbv2.k8s.aws",
    version = "v1beta1",
    kind = "TargetGroupBinding",
    plural = "targetgroupbindings",
    namespaced,
    status = "TargetGroupBindingStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct TargetGroupBindingSpec {
    /// ARN of the target group (`arn:aws:elasticloadbalancing:...:targetgroup/...`).
    #[serde(
        default,
        rename = "targetGroupARN",
        skip_serializing_if = "Option::is_none"
    )]
    pub target_group_arn: Option<String>,
    /// Name of the target group, instead of the ARN (not served by vpcnet-targets yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_group_name: Option<String>,
    /// `ip` (pod addresses, served) or `instance` (nodes; not served yet). None = `ip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_type: Option<String>,
    /// The Service whose endpoints are the targets.
    pub service_ref: ServiceRef,
    /// Nodes whose instances are targets (target type `instance` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// `ipv4` or `ipv6`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address_type: Option<String>,
    /// VPC of the target group.
    #[serde(default, rename = "vpcID", skip_serializing_if = "Option::is_none")]
    pub vpc_id: Option<String>,
}

/// `spec.serviceRef`: a Service of the binding's namespace and one of its ports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceRef {
    pub name: String,
    /// The Service port by number or by name.
    pub port: IntOrString,
}

impl Default for ServiceRef {
    fn default() -> Self {
        ServiceRef {
            name: String::new(),
            port: IntOrString::Int(0),
        }
    }
}

/// A label selector (`matchLabels`, `matchExpressions`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<serde_json::Value>,
}

/// `status`, written by the controller.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetGroupBindingStatus {
    /// `metadata.generation` of the spec last applied to the target group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`metav1.Condition`); vpcnet-targets writes [`IN_USE_CONDITION`] and keeps
    /// the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl TargetGroupBindingStatus {
    /// [`IN_USE_CONDITION`]'s status: Some(true) `True`, Some(false) `False`, None absent or
    /// `Unknown`.
    pub fn in_use(&self) -> Option<bool> {
        match self
            .conditions
            .iter()
            .find(|c| c.type_ == IN_USE_CONDITION)?
            .status
            .as_str()
        {
            "True" => Some(true),
            "False" => Some(false),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn an_aws_load_balancer_controller_binding_parses() {
        let b: TargetGroupBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "elbv2.k8s.aws/v1beta1", "kind": "TargetGroupBinding",
            "metadata": {"name": "web", "namespace": "default", "generation": 3},
            "spec": {"targetGroupARN": "arn:aws:elasticloadbalancing:us-east-1:1:targetgroup/web/1",
                     "targetType": "ip", "serviceRef": {"name": "web", "port": 80}},
            "status": {"observedGeneration": 2, "conditions": [
                {"type": "TargetGroupInUse", "status": "False", "reason": "NoLoadBalancer",
                 "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        assert_eq!(
            b.spec.target_group_arn.as_deref(),
            Some("arn:aws:elasticloadbalancing:us-east-1:1:targetgroup/web/1")
        );
        assert_eq!(b.spec.service_ref.port, IntOrString::Int(80));
        let status = b.status.unwrap();
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(status.in_use(), Some(false));
        assert_eq!(TargetGroupBindingStatus::default().in_use(), None);
        let named: TargetGroupBindingSpec = serde_json::from_value(serde_json::json!({
            "serviceRef": {"name": "web", "port": "http"}}))
        .unwrap();
        assert_eq!(named.service_ref.port, IntOrString::String("http".into()));
        assert_eq!(gate_condition("web"), "target-health.elbv2.k8s.aws/web");
    }

    /// The CRD file names the same resource as the Rust type, with the status subresource
    /// the controller writes.
    #[test]
    fn the_crd_file_matches_the_rust_type() {
        let text = include_str!("../../../charts/vpcnet-targets/crds/targetgroupbinding.yaml");
        let crd: serde_json::Value = serde_yaml::from_str(text).unwrap();
        let spec = &crd["spec"];
        assert_eq!(spec["group"], TargetGroupBinding::group(&()).as_ref());
        assert_eq!(
            spec["names"]["kind"],
            TargetGroupBinding::kind(&()).as_ref()
        );
        assert_eq!(
            spec["names"]["plural"],
            TargetGroupBinding::plural(&()).as_ref()
        );
        assert_eq!(spec["scope"], "Namespaced");
        let v = &spec["versions"][0];
        assert_eq!(v["name"], TargetGroupBinding::version(&()).as_ref());
        assert!(v["subresources"]["status"].is_object());
        let s = &v["schema"]["openAPIV3Schema"]["properties"];
        for f in [
            "targetGroupARN",
            "targetType",
            "serviceRef",
            "nodeSelector",
            "vpcID",
        ] {
            assert!(s["spec"]["properties"][f].is_object(), "{f}");
        }
        assert_eq!(
            s["status"]["properties"]["observedGeneration"]["type"],
            "integer"
        );
        // The API server prunes status fields the schema does not list.
        let c = &s["status"]["properties"]["conditions"];
        assert_eq!(c["type"], "array");
        for f in ["type", "status", "reason", "message", "lastTransitionTime"] {
            assert!(c["items"]["properties"][f].is_object(), "conditions[].{f}");
        }
    }
}
