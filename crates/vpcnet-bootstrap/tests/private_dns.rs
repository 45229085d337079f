//! Under the external cloud provider kubelet's node name must be EC2's PrivateDnsName, which
//! EC2 may report empty right after launch: bootstrap retries a bounded number of times.
//! Runs against vpcnet-emu (empty PrivateDnsName for the first N DescribeInstances calls).

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
        &cloud.imds,
        &cloud.ec2,
        &host(root.path()),
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
        &cloud.imds,
        &cloud.ec2,
        &host(root.path()),
        &mut Vec::new(),
        &mut Vec::new(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert_eq!(cloud.calls("DescribeInstances"), 4);
    let id = &cloud.instance.instance_id;
    assert!(
        e.contains(&format!("no PrivateDnsName for {id} after 4 attempts")) && e.contains("Fix:"),
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
        &cloud.imds,
        &cloud.ec2,
        &host(root.path()),
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
    let plan = vpcnet_bootstrap::plan(&a, &cloud.imds, &cloud.ec2, &host(root.path()))
        .await
        .unwrap();
    assert_eq!(
        (plan.cloud_provider, cloud.calls("DescribeInstances")),
        ("aws", 0)
    );
}
