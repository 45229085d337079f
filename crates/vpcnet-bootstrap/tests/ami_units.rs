//! vpcnet-bootstrap on nodes with the EKS AMIs' real kubelet units (tests/ami, copied from
//! amazon-eks-ami with their versions) and on a node without one: after bootstrap, the unit
//! systemd runs is the AMI's, unchanged, and kubelet's argv (expanded from the unit, the
//! drop-ins and environment files as systemd does) holds every flag of the AMI's `ExecStart=`,
//! the credential provider flags, the runtime endpoint, the cloud provider and vpcnet's values;
//! the AMI's dependencies and pre-start steps are untouched.

mod common;

use std::path::Path;

use clap::Parser;
use common::*;
use vpcnet_bootstrap::startup::RecordingSystem;
use vpcnet_bootstrap::systemd::{kubelet_command_line, unit_directives, unit_files, Service, Unit};
use vpcnet_bootstrap::BootstrapArgs;

const AL2_UNIT: &str = include_str!("ami/al2/kubelet-containerd.service");
const AL2_DOCKER_UNIT: &str = include_str!("ami/al2/kubelet.service");
const AL2_SANDBOX: &str = include_str!("ami/al2/sandbox-image.service");
const AL2_PROVIDER_CONFIG: &str = include_str!("ami/al2/ecr-credential-provider-config.json");
const AL2023_UNIT: &str = include_str!("ami/al2023/kubelet.service");
const PROVIDER_BIN: &str = "/etc/eks/image-credential-provider/ecr-credential-provider";
const PROVIDER_CONFIG: &str = "/etc/eks/image-credential-provider/config.json";
const SOCKET: &str = "unix:///run/containerd/containerd.sock";

fn preseed(root: &Path, files: &[(&str, &str)]) {
    for (p, c) in files {
        let f = root.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, c).unwrap();
    }
}

fn read(root: &Path, p: &str) -> Option<String> {
    std::fs::read_to_string(root.join(p.trim_start_matches('/'))).ok()
}

/// Runs bootstrap (kubelet `kubelet`, m5.large in vpcnet-emu) under `root` with `extra`
/// flags; returns stderr, or the error.
async fn bootstrap(root: &Path, kubelet: &str, extra: &[&str]) -> Result<String, String> {
    let cloud = Cloud::launch(&CloudSpec::new("m5.large", vec!["10.0.0.0/16"])).await;
    let ca = test_ca_b64();
    let root_s = root.display().to_string();
    let mut argv = vec![
        "vpcnet-bootstrap",
        "my-cluster",
        "--apiserver-endpoint",
        "https://api.example.com",
        "--b64-cluster-ca",
        &ca,
        "--root",
        &root_s,
    ];
    argv.extend_from_slice(extra);
    let args = BootstrapArgs::try_parse_from(&argv).unwrap();
    let host = FakeHost {
        kubelet_version: kubelet.into(),
        ..FakeHost::new(root)
    };
    let system = RecordingSystem::default();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    vpcnet_bootstrap::run(&args, &cloud.adapters(&host, &system), &mut out, &mut err)
        .await
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8(err).unwrap())
}

/// The value of `--name` in `argv` (`--name=V` or `--name V`), every occurrence.
fn values(argv: &[String], name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, a) in argv.iter().enumerate() {
        if a == name {
            out.extend(argv.get(i + 1).cloned());
        } else if let Some(v) = a.strip_prefix(&format!("{name}=")) {
            out.push(v.to_string());
        }
    }
    out
}

/// What an AMI unit's `ExecStart=` passes by itself (its words but the `$VARIABLES`).
fn fixed_words(unit: &str) -> Vec<String> {
    let s = Service::parse(&[("ami".into(), unit.into())], "kubelet.service").unwrap();
    s.exec_start
        .into_iter()
        .filter(|w| !w.starts_with('$'))
        .collect()
}

/// The `[Unit]`/`[Service]` directives of the installed unit and every drop-in after
/// bootstrap, as (section, key, value), in systemd's order.
fn effective(root: &Path) -> Vec<(String, String, String)> {
    unit_directives(&unit_files(root, Unit::Installed).unwrap())
        .into_iter()
        .map(|(_, s, k, v)| (s, k, v))
        .collect()
}

/// The values of `key` in `section` of the effective unit.
fn setting(root: &Path, section: &str, key: &str) -> Vec<String> {
    effective(root)
        .into_iter()
        .filter(|(s, k, _)| s == section && k == key)
        .map(|(_, _, v)| v)
        .collect()
}

/// kubelet's argv has everything the node needs from bootstrap: credential provider, runtime
/// endpoint, cloud provider once, and the node's own values.
fn assert_kubelet_gets_everything(argv: &[String], labels: &str) {
    assert_eq!(argv[0], "/usr/bin/kubelet");
    for (flag, want) in [
        ("--image-credential-provider-config", PROVIDER_CONFIG),
        (
            "--image-credential-provider-bin-dir",
            "/etc/eks/image-credential-provider",
        ),
        ("--container-runtime-endpoint", SOCKET),
        ("--config", "/etc/kubernetes/kubelet/kubelet-config.json"),
        ("--kubeconfig", "/var/lib/kubelet/kubeconfig"),
        ("--cloud-provider", "external"),
        ("--node-labels", labels),
    ] {
        let got = values(argv, flag);
        assert!(
            !got.is_empty() && got.iter().all(|v| v == want),
            "{flag}: want {want}, got {got:?} in {argv:?}"
        );
    }
    assert_eq!(values(argv, "--cloud-provider").len(), 1, "{argv:?}");
    for flag in [
        "--node-ip",
        "--hostname-override",
        "--pod-infra-container-image",
    ] {
        assert_eq!(values(argv, flag).len(), 1, "{flag} in {argv:?}");
    }
}

#[tokio::test]
async fn al2_ami_unit_is_installed_as_bootstrap_sh_does_and_keeps_everything() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    preseed(
        r,
        &[
            ("/etc/eks/containerd/kubelet-containerd.service", AL2_UNIT),
            ("/etc/eks/containerd/sandbox-image.service", AL2_SANDBOX),
            ("/etc/systemd/system/kubelet.service", AL2_DOCKER_UNIT),
            (PROVIDER_CONFIG, AL2_PROVIDER_CONFIG),
            (PROVIDER_BIN, "binary"),
        ],
    );
    // Negative control: the AMI's unit alone gives kubelet no cloud provider and no node IP;
    // the drop-ins are what carry them.
    let bare = kubelet_command_line(r, Unit::Text(AL2_UNIT.into())).unwrap();
    assert!(values(&bare, "--cloud-provider").is_empty() && values(&bare, "--node-ip").is_empty());

    let err = bootstrap(
        r,
        "Kubernetes v1.31.2",
        &["--kubelet-extra-args", "--node-labels=team=a"],
    )
    .await
    .unwrap();
    assert!(
        err.contains("kubelet unit: the EKS AMI's (/etc/eks/containerd/kubelet-containerd.service installed as /etc/systemd/system/kubelet.service"),
        "{err}"
    );
    assert!(!err.contains("ecr-credential-provider"), "{err}");
    // The AMI's units, byte for byte; its credential provider config untouched.
    assert_eq!(
        read(r, "/etc/systemd/system/kubelet.service").unwrap(),
        AL2_UNIT
    );
    assert_eq!(
        read(r, "/etc/systemd/system/sandbox-image.service").unwrap(),
        AL2_SANDBOX
    );
    assert_eq!(read(r, PROVIDER_CONFIG).unwrap(), AL2_PROVIDER_CONFIG);

    let argv = kubelet_command_line(r, Unit::Installed).unwrap();
    // Every word the AMI's ExecStart= passes comes first, in order, as the AMI wrote it.
    let fixed = fixed_words(AL2_UNIT);
    assert_eq!(fixed.len(), 11, "{fixed:?}");
    assert_eq!(argv[..fixed.len()], fixed[..], "{argv:?}");
    assert_kubelet_gets_everything(&argv, "team=a");
    // The AMI's config and endpoint flags are not passed a second time by vpcnet.
    assert_eq!(values(&argv, "--container-runtime-endpoint").len(), 1);

    // Dependencies and pre-start steps: exactly the AMI's (drop-ins only set variables).
    assert_eq!(
        setting(r, "Unit", "After"),
        ["containerd.service sandbox-image.service"]
    );
    assert_eq!(
        setting(r, "Unit", "Requires"),
        ["containerd.service sandbox-image.service"]
    );
    assert_eq!(
        setting(r, "Service", "ExecStartPre"),
        ["/sbin/iptables -P FORWARD ACCEPT -w 5"]
    );
    let directives = unit_directives(&unit_files(r, Unit::Installed).unwrap());
    for (file, section, key, _) in directives
        .iter()
        .filter(|(f, ..)| f.contains(".service.d/"))
    {
        assert_eq!(
            (section.as_str(), key.as_str()),
            ("Service", "Environment"),
            "{file}"
        );
    }
}

#[tokio::test]
async fn al2023_ami_unit_is_kept_and_gets_nodeadms_environment_file() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    preseed(
        r,
        &[
            ("/etc/systemd/system/kubelet.service", AL2023_UNIT),
            (PROVIDER_BIN, "binary"),
        ],
    );
    // Negative control: without the environment file nodeadm (or vpcnet) writes, systemd
    // would not start the AMI's unit at all.
    let e = kubelet_command_line(r, Unit::Installed)
        .unwrap_err()
        .to_string();
    assert!(e.contains("/etc/eks/kubelet/environment"), "{e}");

    let err = bootstrap(
        r,
        "Kubernetes v1.33.5",
        &["--kubelet-extra-args", "--node-labels='team=a b'"],
    )
    .await
    .unwrap();
    assert!(
        err.contains("kubelet unit: the AMI's /etc/systemd/system/kubelet.service, kept"),
        "{err}"
    );
    assert_eq!(
        read(r, "/etc/systemd/system/kubelet.service").unwrap(),
        AL2023_UNIT
    );
    // No drop-in: the unit reads none of their variables.
    assert!(!r
        .join("etc/systemd/system/kubelet.service.d")
        .join("10-kubelet-args.conf")
        .exists());
    // The provider config nodeadm would write (API v1 on kubelet 1.33).
    let cfg: serde_json::Value = serde_json::from_str(&read(r, PROVIDER_CONFIG).unwrap()).unwrap();
    assert_eq!(cfg["apiVersion"], "kubelet.config.k8s.io/v1");

    let argv = kubelet_command_line(r, Unit::Installed).unwrap();
    let fixed = fixed_words(AL2023_UNIT);
    assert_eq!(fixed, ["/usr/bin/kubelet"]);
    assert_kubelet_gets_everything(&argv, "team=a b");
    assert_eq!(setting(r, "Unit", "After"), ["containerd.service"]);
    assert_eq!(setting(r, "Unit", "Wants"), ["containerd.service"]);
    assert_eq!(
        setting(r, "Service", "ExecStartPre"),
        ["/sbin/iptables -P FORWARD ACCEPT -w 5"]
    );
    assert_eq!(
        setting(r, "Service", "EnvironmentFile"),
        ["/etc/eks/kubelet/environment"]
    );
}

#[tokio::test]
async fn without_an_ami_unit_vpcnets_own_does_what_the_amis_do() {
    // Bare node: runtime endpoint and FORWARD pre-start; no provider, so no flags (kubelet
    // would refuse a provider it cannot run) and a warning that says how to fix it.
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let err = bootstrap(r, "Kubernetes v1.31.2", &[]).await.unwrap();
    assert!(err.contains("kubelet unit: vpcnet's (/etc/systemd/system/kubelet.service), because the node has no AMI kubelet unit"), "{err}");
    assert!(
        err.contains("warning: no ecr-credential-provider at /etc/eks/image-credential-provider/ecr-credential-provider") && err.contains("Fix:"),
        "{err}"
    );
    let argv = kubelet_command_line(r, Unit::Installed).unwrap();
    assert_eq!(values(&argv, "--container-runtime-endpoint"), [SOCKET]);
    assert!(values(&argv, "--image-credential-provider-config").is_empty());
    assert_eq!(setting(r, "Unit", "Requires"), ["containerd.service"]);
    assert_eq!(
        setting(r, "Service", "ExecStartPre"),
        ["-/sbin/iptables -P FORWARD ACCEPT -w 5"]
    );

    // With the provider binary and a sandbox-image.service: the flags, vpcnet's provider
    // config, and the dependency on the pause image pull.
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    preseed(
        r,
        &[
            (PROVIDER_BIN, "binary"),
            ("/usr/lib/systemd/system/sandbox-image.service", AL2_SANDBOX),
        ],
    );
    let err = bootstrap(
        r,
        "Kubernetes v1.31.2",
        &["--kubelet-extra-args", "--node-labels=x=y"],
    )
    .await
    .unwrap();
    assert!(!err.contains("no ecr-credential-provider"), "{err}");
    let argv = kubelet_command_line(r, Unit::Installed).unwrap();
    assert_kubelet_gets_everything(&argv, "x=y");
    assert!(read(r, PROVIDER_CONFIG)
        .unwrap()
        .contains("ecr-credential-provider"));
    assert_eq!(
        setting(r, "Unit", "Requires"),
        ["containerd.service sandbox-image.service"]
    );
    assert_eq!(
        setting(r, "Unit", "After"),
        ["network-online.target containerd.service sandbox-image.service"]
    );
    // A rerun finds vpcnet's own unit and config, and keeps both.
    let before = tree(r);
    let err = bootstrap(
        r,
        "Kubernetes v1.31.2",
        &["--kubelet-extra-args", "--node-labels=x=y"],
    )
    .await
    .unwrap();
    assert!(err.contains("was written by vpcnet-bootstrap"), "{err}");
    assert_eq!(before, tree(r));
}

#[tokio::test]
async fn a_unit_vpcnet_cannot_reach_kubelet_through_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let odd = "[Service]\nExecStart=/usr/bin/kubelet --config /etc/kubelet.yaml\n";
    preseed(r, &[("/etc/systemd/system/kubelet.service", odd)]);
    let e = bootstrap(r, "Kubernetes v1.31.2", &[]).await.unwrap_err();
    assert!(
        e.contains("/etc/systemd/system/kubelet.service")
            && e.contains("$KUBELET_ARGS")
            && e.contains("Fix:"),
        "{e}"
    );
    // Nothing written: the unit is as it was, no drop-in, no kubelet config.
    assert_eq!(read(r, "/etc/systemd/system/kubelet.service").unwrap(), odd);
    assert!(read(r, "/etc/kubernetes/kubelet/kubelet-config.json").is_none());
}
