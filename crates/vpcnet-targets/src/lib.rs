//! `vpcnet-targets`: registers pod IPs as ELBv2 targets (target type `ip`).
//!
//! - [`core`]: pure decisions — desired targets from endpoints ([`core::desired`]), the
//!   per-target-group diff against ELBv2's view with draining understood, batches of 200,
//!   `AvailabilityZone: all` outside the VPC ([`core::plan`]); readiness gates in a target
//!   group no load balancer uses ([`core::usage`]).
//! - [`crd`]: the `TargetGroupBinding` resource (`elbv2.k8s.aws/v1beta1`).
//! - [`views`]: cached Kubernetes objects → the core's inputs.
//! - [`group`]: one task per target group doing its ELBv2 calls with backoff.
//! - [`controller`]: watches (bindings, Services, EndpointSlices, Pods, Nodes) with a warm
//!   start, feeding the group tasks; readiness gates, Events and binding status.
//! - [`tagged`]: target groups chosen by tag (label-selected mode).
//! - [`leader`]: leader election on a Lease; only the leader writes to ELBv2.
//! - [`metrics`], [`http`]: `/metrics` and `/healthz`.

pub mod controller;
pub mod core;
pub mod crd;
pub mod group;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod tagged;
pub mod views;
