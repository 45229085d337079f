//! A pool that may not provision (`WarmConfig::provisioning = false`, the agent's
//! `DISABLE_NETWORK_RESOURCE_PROVISIONING` and `ENABLE_IMDS_ONLY_MODE`): it serves exactly the
//! addresses attached to the node, plans no EC2 action whatever the warm targets say, adopts
//! addresses attached later by someone else, drops removed ones once free, and says why an
//! ADD fails when everything attached is in use.

mod common;
use std::net::Ipv4Addr;

use common::*;
use vpcnet_ipam::*;

/// The primary ENI with `ips` secondary addresses 10.0.0.(10..), no prefixes.
fn attached(ips: u8) -> Vec<EniObservation> {
    vec![EniObservation {
        info: info("eni-0", 0, Ipv4Addr::new(10, 0, 0, 1)),
        secondary_ips: (0..ips).map(|i| Ipv4Addr::new(10, 0, 0, 10 + i)).collect(),
        prefixes: vec![],
    }]
}

fn no_provisioning(cfg: WarmConfig) -> Pool {
    let mut cfg = cfg;
    cfg.provisioning = false;
    let mut pool = Pool::new(cfg);
    pool.reconcile(&attached(2), UnknownIpPolicy::Free, 0);
    pool
}

#[test]
fn the_plan_is_empty_whatever_the_warm_targets() {
    for (warm_ip, min_ip, pd) in [
        (None, None, false),
        (Some(5), Some(30), false),
        (None, None, true),
        (Some(20), None, true),
    ] {
        let mut cfg = limits("m5.xlarge");
        cfg.warm_ip_target = warm_ip;
        cfg.minimum_ip_target = min_ip;
        cfg.prefix_delegation = pd;
        // Control: the same pool with provisioning grows.
        let mut grows = Pool::new(cfg.clone());
        grows.reconcile(&attached(2), UnknownIpPolicy::Free, 0);
        assert!(!grows.plan(0).is_empty(), "{warm_ip:?} {min_ip:?} {pd}");

        let mut pool = no_provisioning(cfg);
        assert_eq!(pool.plan(0), vec![], "{warm_ip:?} {min_ip:?} {pd}");
        // Nothing to return either: free addresses stay attached past the surplus hold.
        assert_eq!(pool.plan(10 * 60_000), vec![]);
        pool.assign(key(1), pod(1), 0).unwrap();
        pool.release(&key(1), 1_000);
        assert_eq!(pool.plan(10 * 60_000), vec![]);
    }
}

#[test]
fn an_exhausted_pool_says_provisioning_is_disabled() {
    let mut pool = no_provisioning(limits("m5.xlarge"));
    pool.assign(key(1), pod(1), 0).unwrap();
    pool.assign(key(2), pod(2), 0).unwrap();
    let e = pool.assign(key(3), pod(3), 0).unwrap_err();
    assert_eq!(
        e,
        AssignError::ProvisioningDisabled {
            total: 2,
            assigned: 2,
            cooling: 0
        }
    );
    let msg = e.to_string();
    for part in [
        "DISABLE_NETWORK_RESOURCE_PROVISIONING",
        "ENABLE_IMDS_ONLY_MODE",
        "attach more",
        "2 assigned",
    ] {
        assert!(msg.contains(part), "{part}: {msg}");
    }
    // A released address cools down first: the error counts it.
    pool.release(&key(1), 1_000);
    assert_eq!(
        pool.assign(key(3), pod(3), 1_000).unwrap_err(),
        AssignError::ProvisioningDisabled {
            total: 2,
            assigned: 1,
            cooling: 1
        }
    );
    // Control: with provisioning, the same pool would grow (PoolEmpty with growth).
    let mut grows = Pool::new(limits("m5.xlarge"));
    grows.reconcile(&attached(0), UnknownIpPolicy::Free, 0);
    assert!(matches!(
        grows.assign(key(1), pod(1), 0),
        Err(AssignError::PoolEmpty { .. })
    ));
}

#[test]
fn addresses_attached_later_are_adopted_and_removed_ones_dropped_when_free() {
    let mut pool = no_provisioning(limits("m5.xlarge"));
    let a = pool.assign(key(1), pod(1), 0).unwrap().ip;
    pool.assign(key(2), pod(2), 0).unwrap();
    assert!(pool.assign(key(3), pod(3), 0).is_err());
    // Someone attaches two more addresses; the next describe (or IMDS read) shows them.
    let report = pool.reconcile(&attached(4), UnknownIpPolicy::Free, 5_000);
    assert_eq!(report.added_ips.len(), 2);
    pool.assign(key(3), pod(3), 5_000).unwrap();
    // Then takes all but one away, the assigned ones included: free ones go, assigned ones
    // stay with their pods (orphaned) and are never handed out again.
    let report = pool.reconcile(&attached(1), UnknownIpPolicy::Free, 6_000);
    assert_eq!(report.orphaned.len(), 2, "{report:?}");
    assert_eq!(pool.summary(6_000).total_ips, 1);
    assert!(pool.eni("eni-0").unwrap().ips.contains_key(&a));
    assert_eq!(pool.plan(6_000), vec![]);
}
