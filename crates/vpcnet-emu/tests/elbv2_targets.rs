//! ELBv2 targets through the unmodified aws-sdk-elasticloadbalancingv2: IP and instance
//! targets, their rules, the quota and the health states.

mod common;

use std::time::Duration;

use aws_sdk_elasticloadbalancingv2 as elb;
use common::elbv2::{lab, target};
use common::{code, status};
use elb::types::ProtocolEnum;
use vpcnet_emu::elbv2::Limits;
use vpcnet_emu::RunInstance;

#[tokio::test]
async fn ip_targets_rules_quota_and_health_states() {
    let lab = lab(5).await;
    let tg = lab.ip_tg("pods", 8080).await;
    let register = |targets: Vec<elb::types::TargetDescription>| {
        lab.elb
            .register_targets()
            .target_group_arn(&tg)
            .set_targets(Some(targets))
            .send()
    };
    register(vec![
        target("10.0.1.10", None, None),
        target("10.0.1.11", None, None),
        target("10.0.2.12", Some(9090), None),
    ])
    .await
    .unwrap();
    // no load balancer uses the group yet
    let h = lab.health(&tg).await;
    assert_eq!(h.len(), 3);
    assert!(
        h.iter()
            .all(|(_, s, r)| s == "unused" && r.as_deref() == Some("Target.NotInUse")),
        "{h:?}"
    );
    let d = lab
        .elb
        .describe_target_health()
        .target_group_arn(&tg)
        .send()
        .await
        .unwrap();
    let t = d
        .target_health_descriptions()
        .iter()
        .find(|d| d.target().unwrap().id() == Some("10.0.2.12"))
        .unwrap();
    assert_eq!(t.target().unwrap().port(), Some(9090));
    assert_eq!(
        t.target().unwrap().availability_zone(),
        Some("us-east-1b"),
        "zone detected from the subnet"
    );
    assert_eq!(t.health_check_port(), Some("9090"), "traffic-port");

    // in use by a load balancer in us-east-1a: targets there start initial, us-east-1b is not enabled
    let lb = lab.nlb("web").await;
    lab.listener(&lb, 80, &tg).await;
    let h = lab.health(&tg).await;
    assert_eq!(
        h[0],
        (
            "10.0.1.10".into(),
            "initial".into(),
            Some("Elb.RegistrationInProgress".into())
        )
    );
    assert_eq!(
        h[2],
        (
            "10.0.2.12".into(),
            "unused".into(),
            Some("Target.NotInUse".into())
        )
    );

    // InvalidTarget: outside the VPC without AvailabilityZone all; public addresses; wrong zone
    for (t, why) in [
        (target("192.168.1.10", None, None), "outside the VPC"),
        (target("8.8.8.8", None, Some("all")), "public"),
        (target("10.0.1.20", None, Some("us-east-1b")), "other zone"),
        (target("not-an-ip", None, None), "not IPv4"),
    ] {
        let e = register(vec![t]).await.unwrap_err();
        assert_eq!(
            (code(&e).as_str(), status(&e)),
            ("InvalidTarget", 400),
            "{why}"
        );
    }
    let e = register(vec![target("10.0.1.20", None, Some("eu-west-1a"))])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "ValidationError");
    // outside the VPC with zone all, in a private range: accepted
    register(vec![target("192.168.1.10", None, Some("all"))])
        .await
        .unwrap();
    assert_eq!(lab.health(&tg).await.len(), 4);

    // TooManyTargets registers none of the call
    lab.emu.set_elbv2_limits(Limits {
        targets_per_target_group: 5,
        ..Limits::default()
    });
    let e = register(vec![
        target("10.0.1.30", None, None),
        target("10.0.1.31", None, None),
    ])
    .await
    .unwrap_err();
    assert_eq!((code(&e).as_str(), status(&e)), ("TooManyTargets", 400));
    assert_eq!(
        lab.health(&tg).await.len(),
        4,
        "none of the call registered"
    );
    // registering a registered target again does not count
    register(vec![
        target("10.0.1.10", None, None),
        target("10.0.1.30", None, None),
    ])
    .await
    .unwrap();
    assert_eq!(lab.health(&tg).await.len(), 5);

    // deregistration drains for the delay, then the target is gone
    lab.set_delay(&tg, 1).await;
    lab.deregister(&tg, "10.0.1.10").await;
    let h = lab.health(&tg).await;
    assert_eq!(
        h[0],
        (
            "10.0.1.10".into(),
            "draining".into(),
            Some("Target.DeregistrationInProgress".into())
        )
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let h = lab.health(&tg).await;
    assert!(h.iter().all(|(id, _, _)| id != "10.0.1.10"), "{h:?}");
    // asking for it now: unused, not registered
    let d = lab
        .elb
        .describe_target_health()
        .target_group_arn(&tg)
        .targets(target("10.0.1.10", None, None))
        .send()
        .await
        .unwrap();
    let th = d.target_health_descriptions()[0].target_health().unwrap();
    assert_eq!(
        (th.state().unwrap().as_str(), th.reason().unwrap().as_str()),
        ("unused", "Target.NotRegistered")
    );
    let e = lab
        .elb
        .deregister_targets()
        .target_group_arn(&tg)
        .targets(target("10.0.1.10", None, None))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidTarget");
    let e = register(vec![]).await.unwrap_err();
    assert_eq!(code(&e), "ValidationError");
}

#[tokio::test]
async fn instance_targets_and_groups_not_in_use() {
    let lab = lab(6).await;
    let i = lab
        .emu
        .run_instance(RunInstance {
            instance_type: "m5.large".into(),
            subnet_id: lab.subnet_a.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let tg = lab.tg("nodes", ProtocolEnum::Tcp, 30080, None).await;
    let reg = |t| {
        lab.elb
            .register_targets()
            .target_group_arn(&tg)
            .targets(t)
            .send()
    };
    reg(target(&i.instance_id, None, None)).await.unwrap();
    let e = reg(target("i-0123456789abcdef0", None, None))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidTarget");
    let e = reg(target(&i.instance_id, None, Some("us-east-1a")))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "ValidationError");
    let d = lab
        .elb
        .describe_target_health()
        .target_group_arn(&tg)
        .send()
        .await
        .unwrap();
    let t = d.target_health_descriptions()[0].target().unwrap();
    assert_eq!(
        (t.id(), t.port()),
        (Some(i.instance_id.as_str()), Some(30080))
    );
    // a group no load balancer uses: deregistration is immediate
    lab.deregister(&tg, &i.instance_id).await;
    assert!(lab.health(&tg).await.is_empty());
    lab.emu.terminate_instance(&i.instance_id).await.unwrap();
    let e = reg(target(&i.instance_id, None, None)).await.unwrap_err();
    assert_eq!(
        code(&e),
        "InvalidTarget",
        "terminated instances are refused"
    );
}
