//! Kubelet's own configuration files: the kubelet config JSON (the EKS AMI's defaults per
//! kubelet version, NodeConfig overrides merged in) and the kubelet kubeconfig. Pure.

use serde_json::{json, Map, Value};

use crate::node_files::{CA_PATH, CONTAINERD_SOCKET};
use crate::version::KubeletVersion;

/// kubelet-config.json before NodeConfig `kubelet.config` is merged in: the EKS AMI's
/// settings for kubelet version `v`.
pub(crate) fn base_kubelet_config(v: KubeletVersion) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("apiVersion".into(), json!("kubelet.config.k8s.io/v1beta1"));
    m.insert("kind".into(), json!("KubeletConfiguration"));
    m.insert("address".into(), json!("0.0.0.0"));
    m.insert(
        "authentication".into(),
        json!({
            "anonymous": {"enabled": false},
            "webhook": {"cacheTTL": "2m0s", "enabled": true},
            "x509": {"clientCAFile": CA_PATH},
        }),
    );
    m.insert(
        "authorization".into(),
        json!({"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"}}),
    );
    m.insert("cgroupDriver".into(), json!("systemd"));
    m.insert("cgroupRoot".into(), json!("/"));
    m.insert("clusterDomain".into(), json!("cluster.local"));
    if v >= KubeletVersion::new(1, 27, 0) {
        m.insert("containerRuntimeEndpoint".into(), json!(CONTAINERD_SOCKET));
    }
    if v >= KubeletVersion::new(1, 22, 0) && v < KubeletVersion::new(1, 27, 0) {
        // Kubelets before 1.27 default to 5/10, too low with API priority and fairness.
        m.insert("kubeAPIQPS".into(), json!(10));
        m.insert("kubeAPIBurst".into(), json!(20));
    }
    let mut gates = json!({"RotateKubeletServerCertificate": true});
    // nodeadm's defaults for newer kubelets (EKS enables these).
    if v >= KubeletVersion::new(1, 33, 0) {
        gates["DynamicResourceAllocation"] = json!(true);
    }
    if v >= KubeletVersion::new(1, 34, 0) {
        gates["MutableCSINodeAllocatableCount"] = json!(true);
        m.insert("shutdownGracePeriod".into(), json!("2m30s"));
        m.insert("shutdownGracePeriodCriticalPods".into(), json!("30s"));
    }
    m.insert("featureGates".into(), gates);
    // Verbosity lives in the config (not a --v flag), so NodeConfig kubelet.config can set it.
    m.insert("logging".into(), json!({"verbosity": 2}));
    m.insert("hairpinMode".into(), json!("hairpin-veth"));
    m.insert("protectKernelDefaults".into(), json!(true));
    m.insert("readOnlyPort".into(), json!(0));
    m.insert("serializeImagePulls".into(), json!(false));
    m.insert("serverTLSBootstrap".into(), json!(true));
    m.insert(
        "tlsCipherSuites".into(),
        json!([
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            "TLS_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_RSA_WITH_AES_256_GCM_SHA384",
        ]),
    );
    m
}

/// Merges `over` into `base`: objects key by key, anything else replaces; `null` deletes.
pub(crate) fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    b.remove(k);
                } else if let Some(slot) = b.get_mut(k) {
                    merge(slot, v);
                } else {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Pretty JSON with keys sorted at every level (stable whatever serde_json's map feature).
pub(crate) fn to_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let mut s = serde_json::to_string_pretty(&sorted(v)).expect("JSON values serialize");
    s.push('\n');
    s
}

/// The kubelet kubeconfig: the cluster's endpoint and CA, credentials from
/// `aws eks get-token --cluster-name <cluster> --region <region>`.
pub(crate) fn kubeconfig(endpoint: &str, cluster: &str, region: &str) -> String {
    // Field order matters for readers; build the YAML through serde so values are quoted safely.
    #[derive(serde::Serialize)]
    struct Kubeconfig<'a> {
        #[serde(rename = "apiVersion")]
        api_version: &'a str,
        kind: &'a str,
        clusters: Value,
        contexts: Value,
        #[serde(rename = "current-context")]
        current_context: &'a str,
        users: Value,
    }
    let k = Kubeconfig {
        api_version: "v1",
        kind: "Config",
        clusters: json!([{"name": "kubernetes", "cluster": {"certificate-authority": CA_PATH, "server": endpoint}}]),
        contexts: json!([{"name": "kubelet", "context": {"cluster": "kubernetes", "user": "kubelet"}}]),
        current_context: "kubelet",
        users: json!([{"name": "kubelet", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster, "--region", region],
        }}}]),
    };
    serde_yaml::to_string(&k).expect("kubeconfig serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_rules() {
        let mut b = json!({"a": {"x": 1, "y": 2}, "b": [1], "c": 3});
        merge(
            &mut b,
            &json!({"a": {"y": 5}, "b": [2, 3], "c": null, "d": true}),
        );
        assert_eq!(b, json!({"a": {"x": 1, "y": 5}, "b": [2, 3], "d": true}));
    }
}
