//! ELBv2 target groups and listeners through the unmodified aws-sdk-elasticloadbalancingv2:
//! defaults, attributes, pages, listener rules and which groups are in use.

mod common;

use aws_sdk_elasticloadbalancingv2 as elb;
use common::code;
use common::elbv2::{forward, lab};
use elb::types::{Matcher, ProtocolEnum, TargetGroupAttribute, TargetTypeEnum};
use vpcnet_emu::elbv2::Limits;

#[tokio::test]
async fn target_groups_defaults_modify_attributes_and_pages() {
    let lab = lab(3).await;
    let tcp = lab
        .elb
        .create_target_group()
        .name("tcp")
        .protocol(ProtocolEnum::Tcp)
        .port(8080)
        .vpc_id(&lab.vpc.vpc_id)
        .target_type(TargetTypeEnum::Ip)
        .send()
        .await
        .unwrap();
    let t = &tcp.target_groups()[0];
    let arn = t.target_group_arn().unwrap().to_string();
    assert!(arn.contains(":targetgroup/tcp/"), "{arn}");
    assert_eq!(t.target_type(), Some(&TargetTypeEnum::Ip));
    assert_eq!(t.health_check_protocol(), Some(&ProtocolEnum::Tcp));
    assert_eq!(t.health_check_port(), Some("traffic-port"));
    assert_eq!(
        (
            t.health_check_interval_seconds(),
            t.health_check_timeout_seconds(),
            t.healthy_threshold_count(),
            t.unhealthy_threshold_count()
        ),
        (Some(30), Some(10), Some(5), Some(2))
    );
    assert_eq!(t.health_check_path(), None);
    assert!(t.load_balancer_arns().is_empty());

    let http = lab
        .elb
        .create_target_group()
        .name("http")
        .protocol(ProtocolEnum::Http)
        .port(80)
        .vpc_id(&lab.vpc.vpc_id)
        .health_check_path("/healthz")
        .matcher(Matcher::builder().http_code("200-299").build())
        .send()
        .await
        .unwrap();
    let h = &http.target_groups()[0];
    assert_eq!(
        h.target_type(),
        Some(&TargetTypeEnum::Instance),
        "default target type"
    );
    assert_eq!(h.health_check_protocol(), Some(&ProtocolEnum::Http));
    assert_eq!(h.health_check_timeout_seconds(), Some(5));
    assert_eq!(h.health_check_path(), Some("/healthz"));
    assert_eq!(h.matcher().and_then(|m| m.http_code()), Some("200-299"));

    // ELBv2's rules
    let base = lab
        .elb
        .create_target_group()
        .name("bad")
        .protocol(ProtocolEnum::Tcp)
        .port(80)
        .vpc_id(&lab.vpc.vpc_id);
    for (what, req) in [
        ("interval", base.clone().health_check_interval_seconds(4)),
        ("healthy", base.clone().healthy_threshold_count(11)),
        (
            "timeout > interval",
            base.clone()
                .health_check_interval_seconds(5)
                .health_check_timeout_seconds(6),
        ),
        ("no vpc", base.clone().vpc_id("vpc-0123456789abcdef0")),
        ("disabled", base.clone().health_check_enabled(false)),
        ("name", base.clone().name("bad_name")),
    ] {
        let e = req.send().await.unwrap_err();
        assert_eq!(code(&e), "ValidationError", "{what}");
    }
    let e = base
        .clone()
        .name("tcp")
        .port(9999)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "DuplicateTargetGroupName");
    // same name and settings: the same group
    let same = base
        .clone()
        .name("tcp")
        .port(8080)
        .target_type(TargetTypeEnum::Ip)
        .send()
        .await
        .unwrap();
    assert_eq!(
        same.target_groups()[0].target_group_arn(),
        Some(arn.as_str())
    );

    // ModifyTargetGroup keeps what it does not name
    let m = lab
        .elb
        .modify_target_group()
        .target_group_arn(&arn)
        .health_check_interval_seconds(10)
        .healthy_threshold_count(2)
        .send()
        .await
        .unwrap();
    let m = &m.target_groups()[0];
    assert_eq!(
        (
            m.health_check_interval_seconds(),
            m.healthy_threshold_count(),
            m.unhealthy_threshold_count()
        ),
        (Some(10), Some(2), Some(2))
    );
    let e = lab
        .elb
        .modify_target_group()
        .target_group_arn(
            "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/nope/0000000000000000",
        )
        .health_check_interval_seconds(10)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TargetGroupNotFound");

    // attributes: deregistration delay default 300, then changed; bad values refused
    let attrs = lab
        .elb
        .describe_target_group_attributes()
        .target_group_arn(&arn)
        .send()
        .await
        .unwrap();
    let get = |a: &[TargetGroupAttribute], k: &str| {
        a.iter()
            .find(|x| x.key() == Some(k))
            .and_then(|x| x.value())
            .map(str::to_string)
    };
    assert_eq!(
        get(attrs.attributes(), "deregistration_delay.timeout_seconds").as_deref(),
        Some("300")
    );
    let set = |k: &str, v: &str| {
        lab.elb
            .modify_target_group_attributes()
            .target_group_arn(&arn)
            .attributes(TargetGroupAttribute::builder().key(k).value(v).build())
            .send()
    };
    let after = set("deregistration_delay.timeout_seconds", "10")
        .await
        .unwrap();
    assert_eq!(
        get(after.attributes(), "deregistration_delay.timeout_seconds").as_deref(),
        Some("10")
    );
    assert!(
        get(after.attributes(), "stickiness.enabled").is_some(),
        "all attributes answered"
    );
    for (k, v) in [
        ("deregistration_delay.timeout_seconds", "3601"),
        ("no.such.key", "1"),
        ("stickiness.enabled", "maybe"),
    ] {
        let e = set(k, v).await.unwrap_err();
        assert_eq!(code(&e), "ValidationError", "{k}={v}");
    }

    // pages: five groups, two a page, through the SDK's paginator
    for i in 0..3 {
        lab.ip_tg(&format!("p{i}"), 80).await;
    }
    let pages: Vec<_> = lab
        .elb
        .describe_target_groups()
        .page_size(2)
        .into_paginator()
        .send()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(pages.len(), 3);
    let names: Vec<String> = pages
        .iter()
        .flat_map(|p| p.as_ref().unwrap().target_groups().to_vec())
        .map(|t| t.target_group_name().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 5);
    let e = lab
        .elb
        .describe_target_groups()
        .page_size(401)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "ValidationError");
    let e = lab
        .elb
        .describe_target_groups()
        .names("nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TargetGroupNotFound");
    lab.emu.set_elbv2_limits(Limits {
        target_groups: 5,
        ..Limits::default()
    });
    let e = base.clone().name("sixth").send().await.unwrap_err();
    assert_eq!(code(&e), "TooManyTargetGroups");
}

#[tokio::test]
async fn listeners_rules_and_target_group_use() {
    let lab = lab(4).await;
    let lb = lab.nlb("web").await;
    let tg = lab.ip_tg("web", 8080).await;
    let l = lab.listener(&lb, 80, &tg).await;
    assert!(l.contains(":listener/net/web/"), "{l}");
    let d = lab
        .elb
        .describe_listeners()
        .load_balancer_arn(&lb)
        .send()
        .await
        .unwrap();
    let listener = &d.listeners()[0];
    assert_eq!(
        (listener.port(), listener.protocol()),
        (Some(80), Some(&ProtocolEnum::Tcp))
    );
    assert_eq!(
        listener.default_actions()[0].target_group_arn(),
        Some(tg.as_str())
    );
    let d = lab
        .elb
        .describe_target_groups()
        .load_balancer_arn(&lb)
        .send()
        .await
        .unwrap();
    assert_eq!(
        d.target_groups()[0].load_balancer_arns(),
        std::slice::from_ref(&lb)
    );

    let create = |port: i32, proto: ProtocolEnum, tg: &str| {
        lab.elb
            .create_listener()
            .load_balancer_arn(&lb)
            .protocol(proto)
            .port(port)
            .default_actions(forward(tg))
            .send()
    };
    let e = create(80, ProtocolEnum::Tcp, &tg).await.unwrap_err();
    assert_eq!(code(&e), "DuplicateListener");
    let e = create(81, ProtocolEnum::Http, &tg).await.unwrap_err();
    assert_eq!(
        code(&e),
        "ValidationError",
        "HTTP on a network load balancer"
    );
    let e = create(82, ProtocolEnum::Tls, &tg).await.unwrap_err();
    assert_eq!(code(&e), "UnsupportedProtocol");
    let http_tg = lab.tg("h", ProtocolEnum::Http, 80, None).await;
    let e = create(83, ProtocolEnum::Tcp, &http_tg).await.unwrap_err();
    assert_eq!(code(&e), "IncompatibleProtocols");
    let e = create(
        84,
        ProtocolEnum::Tcp,
        "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/nope/0000000000000000",
    )
    .await
    .unwrap_err();
    assert_eq!(code(&e), "TargetGroupNotFound");
    // a target group serves one load balancer
    let other = lab.nlb("other").await;
    let e = lab
        .elb
        .create_listener()
        .load_balancer_arn(&other)
        .protocol(ProtocolEnum::Tcp)
        .port(80)
        .default_actions(forward(&tg))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TargetGroupAssociationLimit");
    // in use: cannot be deleted
    let e = lab
        .elb
        .delete_target_group()
        .target_group_arn(&tg)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "ResourceInUse");
    lab.emu.set_elbv2_limits(Limits {
        listeners_per_load_balancer: 1,
        ..Limits::default()
    });
    let tg2 = lab.ip_tg("second", 8081).await;
    let e = create(85, ProtocolEnum::Tcp, &tg2).await.unwrap_err();
    assert_eq!(code(&e), "TooManyListeners");

    let e = lab.elb.describe_listeners().send().await.unwrap_err();
    assert_eq!(code(&e), "ValidationError");
    lab.elb
        .delete_listener()
        .listener_arn(&l)
        .send()
        .await
        .unwrap();
    let e = lab
        .elb
        .delete_listener()
        .listener_arn(&l)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "ListenerNotFound");
    let e = lab
        .elb
        .describe_listeners()
        .listener_arns(&l)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "ListenerNotFound");
    lab.elb
        .delete_target_group()
        .target_group_arn(&tg)
        .send()
        .await
        .unwrap();
    let e = lab
        .elb
        .describe_target_groups()
        .target_group_arns(&tg)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TargetGroupNotFound");
    // deleting a load balancer removes its listeners
    let tg3 = lab.ip_tg("third", 8082).await;
    lab.emu.set_elbv2_limits(Limits::default());
    let l3 = lab.listener(&lb, 90, &tg3).await;
    lab.elb
        .delete_load_balancer()
        .load_balancer_arn(&lb)
        .send()
        .await
        .unwrap();
    let e = lab
        .elb
        .describe_listeners()
        .listener_arns(&l3)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "ListenerNotFound");
}
