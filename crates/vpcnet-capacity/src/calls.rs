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

/// The agent's calls at start on a fresh node: `DescribeNetworkInterfaces` of the instance
/// (adopting its ENIs) and, with subnet discovery, `DescribeSubnets` of the node's subnet (is
/// it tagged `kubernetes.io/role/cni=0`?). The leaked-ENI sweep's first describe
/// ([`SWEEP`]) comes later, at a random time within 15 minutes of the start, so a fleet
/// booting together does not spend its describe burst on it.
pub fn start_up(subnet_discovery: bool) -> CallCount {
    let mut c = CallCount::default();
    c.add("DescribeNetworkInterfaces", 1);
    c.add("DescribeSubnets", u64::from(subnet_discovery));
    c
}

/// The calls one step of the plan costs when EC2 answers at once ([`sequence`], counted).
pub fn for_action(a: &Action) -> CallCount {
    let mut c = CallCount::default();
    for call in sequence(a) {
        c.add(call, 1);
    }
    c
}

/// The calls of one step of the plan, in the order the agent makes them: an ENI is placed
/// (one `DescribeSubnets` that picks or checks its subnet: the zone's subnets with subnet
/// discovery, the ENIConfig's under custom networking, else the node's), created, attached,
/// polled until attached (one describe when the attachment completes before the first poll:
/// [`ATTACH_POLL`]) and marked delete-on-termination; a surplus ENI is detached, polled until
/// detached, and deleted.
pub fn sequence(a: &Action) -> &'static [&'static str] {
    match a {
        Action::AssignIps { .. } | Action::AssignPrefixes { .. } => &["AssignPrivateIpAddresses"],
        Action::UnassignIps { .. } | Action::UnassignPrefixes { .. } => {
            &["UnassignPrivateIpAddresses"]
        }
        Action::CreateEni { .. } => &[
            "DescribeSubnets",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            ATTACH_POLL,
            "ModifyNetworkInterfaceAttribute",
        ],
        Action::DeleteEni { .. } => &[
            "DetachNetworkInterface",
            "DescribeNetworkInterfaces",
            "DeleteNetworkInterface",
        ],
    }
}

/// The leaked-ENI sweep's describe (by the instance's tag, `status=available`).
pub const SWEEP: &str = "DescribeNetworkInterfaces";

/// The describe that polls a new attachment until EC2 reports it `attached`.
pub const ATTACH_POLL: &str = "DescribeNetworkInterfaces";
