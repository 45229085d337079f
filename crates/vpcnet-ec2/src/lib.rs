//! EC2 adapter: the only crate that depends on aws-sdk-ec2 (1.2 million lines). The CNI
//! plugin and the pure IPAM core never depend on it.
//!
//! - [`Ec2`]: typed async EC2 actions returning plain structs ([`NetworkInterface`],
//!   [`Instance`], [`Subnet`], [`vpcnet_limits::InstanceLimits`]). Every call runs on the
//!   shared AWS call layer (`vpcnet-aws`): a client-side token bucket, a deadline, and retries
//!   with jittered exponential backoff on throttling, 5xx and transport faults only
//!   ([`CallSettings`]); paginated describes follow every page through it.
//! - [`Ec2Error`]: EC2's error code with `is_throttle` / `is_limit` / `is_not_found` /
//!   `is_insufficient_addresses`.
//! - [`Ec2Observer`]: per-request hook for metrics.
//!
//! The IMDS client is `vpcnet_imds::Imds` (feature `client`); the SDK configuration, the
//! rate limiter, the retry classification and `error_chain` are `vpcnet-aws`'s. The types of
//! `vpcnet-aws` that [`Ec2Options`] and [`Action`] hold are re-exported here; the SDK itself is
//! not.

mod action;
mod call;
mod client;
mod convert;
mod ec2;
mod error;
mod model;
mod observer;
mod send;

pub use action::{Action, ActionClass};
pub use client::{Ec2, Ec2Options};
pub use error::Ec2Error;
pub use model::{
    AddressRelease, AddressRequest, Assigned, CreateEni, EniAttachment, Filter, Instance,
    NetworkInterface, Subnet, Tags,
};
pub use observer::{Ec2Observer, NoopObserver};
pub use vpcnet_aws::{
    BucketConfig, CallSettings, Cause, PaceConfig, RetryPolicy, StaticCredentials,
};
