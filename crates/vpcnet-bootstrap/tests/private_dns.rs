//! Under the external cloud provider kubelet's node name must be EC2's PrivateDnsName, which
//! EC2 may report empty right after launch: bootstrap retries within a total time budget
//! (`--private-dns-timeout`) and says whether EC2 was unreachable or answered empty.
//! Runs against vpcnet-emu (empty PrivateDnsName for the first N DescribeInstances calls).

// std's clocks (banned by the workspace clippy.toml): the real bootstrap binary against a DNS server: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant};

use clap::Parser;
use common::*;
use vpcnet_bootstrap::cloud::{bootstrap_call_settings, AwsEc2};
use vpcnet_bootstrap::startup::RecordingSystem;
use vpcnet_bootstrap::{Adapters, BootstrapArgs};
use vpcnet_ec2::{Ec2Options, StaticCredentials};

fn args(root: &std::path::Path, attempts: u32) -> BootstrapArgs {
    let mut a = budget_args(root, 60.0);
    a.private_dns_attempts = Some(attempts);
    a.retry_delay_ms = 1;
    a
}

/// No attempt cap: only the `--private-dns-timeout` budget bounds the wait.
fn budget_args(root: &std::path::Path, seconds: f64) -> BootstrapArgs {
    BootstrapArgs::try_parse_from([
        "vpcnet-bootstrap",
        "c",
        "--apiserver-endpoint",
        "https://api.example.com",
        "--b64-cluster-ca",
        &test_ca_b64(),
        "--kubelet-version",
        "1.30.1",
        "--root",
        root.to_str().unwrap(),
        "--private-dns-timeout",
        &seconds.to_string(),
        "--retry-delay-ms",
        "200",
    ])
    .unwrap()
}

fn host(root: &std::path::Path) -> FakeHost {
    FakeHost {
        kubelet_version: String::new(),
        ..FakeHost::new(root)
    }
}

fn spec() -> CloudSpec {
    CloudSpec::new("m5.large", vec!["10.0.0.0/16"])
}

#[tokio::test]
async fn retried_while_empty_then_used() {
    let root = tempfile::tempdir().unwrap();
    let cloud = Cloud::launch(&CloudSpec {
        empty_private_dns_calls: 3,
        ..spec()
    })
    .await;
    let plan = vpcnet_bootstrap::plan(
        &args(root.path(), 5),
        &cloud.adapters(&host(root.path()), &RecordingSystem::default()),
    )
    .await
    .unwrap();
    assert_eq!(cloud.calls("DescribeInstances"), 4);
    let f = plan
        .files
        .iter()
        .find(|f| f.path.ends_with("10-kubelet-args.conf"))
        .unwrap();
    let want = format!("--hostname-override={}", cloud.instance.private_dns_name);
    assert!(
        f.content.as_ref().unwrap().contains(&want),
        "{:?} lacks {want}",
        f.content
    );
}

#[tokio::test]
async fn gives_up_after_the_budget_with_a_clear_error_and_writes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let cloud = Cloud::launch(&CloudSpec {
        empty_private_dns_calls: 100,
        ..spec()
    })
    .await;
    let e = vpcnet_bootstrap::run(
        &args(root.path(), 4),
        &cloud.adapters(&host(root.path()), &RecordingSystem::default()),
        &mut Vec::new(),
        &mut Vec::new(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert_eq!(cloud.calls("DescribeInstances"), 4);
    let id = &cloud.instance.instance_id;
    assert!(
        e.contains(&format!("PrivateDnsName of {id} stayed empty (4 attempts"))
            && e.contains("DNS hostnames"),
        "{e}"
    );
    assert!(tree(root.path()).is_empty());
}

#[tokio::test]
async fn denied_describe_instances_fails_fast() {
    let root = tempfile::tempdir().unwrap();
    let cloud = Cloud::launch(&CloudSpec {
        deny_describe_instances: true,
        ..spec()
    })
    .await;
    let e = vpcnet_bootstrap::plan(
        &args(root.path(), 10),
        &cloud.adapters(&host(root.path()), &RecordingSystem::default()),
    )
    .await
    .unwrap_err()
    .to_string();
    assert_eq!(cloud.calls("DescribeInstances"), 1);
    assert!(
        e.contains("UnauthorizedOperation") && e.contains("ec2:DescribeInstances"),
        "{e}"
    );
}

#[tokio::test]
async fn old_kubelet_needs_no_private_dns_name() {
    let root = tempfile::tempdir().unwrap();
    let cloud = Cloud::launch(&CloudSpec {
        deny_describe_instances: true,
        ..spec()
    })
    .await;
    let mut a = args(root.path(), 10);
    a.kubelet_version = Some("1.25.3".into());
    let plan = vpcnet_bootstrap::plan(
        &a,
        &cloud.adapters(&host(root.path()), &RecordingSystem::default()),
    )
    .await
    .unwrap();
    assert_eq!(
        (plan.cloud_provider, cloud.calls("DescribeInstances")),
        ("aws", 0)
    );
}

#[tokio::test]
async fn empty_forever_fails_within_the_time_budget_saying_it_stayed_empty() {
    let root = tempfile::tempdir().unwrap();
    let cloud = Cloud::launch(&CloudSpec {
        empty_private_dns_calls: u32::MAX,
        ..spec()
    })
    .await;
    let started = Instant::now();
    let e = vpcnet_bootstrap::plan(
        &budget_args(root.path(), 2.0),
        &cloud.adapters(&host(root.path()), &RecordingSystem::default()),
    )
    .await
    .unwrap_err()
    .to_string();
    let took = started.elapsed();
    // Delays 0.2, 0.4, 0.8 s then cut to the rest of the 2 s budget: 4 to 6 calls.
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert!((3..=6).contains(&cloud.calls("DescribeInstances")));
    assert!(
        e.contains("EC2 answered but the PrivateDnsName") && e.contains("stayed empty"),
        "{e}"
    );
    assert!(
        e.contains("DNS hostnames") && !e.contains("could not be reached"),
        "{e}"
    );
}

/// EC2 answering InternalError every time: the final error names that answer, not an
/// unreachable EC2.
#[tokio::test]
async fn repeated_internal_errors_are_named_as_the_last_cause() {
    let root = tempfile::tempdir().unwrap();
    let cloud = Cloud::launch(&CloudSpec {
        fail_describe_instances: Some("InternalError"),
        ..spec()
    })
    .await;
    let e = vpcnet_bootstrap::plan(
        &budget_args(root.path(), 1.5),
        &cloud.adapters(&host(root.path()), &RecordingSystem::default()),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(cloud.calls("DescribeInstances") >= 2);
    assert!(
        e.contains("EC2 kept answering an error")
            && e.contains("last answer: InternalError: An internal error has occurred."),
        "{e}"
    );
    assert!(!e.contains("could not be reached"), "{e}");
}

#[tokio::test]
async fn refused_connections_fail_within_the_budget_saying_ec2_could_not_be_reached() {
    let root = tempfile::tempdir().unwrap();
    let cloud = Cloud::launch(&spec()).await;
    // A loopback port nobody listens on: bind, note the port, close.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let ec2 = AwsEc2::new(Ec2Options {
        region: Some("us-east-1".into()),
        endpoint_url: Some(format!("http://127.0.0.1:{closed}")),
        imds_endpoint: None,
        credentials: Some(StaticCredentials {
            access_key_id: "AKIDTEST".into(),
            secret_access_key: "secret".into(),
            session_token: None,
        }),
        calls: bootstrap_call_settings(),
    });
    let started = Instant::now();
    let h = host(root.path());
    let system = RecordingSystem::default();
    let adapters = Adapters {
        ec2: &ec2,
        ..cloud.adapters(&h, &system)
    };
    let e = vpcnet_bootstrap::plan(&budget_args(root.path(), 2.0), &adapters)
        .await
        .unwrap_err()
        .to_string();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(
        e.contains("EC2 could not be reached or did not answer") && e.contains("last error:"),
        "{e}"
    );
    assert!(
        e.contains("AWS_EC2_ENDPOINT") && e.contains("credentials") && !e.contains("DNS hostnames"),
        "{e}"
    );
}

#[test]
fn private_dns_timeout_must_be_a_positive_number_of_seconds() {
    for bad in ["0", "-1", "soon", "NaN"] {
        let flag = format!("--private-dns-timeout={bad}");
        let r = BootstrapArgs::try_parse_from(["vpcnet-bootstrap", flag.as_str()]);
        let e = r.unwrap_err().to_string();
        assert!(e.contains("number of seconds"), "{bad}: {e}");
    }
    let a = BootstrapArgs::try_parse_from(["vpcnet-bootstrap"]).unwrap();
    assert_eq!(a.private_dns_timeout, 60.0);
}
