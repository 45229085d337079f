//! Inputs bootstrap.sh accepts are accepted by the binary too (exit 0, files written), with a
//! warning on stderr where the value is probably wrong: existing user data must not stop a
//! node from joining. Runs the real binary against vpcnet-emu with `--files-only`.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_bootstrap_sh_accepts_is_accepted() {
    let cloud = Cloud::launch(&CloudSpec::new("m5.large", vec!["10.0.0.0/16"])).await;
    let imds = cloud.imds_url().await;
    let ec2 = cloud.endpoint.clone();
    // (flags, text the stderr must hold: a warning, or what reached the files)
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--apiserver-endpoint", "http://api.example.com"],
            "warning: --apiserver-endpoint \"http://api.example.com\" is plain http",
        ),
        (
            vec!["--b64-cluster-ca", "aGVsbG8="],
            "warning: --b64-cluster-ca does not decode to a PEM certificate",
        ),
        (
            vec!["--service-ipv4-cidr", "10.100.5.0/16"],
            "warning: --service-ipv4-cidr 10.100.5.0/16: host bits are set",
        ),
        (
            vec!["--use-max-pods", "False"],
            "max pods 110 (kubelet default)",
        ),
        (
            vec!["--use-max-pods", "yes"],
            "warning: --use-max-pods \"yes\" is neither true nor false",
        ),
        (
            vec!["--kubelet-extra-args", "--node-labels='a=b'"],
            "max pods 29",
        ),
        (
            vec!["--kubelet-extra-args", "--node-labels=a=b\n--v=3"],
            "warning: --kubelet-extra-args contains line breaks",
        ),
    ];
    for (flags, want) in cases {
        let root = tempfile::tempdir().unwrap();
        let (i, e, r) = (imds.clone(), ec2.clone(), root.path().to_path_buf());
        let f: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        let o = tokio::task::spawn_blocking(move || {
            let f: Vec<&str> = f.iter().map(String::as_str).collect();
            run_binary(&i, &e, &r, &f)
        })
        .await
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{flags:?}: {err}");
        assert!(
            err.contains(want),
            "{flags:?}: stderr lacks {want:?}:\n{err}"
        );
        let files = tree(root.path());
        assert!(
            files.contains_key("etc/kubernetes/kubelet/kubelet-config.json"),
            "{flags:?}: nothing written"
        );
    }
}

/// A bare IPv6 service address (bootstrap.sh appends `a` to its text): accepted with a
/// warning, and cluster DNS is what bootstrap.sh would use. (The emulator has no IPv6, so the
/// primary ENI's IPv6 address comes from an IMDS overlay: through the library, not the binary.)
#[tokio::test]
async fn bare_ipv6_service_address_gives_bootstrap_sh_dns() {
    let mut spec = CloudSpec::new("m5.large", vec!["10.0.0.0/16"]);
    spec.ipv6s = vec!["2600:1f14:abc:de00::5"];
    let cloud = Cloud::launch(&spec).await;
    let root = tempfile::tempdir().unwrap();
    let args = <vpcnet_bootstrap::BootstrapArgs as clap::Parser>::try_parse_from([
        "vpcnet-bootstrap",
        "my-cluster",
        "--apiserver-endpoint",
        "https://api.example.com",
        "--b64-cluster-ca",
        &test_ca_b64(),
        "--service-ipv6-cidr",
        "fe80::1",
        "--files-only",
        "--root",
        root.path().to_str().unwrap(),
    ])
    .unwrap();
    let host = FakeHost::new(root.path());
    let system = vpcnet_bootstrap::startup::RecordingSystem::default();
    let mut err = Vec::new();
    vpcnet_bootstrap::run(
        &args,
        &cloud.adapters(&host, &system),
        &mut Vec::new(),
        &mut err,
    )
    .await
    .unwrap();
    let err = String::from_utf8(err).unwrap();
    assert!(
        err.contains(
            "warning: --service-ipv6-cidr fe80::1 has no prefix length; cluster DNS is fe80::1a"
        ),
        "{err}"
    );
    let cfg: serde_json::Value =
        serde_json::from_str(&tree(root.path())["etc/kubernetes/kubelet/kubelet-config.json"])
            .unwrap();
    assert_eq!(cfg["clusterDNS"], serde_json::json!(["fe80::1a"]));
    assert!(system.steps().is_empty(), "--files-only runs no step");
}
