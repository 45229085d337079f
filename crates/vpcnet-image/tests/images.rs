//! The two images built from a binary directory whose "vpcnet binaries" are copies of this
//! test's own executable (a real dynamically linked ELF file of this build), with the rest (nft,
//! the reference plugins, libraries, CA bundle) from this machine: reproducible, parseable with
//! oci-spec, self-contained, and accepted by a real containerd.

// The containerd test waits for a real process: std's clock and sleep are the point here.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vpcnet_image::elf;
use vpcnet_image::images::{self, Inputs, NODE_CNI_DIR, NONROOT_ID};
use vpcnet_image::layout;

const ALL_BINARIES: [&str; 5] = [
    "vpcnet-agent",
    "vpcnet-cni",
    "vpcnet-init",
    "vpcnet",
    "vpcnet-targets",
];

fn bin_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let me = std::env::current_exe().unwrap();
    for b in ALL_BINARIES {
        std::fs::copy(&me, d.path().join(b)).unwrap();
    }
    d
}

fn inputs(bin: &Path) -> Inputs {
    Inputs {
        bin_dir: bin.to_path_buf(),
        host_root: "/".into(),
        arch: images::host_arch().into(),
        repository: "localhost/vpcnet-test".into(),
        tag: "t1".into(),
        mtime: 0,
    }
}

#[test]
fn two_builds_of_the_same_inputs_are_byte_identical() {
    let bin = bin_dir();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let one = images::build_all(&inputs(bin.path()), a.path()).unwrap();
    let two = images::build_all(&inputs(bin.path()), b.path()).unwrap();
    assert_eq!(one.len(), 2);
    for ((p1, _, b1), (p2, _, b2)) in one.iter().zip(&two) {
        assert_eq!(b1.manifest_digest, b2.manifest_digest);
        assert_eq!(
            std::fs::read(p1).unwrap(),
            std::fs::read(p2).unwrap(),
            "{}",
            p1.display()
        );
    }
    // A different input (the epoch) gives a different image.
    let mut later = inputs(bin.path());
    later.mtime = 1_700_000_000;
    let c = tempfile::tempdir().unwrap();
    let three = images::build_all(&later, c.path()).unwrap();
    assert_ne!(three[0].2.manifest_digest, one[0].2.manifest_digest);
}

#[test]
fn node_image_reads_back_holds_every_library_and_runs_the_agent_by_default() {
    let bin = bin_dir();
    let image = images::node(&inputs(bin.path())).unwrap();
    let built = image.build(0).unwrap();
    let r = layout::read(&built.archive).unwrap();
    assert_eq!(
        r.index.manifests()[0].digest().to_string(),
        built.manifest_digest
    );
    let c = r.config.config().as_ref().unwrap();
    assert_eq!(
        c.cmd().as_deref(),
        Some(&["/usr/bin/vpcnet-agent".to_string()][..])
    );
    assert!(
        c.user().is_none(),
        "the node image runs as root (it programs the node)"
    );

    let files = images::layer_files(&image.layer);
    for f in [
        "/usr/bin/vpcnet-agent",
        "/usr/bin/vpcnet-init",
        "/usr/bin/vpcnet",
        "/usr/sbin/nft",
        "/etc/ssl/certs/ca-certificates.crt",
    ] {
        assert!(files.contains_key(f), "{f} missing");
    }
    for p in ["vpcnet-cni", "portmap", "bandwidth", "tuning"] {
        assert!(
            files.contains_key(&format!("{NODE_CNI_DIR}/{p}")),
            "{p} missing"
        );
    }
    // The layer in the archive is the file set: same bytes as written from the model.
    assert_eq!(r.layer, image.layer.to_tar(0).unwrap());
    let sys = elf::system_dirs(&r.config.architecture().to_string());
    assert_eq!(elf::unresolved(&files, &sys), Vec::<String>::new());
    // nft's own libraries came along (found through its DT_NEEDED, not listed by hand).
    assert!(
        files.keys().any(|p| p.contains("libnftables.so")),
        "{:?}",
        files.keys()
    );
}

#[test]
fn targets_image_runs_as_a_non_root_user_it_declares() {
    let bin = bin_dir();
    let image = images::targets(&inputs(bin.path())).unwrap();
    let r = layout::read(&image.build(0).unwrap().archive).unwrap();
    let c = r.config.config().as_ref().unwrap();
    let id = NONROOT_ID.to_string();
    assert_eq!(c.user().as_deref(), Some(format!("{id}:{id}").as_str()));
    assert_eq!(
        c.entrypoint().as_deref(),
        Some(&["/usr/bin/vpcnet-targets".to_string()][..])
    );
    let files = images::layer_files(&image.layer);
    let passwd = String::from_utf8(files["/etc/passwd"].clone()).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with(&format!("nonroot:x:{id}:{id}:"))),
        "{passwd}"
    );
    let group = String::from_utf8(files["/etc/group"].clone()).unwrap();
    assert!(
        group.lines().any(|l| l == format!("nonroot:x:{id}:")),
        "{group}"
    );
    let sys = elf::system_dirs(&r.config.architecture().to_string());
    assert_eq!(elf::unresolved(&files, &sys), Vec::<String>::new());
    assert!(
        !files.contains_key("/usr/sbin/nft"),
        "only the controller and what it needs"
    );
}

#[test]
fn a_missing_binary_names_the_path_and_the_fix() {
    let bin = bin_dir();
    std::fs::remove_file(bin.path().join("vpcnet-init")).unwrap();
    let e = format!("{:#}", images::node(&inputs(bin.path())).unwrap_err());
    assert!(
        e.contains("vpcnet-init") && e.contains("scripts/build-images.sh"),
        "{e}"
    );
}

/// A throwaway containerd with its own root, state, socket and configuration in a temp dir
/// (no CRI plugin, no network); killed and removed on drop.
struct Containerd {
    child: Child,
    dir: tempfile::TempDir,
}

impl Containerd {
    fn start() -> Self {
        vpcnet_cni_harness::netns::require_root();
        let dir = tempfile::Builder::new()
            .prefix("vpcnet-ctd")
            .tempdir()
            .unwrap();
        let d = dir.path();
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
"#,
            root = d.join("root").display(),
            state = d.join("state").display(),
            sock = d.join("c.sock").display(),
            opt = d.join("opt").display(),
        );
        std::fs::write(d.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(d.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("cannot run containerd: install Debian's containerd (scripts/install-deps.sh)");
        let c = Containerd { child, dir };
        let t0 = Instant::now();
        while c.ctr(&["version"]).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "containerd did not answer within 30 s: {}",
                std::fs::read_to_string(c.dir.path().join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    fn ctr(&self, args: &[&str]) -> Result<String, String> {
        let o = Command::new("ctr")
            .arg("--address")
            .arg(self.dir.path().join("c.sock"))
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .map_err(|e| format!("cannot run ctr ({e}): install Debian's containerd"))?;
        if o.status.success() {
            Ok(String::from_utf8_lossy(&o.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn containerd_imports_both_archives_under_their_names_and_digests_and_runs_nft_from_the_node_image()
{
    let bin = bin_dir();
    let out = tempfile::tempdir().unwrap();
    let built = images::build_all(&inputs(bin.path()), out.path()).unwrap();
    let ctd = Containerd::start();
    for (path, image, b) in &built {
        ctd.ctr(&[
            "images",
            "import",
            "--snapshotter",
            "overlayfs",
            path_str(path),
        ])
        .unwrap_or_else(|e| panic!("import {}: {e}", path.display()));
        let ls = ctd.ctr(&["images", "ls"]).unwrap();
        let line = ls
            .lines()
            .find(|l| l.split_whitespace().next() == Some(image.spec.reference.as_str()))
            .unwrap_or_else(|| panic!("{} not listed:\n{ls}", image.spec.reference));
        assert!(line.contains(&b.manifest_digest), "{line}");
    }
    // The node image's nft starts with the loader and libraries the image carries.
    let node = &built[0].1.spec.reference;
    let out = ctd
        .ctr(&[
            "run",
            "--rm",
            "--snapshotter",
            "overlayfs",
            node,
            "vpcnet-image-test-nft",
            "/usr/sbin/nft",
            "--version",
        ])
        .unwrap_or_else(|e| panic!("running nft in {node}: {e}"));
    assert!(out.starts_with("nftables v"), "{out}");
}
