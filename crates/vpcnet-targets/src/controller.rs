//! The controller: kube-rs reflectors over TargetGroupBindings, Services, EndpointSlices, Pods
//! and Nodes; on any change (coalesced) the desired input of every target group is recomputed
//! from the caches and handed to that group's task ([`crate::group`]).
//!
//! Warm start: no group task exists before every cache has synced (its initial list is
//! complete), so the first input a task sees is the full desired set; a restart with nothing
//! changed makes no ELBv2 write (each task's first reconcile describes and finds nothing to
//! do). A binding whose Service is missing from the cache is skipped (its target group is left
//! as it is, with a Warning event), never emptied.
//!
//! Leadership: tasks run only while `leader` is true; losing it stops them (their current call
//! finishes), so only the leader writes to ELBv2.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use tokio::sync::{watch, Notify};
use vpcnet_elbv2::Elbv2;

use crate::core::usage::GateOpen;
use crate::crd::{gate_condition, in_use_reason, TargetGroupBinding, IN_USE_CONDITION};
use crate::group::{self, GroupInput, GroupSettings, Owner, Sink};
use crate::metrics::Metrics;
use crate::views;

/// How long changes are gathered before the desired sets are recomputed.
pub const COALESCE: Duration = Duration::from_millis(50);

/// The caches the controller reads.
#[derive(Clone)]
pub struct Caches {
    pub bindings: Store<TargetGroupBinding>,
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
}

/// Runs a reflector for `api` into a new store; every event wakes `notify`. The stream
/// retries with kube-rs's default backoff.
fn reflect<K>(api: Api<K>, notify: Arc<Notify>) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    tokio::spawn(drive(stream, notify));
    store
}

async fn drive<S, T, E>(stream: S, notify: Arc<Notify>)
where
    S: Stream<Item = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        if let Err(e) = ev {
            tracing::warn!(error = %e, "watch error (retrying)");
        }
        notify.notify_one();
    }
}

/// An empty, synced store (a resource not watched).
fn empty<K>() -> Store<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

impl Caches {
    /// Starts the reflectors (cluster-wide); TargetGroupBindings only if `bindings` (the CRD
    /// must then be installed, or the caches never sync).
    pub fn start(client: &Client, notify: Arc<Notify>, bindings: bool) -> Caches {
        Caches {
            bindings: if bindings {
                reflect(Api::all(client.clone()), notify.clone())
            } else {
                empty()
            },
            services: reflect(Api::all(client.clone()), notify.clone()),
            slices: reflect(Api::all(client.clone()), notify.clone()),
            pods: reflect(Api::all(client.clone()), notify.clone()),
            nodes: reflect(Api::all(client.clone()), notify),
        }
    }

    /// Waits until every cache holds its complete initial list.
    pub async fn synced(&self) -> Result<()> {
        self.bindings.wait_until_ready().await?;
        self.services.wait_until_ready().await?;
        self.slices.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        Ok(())
    }
}

/// A binding the controller cannot serve, and why (for a Warning event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub owner: Owner,
    pub reason: &'static str,
    pub note: String,
}

fn owner_of(b: &TargetGroupBinding) -> Owner {
    Owner {
        namespace: b.metadata.namespace.clone().unwrap_or_default(),
        name: b.metadata.name.clone().unwrap_or_default(),
        generation: b.metadata.generation,
        observed: b.status.as_ref().and_then(|s| s.observed_generation),
        uid: b.metadata.uid.clone(),
        in_use: b.status.as_ref().and_then(|s| s.in_use()),
    }
}

/// The input of every target group from the caches (pure over the caches' contents): target
/// group ARN → input, and the bindings skipped. `selections` add label-selected pods.
pub fn inputs(
    c: &Caches,
    selections: &[views::Selection],
) -> (BTreeMap<String, GroupInput>, Vec<Skipped>) {
    let nodes = views::node_map(c.nodes.state().iter().map(|n| n.as_ref()));
    let pods = &c.pods;
    let lookup =
        |ns: &str, name: &str| pods.get(&reflector::ObjectRef::<Pod>::new(name).within(ns));
    let slices = c.slices.state();
    let mut out: BTreeMap<String, GroupInput> = BTreeMap::new();
    let mut skipped = Vec::new();
    for b in c.bindings.state() {
        let owner = owner_of(&b);
        let skip = |reason, note: String| Skipped {
            owner: owner.clone(),
            reason,
            note,
        };
        let Some(arn) = b.spec.target_group_arn.clone().filter(|a| !a.is_empty()) else {
            skipped.push(skip(
                "InvalidSpec",
                "spec.targetGroupARN is required (targetGroupName is not served by vpcnet-targets)"
                    .into(),
            ));
            continue;
        };
        if b.spec.target_type.as_deref().unwrap_or("ip") != "ip" {
            skipped.push(skip(
                "UnsupportedTargetType",
                "vpcnet-targets serves spec.targetType ip only".into(),
            ));
            continue;
        }
        let ns = owner.namespace.as_str();
        let r = &b.spec.service_ref;
        let Some(svc) = c
            .services
            .get(&reflector::ObjectRef::<Service>::new(&r.name).within(ns))
        else {
            skipped.push(skip(
                "ServiceNotFound",
                format!(
                    "Service {ns}/{} not found; target group {arn} left unchanged",
                    r.name
                ),
            ));
            continue;
        };
        let Some(port_name) = views::service_port_name(&svc, &r.port) else {
            skipped.push(skip(
                "ServicePortNotFound",
                format!(
                    "Service {ns}/{} has no port {:?}; target group {arn} left unchanged",
                    r.name, r.port
                ),
            ));
            continue;
        };
        let mine: Vec<&EndpointSlice> = slices
            .iter()
            .map(|s| s.as_ref())
            .filter(|s| {
                s.metadata.namespace.as_deref() == Some(ns)
                    && s.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(views::SERVICE_NAME_LABEL))
                        .is_some_and(|n| *n == r.name)
            })
            .collect();
        let condition = gate_condition(&owner.name);
        let (desired, gated) =
            views::binding_targets(&mine, &port_name, &condition, &lookup, &nodes);
        let e = out.entry(arn).or_default();
        e.pods.extend(views::target_pods(&mine, &port_name));
        e.desired.merge(desired);
        e.gated.extend(gated);
        e.owners.push(owner);
    }
    if !selections.is_empty() {
        let all = c.pods.state();
        for sel in selections {
            let d = views::selected_targets(all.iter().map(|p| p.as_ref()), sel);
            for arn in &sel.target_groups {
                out.entry(arn.clone()).or_default().desired.merge(d.clone());
            }
        }
    }
    (out, skipped)
}

/// What the controller needs besides the caches.
#[derive(Clone)]
pub struct Settings {
    pub group: GroupSettings,
    /// Label-selected pods (besides the TargetGroupBindings).
    pub selections: Vec<views::Selection>,
    /// Watch TargetGroupBindings (their CRD must be installed).
    pub bindings: bool,
    /// Reporter name of Events (`vpcnet-targets`) and this replica's identity.
    pub reporter: Reporter,
}

/// [`Sink`] on the Kubernetes API: gates as pod status conditions (strategic merge patch of
/// `pods/status`), Events through kube-rs's recorder, `status.observedGeneration` and the
/// binding's [`IN_USE_CONDITION`].
#[derive(Clone)]
pub struct KubeSink {
    client: Client,
    recorder: Recorder,
}

impl KubeSink {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        KubeSink {
            recorder: Recorder::new(client.clone(), reporter),
            client,
        }
    }
}

impl KubeSink {
    /// Reads the binding and writes its conditions with [`IN_USE_CONDITION`] set (the others
    /// kept), guarded by the resourceVersion read: a concurrent change fails the write, and
    /// the next reconcile, still seeing the old condition, writes it again.
    async fn write_in_use(&self, o: &Owner, in_use: bool, note: String) -> Result<()> {
        let api: Api<TargetGroupBinding> = Api::namespaced(self.client.clone(), &o.namespace);
        let b = api
            .get(&o.name)
            .await
            .with_context(|| format!("reading TargetGroupBinding {}/{}", o.namespace, o.name))?;
        let status = if in_use { "True" } else { "False" };
        let mut conditions = b.status.map(|s| s.conditions).unwrap_or_default();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let cond = Condition {
            type_: IN_USE_CONDITION.into(),
            status: status.into(),
            reason: in_use_reason(in_use).into(),
            message: note,
            observed_generation: b.metadata.generation,
            last_transition_time: now,
        };
        match conditions.iter_mut().find(|c| c.type_ == IN_USE_CONDITION) {
            Some(c) if c.status == status => {
                let since = c.last_transition_time.clone();
                *c = cond;
                c.last_transition_time = since;
            }
            Some(c) => *c = cond,
            None => conditions.push(cond),
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": b.metadata.resource_version},
            "status": {"conditions": conditions},
        });
        api.patch_status(&o.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| {
                format!(
                    "setting {IN_USE_CONDITION} {status} on TargetGroupBinding {}/{}",
                    o.namespace, o.name
                )
            })?;
        Ok(())
    }
}

fn reference(o: &Owner) -> ObjectReference {
    ObjectReference {
        api_version: Some(TargetGroupBinding::api_version(&()).into_owned()),
        kind: Some(TargetGroupBinding::kind(&()).into_owned()),
        name: Some(o.name.clone()),
        namespace: Some(o.namespace.clone()),
        uid: o.uid.clone(),
        ..Default::default()
    }
}

impl Sink for KubeSink {
    async fn open_gate(&self, g: &group::Gated, why: GateOpen) -> Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &g.namespace);
        // The condition's lastTransitionTime: a wall-clock timestamp is the point.
        #[allow(clippy::disallowed_methods)]
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let message = match why {
            GateOpen::Healthy => format!("target {}:{} is healthy", g.target.ip, g.target.port),
            GateOpen::GroupNotInUse => format!(
                "target {}:{} is unused (Target.NotInUse): no load balancer uses its target group, so no traffic reaches it; opened without a health check",
                g.target.ip, g.target.port
            ),
        };
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": g.condition, "status": "True", "lastTransitionTime": now,
            "reason": why.reason(), "message": message,
        }]}});
        api.patch_status(&g.pod, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .with_context(|| {
                format!(
                    "setting {} True on pod {}/{}",
                    g.condition, g.namespace, g.pod
                )
            })?;
        tracing::info!(pod = %g.pod, namespace = %g.namespace, target = %g.target.ip, reason = why.reason(), "readiness gate set True");
        Ok(())
    }

    async fn in_use_condition(&self, o: &Owner, in_use: bool, note: String) {
        if let Err(e) = self.write_in_use(o, in_use, note).await {
            tracing::warn!(error = format!("{e:#}"), binding = %o.name, "writing the {IN_USE_CONDITION} condition failed");
        }
    }

    async fn event(&self, o: &Owner, warning: bool, reason: &str, note: String) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &reference(o)).await {
            tracing::warn!(error = %e, binding = %o.name, "sending an Event failed");
        }
    }

    async fn pod_event(&self, namespace: &str, pod: &str, reason: &str, note: String) {
        let r = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.to_string()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        };
        let ev = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "RegisterTarget".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &r).await {
            tracing::warn!(error = %e, pod, "sending an Event failed");
        }
    }

    async fn observed(&self, o: &Owner) {
        if o.generation.is_none() || o.generation == o.observed {
            return;
        }
        let api: Api<TargetGroupBinding> = Api::namespaced(self.client.clone(), &o.namespace);
        let patch = serde_json::json!({"status": {"observedGeneration": o.generation}});
        if let Err(e) = api
            .patch_status(&o.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(error = %e, binding = %o.name, "writing status.observedGeneration failed");
        }
    }
}

/// Set once the caches have synced and the first desired sets were computed (`/healthz`).
pub type Synced = Arc<AtomicBool>;

/// Runs the controller until the process ends: caches, warm start, then one task per target
/// group while `leader` is true.
pub async fn run(
    client: Client,
    elb: Elbv2,
    settings: Settings,
    metrics: Metrics,
    mut leader: watch::Receiver<bool>,
    synced: Synced,
) -> Result<()> {
    let notify = Arc::new(Notify::new());
    let caches = Caches::start(&client, notify.clone(), settings.bindings);
    tracing::info!("waiting for the caches to sync");
    caches.synced().await.context("the caches never synced")?;
    tracing::info!("caches synced");
    let sink = KubeSink::new(client.clone(), settings.reporter.clone());
    let mut groups: HashMap<String, watch::Sender<Option<Arc<GroupInput>>>> = HashMap::new();
    let mut warned: HashMap<(String, String), String> = HashMap::new();
    loop {
        let (all, skipped) = inputs(&caches, &settings.selections);
        synced.store(true, Ordering::Relaxed);
        for s in skipped {
            let key = (s.owner.namespace.clone(), s.owner.name.clone());
            if warned.get(&key) != Some(&s.note) {
                tracing::warn!(binding = %s.owner.name, reason = s.reason, "{}", s.note);
                sink.event(&s.owner, true, s.reason, s.note.clone()).await;
                warned.insert(key, s.note);
            }
        }
        if *leader.borrow_and_update() {
            for (arn, input) in &all {
                let input = Arc::new(input.clone());
                match groups.get(arn) {
                    Some(tx) => {
                        tx.send_if_modified(|cur| {
                            if cur.as_deref() == Some(&*input) {
                                false
                            } else {
                                *cur = Some(input.clone());
                                true
                            }
                        });
                    }
                    None => {
                        let (tx, rx) = watch::channel(Some(input));
                        tokio::spawn(group::run(
                            elb.clone(),
                            arn.clone(),
                            rx,
                            settings.group.clone(),
                            sink.clone(),
                            metrics.clone(),
                        ));
                        groups.insert(arn.clone(), tx);
                    }
                }
            }
            // A target group no binding names any more: its targets are deregistered.
            for (arn, tx) in &groups {
                if !all.contains_key(arn) {
                    tx.send_if_modified(|cur| {
                        let empty = Some(Arc::new(GroupInput::default()));
                        if *cur == empty {
                            false
                        } else {
                            *cur = empty;
                            true
                        }
                    });
                }
            }
        } else if !groups.is_empty() {
            tracing::info!("not the leader: stopping target group tasks");
            groups.clear();
        }
        metrics.target_groups.set(groups.len() as i64);
        tokio::select! {
            _ = notify.notified() => tokio::time::sleep(COALESCE).await,
            r = leader.changed() => { if r.is_err() { return Ok(()); } }
        }
    }
}
