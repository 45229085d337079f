//! ELBv2 (Elastic Load Balancing, API version `2015-12-01`) on the emulator's endpoint, for the
//! unmodified aws-sdk-elasticloadbalancingv2: load balancers (`network`, `application`,
//! scheme `internal`, one ENI per subnet), target groups (`ip`, `instance`) with health
//! checks and attributes, listeners forwarding to one target group, target registration with
//! ELBv2's rules and quotas, target health, tags; ELBv2's error codes. Faults and call counts
//! are the emulator's, keyed `elbv2:<Action>` ([`fault_key`]); an empty token bucket (or an
//! injected `RequestLimitExceeded`) answers ELBv2's `Throttling`.
//!
//! A Query request is ELBv2's when its `Version` is `2015-12-01`, or, without `Version`, when
//! its SigV4 credential scope names the service `elasticloadbalancing` ([`is_elbv2`]); both
//! services share action names such as `DescribeTags`.
//!
//! The data plane is a [`LoadBalancerPlane`] ([`Emulator::set_lb_plane`]): the lab serves each
//! load balancer with HAProxy; target health comes from its checks. Without a plane targets
//! of groups in use stay `initial`.

pub(crate) mod actions;
pub mod attributes;
pub mod balancers;
pub mod control;
mod describe;
pub mod error;
pub mod health;
pub mod health_check;
pub mod model;
pub mod plane;
pub mod render;
pub mod targets;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

pub use actions::ACTIONS;
pub use error::ElbError;
pub use health::{CheckFailure, Observation, State, TargetHealth};
pub use model::{Elbv2Model, HealthCheck, HealthCheckPort, LbType, Limits, Protocol, TargetType};
pub use plane::{
    LbSpec, ListenerSpec, LoadBalancerPlane, NoPlane, PlaneAddress, PlaneFuture, TargetGroupSpec,
    TargetSpec,
};

use crate::emulator::Emulator;
use crate::model::Cloud;
use crate::query::params::Params;
use model::LbState;

/// The key of ELBv2 action `action` in the emulator's [`crate::Faults`] and
/// [`crate::CallCounts`]: `elbv2:` + the action name (EC2 and ELBv2 share names such as
/// `DescribeTags`), e.g. `elbv2:RegisterTargets`.
pub fn fault_key(action: &str) -> String {
    format!("elbv2:{action}")
}

/// ELBv2's API version: the `Version` of its Query requests.
pub const API_VERSION: &str = "2015-12-01";
/// The SigV4 signing name of ELBv2.
pub const SIGNING_NAME: &str = "elasticloadbalancing";

/// Whether a Query request goes to ELBv2: `Version=2015-12-01`, or no `Version` and an
/// `Authorization` header whose credential scope (`Credential=AKID/date/region/SERVICE/
/// aws4_request`) names `elasticloadbalancing`.
pub fn is_elbv2(params: &Params, authorization: Option<&str>) -> bool {
    match params.get("Version") {
        Some(v) => v == API_VERSION,
        None => {
            authorization
                .and_then(|a| a.split("Credential=").nth(1))
                .and_then(|c| c.split('/').nth(3))
                == Some(SIGNING_NAME)
        }
    }
}

type Applied = BTreeMap<String, Option<LbSpec>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The ELBv2 side of one emulator.
pub(crate) struct Elbv2State {
    model: Mutex<Elbv2Model>,
    plane: RwLock<Arc<dyn LoadBalancerPlane>>,
    /// What the plane was last given, per load balancer it knows (None: the last apply failed
    /// and is retried on the next change); held while a mutation and its plane deliveries
    /// run, so the plane sees changes in order.
    applied: tokio::sync::Mutex<Applied>,
    /// The pending wake-up that ends deregistration delays.
    wakeup: Mutex<Option<Instant>>,
}

impl Elbv2State {
    pub(crate) fn new(seed: u64, region: &str, account_id: &str) -> Self {
        Elbv2State {
            model: Mutex::new(Elbv2Model::new(seed, region, account_id)),
            plane: RwLock::new(Arc::new(NoPlane)),
            applied: tokio::sync::Mutex::new(BTreeMap::new()),
            wakeup: Mutex::new(None),
        }
    }
}

/// The desired data plane of every load balancer (see [`LbSpec`]).
fn specs(m: &Elbv2Model, cloud: &Cloud) -> BTreeMap<String, LbSpec> {
    let mut out = BTreeMap::new();
    for lb in m.load_balancers.values() {
        let addresses = lb
            .addresses
            .iter()
            .filter_map(|a| {
                Some(PlaneAddress {
                    eni_id: a.eni_id.clone(),
                    mac: cloud.eni(&a.eni_id)?.mac.clone(),
                    ip: a.ip,
                    subnet_cidr: cloud.subnet(&a.subnet_id)?.cidr,
                })
            })
            .collect();
        let zones: Vec<&str> = lb
            .addresses
            .iter()
            .map(|a| a.availability_zone.as_str())
            .collect();
        let listeners: Vec<ListenerSpec> = m
            .listeners
            .values()
            .filter(|l| l.lb_arn == lb.arn)
            .map(|l| ListenerSpec {
                port: l.port,
                protocol: l.protocol,
                target_group: l.target_group_arn.clone(),
            })
            .collect();
        let mut tg_arns: Vec<&String> = listeners.iter().map(|l| &l.target_group).collect();
        tg_arns.sort();
        tg_arns.dedup();
        let target_groups = tg_arns
            .into_iter()
            .filter_map(|a| m.target_groups.get(a))
            .map(|tg| TargetGroupSpec {
                arn: tg.arn.clone(),
                name: tg.name.clone(),
                protocol: tg.protocol,
                health: tg.health.clone(),
                targets: tg
                    .targets
                    .iter()
                    .filter(|r| {
                        r.availability_zone
                            .as_deref()
                            .is_none_or(|z| z == "all" || zones.contains(&z))
                    })
                    .map(|r| TargetSpec {
                        ip: r.ip,
                        port: r.port,
                        draining: r.draining_until.is_some(),
                    })
                    .collect(),
                terminate_on_removal: tg
                    .attributes
                    .get(attributes::CONNECTION_TERMINATION)
                    .is_some_and(|v| v == "true"),
            })
            .collect();
        out.insert(
            lb.arn.clone(),
            LbSpec {
                arn: lb.arn.clone(),
                name: lb.name.clone(),
                lb_type: lb.lb_type,
                addresses,
                listeners,
                target_groups,
            },
        );
    }
    out
}

impl Emulator {
    fn elbv2(&self) -> &Elbv2State {
        &self.inner.elbv2
    }

    /// Install the load-balancer data plane (replacing any before). Load balancers that exist
    /// already are handed to it on the next ELBv2 change.
    pub fn set_lb_plane(&self, plane: Arc<dyn LoadBalancerPlane>) {
        *self
            .elbv2()
            .plane
            .write()
            .unwrap_or_else(|e| e.into_inner()) = plane;
    }

    fn lb_plane(&self) -> Arc<dyn LoadBalancerPlane> {
        self.elbv2()
            .plane
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Read the ELBv2 model (tests and the lab): `f` runs under its lock.
    pub fn with_elbv2<R>(&self, f: impl FnOnce(&Elbv2Model) -> R) -> R {
        f(&lock(&self.elbv2().model))
    }

    /// ELBv2 quotas in force.
    pub fn elbv2_limits(&self) -> Limits {
        lock(&self.elbv2().model).limits
    }

    /// Replace the ELBv2 quotas (e.g. `targets_per_target_group`); existing resources stay.
    pub fn set_elbv2_limits(&self, limits: Limits) {
        lock(&self.elbv2().model).limits = limits;
    }

    /// Answer one ELBv2 Query call: (HTTP status, XML body).
    pub async fn elbv2_call(&self, params: Params) -> (u16, String) {
        self.elbv2_call_from(params, None).await
    }

    /// [`Emulator::elbv2_call`] signed with `access_key`, whose account's rate limits apply.
    pub async fn elbv2_call_from(&self, params: Params, access_key: Option<&str>) -> (u16, String) {
        let request_id = self.next_request_id();
        let fail = |e: ElbError| (e.status(), render::error_body(&e, &request_id));
        let action = match params.required("Action") {
            Ok(a) => a.to_string(),
            Err(e) => return fail(error::revalidate(e)),
        };
        let Some(mutating) = actions::is_mutating(&action) else {
            return fail(error::invalid_action(&action));
        };
        let st = self.elbv2();
        let metered = crate::account_limits::MeteredCall {
            api: crate::request_log::Api::Elbv2,
            action: &action,
            filtered: false,
            access_key,
        };
        let admission = self.admit_call(&fault_key(&action), mutating, &metered);
        if admission.throttled {
            return fail(error::throttling());
        }
        if !admission.latency.is_zero() {
            tokio::time::sleep(admission.latency).await;
        }
        if let Some(e) = admission.error {
            return fail(match e.code.as_str() {
                "RequestLimitExceeded" | "Throttling" => error::throttling(),
                _ => e,
            });
        }
        let plane = self.lb_plane();
        let run = || {
            let now = Instant::now();
            self.with_cloud_mut(|cloud| {
                let mut model = lock(&st.model);
                model.prune_drained(now);
                let mut ctx = actions::Ctx {
                    cloud,
                    model: &mut model,
                    plane: plane.as_ref(),
                    clock: self.clock(now),
                    request_id: &request_id,
                };
                actions::handle(&action, &params, &mut ctx)
            })
        };
        let result = if mutating {
            let mut applied = st.applied.lock().await;
            let r = run();
            if r.is_ok() {
                self.sync_plane(&mut applied).await;
            }
            r
        } else {
            run()
        };
        match result {
            Ok(body) => (200, body),
            Err(e) => fail(e),
        }
    }

    /// Bring the data plane to the model: apply every changed load balancer, remove deleted
    /// ones, record each load balancer's state, and schedule the end of the next
    /// deregistration delay. `applied` is the held plane record.
    async fn sync_plane(&self, applied: &mut Applied) {
        let st = self.elbv2();
        let now = Instant::now();
        let (wanted, next) = self.with_cloud_mut(|cloud| {
            let mut m = lock(&st.model);
            m.prune_drained(now);
            (specs(&m, cloud), m.next_drain_deadline())
        });
        let plane = self.lb_plane();
        let gone: Vec<String> = applied
            .keys()
            .filter(|a| !wanted.contains_key(*a))
            .cloned()
            .collect();
        for arn in gone {
            if let Err(e) = plane.remove(arn.clone()).await {
                tracing::warn!(lb = %arn, error = %e, "removing a load balancer's data plane failed");
            }
            applied.remove(&arn);
        }
        for (arn, spec) in wanted {
            if applied.get(&arn).is_some_and(|a| a.as_ref() == Some(&spec)) {
                continue;
            }
            let result = plane.apply(spec.clone()).await;
            let state = match &result {
                Ok(()) => LbState::Active,
                Err(e) => {
                    tracing::warn!(lb = %arn, error = %e, "data plane failed");
                    LbState::Failed(e.clone())
                }
            };
            if let Some(lb) = lock(&st.model).load_balancers.get_mut(&arn) {
                lb.state = state;
            }
            applied.insert(arn, result.ok().map(|()| spec));
        }
        if let Some(at) = next {
            self.wake_at(at);
        }
    }

    /// Re-sync the plane at `at` (when a deregistration delay ends), unless an earlier wake-up
    /// is pending.
    fn wake_at(&self, at: Instant) {
        {
            let mut w = lock(&self.elbv2().wakeup);
            if w.is_some_and(|t| t <= at && t > Instant::now()) {
                return;
            }
            *w = Some(at);
        }
        let emu = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            let st = emu.elbv2();
            {
                let mut w = lock(&st.wakeup);
                if *w == Some(at) {
                    *w = None;
                }
            }
            let mut applied = st.applied.lock().await;
            emu.sync_plane(&mut applied).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_by_version_then_signing_service() {
        let p = |s: &str| Params::parse(s.as_bytes());
        assert!(is_elbv2(&p("Action=DescribeTags&Version=2015-12-01"), None));
        assert!(!is_elbv2(
            &p("Action=DescribeTags&Version=2016-11-15"),
            None
        ));
        let elb = "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/elasticloadbalancing/aws4_request, SignedHeaders=host, Signature=x";
        let ec2 = "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=x";
        assert!(is_elbv2(&p("Action=DescribeTags"), Some(elb)));
        assert!(!is_elbv2(&p("Action=DescribeTags"), Some(ec2)));
        assert!(!is_elbv2(&p("Action=DescribeTags"), None));
        // an explicit Version wins over the signature
        assert!(!is_elbv2(
            &p("Action=DescribeTags&Version=2016-11-15"),
            Some(elb)
        ));
    }
}
