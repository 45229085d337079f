//! `AWS_MANAGE_ENIS_NON_SCHEDULABLE=false` (the VPC CNI's default): while the agent's Node is
//! unschedulable the pool is left as it is. The VPC CNI (v1.23.2) reads its Node before each
//! pool growth and ENI release and, when the Node carries the taint
//! `node.kubernetes.io/unschedulable` with effect `NoSchedule` (which the node lifecycle
//! controller sets on a cordoned Node, `spec.unschedulable`), neither assigns addresses or
//! prefixes nor attaches a new ENI, and detaches no ENI; freeing surplus addresses and
//! prefixes goes on. A Node it cannot read counts as schedulable.
//!
//! Here a kube-rs watcher on the one Node (field selector `metadata.name`) keeps
//! [`crate::state::Shared::eni_management_paused`] current, logs each change and wakes the
//! reconciler, which filters its plans ([`allowed_while_paused`]). Until the Node has been
//! read, when it is deleted, and when no API server is reachable, ENIs are managed (as the
//! VPC CNI does when its read fails); a watch that fails after the first read keeps the last
//! known state while it retries.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::watch;
use vpcnet_ipam::Action;

use super::eniconfig_watch::WATCH_TIMEOUT_SECS;
use crate::state::Shared;

/// The taint the node lifecycle controller puts on a cordoned Node.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Whether `node` is unschedulable as the VPC CNI tells: it carries the taint
/// [`UNSCHEDULABLE_TAINT`] with effect `NoSchedule` (any value).
pub fn is_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|t| t.key == UNSCHEDULABLE_TAINT && t.effect == "NoSchedule")
        })
}

/// Whether the reconciler may execute `action` while ENI management is paused: only the
/// release of surplus addresses and prefixes (no growth, no ENI created or deleted).
pub fn allowed_while_paused(action: &Action) -> bool {
    matches!(
        action,
        Action::UnassignIps { .. } | Action::UnassignPrefixes { .. }
    )
}

/// Sets the pause (a change is logged and wakes the reconciler, so an uncordoned node grows
/// its pool at once).
pub fn set_paused(shared: &Shared, paused: bool, node: &str) {
    let was = shared.enis().set_management_paused(paused);
    shared
        .metrics()
        .set_eni_management_paused(u64::from(paused));
    if was == paused {
        return;
    }
    if paused {
        tracing::info!(
            node,
            "Node {node} is unschedulable (taint {UNSCHEDULABLE_TAINT}:NoSchedule): ENI management paused, no ENI or address is added and no ENI deleted until it is schedulable again (AWS_MANAGE_ENIS_NON_SCHEDULABLE=false; set it to true to manage ENIs anyway)"
        );
    } else {
        tracing::info!(node, "Node {node} is schedulable: ENI management resumed");
    }
    shared.pool_state().wake_reconciler();
}

/// The watch task: waits for the API client (a new client after a reconnect restarts the
/// watcher) and follows the Node `node` until the agent stops. Never returns an error.
pub async fn run(shared: Arc<Shared>, node: String, mut clients: watch::Receiver<Option<Client>>) {
    loop {
        let client = match clients.wait_for(|c| c.is_some()).await {
            Ok(c) => c.clone().expect("waited for Some"),
            Err(_) => {
                tracing::info!(node = %node, "no Kubernetes API server: ENIs are managed whether Node {node} is schedulable or not");
                set_paused(&shared, false, &node);
                return;
            }
        };
        tokio::select! {
            _ = follow(&shared, &client, &node) => {}
            r = clients.changed() => if r.is_err() {
                set_paused(&shared, false, &node);
                return;
            },
        }
    }
}

/// Follows the Node's taints; returns only if the watch stream ends.
async fn follow(shared: &Shared, client: &Client, node: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut events = watcher(
        nodes,
        watcher::Config::default()
            .fields(&format!("metadata.name={node}"))
            .timeout(WATCH_TIMEOUT_SECS),
    )
    .default_backoff()
    .boxed();
    // Whether the (re)list in progress found the Node unschedulable.
    let mut listing: Option<bool> = None;
    while let Some(ev) = events.next().await {
        match ev {
            Ok(watcher::Event::Init) => listing = Some(false),
            Ok(watcher::Event::InitApply(n)) => listing = Some(is_unschedulable(&n)),
            Ok(watcher::Event::InitDone) => {
                set_paused(shared, listing.take().unwrap_or(false), node)
            }
            Ok(watcher::Event::Apply(n)) => set_paused(shared, is_unschedulable(&n), node),
            Ok(watcher::Event::Delete(_)) => set_paused(shared, false, node),
            Err(e) => {
                shared.metrics().inc_k8s_watch_restart("Node");
                tracing::warn!(node, "watching Node {node} for cordoning: {e} (retrying with backoff; the last known state stays in force)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};

    fn node(taints: &[(&str, &str)], unschedulable: bool) -> Node {
        Node {
            spec: Some(NodeSpec {
                unschedulable: Some(unschedulable),
                taints: Some(
                    taints
                        .iter()
                        .map(|(k, e)| Taint {
                            key: k.to_string(),
                            effect: e.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_unschedulable_noschedule_taint_is_what_counts() {
        assert!(is_unschedulable(&node(
            &[(UNSCHEDULABLE_TAINT, "NoSchedule")],
            true
        )));
        // As the VPC CNI: the taint decides (the controller adds it shortly after cordon).
        assert!(!is_unschedulable(&node(&[], true)));
        assert!(!is_unschedulable(&node(
            &[(UNSCHEDULABLE_TAINT, "NoExecute")],
            true
        )));
        assert!(!is_unschedulable(&node(
            &[("node.kubernetes.io/not-ready", "NoSchedule")],
            false
        )));
        assert!(!is_unschedulable(&Node::default()));
    }

    #[test]
    fn only_surplus_release_runs_while_paused() {
        let eni = || "eni-1".to_string();
        assert!(allowed_while_paused(&Action::UnassignIps {
            eni_id: eni(),
            ips: vec!["10.0.0.5".parse().unwrap()],
        }));
        assert!(allowed_while_paused(&Action::UnassignPrefixes {
            eni_id: eni(),
            prefixes: vec!["10.0.0.16/28".parse().unwrap()],
        }));
        for a in [
            Action::AssignIps {
                eni_id: eni(),
                count: 1,
            },
            Action::AssignPrefixes {
                eni_id: eni(),
                count: 1,
            },
            Action::CreateEni {
                ips: 1,
                prefixes: 0,
                network_card: 0,
            },
            Action::DeleteEni { eni_id: eni() },
        ] {
            assert!(!allowed_while_paused(&a), "{a:?}");
        }
    }
}
