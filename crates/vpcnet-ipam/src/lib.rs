//! Pure IPAM core of the vpcnet agent (the VPC CNI's ipamd brain). Issue 3.
//!
//! No I/O and no clock reads: every method that depends on time takes `now_ms`, milliseconds
//! since the Unix epoch, from the caller. Deterministic: the same inputs give the same outputs.
//!
//! Shape:
//! - [`Pool`] holds EC2's view of the node's ENIs ([`Eni`]: secondary IPv4 /32s and /28
//!   prefixes) plus our own state: assignments keyed by [`PodKey`] (container ID + interface
//!   name) and cooldown timestamps of released addresses.
//! - [`Pool::plan`] is the warm-pool decision: a pure function of (pool, [`WarmConfig`], now)
//!   returning the EC2 [`Action`]s to take. The agent executes them and feeds the results
//!   back ([`Pool::add_eni`], [`Pool::add_ips`], [`Pool::remove_ips`], [`Pool::remove_eni`], ...).
//! - [`Pool::reconcile`] adopts EC2's view (EC2 is the source of truth; IMDS is never used
//!   to release or hand out an address).
//! - [`Checkpoint`] is the persisted model (JSON, versioned): assignments and cooldowns;
//!   [`vpc_cni`] converts it to and from the VPC CNI's checkpoint (the in-place swap).

mod checkpoint;
mod config;
mod model;
mod plan;
mod pool;
pub mod subnet_role;
pub mod vpc_cni;

pub use checkpoint::{
    Checkpoint, CheckpointAssignment, CheckpointCooldown, CheckpointError, CHECKPOINT_VERSION,
};
pub use config::{
    ConfigError, NetworkCardLimit, WarmConfig, WarmMode, DEFAULT_COOLDOWN_MS,
    DEFAULT_PREFIX_RETRY_MS, IPS_PER_PREFIX,
};
pub use model::{Assignment, Eni, EniInfo, EniObservation, PodKey, PodRef};
pub use plan::Action;
pub use pool::{
    AssignError, Drift, Granted, Pool, PoolSummary, PrefixFallback, ReconcileReport,
    UnknownIpPolicy, EXTRA_INTERFACE_PREFIX, SUBNET_FULL_MS, UNKNOWN_POD_PREFIX,
};
