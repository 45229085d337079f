//! Custom networking (`primary_eni_for_pods = false`, the VPC CNI's
//! AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG): pods get addresses of secondary ENIs only.

mod common;
use common::*;
use vpcnet_ipam::*;

fn custom(ty: &str) -> WarmConfig {
    let mut cfg = limits(ty);
    cfg.primary_eni_for_pods = false;
    cfg
}

#[test]
fn the_primary_eni_gets_no_addresses_and_gives_none_to_pods() {
    for warm_ip in [None, Some(2)] {
        let mut cfg = custom("t3.small");
        cfg.warm_ip_target = warm_ip;
        let (mut pool, mut ec2) = start(cfg);
        ec2.settle(&mut pool, 0);
        let per_eni = ec2.ips_per_eni();
        assert_eq!(
            per_eni[0], 0,
            "primary ENI untouched ({warm_ip:?}): {per_eni:?}"
        );
        assert!(
            per_eni.len() >= 2,
            "a secondary ENI was created: {per_eni:?}"
        );
        // t3.small: 3 ENIs; without the primary 2 × 3 addresses for pods.
        assert_eq!(pool.summary(0).max_ips, 6);
        for i in 0..6 {
            let g = pool.assign(key(i), pod(i), 1).unwrap();
            assert!(!g.primary_eni, "pod {i} got {} of the primary ENI", g.ip);
            ec2.settle(&mut pool, 1);
        }
        assert_eq!(ec2.ips_per_eni()[0], 0);
        let e = pool.assign(key(6), pod(6), 1).unwrap_err();
        assert!(matches!(e, AssignError::AtLimit { .. }), "{e:?}");
    }
}

#[test]
fn addresses_already_on_the_primary_eni_are_not_handed_out() {
    // The pool filled the primary ENI before custom networking was turned on.
    let (mut pool, mut ec2) = start(limits("t3.small"));
    ec2.settle(&mut pool, 0);
    assert!(ec2.ips_per_eni()[0] > 0);
    let mut cfg = pool.config().clone();
    cfg.primary_eni_for_pods = false;
    pool.set_config(cfg);
    ec2.settle(&mut pool, 1);
    let g = pool.assign(key(0), pod(0), 2).unwrap();
    assert!(!g.primary_eni, "{g:?}");
}

#[test]
fn one_eni_leaves_nothing_for_pods() {
    let mut cfg = custom("t3.small");
    cfg.max_eni = Some(1);
    assert!(matches!(
        cfg.validate(),
        Err(ConfigError::NoSecondaryEni(1))
    ));
    cfg.max_eni = Some(2);
    cfg.validate().unwrap();
}
