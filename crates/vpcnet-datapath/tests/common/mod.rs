//! Test namespaces: created with `ip netns add` under a unique name, deleted on drop (even when
//! the test panics). Every datapath test works only inside these.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

#[allow(dead_code)]
pub struct TestNetns {
    pub name: String,
}

#[allow(clippy::new_without_default, dead_code)]
impl TestNetns {
    pub fn new() -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("vpcnet-t{}-{n}", std::process::id());
        run(&["ip", "netns", "add", &name]);
        run(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        TestNetns { name }
    }

    pub fn path(&self) -> std::path::PathBuf {
        format!("/var/run/netns/{}", self.name).into()
    }

    /// Runs `ip -n <ns> <args>` and returns stdout; panics on failure.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

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
