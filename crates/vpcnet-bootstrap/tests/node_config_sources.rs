//! NodeConfig from a config file as nodeadm reads every config source: a MIME multi-part
//! document works from a file as from the user data, and messages name the NodeConfig fields
//! that were given, never bootstrap.sh flags that were not.

mod common;

use clap::Parser;
use common::*;
use vpcnet_bootstrap::startup::RecordingSystem;
use vpcnet_bootstrap::BootstrapArgs;

/// A MIME multi-part document: two NodeConfig parts and a shell script.
fn mime(ca: &str) -> String {
    format!(
        "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"B\"\r\n\r\n\
--B\r\nContent-Type: application/node.eks.aws\r\n\r\n\
apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: file-cluster\n    apiServerEndpoint: http://api.example.com\n    certificateAuthority: {ca}\n    cidr: 10.100.0.0/16\n\r\n\
--B\r\nContent-Type: text/x-shellscript\r\n\r\n#!/bin/sh\necho skipped\r\n\
--B\r\nContent-Type: application/node.eks.aws\r\n\r\n\
apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    flags: [--node-labels=from=mime]\n    config:\n      maxPods: 33\n\r\n\
--B--\r\n"
    )
}

/// Runs bootstrap with `--config FILE` (`file://` form too) holding `text`; stderr or error.
async fn run_with_config(
    text: &str,
    file_url: bool,
) -> (Result<String, String>, tempfile::TempDir) {
    let cloud = Cloud::launch(&CloudSpec::new("m5.large", vec!["10.0.0.0/16"])).await;
    let root = tempfile::tempdir().unwrap();
    let cfg = root.path().join("nodeconfig");
    std::fs::write(&cfg, text).unwrap();
    let source = if file_url {
        format!("file://{}", cfg.display())
    } else {
        cfg.display().to_string()
    };
    let args = BootstrapArgs::try_parse_from([
        "vpcnet-bootstrap",
        "--config",
        &source,
        "--files-only",
        "--root",
        root.path().to_str().unwrap(),
    ])
    .unwrap();
    let host = FakeHost::new(root.path());
    let system = RecordingSystem::default();
    let mut err = Vec::new();
    let r = vpcnet_bootstrap::run(
        &args,
        &cloud.adapters(&host, &system),
        &mut Vec::new(),
        &mut err,
    )
    .await
    .map(|_| String::from_utf8(err).unwrap())
    .map_err(|e| e.to_string());
    (r, root)
}

#[tokio::test]
async fn mime_multipart_config_file_merges_like_user_data() {
    for file_url in [false, true] {
        let (r, root) = run_with_config(&mime(&test_ca_b64()), file_url).await;
        let err = r.unwrap();
        let files = tree(root.path());
        let cfg: serde_json::Value =
            serde_json::from_str(&files["etc/kubernetes/kubelet/kubelet-config.json"]).unwrap();
        assert_eq!(cfg["maxPods"], 33, "the second part's kubelet config");
        assert_eq!(cfg["clusterDNS"], serde_json::json!(["10.100.0.10"]));
        assert!(
            files["etc/systemd/system/kubelet.service.d/30-kubelet-extra-args.conf"]
                .contains("--node-labels=from=mime"),
            "the second part's flags"
        );
        assert!(
            files["var/lib/kubelet/kubeconfig"].contains("file-cluster"),
            "the first part's cluster name"
        );
        // The plain-http endpoint came from the NodeConfig: the warning names its field.
        assert!(
            err.contains(
                "warning: spec.cluster.apiServerEndpoint \"http://api.example.com\" is plain http"
            ),
            "{err}"
        );
        assert!(!err.contains("--apiserver-endpoint"), "{err}");
    }
}

#[tokio::test]
async fn config_file_errors_name_the_file_and_the_field() {
    // A MIME document without a NodeConfig part: the file is named, not "EC2 user data".
    let only_script = "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"B\"\r\n\r\n--B\r\nContent-Type: text/x-shellscript\r\n\r\n#!/bin/sh\r\n--B--\r\n";
    let (r, root) = run_with_config(only_script, false).await;
    let e = r.unwrap_err();
    assert!(
        e.contains(&root.path().join("nodeconfig").display().to_string())
            && e.contains("application/node.eks.aws")
            && !e.contains("EC2 user data"),
        "{e}"
    );
    // Outposts from the NodeConfig without an ID: the error names the NodeConfig fields.
    let nc = format!(
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: c\n    apiServerEndpoint: https://api.example.com\n    certificateAuthority: {}\n    cidr: 10.100.0.0/16\n    enableOutpost: true\n",
        test_ca_b64()
    );
    let (r, _root) = run_with_config(&nc, false).await;
    let e = r.unwrap_err();
    assert!(
        e.contains("spec.cluster.enableOutpost") && e.contains("spec.cluster.id"),
        "{e}"
    );
}
