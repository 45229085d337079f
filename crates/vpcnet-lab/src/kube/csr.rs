//! Approving kubelet serving certificates, as EKS's managed control plane does: kubelet runs
//! with `serverTLSBootstrap: true` (vpcnet-bootstrap writes it, as the EKS AMI does) and asks
//! for its serving certificate with a CertificateSigningRequest (signer
//! `kubernetes.io/kubelet-serving`) that nothing in upstream Kubernetes approves. Until it is
//! approved, `kubectl exec` and `logs` fail with a TLS error. The lab runs this approver on the
//! control-plane host (`vpcnet lab csr-approver`, recorded and stopped like every lab process).

use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use super::kubectl::Kubectl;

/// Signer of kubelet serving certificates.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// Names of the pending CSRs in a `kubectl get csr -o json` list that a kubelet made for its
/// own serving certificate: signer [`KUBELET_SERVING`], requested by `system:node:<name>` in
/// group `system:nodes`, with no Approved or Denied condition yet.
pub fn approvable(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|c| c["spec"]["signerName"] == KUBELET_SERVING)
                .filter(|c| {
                    c["spec"]["username"]
                        .as_str()
                        .is_some_and(|u| u.starts_with("system:node:"))
                })
                .filter(|c| {
                    c["spec"]["groups"]
                        .as_array()
                        .is_some_and(|g| g.iter().any(|g| g == "system:nodes"))
                })
                .filter(|c| {
                    c["status"]["conditions"]
                        .as_array()
                        .is_none_or(|cs| cs.is_empty())
                })
                .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Approves kubelet serving CSRs every second, forever (errors are logged and retried).
pub fn run(kubectl: &Kubectl) -> Result<()> {
    loop {
        match kubectl.json(&["get", "csr"]) {
            Ok(list) => {
                for name in approvable(&list) {
                    match kubectl.run(&["certificate", "approve", &name]) {
                        Ok(_) => eprintln!("approved kubelet serving certificate request {name}"),
                        Err(e) => eprintln!("approving {name}: {e:#}"),
                    }
                }
            }
            Err(e) => eprintln!("listing CSRs: {e:#}"),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_pending_kubelet_serving_requests_of_nodes() {
        let csr = |name: &str, signer: &str, user: &str, cond: Value| {
            json!({"metadata": {"name": name}, "spec": {"signerName": signer, "username": user,
                "groups": ["system:nodes", "system:authenticated"]}, "status": cond})
        };
        let list = json!({"items": [
            csr("a", KUBELET_SERVING, "system:node:ip-1", json!({})),
            csr("b", KUBELET_SERVING, "system:node:ip-2", json!({"conditions": [{"type": "Approved"}]})),
            csr("c", "kubernetes.io/kube-apiserver-client-kubelet", "system:node:ip-3", json!({})),
            csr("d", KUBELET_SERVING, "mallory", json!({})),
        ]});
        assert_eq!(approvable(&list), vec!["a".to_string()]);
    }
}
