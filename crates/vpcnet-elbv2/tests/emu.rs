//! The adapter against vpcnet-emu: typed results, every page of paginated describes, retries on
//! `Throttling` only, deadlines, and the error predicates.

// std's clocks (banned by the workspace clippy.toml): the emulator serves over HTTP on the wall clock.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use tokio::time::Instant;

use vpcnet_elbv2::{
    CallSettings, Elbv2, Elbv2Options, HealthCheck, HealthState, LoadBalancerType, NewLoadBalancer,
    NewTargetGroup, StaticCredentials, Target, TargetType,
};
use vpcnet_emu::elbv2::{fault_key, Limits};
use vpcnet_emu::{ActionFaults, EmuServer, Emulator};

struct Cloud {
    emu: Emulator,
    _server: EmuServer,
    elb: Elbv2,
    vpc: String,
    subnet: String,
}

fn fast() -> CallSettings {
    let mut s = CallSettings::default();
    s.retry.base_delay = Duration::from_millis(5);
    s.retry.throttle_base_delay = Duration::from_millis(20);
    s.retry.max_delay = Duration::from_millis(200);
    s.operation_timeout = Duration::from_secs(10);
    s.attempt_timeout = Duration::from_secs(2);
    s
}

async fn cloud(seed: u64, calls: CallSettings) -> Cloud {
    let emu = Emulator::new(seed);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "10.0.1.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let elb = Elbv2::connect(Elbv2Options {
        region: Some("us-east-1".into()),
        endpoint_url: Some(server.endpoint.clone()),
        credentials: Some(StaticCredentials {
            access_key_id: "AKIDEMU".into(),
            secret_access_key: "secret".into(),
            session_token: None,
        }),
        calls,
    })
    .await
    .unwrap();
    Cloud {
        emu,
        _server: server,
        elb,
        vpc: vpc.vpc_id,
        subnet,
    }
}

fn nlb(name: &str, subnet: &str) -> NewLoadBalancer {
    NewLoadBalancer {
        name: name.into(),
        lb_type: LoadBalancerType::Network,
        internal: true,
        subnets: vec![subnet.into()],
        security_groups: vec![],
        tags: vec![],
    }
}

fn tg(name: &str, vpc: &str) -> NewTargetGroup {
    NewTargetGroup {
        name: name.into(),
        protocol: "TCP".into(),
        port: 8080,
        vpc_id: vpc.into(),
        target_type: TargetType::Ip,
        health: HealthCheck {
            interval_seconds: Some(10),
            ..HealthCheck::default()
        },
        tags: vec![("team".into(), "net".into())],
    }
}

#[tokio::test]
async fn typed_round_trip() {
    let c = cloud(1, fast()).await;
    let lb = c
        .elb
        .create_load_balancer(&nlb("web", &c.subnet))
        .await
        .unwrap();
    assert_eq!(
        (lb.lb_type.as_str(), lb.scheme.as_str()),
        ("network", "internal")
    );
    assert_eq!(lb.zones[0].zone, "us-east-1a");
    assert!(lb.zones[0].private_ip.is_some());
    let t = c.elb.create_target_group(&tg("web", &c.vpc)).await.unwrap();
    assert_eq!(t.health.interval_seconds, Some(10));
    assert_eq!(t.health.protocol.as_deref(), Some("TCP"));
    let attrs = c
        .elb
        .modify_target_group_attributes(&t.arn, &[("deregistration_delay.timeout_seconds", "5")])
        .await
        .unwrap();
    assert!(attrs.contains(&("deregistration_delay.timeout_seconds".into(), "5".into())));
    let l = c
        .elb
        .create_listener(&lb.arn, "TCP", 80, &t.arn)
        .await
        .unwrap();
    assert_eq!(l.target_group_arn.as_deref(), Some(t.arn.as_str()));
    assert_eq!(c.elb.listeners(&lb.arn).await.unwrap(), vec![l.clone()]);
    c.elb
        .register_targets(&t.arn, &[Target::ip("10.0.1.9".parse().unwrap(), 8080)])
        .await
        .unwrap();
    let h = c.elb.target_health(&t.arn, &[]).await.unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].state, HealthState::Initial);
    assert_eq!(h[0].reason.as_deref(), Some("Elb.RegistrationInProgress"));
    assert_eq!(h[0].target.availability_zone.as_deref(), Some("us-east-1a"));
    let tags = c.elb.tags(std::slice::from_ref(&t.arn)).await.unwrap();
    assert_eq!(tags[0].1, vec![("team".to_string(), "net".to_string())]);
    let m = c
        .elb
        .modify_target_group(
            &t.arn,
            &HealthCheck {
                healthy_threshold: Some(3),
                ..HealthCheck::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (m.health.healthy_threshold, m.health.interval_seconds),
        (Some(3), Some(10))
    );
    let found = c.elb.target_groups(Some(&lb.arn), &[]).await.unwrap();
    assert_eq!(found[0].load_balancer_arns, vec![lb.arn.clone()]);
    c.elb.delete_listener(&l.arn).await.unwrap();
    c.elb.delete_target_group(&t.arn).await.unwrap();
    c.elb.delete_load_balancer(&lb.arn).await.unwrap();
    assert!(c.elb.load_balancers(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn every_page_is_read() {
    let mut s = fast();
    s.describe_page_size = 2;
    let c = cloud(2, s).await;
    for i in 0..5 {
        c.elb
            .create_target_group(&tg(&format!("tg{i}"), &c.vpc))
            .await
            .unwrap();
    }
    let all = c.elb.target_groups(None, &[]).await.unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(
        c.emu.calls().per_action[&fault_key("DescribeTargetGroups")],
        3
    );
}

#[tokio::test]
async fn throttling_is_retried_and_client_errors_are_not() {
    let c = cloud(3, fast()).await;
    let t = c.elb.create_target_group(&tg("t", &c.vpc)).await.unwrap();
    c.emu
        .set_action_faults(
            &fault_key("DescribeTargetHealth"),
            Some(ActionFaults::default().throttle(1, 10.0)),
        )
        .unwrap();
    for _ in 0..3 {
        c.elb.target_health(&t.arn, &[]).await.unwrap();
    }
    let calls = c.emu.calls();
    assert!(
        calls.throttled[&fault_key("DescribeTargetHealth")] >= 1,
        "{calls:?}"
    );

    let e = c
        .elb
        .register_targets(&t.arn, &[Target::ip("192.168.9.9".parse().unwrap(), 80)])
        .await
        .unwrap_err();
    assert!(e.is_invalid_target() && !e.is_retryable(), "{e}");
    assert_eq!(
        c.emu.calls().per_action[&fault_key("RegisterTargets")],
        1,
        "not retried"
    );
    c.emu.set_elbv2_limits(Limits {
        targets_per_target_group: 1,
        ..Limits::default()
    });
    let two = [
        Target::ip("10.0.1.5".parse().unwrap(), 80),
        Target::ip("10.0.1.6".parse().unwrap(), 80),
    ];
    let e = c.elb.register_targets(&t.arn, &two).await.unwrap_err();
    assert!(e.is_quota(), "{e}");
    let e = c
        .elb
        .target_groups(None, &["nope".into()])
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    // a 5xx is retried until it passes
    c.emu
        .set_action_faults(
            &fault_key("DescribeListeners"),
            Some(ActionFaults::default().error(0.5, "InternalFailure")),
        )
        .unwrap();
    let lb = c
        .elb
        .create_load_balancer(&nlb("w", &c.subnet))
        .await
        .unwrap();
    for _ in 0..5 {
        c.elb.listeners(&lb.arn).await.unwrap();
    }
}

#[tokio::test]
async fn attempt_deadline_then_operation_deadline() {
    let mut s = fast();
    s.attempt_timeout = Duration::from_millis(100);
    s.operation_timeout = Duration::from_millis(700);
    let c = cloud(4, s).await;
    c.emu
        .set_action_faults(
            &fault_key("DescribeLoadBalancers"),
            Some(ActionFaults::default().latency(Duration::from_secs(5))),
        )
        .unwrap();
    let t0 = Instant::now();
    let e = c.elb.load_balancers(&[]).await.unwrap_err();
    assert_eq!(e.code(), "Timeout", "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        c.emu.calls().per_action[&fault_key("DescribeLoadBalancers")] >= 2,
        "attempts retried"
    );
}
