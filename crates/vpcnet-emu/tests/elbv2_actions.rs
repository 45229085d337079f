//! Every ELBv2 action through the unmodified aws-sdk-elasticloadbalancingv2, with ELBv2's
//! defaults, rules and error codes.

mod common;

use std::time::Duration;

use aws_sdk_elasticloadbalancingv2 as elb;
use common::elbv2::{forward, lab, target};
use common::{code, status};
use elb::types::{
    LoadBalancerSchemeEnum, LoadBalancerTypeEnum, Matcher, ProtocolEnum, SubnetMapping, Tag,
    TargetGroupAttribute, TargetTypeEnum,
};
use vpcnet_emu::elbv2::Limits;
use vpcnet_emu::RunInstance;

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

#[tokio::test]
async fn load_balancer_lifecycle_and_its_enis() {
    let lab = lab(1).await;
    let free = lab.emu.subnet_available(&lab.subnet_a).unwrap();
    let out = lab
        .elb
        .create_load_balancer()
        .name("web")
        .r#type(LoadBalancerTypeEnum::Network)
        .scheme(LoadBalancerSchemeEnum::Internal)
        .subnets(&lab.subnet_a)
        .tags(tag("team", "net"))
        .send()
        .await
        .unwrap();
    let lb = &out.load_balancers()[0];
    let arn = lb.load_balancer_arn().unwrap().to_string();
    assert!(
        arn.starts_with(
            "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/web/"
        ),
        "{arn}"
    );
    assert_eq!(lb.load_balancer_name(), Some("web"));
    assert_eq!(lb.r#type(), Some(&LoadBalancerTypeEnum::Network));
    assert_eq!(lb.scheme(), Some(&LoadBalancerSchemeEnum::Internal));
    assert_eq!(lb.vpc_id(), Some(lab.vpc.vpc_id.as_str()));
    assert_eq!(lb.state().unwrap().code().unwrap().as_str(), "provisioning");
    assert!(lb
        .dns_name()
        .unwrap()
        .ends_with(".elb.us-east-1.amazonaws.com"));
    assert!(lb.created_time().is_some());
    let az = &lb.availability_zones()[0];
    assert_eq!(
        (az.zone_name(), az.subnet_id()),
        (Some("us-east-1a"), Some(lab.subnet_a.as_str()))
    );
    let ip: std::net::Ipv4Addr = az.load_balancer_addresses()[0]
        .private_ipv4_address()
        .unwrap()
        .parse()
        .unwrap();
    assert!("10.0.1.0/24"
        .parse::<ipnet::Ipv4Net>()
        .unwrap()
        .contains(&ip));
    // the load balancer's node is an ENI of the subnet, as in EC2
    let eni = lab
        .emu
        .enis()
        .into_iter()
        .find(|e| e.primary_ip == ip)
        .expect("ELB ENI");
    assert!(
        eni.description.starts_with("ELB net/web/"),
        "{}",
        eni.description
    );
    assert_eq!(lab.emu.subnet_available(&lab.subnet_a), Some(free - 1));

    // active once the data plane took it; found by name and by ARN
    let d = lab
        .elb
        .describe_load_balancers()
        .names("web")
        .send()
        .await
        .unwrap();
    assert_eq!(
        d.load_balancers()[0]
            .state()
            .unwrap()
            .code()
            .unwrap()
            .as_str(),
        "active"
    );
    let d = lab
        .elb
        .describe_load_balancers()
        .load_balancer_arns(&arn)
        .send()
        .await
        .unwrap();
    assert_eq!(d.load_balancers().len(), 1);

    // same name, same settings: the same load balancer; other settings: DuplicateLoadBalancerName
    let again = lab.nlb("web").await;
    assert_eq!(again, arn);
    let e = lab
        .elb
        .create_load_balancer()
        .name("web")
        .r#type(LoadBalancerTypeEnum::Network)
        .scheme(LoadBalancerSchemeEnum::Internal)
        .subnets(&lab.subnet_b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (code(&e).as_str(), status(&e)),
        ("DuplicateLoadBalancerName", 400)
    );

    lab.elb
        .delete_load_balancer()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap();
    assert!(
        lab.emu.enis().iter().all(|e| e.primary_ip != ip),
        "ENI removed"
    );
    assert_eq!(lab.emu.subnet_available(&lab.subnet_a), Some(free));
    // deleting again succeeds (ELBv2 is idempotent there); describing it does not
    lab.elb
        .delete_load_balancer()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap();
    let e = lab
        .elb
        .describe_load_balancers()
        .load_balancer_arns(&arn)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "LoadBalancerNotFound");
    let e = lab
        .elb
        .describe_load_balancers()
        .names("web")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "LoadBalancerNotFound");
}

#[tokio::test]
async fn load_balancer_rules() {
    let lab = lab(2).await;
    let create = || {
        lab.elb
            .create_load_balancer()
            .name("x")
            .scheme(LoadBalancerSchemeEnum::Internal)
    };
    // application load balancers need two zones
    let e = create().subnets(&lab.subnet_a).send().await.unwrap_err();
    assert_eq!(code(&e), "ValidationError");
    let alb = create()
        .subnets(&lab.subnet_a)
        .subnets(&lab.subnet_b)
        .send()
        .await
        .unwrap();
    let alb = &alb.load_balancers()[0];
    assert_eq!(alb.r#type(), Some(&LoadBalancerTypeEnum::Application));
    assert!(alb.dns_name().unwrap().starts_with("internal-x-"));
    assert_eq!(alb.availability_zones().len(), 2);
    // the emulated VPCs have no internet gateway
    let e = lab
        .elb
        .create_load_balancer()
        .name("public")
        .r#type(LoadBalancerTypeEnum::Network)
        .subnets(&lab.subnet_a)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidSubnet");
    let nlb = lab
        .elb
        .create_load_balancer()
        .name("n")
        .r#type(LoadBalancerTypeEnum::Network)
        .scheme(LoadBalancerSchemeEnum::Internal);
    let e = nlb
        .clone()
        .subnets("subnet-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "SubnetNotFound");
    let e = nlb
        .clone()
        .subnets(&lab.subnet_a)
        .security_groups("sg-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidSecurityGroup");
    let e = nlb.clone().send().await.unwrap_err();
    assert_eq!(code(&e), "ValidationError");
    for bad in ["-n", "n-", "internal-n", "n_1"] {
        let e = nlb
            .clone()
            .name(bad)
            .subnets(&lab.subnet_a)
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e), "ValidationError", "{bad}");
    }
    // a chosen address through SubnetMappings
    let mapped = nlb
        .clone()
        .subnet_mappings(
            SubnetMapping::builder()
                .subnet_id(&lab.subnet_b)
                .private_ipv4_address("10.0.2.50")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let a = &mapped.load_balancers()[0].availability_zones()[0];
    assert_eq!(
        a.load_balancer_addresses()[0].private_ipv4_address(),
        Some("10.0.2.50")
    );
    // the quota of load balancers
    lab.emu.set_elbv2_limits(Limits {
        load_balancers: 2,
        ..Limits::default()
    });
    let e = nlb
        .clone()
        .name("third")
        .subnets(&lab.subnet_a)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TooManyLoadBalancers");
}

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

#[tokio::test]
async fn tags_on_every_resource() {
    let lab = lab(7).await;
    let lb = lab.nlb("web").await;
    let tg = lab.ip_tg("web", 80).await;
    let l = lab.listener(&lb, 80, &tg).await;
    lab.elb
        .add_tags()
        .resource_arns(&lb)
        .resource_arns(&tg)
        .resource_arns(&l)
        .tags(tag("a", "1"))
        .tags(tag("b", "2"))
        .send()
        .await
        .unwrap();
    lab.elb
        .remove_tags()
        .resource_arns(&tg)
        .tag_keys("a")
        .send()
        .await
        .unwrap();
    let d = lab
        .elb
        .describe_tags()
        .resource_arns(&lb)
        .resource_arns(&tg)
        .resource_arns(&l)
        .send()
        .await
        .unwrap();
    let got: Vec<(String, Vec<String>)> = d
        .tag_descriptions()
        .iter()
        .map(|t| {
            (
                t.resource_arn().unwrap().to_string(),
                t.tags()
                    .iter()
                    .map(|t| format!("{}={}", t.key().unwrap(), t.value().unwrap()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (lb.clone(), vec!["a=1".to_string(), "b=2".to_string()]),
            (tg.clone(), vec!["b=2".to_string()]),
            (l.clone(), vec!["a=1".to_string(), "b=2".to_string()]),
        ]
    );
    let e = lab
        .elb
        .add_tags()
        .resource_arns(&lb)
        .tags(tag("x", "1"))
        .tags(tag("x", "2"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "DuplicateTagKeys");
    lab.emu.set_elbv2_limits(Limits {
        tags_per_resource: 3,
        ..Limits::default()
    });
    let e = lab
        .elb
        .add_tags()
        .resource_arns(&tg)
        .resource_arns(&lb)
        .tags(tag("c", "3"))
        .tags(tag("d", "4"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TooManyTags");
    let d = lab
        .elb
        .describe_tags()
        .resource_arns(&tg)
        .send()
        .await
        .unwrap();
    assert_eq!(d.tag_descriptions()[0].tags().len(), 1, "all or nothing");
    let gone_lb = lb.replace("/web/", "/gone/");
    let e = lab
        .elb
        .describe_tags()
        .resource_arns(&gone_lb)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "LoadBalancerNotFound");
    let e = lab
        .elb
        .describe_tags()
        .resource_arns(tg.replace("/web/", "/gone/"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TargetGroupNotFound");
}
