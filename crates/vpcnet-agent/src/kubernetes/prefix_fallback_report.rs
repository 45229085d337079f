//! Prefix delegation's fallback to secondary /32 addresses
//! ([`crate::reconciler::prefix_fallback`]) reported on the agent's Node: the condition
//! [`CONDITION_TYPE`] (`False`, reason `InsufficientCidrBlocks`, while the node falls back;
//! `True`, reason `PrefixesAssigned`, once a prefix is assigned again) and Events (Warning on
//! the fallback, Normal on the return). A node that never fell back gets no condition; one
//! whose Node still carries it from before a restart has it brought up to date.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::Client;
use tokio::sync::watch;
use vpcnet_ipam::PrefixFallback;

use super::node_report::{Condition, NodeReport};
use crate::reconciler::prefix_fallback::FIX;
use crate::state::Shared;

/// The Node condition vpcnet owns for prefix delegation.
pub const CONDITION_TYPE: &str = "vpcnet.io/PrefixBlocksAvailable";
/// How long a failed read of the Node waits before the next attempt.
const RETRY: Duration = Duration::from_secs(10);

/// The condition for the pool's fallback state.
pub fn condition(fallback: Option<&PrefixFallback>) -> Condition {
    match fallback {
        Some(_) => Condition {
            status: "False",
            reason: "InsufficientCidrBlocks",
            message: format!(
                "no free /28 prefix in the subnet (EC2 InsufficientCidrBlocks): pods get \
                 secondary IPs instead, and prefixes are tried again after VPCNET_PREFIX_RETRY \
                 (2 minutes by default), then after waits doubling up to 16 times that; to \
                 keep prefixes, {FIX}"
            ),
        },
        None => Condition {
            status: "True",
            reason: "PrefixesAssigned",
            message: "the subnet has free /28 prefixes again: the node is back on prefixes, \
                      returning its secondary IPs as their pods go"
                .into(),
        },
    }
}

/// The report task: waits for the API client, then follows the pool's fallback state until
/// the agent stops. Never returns an error.
pub async fn run(shared: Arc<Shared>, node: String, mut clients: watch::Receiver<Option<Client>>) {
    let Ok(client) = clients.wait_for(|c| c.is_some()).await.map(|c| c.clone()) else {
        return;
    };
    let client = client.expect("waited for Some");
    let mut report = NodeReport::new(client.clone(), &node, CONDITION_TYPE, "AssignPrefixes");
    let mut changes = shared.kube().prefix_fallback();
    let nodes: Api<Node> = Api::all(client);
    let mut first = true;
    loop {
        let state = *changes.borrow_and_update();
        let n = loop {
            match nodes.get(&node).await {
                Ok(n) => break n,
                Err(e) => {
                    tracing::warn!(node = %node, "reading Node {node} to report prefix delegation: {e} (retrying in {RETRY:?})");
                    tokio::time::sleep(RETRY).await;
                }
            }
        };
        let has_condition = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == CONDITION_TYPE));
        if state.is_some() || has_condition || !first {
            report.report(&n, &condition(state.as_ref())).await;
        }
        first = false;
        if changes.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_condition_says_what_the_node_does_and_the_fix() {
        let f = PrefixFallback {
            since_ms: 0,
            failures: 1,
            retry_at_ms: 120_000,
        };
        let c = condition(Some(&f));
        assert_eq!((c.status, c.reason), ("False", "InsufficientCidrBlocks"));
        assert!(
            c.message.contains("create-subnet-cidr-reservation"),
            "{}",
            c.message
        );
        let later = PrefixFallback {
            failures: 3,
            retry_at_ms: 999_000,
            ..f
        };
        assert_eq!(
            condition(Some(&later)),
            c,
            "one Event per fallback, not per retry"
        );
        assert_eq!(condition(None).status, "True");
    }
}
