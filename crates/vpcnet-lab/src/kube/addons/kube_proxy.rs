//! kube-proxy as EKS installs it: a DaemonSet in `kube-system` on the host network,
//! privileged, `system-node-critical`, tolerating every taint, reading its kubeconfig from the
//! ConfigMap `kube-proxy` and its configuration from the ConfigMap `kube-proxy-config`, and
//! authenticating with the token of its ServiceAccount `kube-proxy`, bound to Kubernetes' own
//! `system:node-proxier` role (no client certificate, no admin kubeconfig).
//!
//! The objects it needs ([`config_objects`]) and the DaemonSet itself ([`daemonset`]) are
//! separate, so the lab can hold the DaemonSet back (a node booting without kube-proxy) and
//! create it later.

use serde_json::{json, Value};

use super::images::{KUBE_PROXY_PATH, KUBE_PROXY_REF};
use crate::kube::node::kube_proxy_configuration;

/// Namespace of the add-ons.
pub const NAMESPACE: &str = "kube-system";
/// Name of the DaemonSet, its ServiceAccount and its kubeconfig ConfigMap.
pub const NAME: &str = "kube-proxy";
/// Name of the ConfigMap holding the KubeProxyConfiguration.
pub const CONFIG_NAME: &str = "kube-proxy-config";
/// The pods' label (`k8s-app=kube-proxy`), for selecting them.
pub const SELECTOR: &str = "k8s-app=kube-proxy";
/// Where the pod's service-account token and CA are mounted (Kubernetes' fixed path).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn labels() -> Value {
    json!({"k8s-app": NAME, "eks.amazonaws.com/component": NAME})
}

/// The kubeconfig of the `kube-proxy` ConfigMap: the API server at `server` (its own address:
/// kube-proxy is what makes the `kubernetes` Service reachable), trusting the service account's
/// CA and sending its token.
pub fn kubeconfig(server: &str) -> String {
    let v = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default", "cluster": {
            "server": server,
            "certificate-authority": format!("{SERVICE_ACCOUNT_DIR}/ca.crt"),
        }}],
        "users": [{"name": "default", "user": {"tokenFile": format!("{SERVICE_ACCOUNT_DIR}/token")}}],
        "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}],
        "current-context": "default",
    });
    serde_yaml::to_string(&v).expect("YAML of JSON")
}

/// Everything the DaemonSet's pods need, without the DaemonSet: the ServiceAccount, its
/// binding to `system:node-proxier`, and the two ConfigMaps (kubeconfig for `server`, and the
/// lab's KubeProxyConfiguration, iptables mode, as the process-mode kube-proxy uses).
pub fn config_objects(server: &str) -> Vec<Value> {
    let meta = |name: &str| json!({"name": name, "namespace": NAMESPACE, "labels": labels()});
    let config = serde_yaml::to_string(&kube_proxy_configuration()).expect("YAML of JSON");
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME)}),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "vpcnet-lab:kube-proxy", "labels": labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:node-proxier"},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        }),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(NAME),
               "data": {"kubeconfig": kubeconfig(server)}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(CONFIG_NAME),
               "data": {"config": config}}),
    ]
}

/// The DaemonSet. The lab's image ([`KUBE_PROXY_REF`], imported on every node, never pulled);
/// node name from the downward API as `--hostname-override`; `/lib/modules` read-only as EKS
/// mounts it. EKS also mounts `/run/xtables.lock`: the image's iptables is the nf_tables
/// variant, which takes no xtables lock, and in the lab `/run` is the host's, where a
/// `FileOrCreate` host path would create a file, so it is left out.
pub fn daemonset() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels()},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": NAME}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "hostNetwork": true,
                    "serviceAccountName": NAME,
                    "tolerations": [{"operator": "Exists"}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                        ]}]}}},
                    "containers": [{
                        "name": NAME,
                        "image": KUBE_PROXY_REF,
                        "imagePullPolicy": "Never",
                        "command": [
                            KUBE_PROXY_PATH,
                            "--v=2",
                            "--config=/var/lib/kube-proxy-config/config",
                            "--hostname-override=$(NODE_NAME)",
                        ],
                        "env": [{"name": "NODE_NAME",
                                 "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "resources": {"requests": {"cpu": "100m"}},
                        "securityContext": {"privileged": true},
                        "volumeMounts": [
                            {"name": "kubeconfig", "mountPath": "/var/lib/kube-proxy/", "readOnly": true},
                            {"name": "config", "mountPath": "/var/lib/kube-proxy-config/", "readOnly": true},
                            {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": true},
                        ],
                    }],
                    "volumes": [
                        {"name": "kubeconfig", "configMap": {"name": NAME}},
                        {"name": "config", "configMap": {"name": CONFIG_NAME}},
                        {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}},
                    ],
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_uses_the_service_account_token_not_a_certificate() {
        let k: serde_yaml::Value =
            serde_yaml::from_str(&kubeconfig("https://10.0.0.9:6443")).unwrap();
        assert_eq!(
            k["clusters"][0]["cluster"]["server"],
            "https://10.0.0.9:6443"
        );
        let user = &k["users"][0]["user"];
        assert_eq!(user["tokenFile"], format!("{SERVICE_ACCOUNT_DIR}/token"));
        assert!(user.get("client-certificate-data").is_none());
        assert!(user.get("client-certificate").is_none());
    }

    #[test]
    fn objects_bind_the_service_account_to_node_proxier_and_carry_the_config() {
        let objs = config_objects("https://10.0.0.9:6443");
        let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRoleBinding",
                "ConfigMap",
                "ConfigMap"
            ]
        );
        assert_eq!(objs[1]["roleRef"]["name"], "system:node-proxier");
        assert_eq!(objs[1]["subjects"][0]["name"], NAME);
        let config: serde_yaml::Value =
            serde_yaml::from_str(objs[3]["data"]["config"].as_str().unwrap()).unwrap();
        assert_eq!(config["mode"], "iptables");
        assert!(
            config.get("hostnameOverride").is_none(),
            "the flag names the node"
        );
        assert_eq!(
            config["clientConnection"]["kubeconfig"],
            "/var/lib/kube-proxy/kubeconfig"
        );
    }

    #[test]
    fn daemonset_is_shaped_like_eks_kube_proxy() {
        let d = daemonset();
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["hostNetwork"], true);
        assert_eq!(pod["priorityClassName"], "system-node-critical");
        assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
        assert_eq!(pod["serviceAccountName"], NAME);
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["privileged"], true);
        assert_eq!(c["image"], KUBE_PROXY_REF);
        assert!(c["command"]
            .as_array()
            .unwrap()
            .contains(&json!("--hostname-override=$(NODE_NAME)")));
        // The token is the pod's own (automounted), not a file of the node.
        assert!(pod.get("automountServiceAccountToken").is_none());
    }
}
