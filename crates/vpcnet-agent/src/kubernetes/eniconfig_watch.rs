//! The node's ENIConfig, watched: a kube-rs watcher on the agent's Node (by name,
//! `MY_NODE_NAME`) and one on all ENIConfigs keep the resolved choice ([`resolve`]) in a
//! `tokio::sync::watch` channel ([`EniConfigTracked`]), which the reconciler reads for the
//! placement of new ENIs and introspection shows (`/v1/eniconfig`).
//!
//! While no valid ENIConfig is resolved the problem is reported where an operator looks: a
//! Warning Event on the Node (reason = [`Unresolved::reason`]), the Node condition
//! [`CONDITION_TYPE`] (owned by vpcnet: `False` with reason and message, `True` once
//! resolved), the metric `vpcnet_eniconfig_resolved`, introspection and `vpcnet inspect
//! eniconfig`. Nothing here ever stops the agent or blocks IPAM.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::watch;

use super::eniconfig::{resolve, EniConfig, EniConfigChoice, SelectionKeys, Unresolved};
use super::node_report::{Condition, NodeReport};
use crate::clock::now_ms;
use crate::metrics::Metrics;

/// The Node condition vpcnet owns for custom networking.
pub const CONDITION_TYPE: &str = "vpcnet.io/ENIConfigResolved";
/// `timeoutSeconds` of every watch: the server ends it then and it is resumed (not an error).
pub const WATCH_TIMEOUT_SECS: u32 = 290;

/// The node's ENIConfig: resolved, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EniConfigStatus {
    /// New ENIs go to this subnet with these security groups.
    Resolved(EniConfigChoice),
    /// No ENI is created; the reason says why.
    Unresolved(Unresolved),
}

/// What the channel holds: the status, since when, and how long the last wait for a valid
/// ENIConfig took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniConfigTracked {
    pub status: EniConfigStatus,
    /// When `status` began, ms since the Unix epoch.
    pub since_ms: u64,
    /// Ms the node spent unresolved before its last resolution (from the agent's start or
    /// the loss of the previous ENIConfig).
    pub last_wait_ms: Option<u64>,
    /// Why EC2 (or the check before the call) refused the resolved ENIConfig for the last new
    /// ENI: its subnet unknown, in another zone than the node, or full, or a security group
    /// unknown; EC2's message with the ENIConfig's name and the fix. Set by the reconciler
    /// ([`crate::reconciler::placement::record_outcome`]), cleared by the next ENI created
    /// with this ENIConfig or by another choice. Reported like an unresolved ENIConfig
    /// (reason [`REJECTED`]).
    pub placement_error: Option<String>,
}

/// Reason (Node condition, Event, `/v1/eniconfig`) while EC2 refuses the resolved
/// ENIConfig's subnet or security groups.
pub const REJECTED: &str = "ENIConfigRejected";

impl EniConfigTracked {
    /// The state at the agent's start: unresolved until the API answers.
    pub fn initial(now_ms: u64) -> Self {
        EniConfigTracked {
            status: EniConfigStatus::Unresolved(Unresolved::ApiUnavailable(
                "the Kubernetes API has not been reached yet".into(),
            )),
            since_ms: now_ms,
            last_wait_ms: None,
            placement_error: None,
        }
    }

    /// The resolved choice, if any.
    pub fn choice(&self) -> Option<&EniConfigChoice> {
        match &self.status {
            EniConfigStatus::Resolved(c) => Some(c),
            EniConfigStatus::Unresolved(_) => None,
        }
    }

    /// `/v1/eniconfig` for `node`.
    pub fn doc(&self, node: Option<&str>) -> vpcnet_introspection::EniConfigDoc {
        use vpcnet_introspection::{EniConfigDoc, EniConfigState};
        let mut d = EniConfigDoc {
            node: node.map(str::to_string),
            since_ms: Some(self.since_ms),
            last_wait_ms: self.last_wait_ms,
            ..Default::default()
        };
        match &self.status {
            EniConfigStatus::Resolved(c) => {
                d.state = EniConfigState::Resolved;
                d.name = Some(c.name.clone());
                d.selected_by = Some(c.by.to_string());
                d.subnet = Some(c.subnet.clone());
                d.security_groups = c.security_groups.clone();
                if let Some(e) = &self.placement_error {
                    d.reason = Some(REJECTED.to_string());
                    d.message = Some(e.clone());
                }
            }
            EniConfigStatus::Unresolved(u) => {
                d.state = if matches!(u, Unresolved::ApiUnavailable(_)) {
                    EniConfigState::Waiting
                } else {
                    EniConfigState::Unresolved
                };
                if let Some(s) = u.name() {
                    d.name = Some(s.name.clone());
                    d.selected_by = Some(s.by.to_string());
                }
                d.reason = Some(u.reason().to_string());
                d.message = Some(u.to_string());
            }
        }
        d
    }
}

/// Publishes `status` when it differs from the current one (updating `since_ms` and, on a
/// resolution after a wait, `last_wait_ms`) and sets the metric. Returns whether it changed.
pub fn publish(
    tx: &watch::Sender<EniConfigTracked>,
    metrics: &Metrics,
    status: EniConfigStatus,
    now_ms: u64,
) -> bool {
    metrics.set_eniconfig_resolved(u64::from(matches!(status, EniConfigStatus::Resolved(_))));
    tx.send_if_modified(|t| {
        if t.status == status {
            return false;
        }
        let was_unresolved = matches!(t.status, EniConfigStatus::Unresolved(_));
        match &status {
            EniConfigStatus::Resolved(c) => {
                if was_unresolved {
                    let waited = now_ms.saturating_sub(t.since_ms);
                    t.last_wait_ms = Some(waited);
                    tracing::info!(eniconfig = %c.name, subnet = %c.subnet, security_groups = ?c.security_groups, waited_ms = waited, "ENIConfig {} (chosen by {}) resolved after {waited} ms: new ENIs go to {} with security groups {:?}", c.name, c.by, c.subnet, c.security_groups);
                } else {
                    tracing::info!(eniconfig = %c.name, subnet = %c.subnet, security_groups = ?c.security_groups, "ENIConfig changed to {} (chosen by {}): new ENIs go to {} with security groups {:?}; existing ENIs stay as they are", c.name, c.by, c.subnet, c.security_groups);
                }
            }
            EniConfigStatus::Unresolved(u) => {
                tracing::warn!(reason = u.reason(), "custom networking: {u}");
            }
        }
        // Unresolved → unresolved for another reason keeps the start of the wait.
        if !(was_unresolved && matches!(status, EniConfigStatus::Unresolved(_))) {
            t.since_ms = now_ms;
        }
        // Another choice: whether EC2 accepts it is unknown until its first ENI.
        t.placement_error = None;
        t.status = status;
        true
    })
}

/// The watch task: waits for the API client of [`super::client::run`] (a new client after a
/// reconnect restarts the watchers), then watches the Node and the ENIConfigs until the
/// agent stops. Never returns an error; every problem becomes an [`Unresolved`].
pub async fn run(
    node_name: Option<String>,
    keys: SelectionKeys,
    mut clients: watch::Receiver<Option<Client>>,
    tx: watch::Sender<EniConfigTracked>,
    metrics: std::sync::Arc<Metrics>,
) {
    let unresolved = |u| publish(&tx, &metrics, EniConfigStatus::Unresolved(u), now_ms());
    unresolved(Unresolved::ApiUnavailable(
        "the Kubernetes API has not been reached yet".into(),
    ));
    let Some(node) = node_name else {
        unresolved(Unresolved::NodeNotFound(
            "MY_NODE_NAME is not set: set it from the downward API (fieldRef spec.nodeName) in the agent's DaemonSet, custom networking chooses the ENIConfig by the Node".into(),
        ));
        return;
    };
    loop {
        let client = match clients.wait_for(|c| c.is_some()).await {
            Ok(c) => c.clone().expect("waited for Some"),
            Err(_) => {
                unresolved(Unresolved::ApiUnavailable(
                    "no usable Kubernetes API server is configured (CLUSTER_ENDPOINT or the in-cluster kubernetes Service; see /v1/apiserver): custom networking needs it to read the ENIConfig".into(),
                ));
                return;
            }
        };
        tokio::select! {
            _ = watch_node(&client, &node, &keys, &tx, &metrics) => {}
            r = clients.changed() => if r.is_err() { return },
        }
    }
}

/// One watched item.
enum Seen {
    Node(Box<Result<watcher::Event<Node>, watcher::Error>>),
    Config(Box<Result<watcher::Event<EniConfig>, watcher::Error>>),
    /// The channel changed (a placement error set or cleared, or this task's own publish).
    Tracked,
}

/// A watched collection rebuilt by the watcher's (re)list: `Init` starts a new list,
/// `InitApply` fills it, `InitDone` swaps it in; `Apply`/`Delete` change the current one.
struct Mirror<T> {
    current: BTreeMap<String, T>,
    listing: Option<BTreeMap<String, T>>,
    synced: bool,
}

impl<T> Mirror<T> {
    fn new() -> Self {
        Mirror {
            current: BTreeMap::new(),
            listing: None,
            synced: false,
        }
    }

    /// Applies `ev` (objects keyed by `name`); returns whether the current view changed.
    fn apply<K>(&mut self, ev: watcher::Event<K>, f: impl Fn(K) -> (String, T)) -> bool {
        match ev {
            watcher::Event::Init => {
                self.listing = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(o) => {
                let (k, v) = f(o);
                self.listing.get_or_insert_with(BTreeMap::new).insert(k, v);
                false
            }
            watcher::Event::InitDone => {
                self.current = self.listing.take().unwrap_or_default();
                self.synced = true;
                true
            }
            watcher::Event::Apply(o) => {
                let (k, v) = f(o);
                self.current.insert(k, v);
                true
            }
            watcher::Event::Delete(o) => {
                let (k, _) = f(o);
                self.current.remove(&k);
                true
            }
        }
    }
}

/// Watches the Node `node` and all ENIConfigs; publishes and reports each change of the
/// resolution. Returns only if both watch streams end (they retry with backoff forever).
async fn watch_node(
    client: &Client,
    node: &str,
    keys: &SelectionKeys,
    tx: &watch::Sender<EniConfigTracked>,
    metrics: &Metrics,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    // The server ends each watch after WATCH_TIMEOUT_SECS (kube-apiserver's own default is
    // longer and random); the watcher resumes it from the last resourceVersion, so a quiet
    // watch is never an error.
    let node_events = watcher(
        nodes.clone(),
        watcher::Config::default()
            .fields(&format!("metadata.name={node}"))
            .timeout(WATCH_TIMEOUT_SECS),
    )
    .default_backoff()
    .map(|e| Seen::Node(Box::new(e)))
    .boxed();
    let config_events = watcher(
        Api::<EniConfig>::all(client.clone()),
        watcher::Config::default().timeout(WATCH_TIMEOUT_SECS),
    )
    .default_backoff()
    .map(|e| Seen::Config(Box::new(e)))
    .boxed();
    // The channel itself: the reconciler's placement errors change the report too.
    let tracked_events = futures::stream::unfold(tx.subscribe(), |mut rx| async move {
        rx.changed().await.ok().map(|()| (Seen::Tracked, rx))
    })
    .boxed();
    let mut events = futures::stream::select(
        futures::stream::select(node_events, config_events),
        tracked_events,
    );
    let mut node_view: Mirror<Node> = Mirror::new();
    let mut configs = Mirror::new();
    let mut reporter = NodeReport::new(client.clone(), node, CONDITION_TYPE, "ResolveENIConfig");
    while let Some(seen) = events.next().await {
        let arrived = tokio::time::Instant::now();
        let resource = match &seen {
            Seen::Node(_) => "Node",
            Seen::Config(_) => "ENIConfig",
            Seen::Tracked => "",
        };
        let seen = match seen {
            Seen::Node(b) => (*b).map(|ev| node_view.apply(ev, |n| (node.to_string(), n))),
            Seen::Config(r) => (*r).map(|ev| {
                configs.apply(ev, |c: EniConfig| {
                    (c.metadata.name.clone().unwrap_or_default(), c.spec)
                })
            }),
            Seen::Tracked => {
                // Only the report can differ; it patches and sends only what changed.
                if let (true, Some(n)) = (
                    node_view.synced && configs.synced,
                    node_view.current.get(node),
                ) {
                    let t = tx.borrow().clone();
                    reporter.report(n, &node_condition(&t)).await;
                }
                continue;
            }
        };
        let changed = match seen {
            Ok(changed) => changed,
            Err(e) => {
                metrics.inc_k8s_watch_restart(resource);
                tracing::warn!(resource, "custom networking: watching the Node and ENIConfigs: {e} (retrying with backoff)");
                // Before the first complete lists, say why nothing is known; afterwards the
                // last known state stays in force while the watch recovers.
                if !(node_view.synced && configs.synced) {
                    publish(
                        tx,
                        metrics,
                        EniConfigStatus::Unresolved(Unresolved::WatchFailed(format!("{e}"))),
                        now_ms(),
                    );
                }
                false
            }
        };
        if !changed || !node_view.synced || !configs.synced {
            continue;
        }
        let n = node_view.current.get(node);
        let meta = n.map(|n| {
            (
                n.metadata.annotations.clone().unwrap_or_default(),
                n.metadata.labels.clone().unwrap_or_default(),
            )
        });
        let status = match resolve(
            node,
            meta.as_ref().map(|(a, l)| (a, l)),
            &configs.current,
            keys,
        ) {
            Ok(c) => EniConfigStatus::Resolved(c),
            Err(u) => EniConfigStatus::Unresolved(u),
        };
        // Recorded before the change is published, so whoever sees the change sees its time.
        metrics.observe_watch_apply(resource, arrived.elapsed());
        publish(tx, metrics, status, now_ms());
        if let Some(n) = n {
            let t = tx.borrow().clone();
            reporter.report(n, &node_condition(&t)).await;
        }
    }
}

/// [`condition_of`] as the Node condition to report.
fn node_condition(tracked: &EniConfigTracked) -> Condition {
    let (status, reason, message) = condition_of(tracked);
    Condition {
        status,
        reason,
        message,
    }
}

/// The condition's status, reason and message for `tracked`: `False` while unresolved or
/// while EC2 refuses the resolved ENIConfig (reason [`REJECTED`]), else `True`.
pub fn condition_of(tracked: &EniConfigTracked) -> (&'static str, &'static str, String) {
    match &tracked.status {
        EniConfigStatus::Resolved(_) if tracked.placement_error.is_some() => (
            "False",
            REJECTED,
            tracked.placement_error.clone().unwrap_or_default(),
        ),
        EniConfigStatus::Resolved(c) => (
            "True",
            "ENIConfigResolved",
            format!(
                "ENIConfig {} (chosen by {}): new ENIs are created in {} with security groups {:?}",
                c.name, c.by, c.subnet, c.security_groups
            ),
        ),
        EniConfigStatus::Unresolved(u) => ("False", u.reason(), u.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::eniconfig::{SelectedBy, Selection};
    use super::*;

    fn choice(name: &str) -> EniConfigStatus {
        EniConfigStatus::Resolved(EniConfigChoice {
            name: name.into(),
            by: SelectedBy::Default,
            subnet: "subnet-1".into(),
            security_groups: vec!["sg-1".into()],
        })
    }

    fn missing(name: &str) -> EniConfigStatus {
        EniConfigStatus::Unresolved(Unresolved::NotFound(Selection {
            name: name.into(),
            by: SelectedBy::Default,
        }))
    }

    #[test]
    fn publishing_tracks_the_wait_and_the_metric() {
        let metrics = Metrics::new();
        let (tx, rx) = watch::channel(EniConfigTracked::initial(1_000));
        assert!(publish(&tx, &metrics, missing("default"), 2_000));
        // Another reason while still unresolved: the wait keeps its start.
        assert_eq!(rx.borrow().since_ms, 1_000);
        assert!(
            !publish(&tx, &metrics, missing("default"), 2_500),
            "same status: no change"
        );
        assert!(metrics.encode().contains("vpcnet_eniconfig_resolved 0"));
        assert!(publish(&tx, &metrics, choice("default"), 4_000));
        let t = rx.borrow().clone();
        assert_eq!(t.last_wait_ms, Some(3_000));
        assert_eq!(t.since_ms, 4_000);
        assert_eq!(t.choice().unwrap().subnet, "subnet-1");
        assert!(metrics.encode().contains("vpcnet_eniconfig_resolved 1"));
        let d = t.doc(Some("n1"));
        assert_eq!(d.state, vpcnet_introspection::EniConfigState::Resolved);
        assert_eq!(d.subnet.as_deref(), Some("subnet-1"));
        assert_eq!(d.selected_by.as_deref(), Some("default"));
        // Lost again: a new wait starts now.
        assert!(publish(&tx, &metrics, missing("default"), 5_000));
        let d = rx.borrow().doc(Some("n1"));
        assert_eq!(d.state, vpcnet_introspection::EniConfigState::Unresolved);
        assert_eq!(d.reason.as_deref(), Some("ENIConfigNotFound"));
        assert_eq!(d.name.as_deref(), Some("default"));
        assert_eq!(d.since_ms, Some(5_000));
        assert!(d.subnet.is_none());
    }

    #[test]
    fn the_initial_state_is_waiting_not_resolved() {
        let d = EniConfigTracked::initial(7).doc(None);
        assert_eq!(d.state, vpcnet_introspection::EniConfigState::Waiting);
        assert_eq!(d.reason.as_deref(), Some("APIUnavailable"));
    }

    #[test]
    fn the_condition_is_false_with_the_reason_until_resolved() {
        let tracked = |status| EniConfigTracked {
            status,
            ..EniConfigTracked::initial(0)
        };
        let (s, r, m) = condition_of(&tracked(missing("x")));
        assert_eq!((s, r), ("False", "ENIConfigNotFound"));
        assert!(m.contains("\"x\""), "{m}");
        let (s, r, m) = condition_of(&tracked(choice("x")));
        assert_eq!((s, r), ("True", "ENIConfigResolved"));
        assert!(m.contains("subnet-1"), "{m}");
    }

    #[test]
    fn a_rejected_eniconfig_is_reported_until_another_choice() {
        let (tx, _rx) = watch::channel(EniConfigTracked::initial(0));
        let m = Metrics::default();
        publish(&tx, &m, choice("x"), 1);
        tx.send_modify(|t| t.placement_error = Some("ENIConfig \"x\": subnet gone".into()));
        let (s, r, msg) = condition_of(&tx.borrow());
        assert_eq!((s, r), ("False", REJECTED));
        assert!(msg.contains("subnet gone"), "{msg}");
        let d = tx.borrow().doc(Some("n1"));
        assert_eq!(d.reason.as_deref(), Some(REJECTED));
        assert_eq!(d.state, vpcnet_introspection::EniConfigState::Resolved);
        // The same choice again changes nothing; another one forgets the error.
        assert!(!publish(&tx, &m, choice("x"), 2));
        assert!(tx.borrow().placement_error.is_some());
        assert!(publish(&tx, &m, choice("y"), 3));
        assert_eq!(condition_of(&tx.borrow()).0, "True");
    }

    #[test]
    fn the_mirror_swaps_in_a_relist_only_when_it_is_complete() {
        let mut m: Mirror<u32> = Mirror::new();
        let f = |v: (String, u32)| v;
        assert!(!m.apply(watcher::Event::Init, f));
        assert!(!m.apply(watcher::Event::InitApply(("a".into(), 1)), f));
        assert!(!m.synced && m.current.is_empty());
        assert!(m.apply(watcher::Event::InitDone, f));
        assert_eq!(m.current.get("a"), Some(&1));
        assert!(m.apply(watcher::Event::Apply(("b".into(), 2)), f));
        // A relist (after a watch error) keeps the old view until it is done.
        m.apply(watcher::Event::Init, f);
        m.apply(watcher::Event::InitApply(("b".into(), 3)), f);
        assert_eq!(m.current.len(), 2);
        m.apply(watcher::Event::InitDone, f);
        assert_eq!(m.current.len(), 1);
        assert_eq!(m.current.get("b"), Some(&3));
        assert!(m.apply(watcher::Event::Delete(("b".into(), 0)), f));
        assert!(m.current.is_empty());
    }
}
