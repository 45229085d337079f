//! The load-balancer data plane the emulator drives: what the lab implements (HAProxy in a
//! namespace per load balancer) so that registered targets really receive traffic and their
//! health comes from real checks.
//!
//! The emulator is declarative: after every ELBv2 change it hands the plane the whole desired
//! state of each load balancer that changed ([`LbSpec`]) and the ARNs of those deleted, one at
//! a time, in order, outside its state lock; the ELBv2 call answers after the plane returned.
//! Health is read back with [`LoadBalancerPlane::observe`] on every DescribeTargetHealth.

use std::future::Future;
use std::net::Ipv4Addr;
use std::pin::Pin;

use ipnet::Ipv4Net;
use serde::Serialize;

use super::health::Observation;
use super::model::{HealthCheck, LbType, Protocol};

/// The future a plane method returns: `Err` carries a message reported as the load balancer's
/// `State.Reason` (state `failed`).
pub type PlaneFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// The load balancer's address in one subnet (its ELB ENI).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlaneAddress {
    pub eni_id: String,
    /// The ENI's MAC, `02:..`.
    pub mac: String,
    pub ip: Ipv4Addr,
    pub subnet_cidr: Ipv4Net,
}

/// A listener: traffic to every address on `port` goes to `target_group` (an ARN of
/// [`LbSpec::target_groups`]). TCP (network) or HTTP (application).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListenerSpec {
    pub port: u16,
    pub protocol: Protocol,
    pub target_group: String,
}

/// One target as the plane must serve it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetSpec {
    pub ip: Ipv4Addr,
    pub port: u16,
    /// Deregistered: existing connections continue, no new ones.
    pub draining: bool,
}

/// A target group used by the load balancer: round-robin over its targets, health checked as
/// `health` says (`HealthCheckPort::TrafficPort` is each target's own port).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetGroupSpec {
    pub arn: String,
    pub name: String,
    pub protocol: Protocol,
    pub health: HealthCheck,
    pub targets: Vec<TargetSpec>,
    /// `deregistration_delay.connection_termination.enabled`: when a drained target goes,
    /// close its remaining connections (otherwise they may finish).
    pub terminate_on_removal: bool,
}

/// The whole desired data plane of one load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LbSpec {
    pub arn: String,
    pub name: String,
    pub lb_type: LbType,
    pub addresses: Vec<PlaneAddress>,
    pub listeners: Vec<ListenerSpec>,
    pub target_groups: Vec<TargetGroupSpec>,
}

/// What the lab implements. Methods are called one at a time, in the order of the ELBv2
/// changes; they must not call back into mutating ELBv2 methods of the same emulator.
pub trait LoadBalancerPlane: Send + Sync + 'static {
    /// Create the load balancer's data plane, or bring it to `spec`.
    fn apply(&self, spec: LbSpec) -> PlaneFuture<'_>;
    /// Remove the load balancer's data plane (its ARN); idempotent.
    fn remove(&self, lb_arn: String) -> PlaneFuture<'_>;
    /// What the checks of target `ip:port` in target group `tg_arn` report, if the plane checks
    /// it. Must answer from memory, quickly.
    fn observe(&self, tg_arn: &str, ip: Ipv4Addr, port: u16) -> Option<Observation>;
}

/// No data plane (the default): load balancers become `active` at once and targets of groups
/// in use stay `initial`, as no check ever runs.
pub struct NoPlane;

impl LoadBalancerPlane for NoPlane {
    fn apply(&self, _spec: LbSpec) -> PlaneFuture<'_> {
        Box::pin(async { Ok(()) })
    }
    fn remove(&self, _lb_arn: String) -> PlaneFuture<'_> {
        Box::pin(async { Ok(()) })
    }
    fn observe(&self, _: &str, _: Ipv4Addr, _: u16) -> Option<Observation> {
        None
    }
}
