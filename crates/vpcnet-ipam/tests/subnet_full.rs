//! An ENI whose subnet has no room left ([`Pool::mark_subnet_full`]): the plan stops growing
//! it and creates an ENI instead (which subnet discovery may place in another subnet), for
//! [`SUBNET_FULL_MS`], then tries it again.

mod common;
use common::*;
use vpcnet_ipam::*;

#[test]
fn a_full_subnet_makes_the_plan_create_an_eni_instead_for_two_minutes() {
    let mut cfg = limits("m5.xlarge");
    cfg.warm_ip_target = Some(5);
    cfg.minimum_ip_target = Some(10);
    let (mut pool, _ec2) = start(cfg);
    let assign = vec![Action::AssignIps {
        eni_id: "eni-0".into(),
        count: 10,
    }];
    assert_eq!(pool.plan(0), assign);

    pool.mark_subnet_full("eni-0", 1_000);
    assert_eq!(
        pool.plan(1_000),
        vec![Action::CreateEni {
            ips: 10,
            prefixes: 0,
            network_card: 0
        }],
        "the primary ENI's subnet is full: a new ENI, not another assign there"
    );
    assert_eq!(pool.plan(1_000 + SUBNET_FULL_MS - 1), pool.plan(1_000));
    assert_eq!(
        pool.plan(1_000 + SUBNET_FULL_MS),
        assign,
        "after the back-off the ENI is grown again"
    );

    // An unknown ENI is not recorded (nothing to grow there anyway).
    pool.mark_subnet_full("eni-unknown", 0);
    assert_eq!(pool.plan(1_000 + SUBNET_FULL_MS), assign);
}
