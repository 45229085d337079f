//! Follows NetworkPolicies, Pods and Namespaces (all namespaces) into the enforcer's world and
//! programs the node after each batch of changes. Each object is reduced to what the compiler
//! needs as it arrives; no object cache is kept. A relist (after a watch error or a new API
//! client) replaces that kind's objects at its end, so objects deleted meanwhile go.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use super::{with_local_ip, Enforcer};
use crate::kubernetes::eniconfig_watch::WATCH_TIMEOUT_SECS;
use crate::state::Shared;

/// One object event of one of the three kinds.
enum Change {
    Policy(watcher::Event<NetworkPolicy>),
    Pod(Box<watcher::Event<Pod>>),
    Namespace(watcher::Event<Namespace>),
}

/// Kinds in the order they are reported.
const KINDS: [&str; 3] = ["NetworkPolicy", "Pod", "Namespace"];

/// The watch task: waits for the API client (a new client restarts the watches) and follows
/// the three kinds until the agent stops. Never returns an error.
pub async fn run(
    shared: Arc<Shared>,
    enforcer: Arc<Enforcer>,
    mut clients: watch::Receiver<Option<Client>>,
) {
    loop {
        let client = match clients.wait_for(|c| c.is_some()).await {
            Ok(c) => c.clone().expect("waited for Some"),
            Err(_) => {
                tracing::error!("network policy is enabled but no Kubernetes API server is configured: no pod can be admitted (set CLUSTER_ENDPOINT or run the agent in a pod)");
                return;
            }
        };
        tokio::select! {
            _ = follow(&shared, &enforcer, &client) => {}
            r = clients.changed() => if r.is_err() { return },
        }
    }
}

/// Which kinds a relist is collecting, and the keys it has seen so far.
#[derive(Default)]
struct Relist {
    policies: Option<BTreeSet<(String, String)>>,
    pods: Option<BTreeSet<(String, String)>>,
    namespaces: Option<BTreeSet<String>>,
    /// Kinds whose first list completed.
    done: BTreeSet<&'static str>,
}

async fn follow(shared: &Shared, enforcer: &Enforcer, client: &Client) {
    let cfg = || watcher::Config::default().timeout(WATCH_TIMEOUT_SECS);
    let policies = watcher(Api::<NetworkPolicy>::all(client.clone()), cfg())
        .default_backoff()
        .map(|e| e.map(Change::Policy))
        .boxed();
    let pods = watcher(Api::<Pod>::all(client.clone()), cfg())
        .default_backoff()
        .map(|e| e.map(|ev| Change::Pod(Box::new(ev))))
        .boxed();
    let namespaces = watcher(Api::<Namespace>::all(client.clone()), cfg())
        .default_backoff()
        .map(|e| e.map(Change::Namespace))
        .boxed();
    let mut events = futures::stream::select_all([policies, pods, namespaces]);
    let mut relist = Relist::default();
    while let Some(first) = events.next().await {
        // Apply every event that is ready, then program once.
        let mut changed = false;
        let mut next = Some(first);
        while let Some(ev) = next {
            match ev {
                Ok(change) => changed |= apply(enforcer, &mut relist, change).await,
                Err(e) => {
                    shared.metrics().inc_k8s_watch_restart("NetworkPolicy");
                    tracing::warn!("network policy watch: {e} (retrying with backoff; the rules in force stay)");
                }
            }
            next = events.next().now_or_never().flatten();
        }
        if relist.done.len() < KINDS.len() {
            continue;
        }
        if !enforcer.is_synced() {
            enforcer.set_synced();
            tracing::info!(
                "network policy: NetworkPolicies, Pods and Namespaces read; programming the node"
            );
            changed = true;
        }
        if changed {
            if let Err(e) = enforcer.program(shared, "API change").await {
                tracing::warn!("network policy: {e:#}");
            }
        }
    }
}

/// Applies one event to the world; whether the world changed.
async fn apply(enforcer: &Enforcer, relist: &mut Relist, change: Change) -> bool {
    match change {
        Change::Policy(ev) => match ev {
            watcher::Event::Init => {
                relist.policies = Some(BTreeSet::new());
                false
            }
            watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                if let Some(seen) = relist.policies.as_mut() {
                    seen.insert(key(&p));
                }
                let converted = vpcnet_policy::k8s::policy(&p);
                for w in &converted.warnings {
                    tracing::warn!("network policy: {w}");
                }
                enforcer
                    .update(|w, _| w.upsert_policy(converted.value))
                    .await
            }
            watcher::Event::Delete(p) => {
                let (ns, name) = key(&p);
                enforcer.update(|w, _| w.remove_policy(&ns, &name)).await
            }
            watcher::Event::InitDone => {
                relist.done.insert(KINDS[0]);
                let seen = relist.policies.take().unwrap_or_default();
                enforcer.update(|w, _| w.retain_policies(&seen)).await
            }
        },
        Change::Pod(ev) => match *ev {
            watcher::Event::Init => {
                relist.pods = Some(BTreeSet::new());
                false
            }
            watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                if let Some(seen) = relist.pods.as_mut() {
                    seen.insert(key(&p));
                }
                let Some(pod) = vpcnet_policy::k8s::pod(&p) else {
                    return false;
                };
                enforcer
                    .update(|w, local| {
                        let k = (pod.namespace.clone(), pod.name.clone());
                        let mut c = w.upsert_pod(pod);
                        if let Some(ip) = local.get(&k) {
                            c |= with_local_ip_changed(w, &k.0, &k.1, *ip);
                        }
                        c
                    })
                    .await
            }
            watcher::Event::Delete(p) => {
                let (ns, name) = key(&p);
                enforcer.update(|w, _| w.remove_pod(&ns, &name)).await
            }
            watcher::Event::InitDone => {
                relist.done.insert(KINDS[1]);
                let seen = relist.pods.take().unwrap_or_default();
                enforcer.update(|w, _| w.retain_pods(&seen)).await
            }
        },
        Change::Namespace(ev) => match ev {
            watcher::Event::Init => {
                relist.namespaces = Some(BTreeSet::new());
                false
            }
            watcher::Event::InitApply(n) | watcher::Event::Apply(n) => {
                if let Some(seen) = relist.namespaces.as_mut() {
                    seen.insert(n.name_any());
                }
                match vpcnet_policy::k8s::namespace(&n) {
                    Some(ns) => enforcer.update(|w, _| w.upsert_namespace(ns)).await,
                    None => false,
                }
            }
            watcher::Event::Delete(n) => {
                let name = n.name_any();
                enforcer.update(|w, _| w.remove_namespace(&name)).await
            }
            watcher::Event::InitDone => {
                relist.done.insert(KINDS[2]);
                let seen = relist.namespaces.take().unwrap_or_default();
                enforcer.update(|w, _| w.retain_namespaces(&seen)).await
            }
        },
    }
}

fn key<K: ResourceExt>(o: &K) -> (String, String) {
    (o.namespace().unwrap_or_default(), o.name_any())
}

/// [`with_local_ip`], telling whether it changed the world.
fn with_local_ip_changed(
    w: &mut vpcnet_policy::World,
    ns: &str,
    name: &str,
    ip: std::net::Ipv4Addr,
) -> bool {
    let before = w.pod(ns, name).map(|p| p.ips.clone());
    with_local_ip(w, ns, name, ip);
    w.pod(ns, name).map(|p| p.ips.clone()) != before
}
