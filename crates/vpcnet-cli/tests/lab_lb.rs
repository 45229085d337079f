//! `vpcnet lab lb ...` as an operator types it: a lab with two httpd containers, a network load
//! balancer created, targets registered, health listed until healthy, load sent through it and
//! reported, the load balancer deleted, the lab removed (always, even on failure). Needs root,
//! haproxy and the workspace binaries (`cargo build --workspace --all-targets`); fails when not root.

use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `vpcnet lab ARGS --name NAME`-style commands; removes the lab when dropped.
struct Session {
    name: String,
}

impl Session {
    fn vpcnet(&self, args: &[&str]) -> String {
        let mut full = vec!["lab"];
        let (sub, rest) = args.split_first().unwrap();
        full.push(sub);
        if *sub == "lb" {
            full.extend(["--name", &self.name]);
            full.extend(rest);
        } else {
            full.extend(rest);
            full.extend(["--name", &self.name]);
        }
        let out = Command::new(env!("CARGO_BIN_EXE_vpcnet"))
            .args(&full)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "vpcnet {full:?} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new(env!("CARGO_BIN_EXE_vpcnet"))
            .args(["lab", "down", "--name", &self.name])
            .status();
    }
}

#[test]
fn an_operator_creates_a_load_balancer_registers_checks_and_loads_it() {
    vpcnet_cni_harness::netns::require_root();
    let s = Session {
        name: format!("e2e-clilb-{}-0", std::process::id()),
    };
    s.vpcnet(&["up"]);
    let out = s.vpcnet(&["run", "--httpd", "8080", "c1", "c2"]);
    assert_eq!(out.lines().count(), 2, "{out}");
    let out = s.vpcnet(&[
        "lb",
        "create",
        "web",
        "--health-interval",
        "5",
        "--health-timeout",
        "2",
        "--healthy-threshold",
        "2",
        "--deregistration-delay",
        "5",
    ]);
    assert!(
        out.contains("web") && out.contains("TCP 80") && out.contains("active"),
        "{out}"
    );
    s.vpcnet(&["lb", "register", "web", "c1", "c2"]);
    let t0 = Instant::now();
    loop {
        let health = s.vpcnet(&["lb", "health", "web"]);
        let healthy = health.lines().filter(|l| l.contains(" healthy")).count();
        if healthy == 2 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "not healthy:\n{health}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let report = s.vpcnet(&["lb", "load", "web", "--seconds", "2", "--connections", "4"]);
    assert!(report.contains("errors 0"), "{report}");
    assert!(report.contains("latency ms  p50"), "{report}");
    for c in ["c1", "c2"] {
        assert!(
            report.lines().any(|l| l.starts_with(c)),
            "{c} answered:\n{report}"
        );
    }
    let list = s.vpcnet(&["lb", "list"]);
    assert!(list.lines().any(|l| l.starts_with("web")), "{list}");
    s.vpcnet(&["lb", "deregister", "web", "c2"]);
    let health = s.vpcnet(&["lb", "health", "web"]);
    assert!(health.contains("draining"), "{health}");
    s.vpcnet(&["lb", "delete", "web"]);
    let list = s.vpcnet(&["lb", "list"]);
    assert!(!list.lines().any(|l| l.starts_with("web")), "{list}");
}
