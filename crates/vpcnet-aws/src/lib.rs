//! The AWS call layer every vpcnet AWS adapter (`vpcnet-ec2`, `vpcnet-elbv2`, `vpcnet-eks`)
//! shares, so that each adapter holds only its service's actions, conversions and error codes.
//! It links aws-config (for the SDK configuration) but no service SDK; like the adapters it
//! stays out of the CNI plugin and the pure core.
//!
//! - [`sdk_config`] from [`SdkOptions`]: region (explicit, environment, optionally IMDS),
//!   endpoint, [`StaticCredentials`] or the default chain, connect timeout, the SDK's own
//!   retries off. [`ConfigError`] when it cannot be built.
//! - [`CallSettings`]: an operation deadline, an attempt deadline, the [`RetryPolicy`] (the
//!   workspace's one backoff type, `vpcnet_backoff::Backoff`, with equal jitter) and two
//!   [`BucketConfig`]s.
//! - [`RateLimiter`]: two client-side [`TokenBucket`]s per client, one per [`ActionClass`],
//!   on tokio's clock, so tests run them on a paused clock.
//! - [`pace`]: throttle pacing per bucket ([`PaceConfig`]): a throttled answer holds every
//!   call of its class, doubling per throttle, lowered by granted calls.
//! - [`Caller`]: the one call loop (bucket, attempt deadline, retries on throttling, 5xx and
//!   transport faults only, operation deadline, an [`Observer`] for metrics) and
//!   [`Caller::pages`], the loop over the pages of a token-paginated Describe. An adapter
//!   plugs in through [`AwsAction`] (its action type) and [`CallError`] (its error type).
//! - [`classify`]: AWS error codes and HTTP statuses as [`Retry`] classes; [`error_chain`]
//!   formats an error with its causes on one line; [`Cause`] is the shared cause type.

mod bucket;
mod call;
mod config;
mod error;
pub mod pace;
mod retry;

pub use aws_types::SdkConfig;
pub use bucket::{ActionClass, BucketConfig, RateLimiter, TokenBucket};
pub use call::{AwsAction, CallSettings, Caller, NoObserver, Observer};
pub use config::{region_of, sdk_config, RegionLookup, SdkOptions, StaticCredentials};
pub use error::{classify, error_chain, CallError, Cause, ConfigError, Retry};
pub use pace::PaceConfig;
pub use retry::RetryPolicy;
