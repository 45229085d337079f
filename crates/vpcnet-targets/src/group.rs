//! One task per target group: it owns every ELBv2 call for its group, so a throttled or failing
//! group backs off alone and never delays another, and one group's diff is never applied to
//! another.
//!
//! The task waits for its first [`GroupInput`] (sent only once the caches have synced and the
//! full desired set is computed: warm start), then reconciles: `DescribeTargetHealth`, the
//! [`crate::core::plan`], `RegisterTargets` then `DeregisterTargets` in batches of at most
//! 200 (deregistrations are still applied when registrations fail, e.g. on `TooManyTargets`),
//! then readiness gates of pods whose target is `healthy`. It reconciles again when its input
//! changes, every `resync` (repairs drift: targets added or removed by hand), every
//! `gate_recheck` while a gate waits (fixed interval: bounded re-checks, no exponential
//! growth), and after a failure with jittered exponential backoff (`Throttling`, 5xx,
//! transport), during which input changes wait for the backoff to end.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::Ipv4Net;
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;
use vpcnet_backoff::Backoff;
use vpcnet_elbv2::{Elbv2, Elbv2Error, HealthState, Target};

use crate::core::desired::{Desired, TargetKey};
use crate::core::plan::{self, Current, Observed};
use crate::metrics::Metrics;

/// A pod whose readiness gate is not True yet, and its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gated {
    pub namespace: String,
    pub pod: String,
    /// `target-health.elbv2.k8s.aws/<binding>`.
    pub condition: String,
    pub target: TargetKey,
}

/// A binding that feeds this target group (for events and status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub namespace: String,
    pub name: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `status.observedGeneration` as last read.
    pub observed: Option<i64>,
    /// `metadata.uid` (Event references).
    pub uid: Option<String>,
}

/// Everything a target group's task reconciles towards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupInput {
    pub desired: Desired,
    pub gated: Vec<Gated>,
    pub owners: Vec<Owner>,
    /// The pod behind a target (namespace, name), for Events on pods.
    pub pods: Vec<(TargetKey, String, String)>,
}

/// Timing of a task.
#[derive(Debug, Clone)]
pub struct GroupSettings {
    /// Reconcile at least this often (default 60 s).
    pub resync: Duration,
    /// Re-check target health this often while a readiness gate waits (default 2 s).
    pub gate_recheck: Duration,
    /// Backoff after a failed reconcile (throttling, 5xx, transport).
    pub backoff: Backoff,
    /// CIDRs of the VPC: IP targets outside them get `AvailabilityZone: all`.
    pub vpc_cidrs: Vec<Ipv4Net>,
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings {
            resync: Duration::from_secs(60),
            gate_recheck: Duration::from_secs(2),
            backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(30)),
            vpc_cidrs: Vec::new(),
        }
    }
}

/// What a task reports back to the Kubernetes side.
pub trait Sink: Send + Sync + 'static {
    /// Set `gate`'s pod condition True.
    fn open_gate(
        &self,
        gate: &Gated,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send;
    /// A Warning (or Normal) event on `owner`.
    fn event(
        &self,
        owner: &Owner,
        warning: bool,
        reason: &str,
        note: String,
    ) -> impl std::future::Future<Output = ()> + Send;
    /// A Warning event on pod `namespace/pod`.
    fn pod_event(
        &self,
        namespace: &str,
        pod: &str,
        reason: &str,
        note: String,
    ) -> impl std::future::Future<Output = ()> + Send;
    /// The group matches `owner`'s spec at its generation.
    fn observed(&self, owner: &Owner) -> impl std::future::Future<Output = ()> + Send;
}

/// The result of one reconcile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub registered: usize,
    pub deregistered: usize,
    pub gates_opened: usize,
    /// Gates still waiting for a healthy target.
    pub gates_waiting: usize,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
#[error("target group {arn}: {source}")]
pub struct ReconcileError {
    pub arn: String,
    #[source]
    pub source: Elbv2Error,
}

fn current_of(h: &[vpcnet_elbv2::TargetHealth], default_port: Option<u16>) -> Vec<Current> {
    h.iter()
        .filter_map(|t| {
            let ip: Ipv4Addr = t.target.id.parse().ok()?;
            let port = t.target.port.or(default_port)?;
            let state = match t.state {
                HealthState::Healthy => Observed::Healthy,
                HealthState::Draining => Observed::Draining,
                _ => Observed::Registered,
            };
            Some(Current {
                key: TargetKey { ip, port },
                state,
            })
        })
        .collect()
}

fn target(k: &TargetKey, cidrs: &[Ipv4Net]) -> Target {
    Target {
        id: k.ip.to_string(),
        port: Some(k.port),
        availability_zone: plan::availability_zone(k.ip, cidrs).map(str::to_string),
    }
}

/// One reconcile of target group `arn` towards `input` (module docs).
pub async fn reconcile<S: Sink>(
    elb: &Elbv2,
    arn: &str,
    input: &GroupInput,
    settings: &GroupSettings,
    sink: &S,
    metrics: &Metrics,
) -> Result<Outcome, ReconcileError> {
    let fail = |source| ReconcileError {
        arn: arn.to_string(),
        source,
    };
    let t0 = std::time::Instant::now();
    let health = elb.target_health(arn, &[]).await;
    metrics.call(
        "DescribeTargetHealth",
        health.as_ref().err().map(|e| e.code()),
    );
    let health = health.map_err(fail)?;
    let mut current = current_of(&health, None);
    let p = plan::plan(&input.desired, &current);
    let mut out = Outcome::default();
    let mut first_error: Option<Elbv2Error> = None;

    for batch in plan::batches(&p.register) {
        let targets: Vec<Target> = batch
            .iter()
            .map(|k| target(k, &settings.vpc_cidrs))
            .collect();
        let r = elb.register_targets(arn, &targets).await;
        metrics.call("RegisterTargets", r.as_ref().err().map(|e| e.code()));
        match r {
            Ok(()) => {
                out.registered += batch.len();
                metrics.registrations.inc_by(batch.len() as u64);
                for k in batch {
                    current.retain(|c| c.key != *k);
                    current.push(Current {
                        key: *k,
                        state: Observed::Registered,
                    });
                }
            }
            Err(e) => {
                for o in &input.owners {
                    sink.event(
                        o,
                        true,
                        "FailedRegisterTargets",
                        format!("registering {} target(s) in {arn}: {e}", batch.len()),
                    )
                    .await;
                }
                for k in batch {
                    for (_, ns, pod) in input.pods.iter().filter(|(t, _, _)| t == k) {
                        sink.pod_event(
                            ns,
                            pod,
                            "FailedRegisterTarget",
                            format!("registering {}:{} in {arn}: {e}", k.ip, k.port),
                        )
                        .await;
                    }
                }
                tracing::warn!(arn, error = %e, targets = batch.len(), "RegisterTargets failed");
                first_error.get_or_insert(e);
            }
        }
    }
    for batch in plan::batches(&p.deregister) {
        let targets: Vec<Target> = batch
            .iter()
            .map(|k| target(k, &settings.vpc_cidrs))
            .collect();
        let r = elb.deregister_targets(arn, &targets).await;
        metrics.call("DeregisterTargets", r.as_ref().err().map(|e| e.code()));
        match r {
            Ok(()) => {
                out.deregistered += batch.len();
                metrics.deregistrations.inc_by(batch.len() as u64);
            }
            Err(e) => {
                for o in &input.owners {
                    sink.event(
                        o,
                        true,
                        "FailedDeregisterTargets",
                        format!("deregistering {} target(s) from {arn}: {e}", batch.len()),
                    )
                    .await;
                }
                tracing::warn!(arn, error = %e, targets = batch.len(), "DeregisterTargets failed");
                first_error.get_or_insert(e);
            }
        }
    }
    if out.registered + out.deregistered > 0 {
        tracing::info!(
            arn,
            registered = out.registered,
            deregistered = out.deregistered,
            "target group updated"
        );
    }

    // Readiness gates: pods whose target is healthy.
    let pairs: Vec<(String, TargetKey)> = input
        .gated
        .iter()
        .map(|g| (format!("{}/{}", g.namespace, g.pod), g.target))
        .collect();
    let open: BTreeSet<String> = plan::gates_to_open(&pairs, &current)
        .into_iter()
        .map(|(n, _)| n.clone())
        .collect();
    for g in &input.gated {
        if open.contains(&format!("{}/{}", g.namespace, g.pod)) {
            match sink.open_gate(g).await {
                Ok(()) => {
                    out.gates_opened += 1;
                    metrics.gates_opened.inc();
                }
                Err(e) => {
                    tracing::warn!(pod = %g.pod, error = format!("{e:#}"), "setting the readiness gate failed");
                    out.gates_waiting += 1;
                }
            }
        } else {
            out.gates_waiting += 1;
        }
    }
    metrics.reconcile.observe(t0.elapsed().as_secs_f64());
    if let Some(e) = first_error {
        return Err(fail(e));
    }
    for o in &input.owners {
        sink.observed(o).await;
    }
    Ok(out)
}

/// The task of target group `arn`: reconciles whenever `input` changes, on resync, while gates
/// wait, and after failures with backoff (module docs). Returns when the sender is dropped.
pub async fn run<S: Sink>(
    elb: Elbv2,
    arn: String,
    mut input: watch::Receiver<Option<Arc<GroupInput>>>,
    settings: GroupSettings,
    sink: S,
    metrics: Metrics,
) {
    let mut due: Option<Instant> = None;
    let mut failures = 0u32;
    let mut previous = Duration::ZERO;
    if input.borrow().is_some() {
        due = Some(Instant::now());
    }
    loop {
        let sleep = async {
            match due {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = input.changed() => {
                if changed.is_err() {
                    return;
                }
                if failures == 0 {
                    due = Some(Instant::now());
                }
                continue;
            }
            _ = sleep => {}
        }
        let Some(current) = input.borrow_and_update().clone() else {
            due = None;
            continue;
        };
        match reconcile(&elb, &arn, &current, &settings, &sink, &metrics).await {
            Ok(o) => {
                failures = 0;
                previous = Duration::ZERO;
                let next = if o.gates_waiting > 0 {
                    settings.gate_recheck.min(settings.resync)
                } else {
                    settings.resync
                };
                due = Some(Instant::now() + next);
            }
            Err(e) => {
                failures += 1;
                let d = settings
                    .backoff
                    .delay(failures, previous, rand::rng().random());
                previous = d;
                tracing::warn!(error = %e, retry_in = ?d, failures, "reconcile failed");
                due = Some(Instant::now() + d);
            }
        }
    }
}
