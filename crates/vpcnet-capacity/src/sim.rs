//! Nodes joining at once against one account's EC2 request-token buckets, in virtual time: a
//! discrete-event simulation of the agent's start-up and pool fill. No process, no clock:
//! each node is the agent's own IPAM core ([`vpcnet_ipam::Pool`]) making the agent's calls in
//! the agent's order ([`crate::calls`]), through the agent's client-side token buckets,
//! jittered waits and retries on `RequestLimitExceeded` ([`AgentPolicy`]), against the
//! account's per-action buckets (`vpcnet-limits`' `api_rates`) and fixed EC2 latencies.
//!
//! It answers what a fleet of N nodes joining together sees: when each node can serve its
//! first pod and when its warm pool is full (p50, p99, last), the calls by action and how many
//! were throttled, against the floor the buckets impose ([`crate::rates::floor`]).

mod bucket;
mod run;

use serde::Serialize;
use vpcnet_ipam::WarmConfig;
use vpcnet_limits::api_rates::BucketSpec;

use crate::calls::CallCount;
use crate::rates::Floor;

pub use run::simulate;

/// EC2's answer times (ms), as the emulator's latency faults would set them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latencies {
    pub describe_ms: u64,
    pub assign_ms: u64,
    pub create_ms: u64,
    /// The `AttachNetworkInterface` call itself (it answers `attaching`).
    pub attach_call_ms: u64,
    /// From the attach call's answer until EC2 reports the attachment `attached`.
    pub attach_complete_ms: u64,
    /// Any other action.
    pub other_ms: u64,
}

impl Default for Latencies {
    /// The figures of the agent's start-up benchmark (`docs/benchmarks.md`):
    /// describe 100 ms, assign 200 ms, create 300 ms, attach 2 s.
    fn default() -> Self {
        Latencies {
            describe_ms: 100,
            assign_ms: 200,
            create_ms: 300,
            attach_call_ms: 100,
            attach_complete_ms: 2_000,
            other_ms: 100,
        }
    }
}

impl Latencies {
    pub(crate) fn of(&self, action: &str) -> u64 {
        match action {
            a if a.starts_with("Describe") => self.describe_ms,
            "AssignPrivateIpAddresses" | "UnassignPrivateIpAddresses" => self.assign_ms,
            "CreateNetworkInterface" | "DeleteNetworkInterface" => self.create_ms,
            "AttachNetworkInterface" => self.attach_call_ms,
            _ => self.other_ms,
        }
    }
}

/// The agent's side of the rate limits: its client-side buckets (`VPCNET_EC2_*_BUCKET_SIZE`,
/// `VPCNET_EC2_*_REFILL_RATE`), its retries (`vpcnet-aws`'s `RetryPolicy`) and the pool
/// filler's backoff after a failed pass (`pass_backoff` in its reconciler's run loop). The
/// defaults are the agent's; a test in `vpcnet-agent` (`tests/capacity_plan.rs`) keeps the
/// buckets and the retries equal to them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentPolicy {
    pub describe_bucket: BucketSpec,
    pub mutating_bucket: BucketSpec,
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// A call's deadline, bucket waits, throttle holds and retries included
    /// (`VPCNET_EC2_CALL_TIMEOUT`): a throttled call whose retry would come after it fails at
    /// once, as one that ran out of attempts.
    pub operation_timeout_ms: u64,
    /// First retry ceiling after throttling (equal jitter, doubling).
    pub throttle_base_ms: u64,
    /// Largest retry ceiling.
    pub max_delay_ms: u64,
    /// The pool filler's backoff after a failed pass: first ceiling and largest.
    pub pass_base_ms: u64,
    pub pass_max_ms: u64,
    /// The fleet budget's throttle pacing (`VPCNET_EC2_THROTTLE_PACE_*`), `None` for the agent
    /// before it: each call's retries start again from `throttle_base_ms`.
    pub pace: Option<ThrottlePace>,
    /// Whether the leaked-ENI sweep's first describe is made at start (the agent before the
    /// fleet budget) or at a random time within [`FIRST_SWEEP_SPREAD_MS`] of it.
    pub sweep_at_start: bool,
    /// Whether the leaked-ENI sweep runs at all (`DISABLE_LEAKED_ENI_CLEANUP=false`, the
    /// default).
    pub sweep: bool,
}

/// The agent's throttle pacing, one per client-side bucket and node: every throttled answer
/// raises the bucket's level and holds all its calls for an equal-jitter wait of
/// `min(max, base × 2^(level−1))`, whatever call or pass they belong to; a granted call lowers
/// the level by one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ThrottlePace {
    pub base_ms: u64,
    pub max_ms: u64,
}

/// The leaked-ENI sweep's first pass comes at a random time within this many milliseconds of
/// the agent's start (the agent's `FIRST_SWEEP_SPREAD`).
pub const FIRST_SWEEP_SPREAD_MS: u64 = 900_000;

impl AgentPolicy {
    /// The agent before the fleet budget (`docs/benchmarks.md`' figures of 2026-12-07).
    pub fn unpaced() -> Self {
        AgentPolicy {
            pace: None,
            sweep_at_start: true,
            ..AgentPolicy::default()
        }
    }
}

impl Default for AgentPolicy {
    fn default() -> Self {
        AgentPolicy {
            describe_bucket: BucketSpec::new(100, 20.0),
            mutating_bucket: BucketSpec::new(20, 5.0),
            max_attempts: 8,
            operation_timeout_ms: 30_000,
            throttle_base_ms: 500,
            max_delay_ms: 10_000,
            pass_base_ms: 100,
            pass_max_ms: 10_000,
            pace: Some(ThrottlePace {
                base_ms: 1_000,
                max_ms: 5_000,
            }),
            sweep_at_start: false,
            sweep: true,
        }
    }
}

/// What is simulated besides the nodes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimSettings {
    pub latency: Latencies,
    pub agent: AgentPolicy,
    /// Nodes boot at a uniform random time in `[0, boot_spread_ms]`.
    pub boot_spread_ms: u64,
    /// Share (0..1) of every account bucket's refill that other tools in the account use.
    pub other_tools_share: f64,
    /// Seed of every random draw (jitter, boot times): a run reproduces.
    pub seed: u64,
    /// A cluster-wide coordinator (not built; the figure of what one would give): it hands
    /// each joining node, in boot order, a slot of the account's ENI-action bucket from the
    /// bucket's documented size and refill (less `other_tools_share`), and the node sends no
    /// mutating call before its slot.
    pub slots: bool,
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            latency: Latencies::default(),
            agent: AgentPolicy::default(),
            boot_spread_ms: 0,
            other_tools_share: 0.0,
            seed: 1,
            slots: false,
        }
    }
}

/// One node to simulate: its IPAM settings and whether it uses subnet discovery.
#[derive(Debug, Clone)]
pub struct SimNode {
    pub cfg: WarmConfig,
    pub subnet_discovery: bool,
}

/// Milliseconds at p50, p99 and the last node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Spread {
    pub p50_ms: u64,
    pub p99_ms: u64,
    pub last_ms: u64,
}

impl Spread {
    /// p50, p99 and the largest of `v` (all zero when empty).
    pub fn of(mut v: Vec<u64>) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
        Spread {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            last_ms: *v.last().expect("not empty"),
        }
    }
}

/// The outcome of a simulated join.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimReport {
    pub nodes: u64,
    /// Nodes booted at random within this many milliseconds.
    pub boot_spread_ms: u64,
    /// From t = 0 until each node can serve its first pod.
    pub first_address: Spread,
    /// From t = 0 until each node's warm pool is full (its plan empty).
    pub warm_full: Spread,
    /// Nodes whose pool never filled (a call failed every attempt and the run ended).
    pub unfinished: u64,
    /// Every request EC2 received, retries included, by action.
    pub calls: CallCount,
    /// Of those, answered `RequestLimitExceeded`.
    pub throttled: CallCount,
    /// The least time the account's buckets allow for every node's first address (with
    /// what other tools leave of their refill).
    pub floor_first_address: Floor,
}
