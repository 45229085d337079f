//! Network namespaces for the agent's root tests: a unique name per run and per namespace,
//! loopback up, deleted again on drop (also when the test fails).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace named `vpcnet-<tag><pid>-<n>`, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("vpcnet-{tag}{}-{n}", std::process::id());
        run(&["ip", "netns", "add", &name]);
        run(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        Netns { name }
    }

    pub fn path(&self) -> PathBuf {
        format!("/var/run/netns/{}", self.name).into()
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// `ARGS` run inside the namespace (`ip netns exec`).
    pub fn exec(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Runs `args[0]` with the rest; panics with its stderr unless it succeeds; its stdout.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
