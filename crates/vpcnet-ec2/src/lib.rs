//! EC2 and IMDS adapter: the only crate that depends on aws-sdk-ec2 (1.2 million lines).
//! The CNI plugin and the pure IPAM core never depend on it.
//!
//! - [`Ec2`]: typed async EC2 actions returning plain structs ([`NetworkInterface`],
//!   [`Instance`], [`Subnet`], [`vpcnet_limits::InstanceLimits`]); every call passes a
//!   client-side token bucket, has a deadline, and is retried with jittered exponential
//!   backoff on throttling, 5xx and transport faults only ([`CallSettings`]).
//! - [`Ec2Error`]: EC2's error code with `is_throttle` / `is_limit` / `is_not_found` /
//!   `is_insufficient_addresses`.
//! - [`Ec2Observer`]: per-request hook for metrics.
//! - [`Imds`]: instance metadata (IMDSv2) through aws-config's IMDS client.
//! - [`sdk_config`]: the SDK configuration (region, endpoint, credentials, timeouts) other
//!   adapters (e.g. `vpcnet-eks`) start from.

mod action;
mod bucket;
mod call;
mod client;
mod convert;
mod ec2;
mod error;
mod imds;
mod model;
mod observer;
mod retry;

pub use action::{Action, ActionClass};
pub use bucket::{BucketConfig, RateLimiter, TokenBucket};
pub use call::CallSettings;
pub use client::{sdk_config, Ec2, Ec2Options, StaticCredentials};
pub use error::{classify, error_chain, Cause, Ec2Error, Retry};
pub use imds::{Imds, ImdsError, ImdsInterface};
pub use model::{
    AddressRelease, AddressRequest, Assigned, CreateEni, EniAttachment, Filter, Instance,
    NetworkInterface, Subnet, Tags,
};
pub use observer::{Ec2Observer, NoopObserver};
pub use retry::RetryPolicy;

pub use aws_config;
pub use aws_sdk_ec2;
