//! EC2 error codes surfaced by aws-sdk-ec2 with EC2's HTTP status and retryability, and
//! throttling by token bucket.

mod common;

use std::time::{Duration, Instant};

use common::{client, code, lab, status};
use vpcnet_emu::ActionFaults;

/// Calls the emulator saw for `action`.
fn seen(lab: &common::Lab, action: &str) -> u64 {
    lab.emu.calls().per_action.get(action).copied().unwrap_or(0)
}

#[tokio::test]
async fn not_found_and_parameter_errors() {
    let lab = lab(20).await;
    let inst = lab.instance("m5.large").await;
    let eni = inst.primary_eni.clone().unwrap().eni_id;

    let e = lab
        .ec2
        .describe_instances()
        .instance_ids("i-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (code(&e).as_str(), status(&e)),
        ("InvalidInstanceID.NotFound", 400)
    );
    let e = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&eni)
        .instance_id("i-0123456789abcdef0")
        .device_index(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidInstanceID.NotFound");
    let e = lab
        .ec2
        .create_network_interface()
        .subnet_id("subnet-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidSubnetID.NotFound");
    let e = lab
        .ec2
        .describe_subnets()
        .subnet_ids("subnet-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidSubnetID.NotFound");
    let e = lab
        .ec2
        .delete_network_interface()
        .network_interface_id("eni-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidNetworkInterfaceID.NotFound");
    let e = lab
        .ec2
        .terminate_instances()
        .instance_ids("i-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidInstanceID.NotFound");

    // nothing to assign: MissingParameter naming what is missing
    let e = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .send()
        .await
        .unwrap_err();
    assert_eq!((code(&e).as_str(), status(&e)), ("MissingParameter", 400));
    assert!(e
        .into_service_error()
        .meta()
        .message()
        .unwrap()
        .contains("SecondaryPrivateIpAddressCount"));
    // the SDK does not check required members of EC2 inputs; the server does
    let e = lab.ec2.create_network_interface().send().await.unwrap_err();
    assert_eq!(code(&e), "MissingParameter");
    assert!(e
        .into_service_error()
        .meta()
        .message()
        .unwrap()
        .contains("SubnetId"));

    let e = lab
        .ec2
        .unassign_private_ip_addresses()
        .network_interface_id(&eni)
        .private_ip_addresses(inst.private_ip.to_string())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .private_ip_addresses("not-an-ip")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    assert!(e
        .into_service_error()
        .meta()
        .message()
        .unwrap()
        .contains("PrivateIpAddress.1"));
    let e = lab
        .ec2
        .describe_network_interfaces()
        .max_results(2)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");

    // the primary ENI cannot be detached; an unknown attachment is not found
    let att = inst.primary_eni.unwrap().attachment.unwrap().attachment_id;
    let e = lab
        .ec2
        .detach_network_interface()
        .attachment_id(&att)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "OperationNotPermitted");
    let e = lab
        .ec2
        .detach_network_interface()
        .attachment_id("eni-attach-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidAttachmentID.NotFound");
}

/// Every client error the emulator produces by itself: EC2's code, HTTP 400, and the SDK's
/// standard retry policy does not retry it (the emulator sees exactly one call).
#[tokio::test]
async fn client_errors_are_not_retried() {
    let lab = lab(21).await;
    let retrying = client(&lab.server.endpoint, 3);
    let inst = lab.instance("m5.large").await;
    let primary = inst.primary_eni.clone().unwrap().eni_id;
    let small = lab
        .emu
        .create_subnet(
            &lab.vpc.vpc_id,
            "10.0.9.0/28".parse().unwrap(),
            "us-east-1a",
        )
        .unwrap();
    let frag = lab
        .emu
        .create_subnet(
            &lab.vpc.vpc_id,
            "10.0.8.0/27".parse().unwrap(),
            "us-east-1a",
        )
        .unwrap();
    // fill the /28; occupy one address in each /28 block of the /27
    retrying
        .create_network_interface()
        .subnet_id(&small)
        .secondary_private_ip_address_count(10)
        .send()
        .await
        .unwrap();
    retrying
        .create_network_interface()
        .subnet_id(&frag)
        .private_ip_address("10.0.8.4")
        .send()
        .await
        .unwrap();
    retrying
        .create_network_interface()
        .subnet_id(&frag)
        .private_ip_address("10.0.8.20")
        .send()
        .await
        .unwrap();
    for idx in 1..=2 {
        let r = retrying
            .create_network_interface()
            .subnet_id(&lab.subnet)
            .send()
            .await
            .unwrap();
        let id = r
            .network_interface()
            .unwrap()
            .network_interface_id()
            .unwrap()
            .to_string();
        retrying
            .attach_network_interface()
            .network_interface_id(&id)
            .instance_id(&inst.instance_id)
            .device_index(idx)
            .send()
            .await
            .unwrap();
    }
    let spare = retrying
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .send()
        .await
        .unwrap();
    let spare = spare
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();

    macro_rules! expect {
        ($action:literal, $code:literal, $call:expr) => {{
            lab.emu.reset_calls();
            let e = $call.send().await.unwrap_err();
            assert_eq!((code(&e).as_str(), status(&e)), ($code, 400), "{}", $action);
            assert_eq!(
                seen(&lab, $action),
                1,
                "{} ({}) was retried",
                $action,
                $code
            );
        }};
    }
    expect!(
        "AttachNetworkInterface",
        "AttachmentLimitExceeded",
        retrying
            .attach_network_interface()
            .network_interface_id(&spare)
            .instance_id(&inst.instance_id)
            .device_index(3)
    );
    expect!(
        "AssignPrivateIpAddresses",
        "PrivateIpAddressLimitExceeded",
        retrying
            .assign_private_ip_addresses()
            .network_interface_id(&primary)
            .secondary_private_ip_address_count(10)
    );
    expect!(
        "CreateNetworkInterface",
        "InsufficientFreeAddressesInSubnet",
        retrying.create_network_interface().subnet_id(&small)
    );
    expect!(
        "CreateNetworkInterface",
        "InsufficientCidrBlocks",
        retrying
            .create_network_interface()
            .subnet_id(&frag)
            .ipv4_prefix_count(1)
    );
    expect!(
        "DeleteNetworkInterface",
        "InvalidNetworkInterfaceID.NotFound",
        retrying
            .delete_network_interface()
            .network_interface_id("eni-0123456789abcdef0")
    );
    expect!(
        "TerminateInstances",
        "InvalidInstanceID.NotFound",
        retrying
            .terminate_instances()
            .instance_ids("i-0123456789abcdef0")
    );
    expect!(
        "CreateNetworkInterface",
        "InvalidSubnetID.NotFound",
        retrying
            .create_network_interface()
            .subnet_id("subnet-0123456789abcdef0")
    );
    expect!(
        "CreateNetworkInterface",
        "InvalidGroup.NotFound",
        retrying
            .create_network_interface()
            .subnet_id(&lab.subnet)
            .groups("sg-0123456789abcdef0")
    );
    expect!(
        "DescribeNetworkInterfaces",
        "InvalidParameterValue",
        retrying.describe_network_interfaces().max_results(1)
    );
    expect!(
        "AssignPrivateIpAddresses",
        "MissingParameter",
        retrying
            .assign_private_ip_addresses()
            .network_interface_id(&primary)
    );
    expect!(
        "DeleteNetworkInterface",
        "InvalidNetworkInterface.InUse",
        retrying
            .delete_network_interface()
            .network_interface_id(&primary)
    );
}

/// Injected errors: code, HTTP status, and whether the SDK's standard retry policy retries.
#[tokio::test]
async fn injected_errors_have_ec2_status_and_retryability() {
    let lab = lab(22).await;
    let retrying = client(&lab.server.endpoint, 3);
    for (code_in, want_status, retried) in [
        ("InternalError", 500, true),
        ("Unavailable", 503, true),
        ("RequestLimitExceeded", 503, true),
        ("UnauthorizedOperation", 403, false),
        ("InvalidParameterValue", 400, false),
    ] {
        lab.emu
            .set_action_faults(
                "DescribeSubnets",
                Some(ActionFaults::default().error(1.0, code_in)),
            )
            .unwrap();
        lab.emu.reset_calls();
        let e = retrying.describe_subnets().send().await.unwrap_err();
        assert_eq!(code(&e), code_in);
        assert_eq!(status(&e), want_status, "{code_in}");
        let calls = seen(&lab, "DescribeSubnets");
        assert_eq!(
            calls,
            if retried { 3 } else { 1 },
            "{code_in}: retried {calls} times"
        );
        // a call to another action is unaffected
        lab.ec2.describe_vpcs().send().await.unwrap();
    }
    // a transient error rate: the retrying client gets through
    lab.emu
        .set_action_faults(
            "DescribeSubnets",
            Some(ActionFaults::default().error(0.3, "InternalError")),
        )
        .unwrap();
    for _ in 0..10 {
        retrying
            .describe_subnets()
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e:?}"));
    }
    lab.emu.set_action_faults("DescribeSubnets", None).unwrap();
    lab.ec2.describe_subnets().send().await.unwrap();
}

#[tokio::test]
async fn latency_is_applied() {
    let lab = lab(23).await;
    lab.emu
        .set_action_faults(
            "DescribeVpcs",
            Some(ActionFaults::default().latency(Duration::from_millis(300))),
        )
        .unwrap();
    let t = Instant::now();
    lab.ec2.describe_vpcs().send().await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
    lab.emu
        .set_action_faults(
            "DescribeVpcs",
            Some(
                ActionFaults::default()
                    .latency_range(Duration::from_millis(50), Duration::from_millis(100)),
            ),
        )
        .unwrap();
    for _ in 0..3 {
        let t = Instant::now();
        lab.ec2.describe_vpcs().send().await.unwrap();
        assert!(t.elapsed() >= Duration::from_millis(50));
    }
}

#[tokio::test]
async fn token_bucket_throttles_a_burst_and_recovers_at_refill_rate() {
    let lab = lab(24).await;
    lab.emu
        .set_action_faults(
            "DescribeNetworkInterfaces",
            Some(ActionFaults::default().throttle(10, 1.0)),
        )
        .unwrap();
    let mut throttled = 0;
    let t0 = Instant::now();
    for _ in 0..30 {
        match lab.ec2.describe_network_interfaces().send().await {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(
                    (code(&e).as_str(), status(&e)),
                    ("RequestLimitExceeded", 503)
                );
                throttled += 1;
            }
        }
    }
    let burst = t0.elapsed().as_secs_f64();
    // tokens refilled during the burst itself count: allow ±1 plus what the burst's duration earned
    let expected = 20.0 - burst.floor();
    assert!(
        (throttled as f64 - expected).abs() <= 1.0,
        "{throttled} throttled in a {burst:.2}s burst"
    );
    assert_eq!(
        lab.emu.calls().throttled.get("DescribeNetworkInterfaces"),
        Some(&(throttled as u64))
    );

    // recovery at 1 token per second: after ~3 s, 3 calls pass (±1) and the rest are throttled
    let drained = Instant::now();
    tokio::time::sleep(Duration::from_millis(3050)).await;
    let mut ok = 0;
    for _ in 0..8 {
        if lab.ec2.describe_network_interfaces().send().await.is_ok() {
            ok += 1;
        }
    }
    // tokens earned since the bucket was drained: ~1 per second (plus a partial one)
    let earned = drained.elapsed().as_secs_f64();
    assert!(
        ok >= 2 && (ok as f64) <= earned + 1.0,
        "{ok} calls passed {earned:.2}s after the burst"
    );
    // other actions have their own buckets
    lab.ec2.describe_subnets().send().await.unwrap();
}

#[tokio::test]
async fn unknown_action_and_dry_run() {
    let lab = lab(25).await;
    // a raw Query call with an unknown action
    let app = lab.emu.router();
    use tower::ServiceExt;
    let req = http::Request::post("/")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(axum::body::Body::from(
            "Action=RunFooBar&Version=2016-11-15",
        ))
        .unwrap();
    let resp = app.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 400);
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(body.contains("<Code>InvalidAction</Code>"), "{body}");

    let e = lab
        .ec2
        .describe_vpcs()
        .dry_run(true)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "DryRunOperation");
}
