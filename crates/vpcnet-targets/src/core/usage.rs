//! Whether a load balancer uses a target group, and the readiness-gate policy for a target group
//! that none uses. Pure.
//!
//! ELBv2 health-checks only the targets of a target group that a load balancer forwards to.
//! In a target group no listener or rule forwards to, every registered target is `unused` with
//! reason `Target.NotInUse` and never turns `healthy`; a gate that waited for `healthy` would
//! hold every gated pod not-Ready and deadlock a rollout (aws-load-balancer-controller holds it:
//! its issue #3753, blue/green target groups detached from the load balancer).
//!
//! **Policy.** A readiness gate opens when its target is `healthy`, or when its target is
//! `unused` / `Target.NotInUse` **and** `DescribeTargetGroups` lists no load balancer for the
//! target group: no traffic can reach any of its targets, so holding the pod protects no
//! request, and a rollout proceeds. The binding then carries the condition
//! [`crate::crd::IN_USE_CONDITION`] `False` (reason `NoLoadBalancer`), with a Warning Event
//! `TargetGroupNotInUse` and a log line; once a load balancer uses the group again, the
//! condition turns `True` with a Normal Event. A target `unused` / `Target.NotInUse` in a
//! target group that a load balancer **does** use (its zone is not enabled on that load
//! balancer) keeps its gate shut: other targets serve, and opening it would let a rollout
//! replace serving pods with pods that get no traffic.
//!
//! Evidence, from one `DescribeTargetHealth` answer:
//! - a target in any state ELBv2 reports only for a group in use (`initial`, `healthy`,
//!   `unhealthy`, `unavailable`, ...) → in use, no further call;
//! - otherwise, a target `unused` / `Target.NotInUse` → ask `DescribeTargetGroups`
//!   (`LoadBalancerArns` empty: used by none);
//! - otherwise (no target, or only `draining` ones) → unknown: nothing changes.

use super::plan::{Current, Observed};

/// What `DescribeTargetHealth` alone says about whether a load balancer uses the target group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthSays {
    /// A target is in a state ELBv2 reports only for a target group in use.
    InUse,
    /// Targets are `unused` / `Target.NotInUse`: used by no load balancer, or their zone is not
    /// enabled on the one that uses the group; `DescribeTargetGroups` tells which.
    Ask,
    /// No target but draining ones.
    Unknown,
}

/// The evidence of `described` (targets as `DescribeTargetHealth` reported them; module docs).
pub fn health_says(described: &[Current]) -> HealthSays {
    if described
        .iter()
        .any(|c| matches!(c.state, Observed::Healthy | Observed::Registered))
    {
        HealthSays::InUse
    } else if described.iter().any(|c| c.state == Observed::NotInUse) {
        HealthSays::Ask
    } else {
        HealthSays::Unknown
    }
}

/// Why a readiness gate opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateOpen {
    /// The target is `healthy`.
    Healthy,
    /// The target is `unused` / `Target.NotInUse` and no load balancer uses its target group.
    GroupNotInUse,
}

impl GateOpen {
    /// The pod condition's `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            GateOpen::Healthy => "Healthy",
            GateOpen::GroupNotInUse => "TargetGroupNotInUse",
        }
    }
}

/// Whether the gate of a target in state `state` opens, given whether a load balancer uses its
/// target group (`in_use`: None when unknown). Module docs: the policy.
pub fn gate_opens(state: Observed, in_use: Option<bool>) -> Option<GateOpen> {
    match state {
        Observed::Healthy => Some(GateOpen::Healthy),
        Observed::NotInUse if in_use == Some(false) => Some(GateOpen::GroupNotInUse),
        _ => None,
    }
}

/// The note of the binding's condition and Event when the use of target group `arn` is
/// `in_use`; `unused_targets` of its targets are `unused`, `opened` gates were opened without a
/// health check in this reconcile.
pub fn note(arn: &str, in_use: bool, unused_targets: usize, opened: usize) -> String {
    if in_use {
        format!("a load balancer uses target group {arn} again: readiness gates wait for healthy targets")
    } else {
        format!(
            "target group {arn} is used by no load balancer: its {unused_targets} target(s) are unused \
             (Target.NotInUse) and receive no traffic, so readiness gates open without a health check \
             ({opened} opened now); add a listener or rule that forwards to it, or delete this binding"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::desired::TargetKey;
    use std::net::Ipv4Addr;

    fn cur(i: u8, state: Observed) -> Current {
        Current {
            key: TargetKey {
                ip: Ipv4Addr::new(10, 0, 1, i),
                port: 80,
            },
            state,
        }
    }

    #[test]
    fn health_alone_proves_use_only_through_a_checked_target() {
        use Observed::*;
        assert_eq!(health_says(&[]), HealthSays::Unknown);
        assert_eq!(health_says(&[cur(1, Draining)]), HealthSays::Unknown);
        assert_eq!(
            health_says(&[cur(1, NotInUse), cur(2, Draining)]),
            HealthSays::Ask
        );
        // A zone not enabled on the load balancer: one target unused, another checked.
        assert_eq!(
            health_says(&[cur(1, NotInUse), cur(2, Registered)]),
            HealthSays::InUse
        );
        assert_eq!(
            health_says(&[cur(1, NotInUse), cur(2, Healthy)]),
            HealthSays::InUse
        );
    }

    #[test]
    fn a_not_in_use_target_opens_its_gate_only_when_no_load_balancer_uses_the_group() {
        use Observed::*;
        assert_eq!(
            gate_opens(NotInUse, Some(false)),
            Some(GateOpen::GroupNotInUse)
        );
        // Used by a load balancer (zone not enabled) or not known: the gate stays shut.
        assert_eq!(gate_opens(NotInUse, Some(true)), None);
        assert_eq!(gate_opens(NotInUse, None), None);
        // Only NotInUse is excused: initial, unhealthy, draining wait whatever the group's use.
        for s in [Registered, Draining] {
            assert_eq!(gate_opens(s, Some(false)), None, "{s:?}");
        }
        for u in [Some(true), Some(false), None] {
            assert_eq!(gate_opens(Healthy, u), Some(GateOpen::Healthy));
        }
    }

    #[test]
    fn the_note_names_the_group_and_what_to_do() {
        let n = note("arn:tg/web", false, 3, 2);
        assert!(
            n.contains("arn:tg/web") && n.contains("Target.NotInUse"),
            "{n}"
        );
        assert!(n.contains("3 target(s)") && n.contains("2 opened"), "{n}");
        assert!(note("arn:tg/web", true, 0, 0).contains("again"));
    }
}
