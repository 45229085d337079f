//! A fleet in the lab ([`vpcnet_lab::fleet`], `vpcnet lab fleet`): agent-only vpcnet nodes
//! join at once against one lab cloud with the account's EC2 rate limits on. The fleet's
//! invariants hold (no address on two ENIs, no ENI left unattached, every node adds and
//! deletes a pod through its CNI with an address its instance holds); at a size the account's
//! buckets absorb, the fleet holds exactly what `vpcnet plan` predicts and makes exactly the
//! calls the simulator's agents make; with a tight account bucket the fleet is throttled, still
//! settles, and its last node serves no sooner than that bucket allows; steady churn of pods
//! through each node's CNI never gives one address to two live pods. Needs root and the
//! workspace binaries; fails when not root.

use std::time::Duration;

use vpcnet_lab::fleet::churn::ChurnOptions;
use vpcnet_lab::fleet::{self, AccountLimits, FleetOptions, FleetReport};
use vpcnet_lab::state::NodeCni;

mod common;
use common::*;

/// Runs the join of `nodes` vpcnet nodes with `tweak` applied, then checks the root namespace
/// is unchanged and nothing of the lab is left.
fn join(tag: &str, nodes: usize, tweak: impl FnOnce(&mut FleetOptions)) -> FleetReport {
    let (name, before) = prepare_test_lab(tag);
    let mut o = FleetOptions::new(&name, nodes, NodeCni::Vpcnet);
    o.bin_dir = bin_dir();
    // The leaked-ENI sweep's first describe comes at a random moment within 15 minutes of a
    // node's start: off, so the calls counted are the join's alone, as the simulator's are.
    o.agent_env
        .push(("DISABLE_LEAKED_ENI_CLEANUP".into(), "true".into()));
    o.quiet = Duration::from_secs(10);
    o.timeout = Duration::from_secs(300);
    tweak(&mut o);
    let report = fleet::join(&o).expect("the fleet joins and settles");
    assert!(
        !vpcnet_lab::state::list_labs().contains(&name),
        "lab {name} left behind"
    );
    assert_eq!(before, root_snapshot(), "root namespace changed");
    report
}

#[test]
fn twenty_nodes_join_and_hold_what_the_planner_and_the_simulator_predict() {
    let r = join("fleet", 20, |o| {
        o.churn = Some(ChurnOptions {
            population: 3,
            per_minute: 12,
            duration: Duration::from_secs(20),
        })
    });
    let inv = &r.invariants;
    assert!(inv.pods_checked && inv.hold(), "{inv:?}");
    let f = &r.figures;
    assert_eq!(f.nodes, 20);
    let p = r.prediction.as_ref().expect("a vpcnet fleet is predicted");
    assert_eq!(
        (f.enis as u64, f.addresses as u64),
        (p.enis, p.addresses),
        "ENIs and pod addresses: measured vs vpcnet plan"
    );
    // 20 nodes' calls fit in the account's bursts: nothing is throttled, and each node makes
    // the calls of the simulator's agent, action by action.
    assert_eq!(f.total_throttled(), 0, "{:?}", f.throttled);
    assert!(f.failed.is_empty(), "{:?}", f.failed);
    let simulated: std::collections::BTreeMap<String, u64> = p
        .simulation
        .calls
        .iter()
        .map(|(a, n)| (a.to_string(), n))
        .collect();
    assert_eq!(
        f.calls, simulated,
        "EC2 calls by action: fleet vs simulator"
    );
    assert_eq!(p.simulation.throttled.total(), 0);
    // Then each node replaces 12 of its 3 pods a minute for 20 s: about 80 ADDs and DELs.
    let c = r.churn.as_ref().expect("the churn ran");
    assert!(c.held(), "{c:?}");
    assert!(
        (60..=100).contains(&c.added) && c.deleted == c.added,
        "{} added, {} deleted",
        c.added,
        c.deleted
    );
}

#[test]
fn a_tight_account_bucket_throttles_the_fleet_which_settles_no_sooner_than_it_allows() {
    // Twenty first assigns through a bucket of 4 refilled 2 per second: at least 8 s; another
    // tool taking half the refill makes the floor 16 s (not a hard bound: its own calls are
    // throttled too when the fleet empties the bucket).
    let mut limits = AccountLimits {
        enabled: true,
        ..Default::default()
    };
    limits.actions.insert(
        "AssignPrivateIpAddresses".into(),
        fleet::BucketOverride::new(4, 2.0),
    );
    let r = join("fleet-tight", 20, |o| {
        o.account_limits = limits;
        o.pod_check = false;
        o.other_tools_share = 0.5;
    });
    assert!(r.other_tool_calls > 0, "the other tool made no call");
    let inv = &r.invariants;
    assert!(inv.hold(), "{inv:?}");
    let f = &r.figures;
    assert!(
        f.throttled
            .get("AssignPrivateIpAddresses")
            .copied()
            .unwrap_or(0)
            > 0,
        "the tight bucket throttled nothing: {f:?}"
    );
    assert_eq!(
        f.floor_first_pod.limiting_action.as_deref(),
        Some("AssignPrivateIpAddresses"),
        "{f:?}"
    );
    assert_eq!(f.floor_first_pod.seconds, 16.0);
    // The bucket started full just before the fleet's clock: nothing beats it.
    assert!(
        f.first_pod.last_ms + 100 >= 8_000,
        "the last node served at {} ms, before the bucket allowed",
        f.first_pod.last_ms
    );
    assert_eq!(f.addresses, 20 * 9, "every node still fills its pool");
}
