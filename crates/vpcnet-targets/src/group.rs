//! One task per target group: it owns every ELBv2 call for its group, so a throttled or failing
//! group backs off alone and never delays another, and one group's diff is never applied to
//! another.
//!
//! The task waits for its first [`GroupInput`] (sent only once the caches have synced and the
//! full desired set is computed: warm start), then reconciles: `DescribeTargetHealth`, the
//! [`crate::core::plan`], `RegisterTargets` then `DeregisterTargets` in batches of at most
//! 200 (deregistrations are still applied when registrations fail, e.g. on `TooManyTargets`),
//! then readiness gates of pods whose target is `healthy`, or `unused` / `Target.NotInUse` in a
//! target group no load balancer uses (asked with `DescribeTargetGroups` only when targets are
//! `Target.NotInUse`; policy, condition and Event: [`crate::core::usage`]). It reconciles again
//! when its input
//! changes, every `resync` (repairs drift: targets added or removed by hand), every
//! `gate_recheck` while a gate waits (fixed interval: bounded re-checks, no exponential
//! growth), and after a failure with jittered exponential backoff (`Throttling`, 5xx,
//! transport), during which input changes wait for the backoff to end.

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
use crate::core::usage::{self, GateOpen, HealthSays};
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
    /// Its [`crate::crd::IN_USE_CONDITION`] as last read (None: absent).
    pub in_use: Option<bool>,
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
    /// Set `gate`'s pod condition True, because of `why`.
    fn open_gate(
        &self,
        gate: &Gated,
        why: GateOpen,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send;
    /// Set `owner`'s [`crate::crd::IN_USE_CONDITION`] to `in_use`, message `note`.
    fn in_use_condition(
        &self,
        owner: &Owner,
        in_use: bool,
        note: String,
    ) -> impl std::future::Future<Output = ()> + Send;
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
    /// Of `gates_opened`, those opened because no load balancer uses the target group.
    pub gates_opened_not_in_use: usize,
    /// Whether a load balancer uses the target group (None: no evidence in this reconcile).
    pub in_use: Option<bool>,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
#[error("target group {arn}: {source}")]
pub struct ReconcileError {
    pub arn: String,
    #[source]
    pub source: Elbv2Error,
}

/// ELBv2's reason for a target no load balancer sends traffic to.
const NOT_IN_USE: &str = "Target.NotInUse";

fn current_of(h: &[vpcnet_elbv2::TargetHealth], default_port: Option<u16>) -> Vec<Current> {
    h.iter()
        .filter_map(|t| {
            let ip: Ipv4Addr = t.target.id.parse().ok()?;
            let port = t.target.port.or(default_port)?;
            let state = match t.state {
                HealthState::Healthy => Observed::Healthy,
                HealthState::Draining => Observed::Draining,
                HealthState::Unused if t.reason.as_deref() == Some(NOT_IN_USE) => {
                    Observed::NotInUse
                }
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
    let t0 = tokio::time::Instant::now();
    let health = elb.target_health(arn, &[]).await;
    metrics.call(
        "DescribeTargetHealth",
        health.as_ref().err().map(|e| e.code()),
    );
    let health = health.map_err(fail)?;
    // As described, before this reconcile's registrations: the evidence of the group's use.
    let described = current_of(&health, None);
    let mut current = described.clone();
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

    out.in_use = match usage::health_says(&described) {
        HealthSays::InUse => Some(true),
        HealthSays::Unknown => None,
        HealthSays::Ask => match load_balancers_of(elb, arn, metrics).await {
            Ok(lbs) => Some(!lbs.is_empty()),
            Err(e) => {
                for o in &input.owners {
                    sink.event(
                        o,
                        true,
                        "FailedDescribeTargetGroup",
                        format!(
                            "its targets are unused (Target.NotInUse) and asking which load balancer uses {arn} failed: {e}; readiness gates stay shut"
                        ),
                    )
                    .await;
                }
                tracing::warn!(arn, error = %e, "DescribeTargetGroups failed");
                first_error.get_or_insert(e);
                None
            }
        },
    };

    // Readiness gates: pods whose target is healthy, or unused in a group no load balancer
    // uses.
    let pairs: Vec<(String, TargetKey)> = input
        .gated
        .iter()
        .map(|g| (format!("{}/{}", g.namespace, g.pod), g.target))
        .collect();
    let open: std::collections::BTreeMap<String, GateOpen> =
        plan::gates_to_open(&pairs, &current, out.in_use)
            .into_iter()
            .map(|((n, _), why)| (n.clone(), why))
            .collect();
    for g in &input.gated {
        if let Some(why) = open.get(&format!("{}/{}", g.namespace, g.pod)) {
            match sink.open_gate(g, *why).await {
                Ok(()) => {
                    out.gates_opened += 1;
                    metrics.gates_opened.inc();
                    if *why == GateOpen::GroupNotInUse {
                        out.gates_opened_not_in_use += 1;
                        metrics.gates_opened_not_in_use.inc();
                    }
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
    if let Some(in_use) = out.in_use {
        metrics
            .not_in_use
            .get_or_create(&[("target_group", arn.to_string())])
            .set(i64::from(!in_use));
        report_use(arn, in_use, &described, &out, &input.owners, sink).await;
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

/// `LoadBalancerArns` of target group `arn` (`DescribeTargetGroups`).
async fn load_balancers_of(
    elb: &Elbv2,
    arn: &str,
    metrics: &Metrics,
) -> Result<Vec<String>, Elbv2Error> {
    let r = elb.target_group(arn).await;
    metrics.call("DescribeTargetGroups", r.as_ref().err().map(|e| e.code()));
    Ok(r?.load_balancer_arns)
}

/// The binding side of the group's use: each owner whose condition differs gets it set, with
/// a Warning Event `TargetGroupNotInUse` when the group is used by none, a Normal Event
/// `TargetGroupInUse` when it is used again. An owner that never saw the group unused gets
/// no condition.
async fn report_use<S: Sink>(
    arn: &str,
    in_use: bool,
    described: &[Current],
    out: &Outcome,
    owners: &[Owner],
    sink: &S,
) {
    let unused = described
        .iter()
        .filter(|c| c.state == Observed::NotInUse)
        .count();
    let note = usage::note(arn, in_use, unused, out.gates_opened_not_in_use);
    for o in owners {
        let changed = if in_use {
            o.in_use == Some(false)
        } else {
            o.in_use != Some(false)
        };
        if !changed {
            continue;
        }
        sink.in_use_condition(o, in_use, note.clone()).await;
        let reason = if in_use {
            "TargetGroupInUse"
        } else {
            "TargetGroupNotInUse"
        };
        sink.event(o, !in_use, reason, note.clone()).await;
    }
}

/// The log line of a change in the group's use (both modes; with bindings the condition and
/// Event say it too).
fn log_use(arn: &str, before: Option<bool>, now: Option<bool>) {
    match (before, now) {
        (b, Some(false)) if b != Some(false) => tracing::warn!(
            arn,
            "target group used by no load balancer: its targets are unused (Target.NotInUse) and get no traffic; readiness gates open without a health check"
        ),
        (Some(false), Some(true)) => tracing::info!(
            arn,
            "a load balancer uses the target group again: readiness gates wait for healthy targets"
        ),
        _ => {}
    }
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
    let mut in_use: Option<bool> = None;
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
                if o.in_use.is_some() {
                    log_use(&arn, in_use, o.in_use);
                    in_use = o.in_use;
                }
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
