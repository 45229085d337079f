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
//! changes, every `resync` (repairs drift: targets added or removed by hand), when a waiting
//! readiness gate is due ([`crate::core::recheck`]: not before its target can be healthy,
//! then every health-check interval of the group, one `DescribeTargetHealth` for all its
//! gates; or every fixed `gate_recheck` when the operator sets one), and after a failure with
//! jittered exponential backoff (`Throttling`, 5xx, transport), during which input changes wait
//! for the backoff to end.
//!
//! **Budget.** Between describes the task remembers the group's targets as last described,
//! with its own successful writes applied (a registered target is `initial`, a deregistered
//! one `draining`), and reconciles an input change against that memory: a pod that comes or
//! goes costs its `RegisterTargets` / `DeregisterTargets` and no read. `DescribeTargetHealth`
//! is called at the task's first reconcile, on every resync (drift made by others is repaired
//! then, as before), when a gate is due, and after any failed reconcile. The group's health
//! check (interval, healthy threshold) comes from `DescribeTargetGroups`, read when a gate
//! first waits and again when older than `health_check_cache`; while it cannot be read the
//! gates are re-checked every [`FALLBACK_RECHECK`].

use std::collections::HashMap;
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
use crate::core::recheck::{self, Cadence, HealthTiming, Waiting};
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
    /// Re-check target health this often while a readiness gate waits; None (default): follow
    /// the target group's health check ([`crate::core::recheck`]).
    pub gate_recheck: Option<Duration>,
    /// Re-read the target group's health check (`DescribeTargetGroups`) when older than this
    /// (default 10 min).
    pub health_check_cache: Duration,
    /// Backoff after a failed reconcile (throttling, 5xx, transport).
    pub backoff: Backoff,
    /// CIDRs of the VPC: IP targets outside them get `AvailabilityZone: all`.
    pub vpc_cidrs: Vec<Ipv4Net>,
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings {
            resync: Duration::from_secs(60),
            gate_recheck: None,
            health_check_cache: Duration::from_secs(600),
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
    /// Targets of the gates still waiting that are registered (not draining): the ones a
    /// re-check is for.
    pub waiting: Vec<TargetKey>,
    /// Whether this reconcile called `DescribeTargetHealth` (else it used the task's memory).
    pub described: bool,
}

/// Re-check of waiting gates while the target group's health check is unknown
/// (`DescribeTargetGroups` failed) and no `gate_recheck` is set.
pub const FALLBACK_RECHECK: Duration = Duration::from_secs(2);

/// What a task remembers between reconciles (module docs: budget). Times are the task's clock.
#[derive(Debug, Default)]
pub struct Memory {
    /// The group's targets as last described, with this task's successful writes since
    /// applied; None: describe at the next reconcile.
    known: Option<Vec<Current>>,
    /// When this task registered each target it still knows registered.
    registered_at: HashMap<TargetKey, Instant>,
    /// The last `DescribeTargetHealth`.
    last_described: Option<Instant>,
    /// The group's health check and when it was read.
    timing: Option<(HealthTiming, Instant)>,
    /// The last failed read of the health check.
    timing_failed: Option<Instant>,
    /// Whether a load balancer uses the group, as last seen (`DescribeTargetGroups`, or a
    /// described target only a used group reports).
    in_use: Option<bool>,
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

/// One reconcile of target group `arn` towards `input`, describing its targets first (module
/// docs).
pub async fn reconcile<S: Sink>(
    elb: &Elbv2,
    arn: &str,
    input: &GroupInput,
    settings: &GroupSettings,
    sink: &S,
    metrics: &Metrics,
) -> Result<Outcome, ReconcileError> {
    let mut memory = Memory::default();
    reconcile_in(elb, arn, input, settings, sink, metrics, &mut memory, true).await
}

/// One reconcile against the task's `memory`: describes the group's targets when `describe`
/// or when nothing is remembered, else plans against what is remembered (module docs: budget).
#[allow(clippy::too_many_arguments)]
async fn reconcile_in<S: Sink>(
    elb: &Elbv2,
    arn: &str,
    input: &GroupInput,
    settings: &GroupSettings,
    sink: &S,
    metrics: &Metrics,
    memory: &mut Memory,
    describe: bool,
) -> Result<Outcome, ReconcileError> {
    let fail = |source| ReconcileError {
        arn: arn.to_string(),
        source,
    };
    let t0 = tokio::time::Instant::now();
    // Forgotten unless this reconcile succeeds.
    let remembered = memory.known.take();
    let mut out = Outcome::default();
    // As described, before this reconcile's registrations: the evidence of the group's use.
    let described: Option<Vec<Current>> = match remembered {
        Some(_) if !describe => None,
        _ => {
            let health = elb.target_health(arn, &[]).await;
            metrics.call(
                "DescribeTargetHealth",
                health.as_ref().err().map(|e| e.code()),
            );
            let health = health.map_err(fail)?;
            memory.last_described = Some(Instant::now());
            out.described = true;
            Some(current_of(&health, None))
        }
    };
    let mut current = match &described {
        Some(d) => d.clone(),
        None => remembered.unwrap_or_default(),
    };
    memory.registered_at.retain(|k, _| {
        current
            .iter()
            .any(|c| c.key == *k && c.state != Observed::Draining)
    });
    let p = plan::plan(&input.desired, &current);
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
                let now = Instant::now();
                for k in batch {
                    memory.registered_at.insert(*k, now);
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
                for k in batch {
                    memory.registered_at.remove(k);
                    for c in current.iter_mut().filter(|c| c.key == *k) {
                        c.state = Observed::Draining;
                    }
                }
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

    out.in_use = match described.as_deref().map(usage::health_says) {
        None | Some(HealthSays::Unknown) => None,
        Some(HealthSays::InUse) => Some(true),
        Some(HealthSays::Ask) => match describe_group(elb, arn, metrics, memory).await {
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
                    out.waiting.push(g.target);
                }
            }
        } else {
            out.gates_waiting += 1;
            if current
                .iter()
                .any(|c| c.key == g.target && c.state != Observed::Draining)
            {
                out.waiting.push(g.target);
            }
        }
    }
    if let Some(in_use) = out.in_use {
        metrics
            .not_in_use
            .get_or_create(&[("target_group", arn.to_string())])
            .set(i64::from(!in_use));
        let described = described.as_deref().unwrap_or_default();
        report_use(arn, in_use, described, &out, &input.owners, sink).await;
    }
    metrics.reconcile.observe(t0.elapsed().as_secs_f64());
    if let Some(e) = first_error {
        return Err(fail(e));
    }
    if out.in_use.is_some() {
        memory.in_use = out.in_use;
    }
    memory.known = Some(current);
    for o in &input.owners {
        sink.observed(o).await;
    }
    Ok(out)
}

/// `LoadBalancerArns` of target group `arn` (`DescribeTargetGroups`); its health check goes to
/// `memory`.
async fn describe_group(
    elb: &Elbv2,
    arn: &str,
    metrics: &Metrics,
    memory: &mut Memory,
) -> Result<Vec<String>, Elbv2Error> {
    let r = elb.target_group(arn).await;
    metrics.call("DescribeTargetGroups", r.as_ref().err().map(|e| e.code()));
    let tg = r?;
    memory.in_use = Some(!tg.load_balancer_arns.is_empty());
    if let Some(h) =
        HealthTiming::from_seconds(tg.health.interval_seconds, tg.health.healthy_threshold)
    {
        memory.timing = Some((h, Instant::now()));
        memory.timing_failed = None;
    }
    Ok(tg.load_balancer_arns)
}

/// How the gates of `arn` are re-checked now: the operator's fixed interval, else the group's
/// health check (read with `DescribeTargetGroups` when unknown or older than
/// `health_check_cache`; a failed read is retried after a resync, meanwhile
/// [`FALLBACK_RECHECK`]). A group no load balancer uses is not health-checked: its new targets
/// are `unused` at once and their gates open on the first describe
/// ([`crate::core::usage`]), so it is re-checked every [`FALLBACK_RECHECK`], the first right
/// after the registration.
async fn cadence(
    elb: &Elbv2,
    arn: &str,
    settings: &GroupSettings,
    metrics: &Metrics,
    memory: &mut Memory,
) -> Cadence {
    if let Some(fixed) = settings.gate_recheck {
        return Cadence::Fixed(fixed);
    }
    let now = Instant::now();
    let stale = memory
        .timing
        .is_none_or(|(_, at)| now >= at + settings.health_check_cache);
    let retry = memory
        .timing_failed
        .is_none_or(|at| now >= at + settings.resync);
    if stale && retry {
        match describe_group(elb, arn, metrics, memory).await {
            Ok(_) if memory.timing.is_some_and(|(_, at)| at >= now) => {}
            Ok(_) => {
                tracing::warn!(
                    arn,
                    recheck = ?FALLBACK_RECHECK,
                    "DescribeTargetGroups gave no health-check interval or healthy threshold; readiness gates are re-checked at a fixed interval"
                );
                memory.timing_failed = Some(now);
            }
            Err(e) => {
                tracing::warn!(
                    arn,
                    error = %e,
                    recheck = ?FALLBACK_RECHECK,
                    "reading the target group's health check failed (the controller needs elasticloadbalancing:DescribeTargetGroups); readiness gates are re-checked at a fixed interval until it succeeds"
                );
                memory.timing_failed = Some(now);
            }
        }
    }
    match memory.timing {
        Some((h, _)) if memory.in_use != Some(false) => Cadence::HealthCheck(h),
        _ => Cadence::Fixed(FALLBACK_RECHECK),
    }
}

/// When the task next describes the group for its waiting gates (None: no gate waits).
async fn gate_due(
    elb: &Elbv2,
    arn: &str,
    settings: &GroupSettings,
    metrics: &Metrics,
    memory: &mut Memory,
    waiting: &[TargetKey],
) -> Option<Instant> {
    if waiting.is_empty() {
        return None;
    }
    let cadence = cadence(elb, arn, settings, metrics, memory).await;
    // The pure core counts time from an epoch: the oldest instant it is given.
    let epoch = memory
        .registered_at
        .values()
        .copied()
        .chain(memory.last_described)
        .min()
        .unwrap_or_else(Instant::now);
    let w: Vec<Waiting> = waiting
        .iter()
        .map(|k| Waiting {
            registered: memory.registered_at.get(k).map(|t| *t - epoch),
        })
        .collect();
    let last = memory.last_described.map(|t| t - epoch);
    recheck::next_check(&w, last, cadence).map(|d| epoch + d)
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

/// The task of target group `arn`: reconciles whenever `input` changes (against its memory),
/// and, describing the group, on resync, when a waiting gate is due, and after failures with
/// backoff (module docs). Returns when the sender is dropped.
pub async fn run<S: Sink>(
    elb: Elbv2,
    arn: String,
    mut input: watch::Receiver<Option<Arc<GroupInput>>>,
    settings: GroupSettings,
    sink: S,
    metrics: Metrics,
) {
    let mut memory = Memory::default();
    // When the task wakes next, and when a describe is due (resync or gate).
    let mut due: Option<Instant> = None;
    let mut describe_at: Option<Instant> = None;
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
        let describe = failures > 0 || describe_at.is_some_and(|t| t <= Instant::now());
        let r = reconcile_in(
            &elb,
            &arn,
            &current,
            &settings,
            &sink,
            &metrics,
            &mut memory,
            describe,
        )
        .await;
        match r {
            Ok(o) => {
                if o.in_use.is_some() {
                    log_use(&arn, in_use, o.in_use);
                    in_use = o.in_use;
                }
                failures = 0;
                previous = Duration::ZERO;
                let resync_at =
                    memory.last_described.unwrap_or_else(Instant::now) + settings.resync;
                let gate_at =
                    gate_due(&elb, &arn, &settings, &metrics, &mut memory, &o.waiting).await;
                describe_at = Some(gate_at.map_or(resync_at, |g| g.min(resync_at)));
                due = describe_at;
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
