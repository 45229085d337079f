//! The install step end to end in a network namespace this test creates (and deletes, even
//! when it fails): one end of a veth pair as the primary with the default route through it; the
//! binary run with `ip netns exec`; the sysctls read back from that namespace's `/proc/sys`.
//! Needs root; fails (never skips) without it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use vpcnet_cni_harness::netns::{require_root, run, TestNetns};

/// The project's test namespace (unique name, deleted on drop) and what this test runs in it.
struct Netns(TestNetns);

impl Netns {
    fn create() -> Self {
        Netns(TestNetns::create().expect("creating a test network namespace (ip netns add)"))
    }
    fn exec(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.0.name];
        full.extend_from_slice(args);
        run(&full).unwrap()
    }
    fn sysctl(&self, key: &str) -> String {
        self.exec(&["cat", &format!("/proc/sys/{key}")])
            .trim()
            .to_string()
    }
    fn init(&self, src: &Path, dst: &Path, env: &[(&str, &str)]) -> Output {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.0.name,
            env!("CARGO_BIN_EXE_vpcnet-init"),
        ])
        .arg("--source-dir")
        .arg(src)
        .arg("--host-cni-bin-dir")
        .arg(dst);
        for k in [
            "PRIMARY_INTERFACE",
            "HOST_CNI_BIN_PATH",
            "ENABLE_BANDWIDTH_PLUGIN",
            "DISABLE_POD_V6",
            "DISABLE_TCP_EARLY_DEMUX",
            "ENABLE_IPv6",
            "ENABLE_V6_EGRESS",
        ] {
            c.env_remove(k);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }
}

fn plugins_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for p in ["vpcnet-cni", "portmap", "bandwidth", "tuning"] {
        std::fs::write(d.path().join(p), format!("#!/bin/sh\n# {p}\n")).unwrap();
    }
    d
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn ok(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "vpcnet-init failed: {err}");
    err
}

#[test]
fn sets_rp_filter_on_the_default_route_interface_and_early_demux_both_ways() {
    require_root();
    let ns = Netns::create();
    // A veth pair stands in for two interfaces (the dummy driver may not be loadable).
    ns.exec(&[
        "ip", "link", "add", "prim0", "type", "veth", "peer", "name", "other0",
    ]);
    for l in ["lo", "prim0", "other0"] {
        ns.exec(&["ip", "link", "set", l, "up"]);
    }
    ns.exec(&["ip", "addr", "add", "10.0.0.10/24", "dev", "prim0"]);
    ns.exec(&[
        "ip", "route", "add", "default", "via", "10.0.0.1", "dev", "prim0",
    ]);
    for l in ["prim0", "other0"] {
        ns.exec(&[
            "sh",
            "-c",
            &format!("echo 1 > /proc/sys/net/ipv4/conf/{l}/rp_filter"),
        ]);
    }
    let (src, dst) = (plugins_dir(), tempfile::tempdir().unwrap());

    let log = ok(&ns.init(
        src.path(),
        dst.path(),
        &[("DISABLE_TCP_EARLY_DEMUX", "true")],
    ));
    assert_eq!(ns.sysctl("net/ipv4/conf/prim0/rp_filter"), "2");
    assert_eq!(
        ns.sysctl("net/ipv4/conf/other0/rp_filter"),
        "1",
        "only the primary changes"
    );
    assert_eq!(ns.sysctl("net/ipv4/tcp_early_demux"), "0");
    assert!(log.contains("prim0") && log.contains("rp_filter"), "{log}");
    assert_eq!(names(dst.path()), ["portmap", "vpcnet-cni"]);
    for n in names(dst.path()) {
        let m = std::fs::metadata(dst.path().join(&n)).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o755, "{n}");
    }

    // Rerun with the default and the bandwidth plugin asked for.
    let log = ok(&ns.init(
        src.path(),
        dst.path(),
        &[("ENABLE_BANDWIDTH_PLUGIN", "true")],
    ));
    assert_eq!(ns.sysctl("net/ipv4/tcp_early_demux"), "1");
    assert_eq!(ns.sysctl("net/ipv4/conf/prim0/rp_filter"), "2");
    assert!(log.contains("already installed"), "{log}");
    assert_eq!(names(dst.path()), ["bandwidth", "portmap", "vpcnet-cni"]);
}

#[test]
fn refuses_ipv6_and_a_namespace_without_default_route_before_touching_anything() {
    require_root();
    let ns = Netns::create();
    ns.exec(&["ip", "link", "set", "lo", "up"]);
    let (src, dst) = (plugins_dir(), tempfile::tempdir().unwrap());
    let o = ns.init(src.path(), dst.path(), &[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no IPv4 default route") && err.contains("--primary-interface"),
        "{err}"
    );
    assert!(
        names(dst.path()).is_empty(),
        "nothing installed on a refused run"
    );

    ns.exec(&[
        "ip", "link", "add", "prim0", "type", "veth", "peer", "name", "prim0p",
    ]);
    let o = ns.init(
        src.path(),
        dst.path(),
        &[("PRIMARY_INTERFACE", "prim0"), ("ENABLE_IPv6", "true")],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("ENABLE_IPv6=true"));
    assert!(names(dst.path()).is_empty());

    // The interface given explicitly, no default route needed.
    ok(&ns.init(src.path(), dst.path(), &[("PRIMARY_INTERFACE", "prim0")]));
    assert_eq!(ns.sysctl("net/ipv4/conf/prim0/rp_filter"), "2");
}

#[test]
fn a_missing_host_directory_is_an_error_naming_it() {
    // No namespace needed: nothing is installed and the sysctls are skipped.
    let src = plugins_dir();
    let gone = src.path().join("host-not-mounted");
    let o = Command::new(env!("CARGO_BIN_EXE_vpcnet-init"))
        .args(["--skip-sysctls", "--source-dir"])
        .arg(src.path())
        .arg("--host-cni-bin-dir")
        .arg(&gone)
        .env_remove("ENABLE_BANDWIDTH_PLUGIN")
        .env_remove("DISABLE_POD_V6")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&gone.display().to_string()) && err.contains("hostPath"),
        "{err}"
    );
}
