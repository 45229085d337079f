//! Kubernetes objects the lab creates on its cluster, as manifests for `kubectl apply`.

/// The user the cloud controller manager's client certificate names.
pub const CCM_USER: &str = "system:cloud-controller-manager";
/// Namespace and name of the node agent's service account (the VPC CNI's `aws-node`).
pub const AGENT_SERVICE_ACCOUNT: (&str, &str) = ("kube-system", "aws-node");

/// The ENIConfig CustomResourceDefinition (custom networking), the file operators apply:
/// `charts/vpcnet/crds/eniconfig.yaml`.
pub const ENICONFIG_CRD: &str = include_str!("../../../../charts/vpcnet/crds/eniconfig.yaml");
/// Its name, for `kubectl wait`.
pub const ENICONFIG_CRD_NAME: &str = "eniconfigs.crd.k8s.amazonaws.com";

/// The cloud controller manager's binding: it runs off-cluster with a client certificate; bound
/// to `cluster-admin` in the lab.
pub fn cloud_controller() -> String {
    format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: vpcnet-lab:cloud-controller-manager
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: "{CCM_USER}"}}
"#
    )
}

/// The lab's base objects: [`cloud_controller`], and for agents the lab runs as processes
/// (with the chart install, the chart brings its own) the node agent's service account with the
/// permissions the VPC CNI's `aws-node` ClusterRole grants for what vpcnet reads and writes:
/// Nodes (read, and patch for conditions and labels), Pods (read, and patch when
/// `annotate_pod_ip`: the agents run with `ANNOTATE_POD_IP=true`, for which the VPC CNI's chart
/// adds the same verb), ENIConfigs (read), Events (write).
pub fn base(annotate_pod_ip: bool) -> String {
    format!("{}---\n{}", cloud_controller(), agent(annotate_pod_ip))
}

/// The node agent's service account, ClusterRole and binding (see [`base`]).
pub fn agent(annotate_pod_ip: bool) -> String {
    let (ns, sa) = AGENT_SERVICE_ACCOUNT;
    let pod_verbs = if annotate_pod_ip {
        "get, list, watch, patch"
    } else {
        "get, list, watch"
    };
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: {sa}, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {sa}
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch, patch, update]
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods]
  verbs: [{pod_verbs}]
- apiGroups: [crd.k8s.amazonaws.com]
  resources: [eniconfigs]
  verbs: [get, list, watch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {sa}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {sa}}}
subjects:
- {{kind: ServiceAccount, name: {sa}, namespace: {ns}}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_manifests_parse_as_yaml_documents() {
        for annotate in [false, true] {
            let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&base(annotate))
                .map(|d| serde::Deserialize::deserialize(d).unwrap())
                .collect();
            assert_eq!(docs.len(), 4);
            assert_eq!(docs[1]["metadata"]["name"], "aws-node");
            assert_eq!(docs[3]["subjects"][0]["namespace"], "kube-system");
            let pods = docs[2]["rules"]
                .as_sequence()
                .unwrap()
                .iter()
                .find(|r| r["resources"][0] == "pods")
                .unwrap();
            let patch = serde_yaml::Value::from("patch");
            assert_eq!(
                pods["verbs"].as_sequence().unwrap().contains(&patch),
                annotate,
                "pods patch only with ANNOTATE_POD_IP=true"
            );
        }
    }

    #[test]
    fn the_eniconfig_crd_is_the_repository_file() {
        let crd: serde_yaml::Value = serde_yaml::from_str(ENICONFIG_CRD).unwrap();
        assert_eq!(crd["metadata"]["name"], ENICONFIG_CRD_NAME);
        assert_eq!(crd["spec"]["names"]["kind"], "ENIConfig");
    }
}
