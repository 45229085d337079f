//! A problem reported on the agent's Node where an operator looks: a Node condition owned by
//! vpcnet (`False` with reason and message while the problem lasts, `True` once it is gone)
//! and Events (a Warning each time the problem changes, a Normal when it is over). Used for
//! the node's ENIConfig ([`super::eniconfig_watch`]) and prefix delegation's fallback
//! ([`super::prefix_fallback_report`]). Failures are logged; nothing here blocks IPAM.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

/// Deadline of one status patch or Event.
const REPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// One state of a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `True` (all is well) or `False` (the problem, said by reason and message).
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// The condition `type_` and its Events for one Node.
pub struct NodeReport {
    client: Client,
    node: String,
    recorder: Recorder,
    /// The condition type, e.g. `vpcnet.io/ENIConfigResolved`.
    type_: &'static str,
    /// The Events' `action`, e.g. `ResolveENIConfig`.
    action: &'static str,
    /// (reason, message) of the last Event sent, so each problem is sent once.
    last_event: Option<(String, String)>,
}

impl NodeReport {
    pub fn new(client: Client, node: &str, type_: &'static str, action: &'static str) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "vpcnet-agent".into(),
                instance: Some(node.to_string()),
            },
        );
        NodeReport {
            client,
            node: node.to_string(),
            recorder,
            type_,
            action,
            last_event: None,
        }
    }

    /// Brings the Node's condition to `cond` (patched only when it differs, so the Node
    /// update this causes is a no-op next time) and sends an Event when the problem changes:
    /// Warning while `False`, Normal when `True` after a Warning.
    pub async fn report(&mut self, node: &Node, cond: &Condition) {
        let current = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == self.type_));
        let up_to_date = current.is_some_and(|c| {
            c.status == cond.status
                && c.reason.as_deref() == Some(cond.reason)
                && c.message.as_deref() == Some(cond.message.as_str())
        });
        if !up_to_date {
            self.patch(current, cond).await;
        }
        let key = (cond.reason.to_string(), cond.message.clone());
        let event = if cond.status == "False" {
            (self.last_event.as_ref() != Some(&key)).then_some(EventType::Warning)
        } else {
            self.last_event
                .as_ref()
                .is_some_and(|(r, _)| r != cond.reason)
                .then_some(EventType::Normal)
        };
        let Some(type_) = event else {
            return;
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(self.node.clone()),
            uid: node.metadata.uid.clone(),
            ..Default::default()
        };
        let ev = Event {
            type_,
            reason: cond.reason.into(),
            note: Some(cond.message.clone()),
            action: self.action.into(),
            secondary: None,
        };
        let reason = cond.reason;
        match tokio::time::timeout(REPORT_TIMEOUT, self.recorder.publish(&ev, &reference)).await {
            Ok(Ok(())) => self.last_event = Some(key),
            Ok(Err(e)) => tracing::warn!(node = %self.node, "sending the {reason} Event: {e}"),
            Err(_) => {
                tracing::warn!(node = %self.node, "sending the {reason} Event: no answer within {REPORT_TIMEOUT:?}")
            }
        }
    }

    async fn patch(
        &self,
        current: Option<&k8s_openapi::api::core::v1::NodeCondition>,
        cond: &Condition,
    ) {
        let now = crate::clock::wall_now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let transition = match current {
            Some(c) if c.status == cond.status => c
                .last_transition_time
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_else(|| now.clone()),
            _ => now.clone(),
        };
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": self.type_,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": transition,
        }]}});
        let api: Api<Node> = Api::all(self.client.clone());
        let type_ = self.type_;
        match tokio::time::timeout(
            REPORT_TIMEOUT,
            api.patch_status(
                &self.node,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            ),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(node = %self.node, "setting the Node condition {type_}: {e}")
            }
            Err(_) => {
                tracing::warn!(node = %self.node, "setting the Node condition {type_}: no answer within {REPORT_TIMEOUT:?}")
            }
        }
    }
}
