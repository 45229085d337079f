//! The `vpcnet-bootstrap` binary end to end: IMDS from AWS_EC2_METADATA_SERVICE_ENDPOINT, EC2
//! from AWS_ENDPOINT_URL (both vpcnet-emu), files under --root, rerun changes nothing.

mod common;

use std::process::{Command, Output};

use common::*;

fn run_binary(cloud_imds: &str, ec2: &str, root: &std::path::Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vpcnet-bootstrap"))
        .args([
            "my-cluster",
            "--apiserver-endpoint",
            "https://api.example.com",
            "--b64-cluster-ca",
            &test_ca_b64(),
        ])
        .args([
            "--kubelet-version",
            "1.31.0",
            "--vcpus",
            "2",
            "--root",
            root.to_str().unwrap(),
        ])
        .args(extra)
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", cloud_imds)
        .env("AWS_ENDPOINT_URL", ec2)
        .env("AWS_ACCESS_KEY_ID", "AKIDTEST")
        .env("AWS_SECRET_ACCESS_KEY", "secret")
        .env_remove("AWS_REGION")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_then_rerun_is_a_no_op() {
    let spec = CloudSpec::new("m5.large", vec!["10.0.0.0/16"]);
    let cloud = Cloud::launch(&spec).await;
    let imds = cloud
        .emu
        .imds_endpoint(&cloud.instance.instance_id)
        .await
        .unwrap();
    let ec2 = cloud.endpoint.clone();
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_path_buf();

    let (i, e, p) = (imds.clone(), ec2.clone(), r.clone());
    let o = tokio::task::spawn_blocking(move || run_binary(&i, &e, &p, &[]))
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("created")).count(),
        5,
        "{out}"
    );
    let files = tree(root.path());
    let args10 = &files["etc/systemd/system/kubelet.service.d/10-kubelet-args.conf"];
    assert!(
        args10.contains(&format!("--node-ip={} ", cloud.instance.private_ip)),
        "{args10}"
    );
    assert!(
        args10.contains(&format!(
            "--hostname-override={}",
            cloud.instance.private_dns_name
        )),
        "{args10}"
    );
    let cfg: serde_json::Value =
        serde_json::from_str(&files["etc/kubernetes/kubelet/kubelet-config.json"]).unwrap();
    assert_eq!(cfg["maxPods"], 29);
    assert_eq!(cfg["clusterDNS"][0], "172.20.0.10");
    assert!(
        files["var/lib/kubelet/kubeconfig"].contains("- us-east-1"),
        "region from IMDS"
    );

    let (i, e, p) = (imds.clone(), ec2.clone(), r.clone());
    let o = tokio::task::spawn_blocking(move || run_binary(&i, &e, &p, &[]))
        .await
        .unwrap();
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines()
            .all(|l| l.starts_with("unchanged") || l.starts_with("absent")),
        "{out}"
    );
    assert_eq!(files, tree(root.path()));

    // --dry-run to an empty root prints and writes nothing.
    let empty = tempfile::tempdir().unwrap();
    let p = empty.path().to_path_buf();
    let o = tokio::task::spawn_blocking(move || run_binary(&imds, &ec2, &p, &["--dry-run"]))
        .await
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains("### /etc/kubernetes/kubelet/kubelet-config.json (mode 0644)"));
    assert!(tree(empty.path()).is_empty());
}
