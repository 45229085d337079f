//! vpcnet-ec2's call loop against vpcnet-emu through the real aws-sdk-ec2 client: throttling
//! and 5xx are retried, 4xx are not, the deadline fires.

mod common;

use std::time::Duration;

use common::{create, fast_calls, lab};
use tokio::time::Instant;
use vpcnet_ec2::{Action, AddressRequest, Ec2Error};
use vpcnet_emu::ActionFaults;

#[tokio::test]
async fn throttling_and_server_errors_are_retried_until_success() {
    let lab = lab(fast_calls()).await;
    lab.emu
        .set_action_faults(
            "DescribeSubnets",
            Some(ActionFaults::default().throttle(1, 20.0)),
        )
        .unwrap();
    lab.emu
        .set_action_faults(
            "DescribeInstances",
            Some(ActionFaults::default().error(0.5, "InternalError")),
        )
        .unwrap();
    lab.emu
        .set_action_faults(
            "AssignPrivateIpAddresses",
            Some(ActionFaults::default().error(0.5, "Unavailable")),
        )
        .unwrap();
    let eni = lab
        .ec2
        .create_network_interface(&create(&lab, None, "retry"))
        .await
        .unwrap();
    for _ in 0..10 {
        lab.ec2.describe_subnet(&lab.subnet).await.unwrap();
        lab.ec2
            .describe_instance(&lab.instance.instance_id)
            .await
            .unwrap();
        assert_eq!(
            lab.ec2
                .assign_private_ips(&eni.eni_id, AddressRequest::SecondaryIps(1))
                .await
                .unwrap()
                .ips
                .len(),
            1
        );
    }
    let calls = lab.emu.calls();
    assert!(
        calls.throttled.get("DescribeSubnets").copied().unwrap_or(0) > 0,
        "{calls:?}"
    );
    assert!(
        lab.rec
            .count(Action::DescribeSubnets, Some("RequestLimitExceeded"))
            > 0
    );
    assert!(
        lab.rec
            .count(Action::DescribeInstances, Some("InternalError"))
            > 0
    );
    assert!(
        lab.rec
            .count(Action::AssignPrivateIpAddresses, Some("Unavailable"))
            > 0
    );
    assert_eq!(lab.rec.count(Action::DescribeSubnets, None), 10);
    assert_eq!(lab.rec.count(Action::AssignPrivateIpAddresses, None), 10);
    // Every failed attempt was followed by another attempt: EC2 saw exactly what we sent.
    let attempts = |a: Action| {
        lab.rec
            .attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|(x, _)| *x == a)
            .count() as u64
    };
    assert_eq!(
        calls.per_action.get("DescribeSubnets").copied(),
        Some(attempts(Action::DescribeSubnets))
    );
    // The ENI holds exactly the 10 addresses assigned: no retry doubled an assignment.
    let now = &lab
        .ec2
        .describe_network_interfaces_by_id(&[&eni.eni_id])
        .await
        .unwrap()[0];
    assert_eq!(now.secondary_ips.len(), 10);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let lab = lab(fast_calls()).await;
    lab.emu
        .set_action_faults(
            "DescribeSubnets",
            Some(ActionFaults::default().error(1.0, "UnauthorizedOperation")),
        )
        .unwrap();
    let e = lab.ec2.describe_subnet(&lab.subnet).await.unwrap_err();
    assert_eq!(e.code(), "UnauthorizedOperation");
    assert!(!e.is_retryable());
    assert!(
        matches!(e, Ec2Error::Api { status: Some(s), .. } if (400..500).contains(&s)),
        "{e:?}"
    );
    assert_eq!(
        lab.emu.calls().per_action.get("DescribeSubnets").copied(),
        Some(1)
    );

    let e = lab
        .ec2
        .delete_network_interface("eni-0000000000000000f")
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(
        lab.emu
            .calls()
            .per_action
            .get("DeleteNetworkInterface")
            .copied(),
        Some(1)
    );
}

#[tokio::test]
async fn deadline_fires_on_injected_latency() {
    let mut calls = fast_calls();
    calls.operation_timeout = Duration::from_millis(400);
    calls.attempt_timeout = Duration::from_millis(150);
    let lab = lab(calls).await;
    lab.emu
        .set_action_faults(
            "DescribeInstances",
            Some(ActionFaults::default().latency(Duration::from_secs(3))),
        )
        .unwrap();
    let t0 = Instant::now();
    let e = lab
        .ec2
        .describe_instance(&lab.instance.instance_id)
        .await
        .unwrap_err();
    let took = t0.elapsed();
    assert!(
        matches!(e, Ec2Error::Timeout { after, .. } if after == Duration::from_millis(400)),
        "{e:?}"
    );
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    assert!(
        lab.rec.count(Action::DescribeInstances, Some("Timeout")) >= 2,
        "attempt timeouts are retried"
    );
}
