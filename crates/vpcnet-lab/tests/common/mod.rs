//! Shared end-to-end test harness: root check, the workspace binaries, and [`with_lab`],
//! which builds a lab with a unique name, runs the test, always tears down and then checks that
//! nothing is left (namespaces, directory, root namespace links/routes/rules unchanged).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use vpcnet_lab::lab::{Lab, LabGuard, UpOptions};

pub static SEQ: AtomicU32 = AtomicU32::new(0);

pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// target/debug, where the workspace binaries are (the test binary is in target/debug/deps).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    for b in ["vpcnet", "vpcnet-agent", "vpcnet-cni"] {
        assert!(
            dir.join(b).is_file(),
            "{} missing: run `cargo build --workspace --bins` first",
            dir.join(b).display()
        );
    }
    dir
}

pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The root namespace's links, routes (all tables) and rules.
pub fn root_snapshot() -> String {
    [
        sh("ip", &["-o", "link", "show"]),
        sh("ip", &["route", "show", "table", "all"]),
        sh("ip", &["rule", "show"]),
    ]
    .join("\n")
}

/// Tears down labs of earlier test runs whose process died (e.g. killed by a timeout): their
/// names carry the test process id.
pub fn remove_stale_test_labs() {
    for name in vpcnet_lab::state::list_labs() {
        let Some(rest) = name.strip_prefix("e2e-") else {
            continue;
        };
        let pid = rest.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                eprintln!("removing stale lab {name}");
                let _ = Lab::open(&name).map(|l| l.down());
            }
        }
    }
}

/// Builds a lab, runs `f`, always tears down, then checks nothing is left.
pub fn with_lab(tag: &str, tweak: impl FnOnce(&mut UpOptions), f: impl FnOnce(&Lab)) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    remove_stale_test_labs();
    let before = root_snapshot();
    let name = format!(
        "e2e-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let mut opts = UpOptions::new(&name);
    opts.bin_dir = bin_dir();
    // Reconcile often so restarts are observed quickly.
    opts.agent_env
        .push(("VPCNET_RECONCILE_INTERVAL".into(), "2".into()));
    tweak(&mut opts);
    let lab = Lab::up(&opts).expect("lab up");
    let namespaces = lab.state().unwrap().namespaces;
    let guard = LabGuard::new(lab.clone());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&lab)));
    if result.is_err() {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(lab.dir.join("logs"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        logs.retain(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n == "emulator.log" || n.starts_with("agent-") || n.starts_with("haproxy-")
        });
        logs.sort();
        for p in logs {
            eprintln!(
                "--- {}\n{}",
                p.display(),
                std::fs::read_to_string(&p).unwrap_or_default()
            );
        }
    }
    let down = guard.down();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
    down.expect("lab down removes everything");
    let netns = sh("ip", &["netns", "list"]);
    for ns in &namespaces {
        assert!(!netns.contains(ns.as_str()), "namespace {ns} left behind");
    }
    assert!(!lab.dir.exists(), "lab directory left behind");
    // Other test binaries may run at the same time: allow a transient difference to settle.
    let t0 = Instant::now();
    while root_snapshot() != before && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(before, root_snapshot(), "root namespace changed");
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < timeout,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
