//! A target group no load balancer uses, as ELBv2 reports it and as vpcnet-targets reads it:
//! every target `unused` / `Target.NotInUse` and `DescribeTargetGroups` listing no
//! `LoadBalancerArns`, both before a listener forwards to it and again after its listener or
//! its load balancer is deleted; while used, targets are checked (`initial`) and the load
//! balancer is listed. The two signals always agree.

mod common;

use common::elbv2::{lab, target, Lab};

/// `LoadBalancerArns` of target group `tg` (DescribeTargetGroups by ARN).
async fn lbs_of(lab: &Lab, tg: &str) -> Vec<String> {
    lab.elb
        .describe_target_groups()
        .target_group_arns(tg)
        .send()
        .await
        .expect("DescribeTargetGroups")
        .target_groups()[0]
        .load_balancer_arns()
        .to_vec()
}

async fn assert_not_in_use(lab: &Lab, tg: &str, when: &str) {
    let h = lab.health(tg).await;
    assert!(!h.is_empty(), "{when}: no target");
    assert!(
        h.iter()
            .all(|(_, s, r)| s == "unused" && r.as_deref() == Some("Target.NotInUse")),
        "{when}: {h:?}"
    );
    assert!(lbs_of(lab, tg).await.is_empty(), "{when}");
}

async fn assert_in_use(lab: &Lab, tg: &str, lb: &str, when: &str) {
    let h = lab.health(tg).await;
    assert!(
        h.iter().all(|(_, s, _)| s == "initial"),
        "{when}: checked targets: {h:?}"
    );
    assert_eq!(lbs_of(lab, tg).await, vec![lb.to_string()], "{when}");
}

#[tokio::test]
async fn a_target_group_without_a_listener_reports_its_targets_not_in_use() {
    let lab = lab(61).await;
    let tg = lab.ip_tg("pods", 80).await;
    lab.elb
        .register_targets()
        .target_group_arn(&tg)
        .targets(target("10.0.1.10", None, None))
        .targets(target("10.0.1.11", None, None))
        .send()
        .await
        .unwrap();
    assert_not_in_use(&lab, &tg, "never used").await;

    let lb = lab.nlb("web").await;
    let listener = lab.listener(&lb, 80, &tg).await;
    assert_in_use(&lab, &tg, &lb, "behind a listener").await;

    lab.elb
        .delete_listener()
        .listener_arn(&listener)
        .send()
        .await
        .unwrap();
    assert_not_in_use(&lab, &tg, "its listener deleted, the load balancer kept").await;

    lab.listener(&lb, 80, &tg).await;
    assert_in_use(&lab, &tg, &lb, "a listener again").await;
    lab.elb
        .delete_load_balancer()
        .load_balancer_arn(&lb)
        .send()
        .await
        .unwrap();
    assert_not_in_use(&lab, &tg, "its load balancer deleted").await;
}
