//! EKS DescribeCluster when `--apiserver-endpoint` or `--b64-cluster-ca` is missing, against
//! vpcnet-emu through aws-sdk-eks: retried on server errors (`--aws-api-retry-attempts`),
//! failing at once for an unknown or failed cluster, and not called when both are given.

mod common;

use clap::Parser;
use common::*;
use vpcnet_bootstrap::startup::RecordingSystem;
use vpcnet_bootstrap::BootstrapArgs;
use vpcnet_emu::{ActionFaults, EksClusterSpec};

fn args(root: &std::path::Path, extra: &[&str]) -> BootstrapArgs {
    let mut argv = vec![
        "vpcnet-bootstrap",
        "my-cluster",
        "--kubelet-version",
        "1.31.0",
        "--retry-delay-ms",
        "10",
        "--files-only",
        "--root",
        root.to_str().unwrap(),
    ];
    argv.extend_from_slice(extra);
    BootstrapArgs::try_parse_from(argv).unwrap()
}

fn cluster(status: &str) -> EksClusterSpec {
    EksClusterSpec {
        name: "my-cluster".into(),
        endpoint: "https://api.example.com".into(),
        certificate_authority: test_ca_b64(),
        service_ipv4_cidr: Some("172.16.0.0/16".into()),
        status: Some(status.into()),
        ..Default::default()
    }
}

async fn plan_error(cloud: &Cloud, extra: &[&str]) -> String {
    let root = tempfile::tempdir().unwrap();
    let host = FakeHost::new(root.path());
    let system = RecordingSystem::default();
    let e = vpcnet_bootstrap::plan(&args(root.path(), extra), &cloud.adapters(&host, &system))
        .await
        .unwrap_err()
        .to_string();
    assert!(tree(root.path()).is_empty());
    e
}

#[tokio::test]
async fn described_values_reach_the_files() {
    let mut spec = CloudSpec::new("m5.large", vec!["10.0.0.0/16"]);
    spec.eks_cluster = Some(cluster("ACTIVE"));
    let cloud = Cloud::launch(&spec).await;
    let root = tempfile::tempdir().unwrap();
    let host = FakeHost::new(root.path());
    let system = RecordingSystem::default();
    vpcnet_bootstrap::run(
        &args(root.path(), &[]),
        &cloud.adapters(&host, &system),
        &mut Vec::new(),
        &mut Vec::new(),
    )
    .await
    .unwrap();
    let files = tree(root.path());
    assert!(files["var/lib/kubelet/kubeconfig"].contains("server: https://api.example.com"));
    assert!(files["etc/kubernetes/pki/ca.crt"].starts_with("-----BEGIN CERTIFICATE-----"));
    let cfg: serde_json::Value =
        serde_json::from_str(&files["etc/kubernetes/kubelet/kubelet-config.json"]).unwrap();
    assert_eq!(cfg["clusterDNS"], serde_json::json!(["172.16.0.10"]));
    assert_eq!(cloud.calls("DescribeCluster"), 1);
}

#[tokio::test]
async fn unknown_cluster_fails_at_once_naming_name_and_region() {
    let cloud = Cloud::launch(&CloudSpec::new("m5.large", vec!["10.0.0.0/16"])).await;
    let e = plan_error(&cloud, &[]).await;
    assert_eq!(cloud.calls("DescribeCluster"), 1);
    assert!(
        e.contains("EKS DescribeCluster my-cluster")
            && e.contains("No cluster found for name: my-cluster.")
            && e.contains("cluster's region"),
        "{e}"
    );
}

#[tokio::test]
async fn server_errors_are_retried_then_named() {
    let mut spec = CloudSpec::new("m5.large", vec!["10.0.0.0/16"]);
    spec.eks_cluster = Some(cluster("ACTIVE"));
    let cloud = Cloud::launch(&spec).await;
    cloud
        .emu
        .set_action_faults(
            "DescribeCluster",
            Some(ActionFaults::default().error(1.0, "ServerException")),
        )
        .unwrap();
    let e = plan_error(&cloud, &["--aws-api-retry-attempts", "2"]).await;
    assert_eq!(cloud.calls("DescribeCluster"), 3);
    assert!(
        e.contains("ServerException") && e.contains("3 attempts"),
        "{e}"
    );
}

#[tokio::test]
async fn a_failed_cluster_is_refused_and_given_values_need_no_lookup() {
    let mut spec = CloudSpec::new("m5.large", vec!["10.0.0.0/16"]);
    spec.eks_cluster = Some(cluster("FAILED"));
    let cloud = Cloud::launch(&spec).await;
    let e = plan_error(&cloud, &[]).await;
    assert!(e.contains("the cluster is FAILED"), "{e}");
    assert_eq!(cloud.calls("DescribeCluster"), 1);

    // Endpoint and CA given: no lookup at all.
    let root = tempfile::tempdir().unwrap();
    let host = FakeHost::new(root.path());
    let system = RecordingSystem::default();
    let ca = test_ca_b64();
    vpcnet_bootstrap::plan(
        &args(
            root.path(),
            &[
                "--apiserver-endpoint",
                "https://given.example.com",
                "--b64-cluster-ca",
                &ca,
            ],
        ),
        &cloud.adapters(&host, &system),
    )
    .await
    .unwrap();
    assert_eq!(cloud.calls("DescribeCluster"), 1);
}
