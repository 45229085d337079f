//! `ANNOTATE_POD_IP`: the pod's `vpc.amazonaws.com/pod-ips` annotation written before an ADD
//! is answered and cleared at DEL ([`crate::kubernetes::pod_ips`]).

use super::Backend;

/// An `ANNOTATE_POD_IP` call under way ([`Backend::annotation_call`]).
struct AnnotationCall {
    client: kube::Client,
    /// `namespace/name`, for messages.
    pod: String,
    t0: tokio::time::Instant,
    deadline: tokio::time::Instant,
}

impl Backend {
    /// The start of an `ANNOTATE_POD_IP` call on pod `ns/name`: its deadline
    /// ([`crate::kubernetes::pod_ips::ANNOTATE_TIMEOUT`] from now) and the API client, waited
    /// for until then. `None` for a pod without a name (not from kubelet): it is skipped.
    async fn annotation_call(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<AnnotationCall>, String> {
        use crate::kubernetes::pod_ips;
        if ns.is_empty() || name.is_empty() {
            return Ok(None);
        }
        let t0 = tokio::time::Instant::now();
        let deadline = t0 + pod_ips::ANNOTATE_TIMEOUT;
        let pod = format!("{ns}/{name}");
        let client = pod_ips::client(self.shared.kube().clients(), &pod, deadline, t0)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Some(AnnotationCall {
            client,
            pod,
            t0,
            deadline,
        }))
    }

    /// `ANNOTATE_POD_IP`: the pod's annotation set to `ip` before the ADD is answered
    /// ([`crate::kubernetes::pod_ips`]). A pod without a name (not from kubelet) is skipped.
    pub(super) async fn annotate_added(
        &self,
        ns: &str,
        name: &str,
        ip: &str,
    ) -> Result<(), String> {
        use crate::kubernetes::pod_ips::{self, Annotated};
        let Some(AnnotationCall {
            client,
            pod,
            t0,
            deadline,
        }) = self.annotation_call(ns, name).await?
        else {
            return Ok(());
        };
        match pod_ips::annotate_added(client, ns, name, ip, deadline).await {
            Ok(Annotated::Patched) => {
                tracing::debug!(pod = %pod, ip, elapsed = ?t0.elapsed(), "annotated {}", pod_ips::POD_IPS_ANNOTATION);
                Ok(())
            }
            Ok(Annotated::PodGone) => {
                tracing::info!(pod = %pod, ip, "pod not found while annotating {}: it was deleted, nothing to annotate", pod_ips::POD_IPS_ANNOTATION);
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// `ANNOTATE_POD_IP`: the pod's annotation set to `""` when it names the released `ip`.
    pub(super) async fn clear_released(
        &self,
        ns: &str,
        name: &str,
        ip: &str,
    ) -> Result<(), String> {
        use crate::kubernetes::pod_ips::{self, Cleared};
        let Some(AnnotationCall {
            client,
            pod,
            deadline,
            ..
        }) = self.annotation_call(ns, name).await?
        else {
            return Ok(());
        };
        match pod_ips::clear_released(client, ns, name, ip, deadline).await {
            Ok(Cleared::OtherAddress(other)) => {
                tracing::info!(pod = %pod, ip, annotation = %other, "{} names another address (a newer sandbox of the pod): left as it is", pod_ips::POD_IPS_ANNOTATION);
                Ok(())
            }
            Ok(outcome) => {
                tracing::debug!(pod = %pod, ip, ?outcome, "cleared {}", pod_ips::POD_IPS_ANNOTATION);
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }
}
