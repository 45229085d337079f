//! Prefix delegation on a fragmented subnet. EC2 carves a /28 prefix only from an aligned
//! block of 16 free addresses; a subnet with many free addresses scattered over every block
//! answers `InsufficientCidrBlocks` (VPC CNI #2749, #3264), and a node that only asks for
//! prefixes then starts no pod. Here the pool falls back: after such a failure
//! ([`Pool::fall_back_to_ips`]) the plan grows with secondary /32 addresses (one slot each,
//! as before prefix delegation) until the retry time, then asks for a prefix again. A prefix
//! that arrives ends the fallback ([`Pool::add_prefixes`], [`Pool::add_eni`]), and from then
//! on free /32s count as surplus, so the node returns to prefixes as its /32s free up.
//! Another failure waits twice as long as the last, up to 16 times the base
//! ([`crate::WarmConfig::prefix_retry_ms`]).

use serde::{Deserialize, Serialize};

use super::Pool;

/// Most doublings of the retry wait: 2 min base → at most 32 min.
const MAX_DOUBLINGS: u32 = 4;

/// The pool's fallback from prefixes to secondary /32 addresses (reported on the Node, in
/// metrics and by `/v1/enis`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixFallback {
    /// When the first prefix request failed (ms since the epoch).
    pub since_ms: u64,
    /// Prefix requests that failed since (each one doubles the wait).
    pub failures: u32,
    /// Until when the plan grows with /32s; after it, the next growth asks for prefixes.
    pub retry_at_ms: u64,
}

impl Pool {
    /// A prefix request failed because no aligned /28 is free in the subnet
    /// (`InsufficientCidrBlocks`) and no other ENI can take prefixes: grow with secondary /32s
    /// until the retry time; the subnet-full marks ([`Pool::mark_subnet_full`]) are dropped.
    /// Ignored without prefix delegation.
    pub fn fall_back_to_ips(&mut self, now_ms: u64) {
        if !self.cfg.prefix_delegation {
            return;
        }
        let (since_ms, failures) = match self.prefix_fallback {
            Some(f) => (f.since_ms, f.failures.saturating_add(1)),
            None => (now_ms, 1),
        };
        let wait = self
            .cfg
            .prefix_retry_ms
            .saturating_mul(1 << (failures - 1).min(MAX_DOUBLINGS));
        self.prefix_fallback = Some(PrefixFallback {
            since_ms,
            failures,
            retry_at_ms: now_ms.saturating_add(wait),
        });
        // ENIs marked full after their prefix was refused can take single addresses: the
        // marks go (an ENI whose subnet is really full is marked again at its next refusal).
        self.subnet_full.clear();
    }

    /// The fallback in force, from the first failed prefix request until a prefix arrives.
    pub fn prefix_fallback(&self) -> Option<PrefixFallback> {
        self.prefix_fallback
    }

    /// Whether the plan grows with /32s now (before the retry time of a fallback).
    pub(super) fn growing_with_ips(&self, now_ms: u64) -> bool {
        self.prefix_fallback
            .is_some_and(|f| self.cfg.prefix_delegation && now_ms < f.retry_at_ms)
    }

    /// A prefix was assigned: the subnet has /28 blocks again.
    pub(super) fn prefixes_arrived(&mut self) {
        self.prefix_fallback = None;
    }
}
