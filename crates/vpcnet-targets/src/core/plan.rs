//! The changes one target group needs: desired targets ([`super::desired`]) against what
//! `DescribeTargetHealth` reports, in batches ELBv2 accepts; which readiness gates can turn
//! True (policy for a target group no load balancer uses: [`super::usage`]); the
//! `AvailabilityZone` of a target. Pure.
//!
//! Rules:
//! - a target ELBv2 reports `draining` is **not** registered: wanted again, it is registered
//!   again (ELBv2 then cancels the drain); unwanted, it is left to finish draining (never
//!   deregistered twice);
//! - every other reported state (`initial`, `healthy`, `unhealthy`, `unused` with
//!   `Target.NotInUse`, `unavailable`) counts as registered;
//! - registered and neither wanted nor kept → deregister; wanted and not registered → register.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::desired::{Desired, TargetKey};
use super::usage::{self, GateOpen};

/// The most targets one RegisterTargets / DeregisterTargets call carries.
pub const MAX_BATCH: usize = 200;

/// A target's health state as the plan needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// Registered and passing checks.
    Healthy,
    /// Deregistered, draining for the deregistration delay.
    Draining,
    /// Registered, `unused` with reason `Target.NotInUse`: no load balancer sends it traffic
    /// (none uses its target group, or its zone is not enabled on the one that does).
    NotInUse,
    /// Registered in any other state (initial, unhealthy, unavailable).
    Registered,
}

/// One target as `DescribeTargetHealth` reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Current {
    pub key: TargetKey,
    pub state: Observed,
}

/// What to change in one target group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub register: Vec<TargetKey>,
    pub deregister: Vec<TargetKey>,
}

impl Plan {
    /// No call needed.
    pub fn is_empty(&self) -> bool {
        self.register.is_empty() && self.deregister.is_empty()
    }
}

/// The changes that make `current` match `desired` (module rules). Sorted, no duplicates.
pub fn plan(desired: &Desired, current: &[Current]) -> Plan {
    let registered: BTreeSet<TargetKey> = current
        .iter()
        .filter(|c| c.state != Observed::Draining)
        .map(|c| c.key)
        .collect();
    Plan {
        register: desired
            .wanted
            .iter()
            .filter(|k| !registered.contains(k))
            .copied()
            .collect(),
        deregister: registered
            .iter()
            .filter(|k| !desired.wanted.contains(k) && !desired.keep.contains(k))
            .copied()
            .collect(),
    }
}

/// `items` in chunks of at most [`MAX_BATCH`].
pub fn batches<T>(items: &[T]) -> std::slice::Chunks<'_, T> {
    items.chunks(MAX_BATCH)
}

/// `AvailabilityZone` of an `ip` target: `all` when the address is outside every CIDR of the
/// target group's VPC (ELBv2 refuses such a target otherwise), None (ELBv2 infers the zone
/// from the subnet) inside. With no CIDRs known, None.
pub fn availability_zone(ip: Ipv4Addr, vpc_cidrs: &[Ipv4Net]) -> Option<&'static str> {
    (!vpc_cidrs.is_empty() && !vpc_cidrs.iter().any(|c| c.contains(&ip))).then_some("all")
}

/// Of `gated` (pods waiting for their gate: name and target), those whose gate can turn True
/// and why: target `healthy` in `current`, or `unused` / `Target.NotInUse` while no load
/// balancer uses the target group (`in_use` Some(false); [`usage::gate_opens`]).
pub fn gates_to_open<'a>(
    gated: &'a [(String, TargetKey)],
    current: &[Current],
    in_use: Option<bool>,
) -> Vec<(&'a (String, TargetKey), GateOpen)> {
    gated
        .iter()
        .filter_map(|g| {
            let c = current.iter().find(|c| c.key == g.1)?;
            Some((g, usage::gate_opens(c.state, in_use)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(i: u8) -> TargetKey {
        TargetKey {
            ip: Ipv4Addr::new(10, 0, 1, i),
            port: 80,
        }
    }

    fn cur(i: u8, state: Observed) -> Current {
        Current { key: k(i), state }
    }

    #[test]
    fn registers_missing_deregisters_extra_leaves_the_rest() {
        let d = Desired {
            wanted: [k(1), k(2)].into(),
            keep: [k(5)].into(),
        };
        let p = plan(
            &d,
            &[
                cur(2, Observed::Healthy),
                cur(3, Observed::Registered),
                cur(5, Observed::Registered),
            ],
        );
        assert_eq!(p.register, vec![k(1)]);
        assert_eq!(p.deregister, vec![k(3)]);
    }

    #[test]
    fn a_draining_target_wanted_again_is_registered_unwanted_is_left_alone() {
        let d = Desired {
            wanted: [k(1)].into(),
            keep: Default::default(),
        };
        let p = plan(
            &d,
            &[cur(1, Observed::Draining), cur(2, Observed::Draining)],
        );
        assert_eq!(p.register, vec![k(1)]);
        assert!(p.deregister.is_empty());
    }

    #[test]
    fn kept_targets_are_never_registered_anew() {
        let d = Desired {
            wanted: Default::default(),
            keep: [k(1)].into(),
        };
        assert!(plan(&d, &[]).is_empty());
    }

    #[test]
    fn zone_all_only_outside_the_vpc() {
        let cidrs: Vec<Ipv4Net> = vec!["10.0.0.0/16".parse().unwrap()];
        assert_eq!(availability_zone(Ipv4Addr::new(10, 0, 3, 4), &cidrs), None);
        assert_eq!(
            availability_zone(Ipv4Addr::new(100, 64, 0, 4), &cidrs),
            Some("all")
        );
        assert_eq!(availability_zone(Ipv4Addr::new(100, 64, 0, 4), &[]), None);
    }

    #[test]
    fn gates_open_only_for_healthy_targets() {
        let gated = vec![("a".to_string(), k(1)), ("b".to_string(), k(2))];
        let open = gates_to_open(
            &gated,
            &[cur(1, Observed::Healthy), cur(2, Observed::Registered)],
            Some(true),
        );
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].0 .0, "a");
        assert_eq!(open[0].1, GateOpen::Healthy);
    }

    /// Target group used by no load balancer: NotInUse targets open their gates (once the use
    /// is known to be none), a target not yet described waits.
    #[test]
    fn gates_open_for_not_in_use_targets_of_a_group_no_load_balancer_uses() {
        let gated = vec![
            ("a".to_string(), k(1)),
            ("b".to_string(), k(2)),
            ("c".to_string(), k(3)),
        ];
        let current = [
            cur(1, Observed::NotInUse),
            cur(2, Observed::NotInUse),
            cur(3, Observed::Registered),
        ];
        let open = gates_to_open(&gated, &current, Some(false));
        let names: Vec<(&str, GateOpen)> = open.iter().map(|(g, w)| (g.0.as_str(), *w)).collect();
        assert_eq!(
            names,
            vec![
                ("a", GateOpen::GroupNotInUse),
                ("b", GateOpen::GroupNotInUse)
            ]
        );
        // In use (a zone not enabled) or unknown: held.
        assert!(gates_to_open(&gated, &current, Some(true)).is_empty());
        assert!(gates_to_open(&gated, &current, None).is_empty());
    }

    #[test]
    fn batches_hold_at_most_200() {
        let v: Vec<u32> = (0..401).collect();
        let sizes: Vec<usize> = batches(&v).map(|b| b.len()).collect();
        assert_eq!(sizes, vec![200, 200, 1]);
    }

    fn state() -> impl Strategy<Value = Observed> {
        prop_oneof![
            Just(Observed::Healthy),
            Just(Observed::Draining),
            Just(Observed::NotInUse),
            Just(Observed::Registered)
        ]
    }

    proptest! {
        /// Applying the plan (register → not draining; deregister → draining) yields exactly
        /// the wanted targets plus the kept ones that were registered; a second plan is empty.
        #[test]
        fn the_plan_converges_in_one_step(
            wanted in proptest::collection::btree_set(0u8..40, 0..30),
            keep in proptest::collection::btree_set(0u8..40, 0..10),
            current in proptest::collection::btree_map(0u8..40, state(), 0..30),
        ) {
            let d = Desired {
                wanted: wanted.iter().map(|i| k(*i)).collect(),
                keep: keep.iter().filter(|i| !wanted.contains(i)).map(|i| k(*i)).collect(),
            };
            let cur: Vec<Current> = current.iter().map(|(i, s)| cur(*i, *s)).collect();
            let p = plan(&d, &cur);
            // never both ways, never a draining target deregistered again
            for r in &p.register { prop_assert!(!p.deregister.contains(r)); }
            for x in &p.deregister {
                prop_assert!(cur.iter().any(|c| c.key == *x && c.state != Observed::Draining));
            }
            let mut after: std::collections::BTreeMap<TargetKey, Observed> =
                cur.iter().map(|c| (c.key, c.state)).collect();
            for r in &p.register { after.insert(*r, Observed::Registered); }
            for x in &p.deregister { after.insert(*x, Observed::Draining); }
            let registered: BTreeSet<TargetKey> = after.iter()
                .filter(|(_, s)| **s != Observed::Draining).map(|(k, _)| *k).collect();
            for w in &d.wanted { prop_assert!(registered.contains(w)); }
            for r in &registered { prop_assert!(d.wanted.contains(r) || d.keep.contains(r)); }
            let again: Vec<Current> = after.iter().map(|(k, s)| Current { key: *k, state: *s }).collect();
            prop_assert!(plan(&d, &again).is_empty());
        }
    }
}
