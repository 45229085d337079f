//! Under the external cloud provider kubelet's node name must be EC2's PrivateDnsName, which
//! EC2 may report empty right after launch: bootstrap retries a bounded number of times.

mod common;

use clap::Parser;
use common::*;
use vpcnet_bootstrap::BootstrapArgs;

fn args(root: &std::path::Path, attempts: u32) -> BootstrapArgs {
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
        "--private-dns-attempts",
        &attempts.to_string(),
        "--retry-delay-ms",
        "1",
    ])
    .unwrap()
}

fn host(root: &std::path::Path) -> FakeHost {
    FakeHost {
        root: root.to_path_buf(),
        vcpus: 2,
        kubelet_version: String::new(),
        apiserver_ips: vec![],
    }
}

#[tokio::test]
async fn retried_while_empty_then_used() {
    let root = tempfile::tempdir().unwrap();
    let ec2 = FakeEc2 {
        empty_dns_calls: 3,
        ..Default::default()
    };
    let imds = Instance::simple("m5.large", vec!["10.0.0.0/16"]).imds();
    let plan = vpcnet_bootstrap::plan(&args(root.path(), 5), &imds, &ec2, &host(root.path()))
        .await
        .unwrap();
    assert_eq!(ec2.dns_calls.get(), 4);
    let f = plan
        .files
        .iter()
        .find(|f| f.path.ends_with("10-kubelet-args.conf"))
        .unwrap();
    assert!(f
        .content
        .as_ref()
        .unwrap()
        .contains("--hostname-override=ip-192-168-12-34.us-west-2.compute.internal"));
}

#[tokio::test]
async fn gives_up_after_the_budget_with_a_clear_error_and_writes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let ec2 = FakeEc2 {
        empty_dns_calls: 100,
        ..Default::default()
    };
    let imds = Instance::simple("m5.large", vec!["10.0.0.0/16"]).imds();
    let e = vpcnet_bootstrap::run(
        &args(root.path(), 4),
        &imds,
        &ec2,
        &host(root.path()),
        &mut Vec::new(),
        &mut Vec::new(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert_eq!(ec2.dns_calls.get(), 4);
    assert!(
        e.contains("no PrivateDnsName for i-0123456789abcdef0 after 4 attempts")
            && e.contains("Fix:"),
        "{e}"
    );
    assert!(tree(root.path()).is_empty());
}

#[tokio::test]
async fn denied_describe_instances_fails_fast() {
    let root = tempfile::tempdir().unwrap();
    let ec2 = FakeEc2 {
        deny_describe_instances: true,
        ..Default::default()
    };
    let imds = Instance::simple("m5.large", vec!["10.0.0.0/16"]).imds();
    let e = vpcnet_bootstrap::plan(&args(root.path(), 10), &imds, &ec2, &host(root.path()))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(ec2.dns_calls.get(), 1);
    assert!(
        e.contains("UnauthorizedOperation") && e.contains("ec2:DescribeInstances"),
        "{e}"
    );
}

#[tokio::test]
async fn old_kubelet_needs_no_private_dns_name() {
    let root = tempfile::tempdir().unwrap();
    let ec2 = FakeEc2 {
        deny_describe_instances: true,
        ..Default::default()
    };
    let imds = Instance::simple("m5.large", vec!["10.0.0.0/16"]).imds();
    let mut a = args(root.path(), 10);
    a.kubelet_version = Some("1.25.3".into());
    let plan = vpcnet_bootstrap::plan(&a, &imds, &ec2, &host(root.path()))
        .await
        .unwrap();
    assert_eq!((plan.cloud_provider, ec2.dns_calls.get()), ("aws", 0));
}
