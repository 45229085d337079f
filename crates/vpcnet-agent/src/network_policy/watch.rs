//! Follows NetworkPolicies, Pods and Namespaces (all namespaces) into the enforcer's world and
//! programs the node after each batch of changes. Each object is reduced to what the compiler
//! needs as it arrives; no object cache is kept. A relist (after a watch error or a new API
//! client) replaces that kind's objects at its end, so objects deleted meanwhile go.

use std::collections::BTreeSet;
use std::sync::Arc;

use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{with_local_ip, Enforcer};
use crate::kubernetes::eniconfig_watch::WATCH_TIMEOUT_SECS;
use crate::state::Shared;

/// One object event of one of the three kinds.
enum Change {
    Policy(watcher::Event<NetworkPolicy>),
    Pod(Box<watcher::Event<Pod>>),
    Namespace(watcher::Event<Namespace>),
}

/// Shortest time from one program of the node's rules for API changes to the next. A change
/// after a quiet spell is programmed at once; a burst (a Deployment scaled up, job churn
/// anywhere in the cluster: every node's agent sees every pod) is applied in batches at most
/// this often instead of one compile and nft transaction per few events.
pub const PROGRAM_INTERVAL: Duration = Duration::from_millis(100);

/// The pods the watch asks the API server for: only those that can be a peer or a local pod.
/// A finished pod (`Succeeded`, `Failed`) has given its address back, and a host-network pod
/// is never a peer; leaving them out keeps completed jobs out of every node's memory and
/// events. A pod that finishes leaves the watch as a deletion.
pub const POD_FIELDS: &str = "status.phase!=Succeeded,status.phase!=Failed,spec.hostNetwork=false";

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
        .map(|e| e.map(Change::Policy).map_err(|e| (KINDS[0], e)))
        .boxed();
    let pods = watcher(Api::<Pod>::all(client.clone()), cfg().fields(POD_FIELDS))
        .default_backoff()
        .map(|e| {
            e.map(|ev| Change::Pod(Box::new(ev)))
                .map_err(|e| (KINDS[1], e))
        })
        .boxed();
    let namespaces = watcher(Api::<Namespace>::all(client.clone()), cfg())
        .default_backoff()
        .map(|e| e.map(Change::Namespace).map_err(|e| (KINDS[2], e)))
        .boxed();
    let mut events = futures::stream::select_all([policies, pods, namespaces]);
    let mut relist = Relist::default();
    let mut programmed: Option<Instant> = None;
    while let Some(first) = events.next().await {
        let until = programmed.map(|t| t + PROGRAM_INTERVAL);
        let mut changed = false;
        for ev in batch(first, &mut events, until).await {
            match ev {
                Ok(change) => changed |= apply(enforcer, &mut relist, change).await,
                Err((kind, e)) => {
                    shared.metrics().inc_k8s_watch_restart(kind);
                    tracing::warn!("network policy watch of {kind}s: {e} (retrying with backoff; the rules in force stay)");
                }
            }
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
            programmed = Some(Instant::now());
        }
    }
}

/// The next batch of events to apply before one program: `first`, every event already
/// waiting, and, while `until` (the end of [`PROGRAM_INTERVAL`] after the last program) is
/// ahead, every event arriving before it.
async fn batch<S: Stream + Unpin>(
    first: S::Item,
    events: &mut S,
    until: Option<Instant>,
) -> Vec<S::Item> {
    let mut out = vec![first];
    loop {
        while let Some(ev) = events.next().now_or_never().flatten() {
            out.push(ev);
        }
        let Some(until) = until.filter(|u| Instant::now() < *u) else {
            return out;
        };
        match tokio::time::timeout_at(until, events.next()).await {
            Ok(Some(ev)) => out.push(ev),
            Ok(None) | Err(_) => return out,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Events `0..n`, one every `gap` of the (paused) clock, the first at once.
    fn spaced(n: u32, gap: Duration) -> impl Stream<Item = u32> + Unpin {
        Box::pin(futures::stream::iter(0..n).then(move |i| async move {
            if i > 0 {
                tokio::time::sleep(gap).await;
            }
            i
        }))
    }

    async fn first_batch(
        mut events: impl Stream<Item = u32> + Unpin,
        until: Option<Duration>,
    ) -> (Vec<u32>, Duration) {
        let t0 = Instant::now();
        let first = events.next().await.unwrap();
        let b = batch(first, &mut events, until.map(|d| t0 + d)).await;
        (b, t0.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_after_a_quiet_spell_is_programmed_at_once() {
        let (b, took) = first_batch(spaced(10, Duration::from_millis(15)), None).await;
        assert_eq!((b, took), (vec![0], Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_within_the_interval_is_one_batch() {
        // Events at 0, 15, …, 90 ms arrive before the interval ends at 100 ms; 105 does not.
        let (b, took) = first_batch(
            spaced(10, Duration::from_millis(15)),
            Some(PROGRAM_INTERVAL),
        )
        .await;
        assert_eq!(b, (0..=6).collect::<Vec<_>>());
        assert_eq!(took, PROGRAM_INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_events_join_the_batch_and_an_ended_stream_ends_it_early() {
        let (b, took) = first_batch(
            Box::pin(futures::stream::iter(0..5)),
            Some(PROGRAM_INTERVAL),
        )
        .await;
        assert_eq!((b, took), ((0..5).collect::<Vec<_>>(), Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn an_interval_already_over_holds_nothing_back() {
        let (b, took) =
            first_batch(spaced(3, Duration::from_millis(15)), Some(Duration::ZERO)).await;
        assert_eq!((b, took), (vec![0], Duration::ZERO));
    }
}
