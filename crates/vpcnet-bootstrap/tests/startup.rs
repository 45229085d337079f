//! Node start-up after the files, as bootstrap.sh does it, through a recording system adapter:
//! daemon-reload, bpffs, containerd restarted for a new config, kubelet enabled and
//! (re)started; each step idempotent, skipped by `--files-only` and `--dry-run`, and a failing
//! step reported after the files are in place.

mod common;

use clap::Parser;
use common::*;
use vpcnet_bootstrap::startup::{RecordingSystem, Step};
use vpcnet_bootstrap::{BootstrapArgs, BootstrapError};

fn args(root: &std::path::Path, extra: &[&str]) -> BootstrapArgs {
    let ca = test_ca_b64();
    let mut argv = vec![
        "vpcnet-bootstrap",
        "my-cluster",
        "--apiserver-endpoint",
        "https://api.example.com",
        "--b64-cluster-ca",
        &ca,
        "--root",
        root.to_str().unwrap(),
    ];
    argv.extend_from_slice(extra);
    BootstrapArgs::try_parse_from(argv).unwrap()
}

fn steps(s: &RecordingSystem) -> Vec<String> {
    s.steps().iter().map(|s| s.to_string()).collect()
}

async fn run(
    cloud: &Cloud,
    host: &FakeHost,
    args: &BootstrapArgs,
) -> (Result<(), String>, Vec<String>) {
    let system = RecordingSystem::default();
    let r = vpcnet_bootstrap::run(
        args,
        &cloud.adapters(host, &system),
        &mut Vec::new(),
        &mut Vec::new(),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string());
    (r, steps(&system))
}

#[tokio::test]
async fn steps_follow_what_changed() {
    let cloud = Cloud::launch(&CloudSpec::new("m5.large", vec!["10.0.0.0/16"])).await;
    let root = tempfile::tempdir().unwrap();
    let host = FakeHost::new(root.path());

    let (r, first) = run(&cloud, &host, &args(root.path(), &[])).await;
    r.unwrap();
    assert_eq!(
        first,
        [
            "systemctl daemon-reload",
            "systemctl enable sys-fs-bpf.mount",
            "systemctl start sys-fs-bpf.mount",
            "systemctl enable containerd.service",
            "systemctl restart containerd.service",
            "systemctl enable kubelet.service",
            "systemctl restart kubelet.service",
        ]
    );
    let files = tree(root.path());
    assert!(files["etc/systemd/system/sys-fs-bpf.mount"].contains("What=bpffs"));
    assert!(files["etc/containerd/config.toml"].contains("SystemdCgroup = true"));

    // Nothing changed: kubelet is only made sure to run.
    let (r, second) = run(&cloud, &host, &args(root.path(), &[])).await;
    r.unwrap();
    assert_eq!(
        second,
        [
            "systemctl enable sys-fs-bpf.mount",
            "systemctl start sys-fs-bpf.mount",
            "systemctl enable kubelet.service",
            "systemctl start kubelet.service",
        ]
    );

    // New kubelet flags (bpffs mounted by now): reload and restart kubelet, not containerd.
    let mounted = FakeHost {
        bpffs_mounted: true,
        ..FakeHost::new(root.path())
    };
    let (r, third) = run(
        &cloud,
        &mounted,
        &args(root.path(), &["--kubelet-extra-args", "--node-labels=a=b"]),
    )
    .await;
    r.unwrap();
    assert_eq!(
        third,
        [
            "systemctl daemon-reload",
            "systemctl enable kubelet.service",
            "systemctl restart kubelet.service",
        ]
    );
}

#[tokio::test]
async fn files_only_mount_bpf_fs_false_and_dry_run_run_nothing_extra() {
    let cloud = Cloud::launch(&CloudSpec::new("m5.large", vec!["10.0.0.0/16"])).await;
    let root = tempfile::tempdir().unwrap();
    let host = FakeHost::new(root.path());

    let (r, s) = run(&cloud, &host, &args(root.path(), &["--files-only"])).await;
    r.unwrap();
    assert!(s.is_empty(), "{s:?}");
    assert!(tree(root.path()).contains_key("etc/systemd/system/kubelet.service"));

    let root2 = tempfile::tempdir().unwrap();
    let host2 = FakeHost::new(root2.path());
    let (r, s) = run(
        &cloud,
        &host2,
        &args(root2.path(), &["--mount-bpf-fs", "false"]),
    )
    .await;
    r.unwrap();
    assert!(!s.iter().any(|s| s.contains("bpf")), "{s:?}");
    assert!(!tree(root2.path()).contains_key("etc/systemd/system/sys-fs-bpf.mount"));

    let root3 = tempfile::tempdir().unwrap();
    let host3 = FakeHost::new(root3.path());
    let (r, s) = run(&cloud, &host3, &args(root3.path(), &["--dry-run"])).await;
    r.unwrap();
    assert!(s.is_empty() && tree(root3.path()).is_empty(), "{s:?}");
}

#[tokio::test]
async fn a_failing_step_is_reported_after_the_files_are_written() {
    let cloud = Cloud::launch(&CloudSpec::new("m5.large", vec!["10.0.0.0/16"])).await;
    let root = tempfile::tempdir().unwrap();
    let host = FakeHost::new(root.path());
    let system = RecordingSystem::failing_on(Step::Restart("containerd.service".into()));
    let e = vpcnet_bootstrap::run(
        &args(root.path(), &[]),
        &cloud.adapters(&host, &system),
        &mut Vec::new(),
        &mut Vec::new(),
    )
    .await
    .unwrap_err();
    let be = e.downcast_ref::<BootstrapError>().unwrap();
    assert!(
        matches!(be, BootstrapError::System { .. }) && !be.is_bad_input(),
        "{be}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("systemctl restart containerd.service failed") && msg.contains("rerun"),
        "{msg}"
    );
    // Stopped at the failure: kubelet was not started.
    assert_eq!(
        system.steps().last(),
        Some(&Step::Restart("containerd.service".into()))
    );
    assert!(tree(root.path()).contains_key("etc/kubernetes/kubelet/kubelet-config.json"));
}
