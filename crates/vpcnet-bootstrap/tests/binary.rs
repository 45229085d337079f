//! The `vpcnet-bootstrap` binary end to end: IMDS from AWS_EC2_METADATA_SERVICE_ENDPOINT, EC2
//! from AWS_ENDPOINT_URL (both vpcnet-emu), files under --root, rerun changes nothing. Every
//! run passes `--files-only` or `--dry-run`: systemctl of the machine running the tests is
//! never called.

mod common;

use std::process::Command;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_then_rerun_is_a_no_op() {
    let spec = CloudSpec::new("m5.large", vec!["10.0.0.0/16"]);
    let cloud = Cloud::launch(&spec).await;
    let imds = cloud.imds_url().await;
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
    // kubelet config, CA, kubeconfig, kubelet unit, 2 drop-ins, containerd config, bpffs unit.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("created")).count(),
        8,
        "{out}"
    );
    assert!(!out.contains("ran "), "--files-only runs nothing: {out}");
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
    let dry = String::from_utf8_lossy(&o.stdout);
    assert!(dry.contains("### /etc/kubernetes/kubelet/kubelet-config.json (mode 0644)"));
    assert!(
        !dry.contains("### would run"),
        "--files-only: no steps: {dry}"
    );
    assert!(tree(empty.path()).is_empty());
}

/// The real host adapter: kubelet version from a `kubelet` on PATH, the API server name
/// resolved by the system resolver (`localhost`, so nothing leaves the machine), /etc/hosts
/// under the root kept and extended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outpost_with_real_host_adapter() {
    use std::os::unix::fs::PermissionsExt;
    let cloud = Cloud::launch(&CloudSpec::new("m5.large", vec!["10.0.0.0/16"])).await;
    let imds = cloud.imds_url().await;
    let ec2 = cloud.endpoint.clone();
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(root.path().join("etc/hosts"), "127.0.0.1 localhost\n").unwrap();
    let bin = tempfile::tempdir().unwrap();
    let kubelet = bin.path().join("kubelet");
    std::fs::write(
        &kubelet,
        "#!/bin/sh\necho 'Kubernetes v1.25.9-eks-0a21954'\n",
    )
    .unwrap();
    std::fs::set_permissions(&kubelet, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let r = root.path().to_path_buf();
    let o = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_vpcnet-bootstrap"))
            .args([
                "my-cluster",
                "--apiserver-endpoint",
                "https://localhost",
                "--b64-cluster-ca",
                &test_ca_b64(),
            ])
            .args([
                "--enable-local-outpost",
                "true",
                "--cluster-id",
                "abc-123",
                "--files-only",
                "--root",
                r.to_str().unwrap(),
            ])
            .env("PATH", path)
            .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds)
            .env("AWS_ENDPOINT_URL", ec2)
            .env("AWS_ACCESS_KEY_ID", "AKIDTEST")
            .env("AWS_SECRET_ACCESS_KEY", "secret")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files = tree(root.path());
    let hosts = &files["etc/hosts"];
    assert!(
        hosts.starts_with("127.0.0.1 localhost\n# BEGIN vpcnet-bootstrap"),
        "{hosts}"
    );
    assert!(hosts.contains("127.0.0.1\tlocalhost\n"), "{hosts}");
    // kubelet 1.25 on Outposts: still the external provider, and 1.25 gets the runtime flags.
    let cp = &files["etc/systemd/system/kubelet.service.d/20-kubelet-cloud-provider.conf"];
    assert!(cp.contains("KUBELET_CLOUD_PROVIDER=external"), "{cp}");
    let args10 = &files["etc/systemd/system/kubelet.service.d/10-kubelet-args.conf"];
    assert!(args10.contains("--container-runtime=remote"), "{args10}");
    assert!(args10.contains("--cloud-provider=external"), "{args10}");
    assert!(files["var/lib/kubelet/bootstrap-kubeconfig"].contains("- abc-123"));
    assert!(!files.contains_key("var/lib/kubelet/kubeconfig"));
}

/// EC2 from `AWS_EC2_ENDPOINT` (the VPC CNI's variable) even with `AWS_ENDPOINT_URL` pointing
/// elsewhere (a closed port); the wait for the private DNS name shows on stderr by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_ec2_endpoint_is_honoured_and_the_private_dns_wait_is_visible() {
    let cloud = Cloud::launch(&CloudSpec {
        empty_private_dns_calls: 1,
        ..CloudSpec::new("m5.large", vec!["10.0.0.0/16"])
    })
    .await;
    let imds = cloud.imds_url().await;
    let ec2 = cloud.endpoint.clone();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_path_buf();
    let o = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_vpcnet-bootstrap"))
            .args([
                "my-cluster",
                "--apiserver-endpoint",
                "https://api.example.com",
                "--b64-cluster-ca",
                &test_ca_b64(),
            ])
            .args(["--kubelet-version", "1.31.0", "--vcpus", "2", "--dry-run"])
            .args(["--retry-delay-ms", "10", "--root", r.to_str().unwrap()])
            .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds)
            .env("AWS_EC2_ENDPOINT", ec2)
            .env("AWS_ENDPOINT_URL", closed)
            .env_remove("AWS_ENDPOINT_URL_EC2")
            .env_remove("RUST_LOG")
            .env("AWS_ACCESS_KEY_ID", "AKIDTEST")
            .env("AWS_SECRET_ACCESS_KEY", "secret")
            .env_remove("AWS_REGION")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let id = &cloud.instance.instance_id;
    assert!(
        !err.contains('\u{1b}'),
        "no colour codes into a pipe: {err}"
    );
    assert!(
        err.contains(&format!(
            "waiting for EC2 to report the private DNS name of {id}: attempt 1, retrying in"
        )),
        "{err}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!(
            "--hostname-override={}",
            cloud.instance.private_dns_name
        )),
        "{out}"
    );
    assert_eq!(cloud.calls("DescribeInstances"), 2);
    assert!(tree(root.path()).is_empty());
}

/// IMDS refusing connections for the first seconds of boot: bootstrap waits (a progress line
/// per retry naming the cause) and succeeds once IMDS answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_imds_that_refuses_connections_at_first() {
    let cloud = Cloud::launch(&CloudSpec::new("m5.large", vec!["10.0.0.0/16"])).await;
    let imds = cloud.imds_url().await;
    let target = imds.trim_start_matches("http://").to_string();
    // A loopback port nobody listens on yet; a proxy to the instance's IMDS opens it later.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let proxy = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let l = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        loop {
            let (mut a, _) = l.accept().await.unwrap();
            let target = target.clone();
            tokio::spawn(async move {
                let mut b = tokio::net::TcpStream::connect(target).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
            });
        }
    });
    let ec2 = cloud.endpoint.clone();
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_path_buf();
    let late = format!("http://127.0.0.1:{port}");
    let o = tokio::task::spawn_blocking(move || {
        run_binary(
            &late,
            &ec2,
            &r,
            &["--imds-timeout", "30", "--retry-delay-ms", "200"],
        )
    })
    .await
    .unwrap();
    proxy.abort();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("waiting for IMDS to answer: attempt 1, retrying in")
            && err.contains("connection refused"),
        "{err}"
    );
    assert!(tree(root.path()).contains_key("etc/kubernetes/kubelet/kubelet-config.json"));
}
