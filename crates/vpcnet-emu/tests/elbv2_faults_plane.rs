//! ELBv2 faults (throttling answered `Throttling`, retried by the SDK; injected errors and
//! latency), dispatch between EC2 and ELBv2 on one endpoint, and the data-plane contract: what
//! the emulator hands a [`LoadBalancerPlane`] and how its check reports become target health.

mod common;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::elbv2::{client, lab, target};
use common::{code, status};
use tower::ServiceExt;
use vpcnet_emu::elbv2::{
    fault_key, CheckFailure, LbSpec, LoadBalancerPlane, Observation, PlaneFuture, TargetSpec,
};
use vpcnet_emu::ActionFaults;

#[tokio::test]
async fn throttling_is_elbv2s_and_the_sdk_retries_it() {
    let lab = lab(11).await;
    // ELBv2 actions have buckets of their own, keyed elbv2:<Action>
    lab.emu
        .set_action_faults(
            &fault_key("DescribeTargetGroups"),
            Some(ActionFaults::default().throttle(1, 4.0)),
        )
        .unwrap();
    lab.elb.describe_load_balancers().send().await.unwrap();
    lab.elb.describe_load_balancers().send().await.unwrap();
    lab.elb.describe_target_groups().send().await.unwrap();
    let e = lab.elb.describe_target_groups().send().await.unwrap_err();
    assert_eq!((code(&e).as_str(), status(&e)), ("Throttling", 400));

    // the SDK's standard retry treats Throttling as throttling and tries again until the
    // bucket (4 tokens/s) has a token: about 250 ms
    lab.emu.reset_calls();
    let retrying = client(&lab.server.endpoint, 30);
    let t0 = Instant::now();
    retrying.describe_target_groups().send().await.unwrap();
    let calls = lab.emu.calls();
    let throttled = calls
        .throttled
        .get(&fault_key("DescribeTargetGroups"))
        .copied()
        .unwrap_or(0);
    assert!(throttled >= 1, "{calls:?}");
    assert_eq!(
        calls.per_action[&fault_key("DescribeTargetGroups")],
        throttled + 1
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t0.elapsed()
    );

    // injected errors carry ELBv2's status; latency delays the answer
    lab.emu
        .set_action_faults(
            &fault_key("DescribeListeners"),
            Some(
                ActionFaults::default()
                    .error(1.0, "InternalFailure")
                    .latency(Duration::from_millis(150)),
            ),
        )
        .unwrap();
    let t0 = Instant::now();
    let e = lab
        .elb
        .describe_listeners()
        .load_balancer_arn("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!((code(&e).as_str(), status(&e)), ("InternalFailure", 500));
    assert!(t0.elapsed() >= Duration::from_millis(150));
    assert!(lab
        .emu
        .set_action_faults(
            &fault_key("X"),
            Some(ActionFaults::default().throttle(0, 1.0))
        )
        .is_err());
}

/// One request to the emulator's router: (status, body).
async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut req = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app
        .clone()
        .oneshot(req.body(axum::body::Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn control_api_sets_elbv2_faults_limits_and_counts() {
    let lab = lab(12).await;
    let app = lab.emu.router();
    let json = [("content-type", "application/json")];
    let (st, body) = call(
        &app,
        "PUT",
        "/_emu/elbv2/limits",
        &json,
        r#"{"targets_per_target_group": 7}"#,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let (_, body) = call(&app, "GET", "/_emu/elbv2/limits", &json, "").await;
    assert!(body.contains("\"targets_per_target_group\":7"), "{body}");
    assert_eq!(lab.emu.elbv2_limits().targets_per_target_group, 7);
    assert_eq!(
        lab.emu.elbv2_limits().load_balancers,
        50,
        "unnamed quotas keep their defaults"
    );
    let (st, body) = call(&app, "PUT", "/_emu/elbv2/limits", &json, r#"{"bogus": 1}"#).await;
    assert_eq!(st, 400, "{body}");
    let (st, body) = call(
        &app,
        "PUT",
        "/_emu/faults/actions/elbv2:DescribeTags",
        &json,
        r#"{"error":{"rate":1.0,"code":"Throttling"}}"#,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let e = lab
        .elb
        .describe_tags()
        .resource_arns("arn:x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "Throttling");
    let (_, body) = call(&app, "GET", "/_emu/calls", &json, "").await;
    assert!(body.contains("\"elbv2:DescribeTags\":1"), "{body}");
    let (st, _) = call(
        &app,
        "DELETE",
        "/_emu/faults/actions/elbv2:DescribeTags",
        &json,
        "",
    )
    .await;
    assert_eq!(st, 200);
    assert!(lab.emu.faults().actions.is_empty());
}

#[tokio::test]
async fn ec2_and_elbv2_share_the_endpoint() {
    let lab = lab(13).await;
    // EC2's actions and ELBv2's on the same URL, told apart by Version
    let ec2 = vpcnet_ec2_client(&lab.server.endpoint);
    let subnets = ec2.describe_subnets().send().await.unwrap();
    assert_eq!(subnets.subnets().len(), 2);
    let tg = lab.ip_tg("t", 80).await;
    let d = lab
        .elb
        .describe_tags()
        .resource_arns(&tg)
        .send()
        .await
        .unwrap();
    assert_eq!(d.tag_descriptions().len(), 1);
    // without Version, the SigV4 credential scope decides
    let app = lab.emu.router();
    let form = format!("Action=DescribeTags&ResourceArns.member.1={tg}");
    let scope = |svc: &str| {
        format!("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/{svc}/aws4_request, SignedHeaders=host, Signature=0")
    };
    let elb_auth = scope("elasticloadbalancing");
    let (st, body) = call(&app, "POST", "/", &[("authorization", &elb_auth)], &form).await;
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("<DescribeTagsResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/\">"), "{body}");
    let ec2_auth = scope("ec2");
    let (st, body) = call(&app, "POST", "/", &[("authorization", &ec2_auth)], &form).await;
    assert_eq!(st, 400);
    assert!(
        body.contains("<Code>InvalidAction</Code>"),
        "EC2 does not serve DescribeTags: {body}"
    );
    // The request log tells the two APIs apart and marks each one's writes.
    let log = lab.emu.requests(0).records;
    let of = |api: vpcnet_emu::Api, action: &str| {
        log.iter()
            .find(|r| r.api == api && r.action == action)
            .unwrap_or_else(|| panic!("no {api:?} {action} in {log:?}"))
            .mutating
    };
    assert!(!of(vpcnet_emu::Api::Ec2, "DescribeSubnets"));
    assert!(of(vpcnet_emu::Api::Elbv2, "CreateTargetGroup"));
    assert!(!of(vpcnet_emu::Api::Elbv2, "DescribeTags"));
}

fn vpcnet_ec2_client(endpoint: &str) -> aws_sdk_ec2::Client {
    use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
    let cfg = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("AKIDEMU", "secret", None, None, "tests"))
        .build();
    aws_sdk_ec2::Client::from_conf(cfg)
}

/// A plane that records what it is given and reports scripted check results; `fail` makes
/// `apply` fail with that message.
#[derive(Default)]
struct Recorder {
    applied: Mutex<Vec<LbSpec>>,
    removed: Mutex<Vec<String>>,
    reports: Mutex<HashMap<(Ipv4Addr, u16), Observation>>,
    fail: Mutex<Option<String>>,
}

impl LoadBalancerPlane for Recorder {
    fn apply(&self, spec: LbSpec) -> PlaneFuture<'_> {
        self.applied.lock().unwrap().push(spec);
        let fail = self.fail.lock().unwrap().clone();
        Box::pin(async move { fail.map_or(Ok(()), Err) })
    }
    fn remove(&self, arn: String) -> PlaneFuture<'_> {
        self.removed.lock().unwrap().push(arn);
        Box::pin(async { Ok(()) })
    }
    fn observe(&self, _tg: &str, ip: Ipv4Addr, port: u16) -> Option<Observation> {
        self.reports.lock().unwrap().get(&(ip, port)).cloned()
    }
}

impl Recorder {
    fn last(&self) -> LbSpec {
        self.applied
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a spec")
    }
    fn report(&self, ip: &str, up: bool, ever_up: bool, failure: Option<CheckFailure>) {
        self.reports.lock().unwrap().insert(
            (ip.parse().unwrap(), 8080),
            Observation {
                up,
                ever_up,
                checked: true,
                last_failure: failure,
            },
        );
    }
}

#[tokio::test]
async fn the_plane_gets_the_desired_state_and_reports_health() {
    let lab = lab(14).await;
    let plane = Arc::new(Recorder::default());
    lab.emu.set_lb_plane(plane.clone());
    let lb = lab.nlb("web").await;
    let spec = plane.last();
    assert_eq!(
        (spec.arn.as_str(), spec.name.as_str()),
        (lb.as_str(), "web")
    );
    assert_eq!(spec.addresses.len(), 1);
    assert_eq!(
        spec.addresses[0].subnet_cidr,
        "10.0.1.0/24".parse().unwrap()
    );
    assert!(spec.listeners.is_empty());
    let tg = lab.ip_tg("pods", 8080).await;
    let n = plane.applied.lock().unwrap().len();
    // a target group no load balancer uses changes nothing in the plane
    lab.elb
        .register_targets()
        .target_group_arn(&tg)
        .targets(target("10.0.1.10", None, None))
        .targets(target("10.0.1.11", None, None))
        .send()
        .await
        .unwrap();
    assert_eq!(plane.applied.lock().unwrap().len(), n);
    lab.listener(&lb, 80, &tg).await;
    let spec = plane.last();
    assert_eq!(spec.listeners.len(), 1);
    assert_eq!(spec.listeners[0].port, 80);
    let targets = &spec.target_groups[0].targets;
    assert_eq!(
        targets,
        &vec![
            TargetSpec {
                ip: "10.0.1.10".parse().unwrap(),
                port: 8080,
                draining: false
            },
            TargetSpec {
                ip: "10.0.1.11".parse().unwrap(),
                port: 8080,
                draining: false
            },
        ]
    );

    // health comes from the plane's reports
    plane.report("10.0.1.10", true, true, None);
    plane.report("10.0.1.11", false, true, Some(CheckFailure::Timeout));
    let h = lab.health(&tg).await;
    assert_eq!(h[0], ("10.0.1.10".into(), "healthy".into(), None));
    assert_eq!(
        h[1],
        (
            "10.0.1.11".into(),
            "unhealthy".into(),
            Some("Target.Timeout".into())
        )
    );

    // deregistration: draining in the plane, then gone when the delay ends — with no call
    lab.set_delay(&tg, 1).await;
    lab.deregister(&tg, "10.0.1.10").await;
    assert!(plane.last().target_groups[0]
        .targets
        .iter()
        .any(|t| t.draining));
    tokio::time::sleep(Duration::from_millis(1400)).await;
    let spec = plane.last();
    assert_eq!(spec.target_groups[0].targets.len(), 1, "{spec:?}");
    assert_eq!(
        spec.target_groups[0].targets[0].ip,
        "10.0.1.11".parse::<Ipv4Addr>().unwrap()
    );

    // a plane failure is the load balancer's state
    *plane.fail.lock().unwrap() = Some("haproxy did not start".into());
    lab.elb
        .modify_target_group()
        .target_group_arn(&tg)
        .health_check_interval_seconds(10)
        .send()
        .await
        .unwrap();
    let d = lab
        .elb
        .describe_load_balancers()
        .load_balancer_arns(&lb)
        .send()
        .await
        .unwrap();
    let s = d.load_balancers()[0].state().unwrap();
    assert_eq!(
        (s.code().unwrap().as_str(), s.reason()),
        ("failed", Some("haproxy did not start"))
    );
    *plane.fail.lock().unwrap() = None;
    lab.elb
        .delete_load_balancer()
        .load_balancer_arn(&lb)
        .send()
        .await
        .unwrap();
    assert_eq!(plane.removed.lock().unwrap().clone(), vec![lb]);
}
