//! The EC2 calls the agent makes for each step of the IPAM core's plan, and at start-up, by
//! EC2 action name. These are the agent's contract (`crates/vpcnet-agent/src/reconciler`);
//! `crates/vpcnet-agent/tests/capacity_plan.rs` checks them against a real agent.

use std::collections::BTreeMap;

use serde::Serialize;
use vpcnet_ipam::Action;

/// Calls by EC2 action name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct CallCount(BTreeMap<&'static str, u64>);

impl CallCount {
    /// Counts `n` calls of `action`.
    pub fn add(&mut self, action: &'static str, n: u64) {
        if n > 0 {
            *self.0.entry(action).or_default() += n;
        }
    }

    /// Adds every count of `other`, `times` over.
    pub fn add_all(&mut self, other: &CallCount, times: u64) {
        for (a, n) in &other.0 {
            self.add(a, n * times);
        }
    }

    /// Calls of one action.
    pub fn get(&self, action: &str) -> u64 {
        self.0.get(action).copied().unwrap_or(0)
    }

    /// Every call.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// (action, calls), by action name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.0.iter().map(|(a, n)| (*a, *n))
    }
}

/// How the agent places new ENIs, which decides the describes each one costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Without custom networking: one `DescribeSubnets` per new ENI (the zone's subnets with
    /// subnet discovery, the node's subnet's tag check without).
    Subnets,
    /// Custom networking: the ENIConfig's subnet, described once at start.
    EniConfig,
}

/// The agent's calls at start on a fresh node: `DescribeNetworkInterfaces` of the
/// instance (adopting its ENIs) and `DescribeSubnets` of the subnets they are in (and, with
/// custom networking, the ENIConfig's subnet).
pub fn start_up() -> CallCount {
    let mut c = CallCount::default();
    c.add("DescribeNetworkInterfaces", 1);
    c.add("DescribeSubnets", 1);
    c
}

/// The calls one step of the plan costs when EC2 answers at once: an ENI is created,
/// attached, polled until attached (one describe when the attachment completes before the
/// first poll) and marked delete-on-termination; a surplus ENI is detached, polled until
/// detached, and deleted.
pub fn for_action(a: &Action, placement: Placement) -> CallCount {
    let mut c = CallCount::default();
    match a {
        Action::AssignIps { .. } | Action::AssignPrefixes { .. } => {
            c.add("AssignPrivateIpAddresses", 1)
        }
        Action::UnassignIps { .. } | Action::UnassignPrefixes { .. } => {
            c.add("UnassignPrivateIpAddresses", 1)
        }
        Action::CreateEni { .. } => {
            if placement == Placement::Subnets {
                c.add("DescribeSubnets", 1);
            }
            c.add("CreateNetworkInterface", 1);
            c.add("AttachNetworkInterface", 1);
            c.add("DescribeNetworkInterfaces", 1);
            c.add("ModifyNetworkInterfaceAttribute", 1);
        }
        Action::DeleteEni { .. } => {
            c.add("DetachNetworkInterface", 1);
            c.add("DescribeNetworkInterfaces", 1);
            c.add("DeleteNetworkInterface", 1);
        }
    }
    c
}
