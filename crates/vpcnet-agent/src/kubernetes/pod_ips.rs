//! `ANNOTATE_POD_IP`: the pod annotation `vpc.amazonaws.com/pod-ips`, which policy engines
//! such as Calico read to learn a pod's address before kubelet reports `status.podIP`.
//!
//! The VPC CNI's meaning (v1.23.2, its ADD and DEL handlers): after an ADD has taken the pod's
//! address, and before the ADD is answered, the pod is annotated with that address as plain
//! text (`10.0.1.23`); a failed patch fails the ADD. A DEL that released an address sets the
//! annotation to `""` when it still names that address ("networking removed"), leaves it
//! alone otherwise; a pod that no longer exists is fine. vpcnet does the same, synchronously
//! as the VPC CNI does, with a bounded wait ([`ANNOTATE_TIMEOUT`]). Two differences, both
//! towards fewer failures: a pod already gone at ADD is not an error (it will never run), and
//! an annotation naming another address at DEL (the pod's newer sandbox) is left without
//! failing the DEL.
//!
//! The agent's service account needs `patch` (and `get`, for DEL) on `pods`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use tokio::sync::watch;

/// The annotation the VPC CNI writes.
pub const POD_IPS_ANNOTATION: &str = vpcnet_policy::k8s::POD_IPS_ANNOTATION;
/// Deadline of one annotation (the wait for the API client included). Together with
/// `VPCNET_ADD_IP_WAIT` (5 s by default) it stays within the plugin's 10 s `agentTimeout`.
pub const ANNOTATE_TIMEOUT: Duration = Duration::from_secs(4);
/// Attempts of a DEL's read-and-patch when the pod changed in between (409 Conflict).
const CONFLICT_ATTEMPTS: usize = 3;

/// Why a pod could not be annotated. Each message names the pod, the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum AnnotateError {
    /// No Kubernetes API server is configured, or its configuration is unusable.
    #[error(
        "ANNOTATE_POD_IP=true but no usable Kubernetes API server is configured (see \
         /v1/apiserver): set CLUSTER_ENDPOINT, or run the agent in a pod \
         (KUBERNETES_SERVICE_HOST), or unset ANNOTATE_POD_IP"
    )]
    NoApi,
    /// The API client has not connected yet.
    #[error(
        "pod {pod}: annotating {POD_IPS_ANNOTATION} needs the Kubernetes API, which has not \
         been reached within {waited:?} (see /v1/apiserver); the runtime retries"
    )]
    NotConnected { pod: String, waited: Duration },
    /// The API server refused or failed the call.
    #[error("pod {pod}: {what} {POD_IPS_ANNOTATION}: {source}{hint}")]
    Api {
        pod: String,
        what: &'static str,
        #[source]
        source: Box<kube::Error>,
        hint: &'static str,
    },
    /// No answer in time.
    #[error(
        "pod {pod}: {what} {POD_IPS_ANNOTATION}: no answer from the API server within {timeout:?}"
    )]
    Timeout {
        pod: String,
        what: &'static str,
        timeout: Duration,
    },
}

/// What an ADD's annotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Annotated {
    /// The pod carries the address.
    Patched,
    /// The pod no longer exists (deleted while its sandbox was being set up).
    PodGone,
}

/// What a DEL's annotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleared {
    /// The annotation named the released address and is now `""`.
    Cleared,
    /// The pod has no annotation, or it is already `""`: nothing to do.
    NotSet,
    /// The annotation names another address (a newer sandbox of the pod): left alone.
    OtherAddress(String),
    /// The pod no longer exists.
    PodGone,
}

/// The merge patch an ADD sends: the annotation set to `ip`.
pub fn add_patch(ip: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"annotations": {POD_IPS_ANNOTATION: ip}}})
}

/// What a DEL must do given the pod's annotations and the released address: `Ok(())` to
/// clear it ([`clear_patch`]), else why not.
pub fn on_release(
    annotations: Option<&BTreeMap<String, String>>,
    released: &str,
) -> Result<(), Cleared> {
    match annotations.and_then(|a| a.get(POD_IPS_ANNOTATION)) {
        None => Err(Cleared::NotSet),
        Some(v) if v.is_empty() => Err(Cleared::NotSet),
        Some(v) if v == released => Ok(()),
        Some(v) => Err(Cleared::OtherAddress(v.clone())),
    }
}

/// The merge patch a DEL sends: the annotation set to `""`, conditional on the pod's
/// `resourceVersion` (the API server answers 409 Conflict if the pod changed since it was
/// read).
pub fn clear_patch(resource_version: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {
        "resourceVersion": resource_version,
        "annotations": {POD_IPS_ANNOTATION: ""},
    }})
}

/// The hint added to an API error: the RBAC rule for a 403.
fn hint(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(s) if s.is_forbidden() => {
            "; the agent's ClusterRole needs `get` and `patch` on `pods` (apiGroups [\"\"]) \
             with ANNOTATE_POD_IP=true (docs/configuration.md, \"Kubernetes API\")"
        }
        _ => "",
    }
}

fn api_error(pod: &str, what: &'static str, e: kube::Error) -> AnnotateError {
    AnnotateError::Api {
        pod: pod.to_string(),
        what,
        hint: hint(&e),
        source: Box::new(e),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found())
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_conflict())
}

/// Waits (until `deadline`) for the API client; `clients` is `None` when none was ever
/// started.
pub async fn client(
    clients: Option<&watch::Receiver<Option<Client>>>,
    pod: &str,
    deadline: tokio::time::Instant,
    waited_from: tokio::time::Instant,
) -> Result<Client, AnnotateError> {
    let Some(rx) = clients else {
        return Err(AnnotateError::NoApi);
    };
    let mut rx = rx.clone();
    let waited = tokio::time::timeout_at(deadline, async {
        rx.wait_for(|c| c.is_some()).await.map(|c| c.clone())
    })
    .await;
    match waited {
        Ok(Ok(c)) => Ok(c.expect("waited for Some")),
        Ok(Err(_)) => Err(AnnotateError::NoApi),
        Err(_) => Err(AnnotateError::NotConnected {
            pod: pod.to_string(),
            waited: waited_from.elapsed(),
        }),
    }
}

/// ADD: sets the annotation of pod `namespace/name` to `ip` (one merge patch).
pub async fn annotate_added(
    client: Client,
    namespace: &str,
    name: &str,
    ip: &str,
    deadline: tokio::time::Instant,
) -> Result<Annotated, AnnotateError> {
    let pod = format!("{namespace}/{name}");
    let what = "setting";
    let api: Api<Pod> = Api::namespaced(client, namespace);
    let (params, patch) = (PatchParams::default(), Patch::Merge(add_patch(ip)));
    let call = api.patch(name, &params, &patch);
    match tokio::time::timeout_at(deadline, call).await {
        Ok(Ok(_)) => Ok(Annotated::Patched),
        Ok(Err(e)) if is_not_found(&e) => Ok(Annotated::PodGone),
        Ok(Err(e)) => Err(api_error(&pod, what, e)),
        Err(_) => Err(AnnotateError::Timeout {
            pod,
            what,
            timeout: ANNOTATE_TIMEOUT,
        }),
    }
}

/// DEL: sets the annotation of pod `namespace/name` to `""` when it names `released` (read,
/// then a merge patch conditional on what was read; retried on a conflict).
pub async fn clear_released(
    client: Client,
    namespace: &str,
    name: &str,
    released: &str,
    deadline: tokio::time::Instant,
) -> Result<Cleared, AnnotateError> {
    let pod = format!("{namespace}/{name}");
    let what = "clearing";
    let api: Api<Pod> = Api::namespaced(client, namespace);
    let timeout = |pod: String| AnnotateError::Timeout {
        pod,
        what,
        timeout: ANNOTATE_TIMEOUT,
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let current = match tokio::time::timeout_at(deadline, api.get_opt(name)).await {
            Ok(Ok(Some(p))) => p,
            Ok(Ok(None)) => return Ok(Cleared::PodGone),
            Ok(Err(e)) => return Err(api_error(&pod, what, e)),
            Err(_) => return Err(timeout(pod)),
        };
        if let Err(outcome) = on_release(current.metadata.annotations.as_ref(), released) {
            return Ok(outcome);
        }
        let rv = current.metadata.resource_version.unwrap_or_default();
        let (params, patch) = (PatchParams::default(), Patch::Merge(clear_patch(&rv)));
        let call = api.patch(name, &params, &patch);
        match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(_)) => return Ok(Cleared::Cleared),
            Ok(Err(e)) if is_not_found(&e) => return Ok(Cleared::PodGone),
            Ok(Err(e)) if is_conflict(&e) && attempt < CONFLICT_ATTEMPTS => continue,
            Ok(Err(e)) => return Err(api_error(&pod, what, e)),
            Err(_) => return Err(timeout(pod)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(v: &str) -> BTreeMap<String, String> {
        [
            (POD_IPS_ANNOTATION.to_string(), v.to_string()),
            ("other".to_string(), "x".to_string()),
        ]
        .into()
    }

    #[test]
    fn the_add_patch_sets_the_plain_address() {
        assert_eq!(
            add_patch("10.0.1.23").to_string(),
            r#"{"metadata":{"annotations":{"vpc.amazonaws.com/pod-ips":"10.0.1.23"}}}"#
        );
    }

    #[test]
    fn del_clears_only_the_released_address() {
        assert_eq!(on_release(Some(&ann("10.0.1.23")), "10.0.1.23"), Ok(()));
        assert_eq!(
            on_release(Some(&ann("10.0.1.99")), "10.0.1.23"),
            Err(Cleared::OtherAddress("10.0.1.99".into()))
        );
        assert_eq!(
            on_release(Some(&ann("")), "10.0.1.23"),
            Err(Cleared::NotSet)
        );
        assert_eq!(on_release(None, "10.0.1.23"), Err(Cleared::NotSet));
        assert_eq!(
            on_release(Some(&BTreeMap::new()), "10.0.1.23"),
            Err(Cleared::NotSet)
        );
        let p = clear_patch("42");
        assert_eq!(p["metadata"]["resourceVersion"], "42");
        assert_eq!(p["metadata"]["annotations"][POD_IPS_ANNOTATION], "");
    }

    #[test]
    fn a_forbidden_patch_names_the_rbac_rule() {
        let e = kube::Error::Api(Box::new(kube::core::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "pods \"web-1\" is forbidden".into(),
            ..Default::default()
        }));
        let msg = api_error("default/web-1", "setting", e).to_string();
        assert!(
            msg.starts_with("pod default/web-1: setting vpc.amazonaws.com/pod-ips: "),
            "{msg}"
        );
        assert!(msg.contains("`patch` on `pods`"), "{msg}");
        let gone = kube::Error::Api(Box::new(kube::core::Status {
            code: 404,
            reason: "NotFound".into(),
            ..Default::default()
        }));
        assert!(is_not_found(&gone));
        assert_eq!(hint(&gone), "");
    }

    #[tokio::test]
    async fn without_an_api_client_the_error_says_how_to_configure_one() {
        let now = tokio::time::Instant::now();
        let e = client(None, "default/p", now, now).await.err().unwrap();
        assert!(matches!(e, AnnotateError::NoApi));
        assert!(e.to_string().contains("CLUSTER_ENDPOINT"), "{e}");
        // A client task that ended without connecting (no API configured): the same.
        let (tx, rx) = watch::channel(None);
        drop(tx);
        let e = client(Some(&rx), "default/p", now + Duration::from_secs(1), now)
            .await
            .err()
            .unwrap();
        assert!(matches!(e, AnnotateError::NoApi), "{e}");
        // Not connected yet: bounded by the deadline.
        let (_tx, rx) = watch::channel(None);
        let e = client(Some(&rx), "default/p", now + Duration::from_millis(50), now)
            .await
            .err()
            .unwrap();
        assert!(
            matches!(e, AnnotateError::NotConnected { .. }) && e.to_string().contains("default/p"),
            "{e}"
        );
    }
}
