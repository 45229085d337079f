//! Every bad input stops vpcnet-bootstrap with an error that names the flag and the fix,
//! exit code 2, and nothing written under --root. Runs the real binary; IMDS and EC2 point
//! at a closed loopback port so a bug could never reach a real endpoint.

mod common;

use std::process::{Command, Output};

const ENDPOINT: &str = "https://0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com";

fn run(args: &[&str]) -> (Output, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let ca = common::test_ca_b64();
    let mut full: Vec<String> = Vec::new();
    let has = |f: &str| {
        args.iter()
            .any(|a| *a == f || a.starts_with(&format!("{f}=")))
    };
    if !has("--apiserver-endpoint") {
        full.extend(["--apiserver-endpoint".into(), ENDPOINT.into()]);
    }
    if !has("--b64-cluster-ca") {
        full.extend(["--b64-cluster-ca".into(), ca]);
    }
    full.extend(args.iter().map(|s| s.to_string()));
    full.extend(["--root".into(), root.path().display().to_string()]);
    if !has("--kubelet-version") {
        full.extend(["--kubelet-version".into(), "1.31.0".into()]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_vpcnet-bootstrap"))
        .args(&full)
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AWS_REGION", "us-west-2")
        .output()
        .unwrap();
    (out, root)
}

/// Asserts exit 2, every `needles` in stderr, and an empty root.
fn rejects(args: &[&str], needles: &[&str]) {
    let (out, root) = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "args {args:?}: stderr {err}");
    for n in needles {
        assert!(err.contains(n), "args {args:?}: stderr lacks {n:?}:\n{err}");
    }
    assert!(
        out.stdout.is_empty(),
        "args {args:?}: stdout {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        std::fs::read_dir(root.path()).unwrap().count(),
        0,
        "args {args:?}: files were written"
    );
}

#[test]
fn unknown_flag() {
    rejects(&["my-cluster", "--no-such-flag", "x"], &["--no-such-flag"]);
}

#[test]
fn malformed_service_cidrs() {
    rejects(
        &["my-cluster", "--service-ipv4-cidr", "10.100.0/16"],
        &["--service-ipv4-cidr", "not an IPv4 CIDR", "Fix:"],
    );
    rejects(
        &["my-cluster", "--service-ipv4-cidr", "fd00::/108"],
        &["--service-ipv4-cidr", "not an IPv4 CIDR"],
    );
    rejects(
        &["my-cluster", "--service-ipv6-cidr", "fd00::zz/108"],
        &["--service-ipv6-cidr", "not an IPv6 CIDR", "Fix:"],
    );
}

#[test]
fn malformed_endpoint() {
    rejects(
        &["my-cluster", "--apiserver-endpoint", "not a url"],
        &["--apiserver-endpoint", "not a URL", "Fix:"],
    );
    rejects(
        &[
            "my-cluster",
            "--apiserver-endpoint",
            "ftp://api.example.com",
        ],
        &["--apiserver-endpoint", "https://"],
    );
    rejects(
        &["my-cluster", "--apiserver-endpoint", "https://"],
        &["--apiserver-endpoint"],
    );
}

#[test]
fn outpost_without_cluster_id() {
    rejects(
        &["my-cluster", "--enable-local-outpost", "true"],
        &["--enable-local-outpost", "--cluster-id", "Fix:"],
    );
}

#[test]
fn ipv6_without_cidr_or_dns_ip() {
    rejects(
        &["my-cluster", "--ip-family", "ipv6"],
        &[
            "--ip-family",
            "--service-ipv6-cidr",
            "--dns-cluster-ip",
            "Fix:",
        ],
    );
    rejects(
        &["my-cluster", "--ip-family", "IPv5"],
        &["--ip-family", "ipv4 or --ip-family ipv6"],
    );
    rejects(
        &[
            "my-cluster",
            "--ip-family",
            "ipv4",
            "--service-ipv6-cidr",
            "fd00::/108",
        ],
        &["--ip-family", "--service-ipv6-cidr"],
    );
}

#[test]
fn max_pods_kubelet_cannot_read() {
    rejects(
        &["my-cluster", "--kubelet-extra-args", "--max-pods=lots"],
        &[
            "--kubelet-extra-args",
            "--max-pods",
            "not a positive whole number",
        ],
    );
}

#[test]
fn other_bad_values() {
    rejects(
        &["--dns-cluster-ip", "10.100.0.10"],
        &["cluster name", "Fix:"],
    );
    rejects(
        &["my-cluster", "--dns-cluster-ip", "10.100.0.300"],
        &["--dns-cluster-ip", "Fix:"],
    );
    rejects(
        &["my-cluster", "--b64-cluster-ca", "%%%"],
        &["--b64-cluster-ca", "not base64", "Fix:"],
    );
    rejects(
        &["my-cluster", "--b64-cluster-ca", "//79/A=="],
        &["--b64-cluster-ca", "neither PEM nor a DER certificate"],
    );
    rejects(
        &["my-cluster", "--container-runtime", "dockerd"],
        &[
            "--container-runtime",
            "dockershim",
            "removed in Kubernetes 1.24",
            "containerd",
        ],
    );
    rejects(
        &["my-cluster", "--kubelet-version", "latest"],
        &["--kubelet-version", "Fix:"],
    );
    rejects(
        &["my-cluster", "--cni-max-eni", "0"],
        &["--cni-max-eni", "Fix:"],
    );
    rejects(&["bad name!"], &["<cluster-name>"]);
    rejects(
        &[
            "my-cluster",
            "--enable-local-outpost",
            "true",
            "--cluster-id",
            "x y",
        ],
        &["--cluster-id"],
    );
}

#[test]
fn bad_node_config() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nc.yaml");
    std::fs::write(&p, "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: c\n    apiServerEndpoit: https://x\n").unwrap();
    rejects(
        &["--config", p.to_str().unwrap()],
        &["NodeConfig", "apiServerEndpoit"],
    );
    rejects(
        &["--config", "/nonexistent/nc.yaml"],
        &["NodeConfig", "cannot read"],
    );
    std::fs::write(&p, "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: c\n  kubelet:\n    maxPodsExpression: max_pod + 1\n").unwrap();
    rejects(
        &["--config", p.to_str().unwrap()],
        &[
            "spec.kubelet.maxPodsExpression",
            "unknown name \"max_pod\"",
            "Fix:",
        ],
    );
    std::fs::write(&p, "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: c\n    cidr: 10.0.0.0/33\n").unwrap();
    rejects(
        &["--config", p.to_str().unwrap()],
        &["spec.cluster.cidr", "Fix:"],
    );
    std::fs::write(&p, "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: c\n    enableOutpost: true\n").unwrap();
    rejects(
        &["--config", p.to_str().unwrap()],
        &["--cluster-id", "spec.cluster.id"],
    );
}

#[test]
fn containerd_config_that_cannot_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.toml");
    std::fs::write(
        &p,
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"\nsandbox_image = 1\n",
    )
    .unwrap();
    rejects(
        &[
            "my-cluster",
            "--containerd-config-file",
            p.to_str().unwrap(),
        ],
        &[
            "--containerd-config-file",
            "not valid TOML at line 2",
            "Fix:",
        ],
    );
    rejects(
        &[
            "my-cluster",
            "--containerd-config-file",
            "/nonexistent/config.toml",
        ],
        &["--containerd-config-file", "cannot read"],
    );
}

#[test]
fn unreachable_imds_fails_without_writing() {
    let (out, root) = run(&[
        "my-cluster",
        "--imds-timeout",
        "0.5",
        "--retry-delay-ms",
        "100",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Progress while waiting, then one clean error line: a short cause, one fix, no SDK
    // Debug dump.
    assert!(
        err.contains("waiting for IMDS to answer: attempt 1"),
        "{err}"
    );
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    let e = errors[0];
    assert!(
        e.contains("IMDS GET /latest/meta-data/placement/region"),
        "{e}"
    );
    assert!(e.contains("connection refused"), "{e}");
    assert!(e.contains("attempts in"), "{e}");
    assert_eq!(e.matches("Fix:").count(), 1, "{e}");
    assert_eq!(e.matches("hop limit").count(), 1, "{e}");
    assert!(!e.contains("FailedToLoadToken") && !e.contains('{'), "{e}");
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}
