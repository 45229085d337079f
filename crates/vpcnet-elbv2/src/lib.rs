//! Elastic Load Balancing v2 adapter: the only crate that depends on
//! aws-sdk-elasticloadbalancingv2. Used by the lab (`vpcnet lab lb ...`), the emulator's tests
//! and the target controller.
//!
//! - [`Elbv2`]: typed async ELBv2 actions (load balancers, target groups and their attributes,
//!   listeners, target registration and health, tags) returning plain structs
//!   ([`LoadBalancer`], [`TargetGroup`], [`Listener`], [`TargetHealth`]). Every call passes a
//!   client-side token bucket, has a deadline, and is retried with jittered exponential backoff
//!   on throttling (`Throttling`), 5xx and transport faults only: the shared call loop of
//!   `vpcnet-aws` under [`CallSettings`]; paginated describes follow every page through it.
//! - [`Elbv2Error`]: ELBv2's error code with `is_throttle` / `is_not_found` /
//!   `is_invalid_target` / `is_quota`.

mod client;
mod elbv2;
mod error;
mod model;

pub use client::{Elbv2, Elbv2Options};
pub use error::Elbv2Error;
pub use model::{
    HealthCheck, HealthState, Listener, LoadBalancer, LoadBalancerType, LoadBalancerZone,
    NewLoadBalancer, NewTargetGroup, Target, TargetGroup, TargetHealth, TargetType,
};
pub use vpcnet_aws::{CallSettings, StaticCredentials};
