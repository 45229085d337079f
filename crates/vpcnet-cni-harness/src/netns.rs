//! Network namespaces for tests and benchmarks: unique names (`vpcnet-t<pid>-<n>`), created with
//! `ip netns add`, deleted on drop even when a test panics.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Fails the calling test, naming the fix, unless it runs as root: tests that create network
/// namespaces never pass without having run (`scripts/test.sh` runs them as root).
pub fn require_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test needs root (it creates network namespaces and processes in them): run it as \
         root, as scripts/test.sh does"
    );
}

/// A network namespace owned by the current test; deleted on drop.
#[derive(Debug)]
pub struct TestNetns {
    pub name: String,
}

impl TestNetns {
    /// Creates `vpcnet-t<pid>-<n>` with `lo` up.
    pub fn create() -> anyhow::Result<Self> {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("vpcnet-t{}-{n}", std::process::id());
        run(&["ip", "netns", "add", &name])?;
        let ns = TestNetns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `/var/run/netns/<name>`.
    pub fn path(&self) -> PathBuf {
        format!("/var/run/netns/{}", self.name).into()
    }

    /// Runs `ip -n <name> <args>` and returns its stdout.
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// A snapshot of links, IPv4 addresses, rules, routes of all tables and neighbours, to
    /// compare before/after an operation that must leave nothing behind.
    pub fn snapshot(&self) -> anyhow::Result<String> {
        let mut s = String::new();
        for args in [
            &["-o", "link", "show"][..],
            &["-4", "-o", "addr", "show"],
            &["-4", "rule", "show"],
            &["-4", "route", "show", "table", "all"],
            &["-4", "neigh", "show"],
        ] {
            s.push_str(&self.ip(args)?);
        }
        Ok(s)
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Runs a command, returning stdout; an error with stderr when it fails.
pub fn run(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(args[0]).args(&args[1..]).output()?;
    anyhow::ensure!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}
