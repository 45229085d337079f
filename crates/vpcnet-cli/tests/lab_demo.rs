//! The README's demo command end to end: `vpcnet lab demo` (what scripts/demo.sh runs after
//! installing and building) brings a one-node m5.large lab up, starts 12 containers, prints
//! the container/IP/ENI/device table with secondary ENIs in use and the ping results, and
//! tears everything down. Needs root and the workspace binaries (`cargo build --workspace
//! --bins`); skipped when not root.

use std::process::Command;

#[test]
fn lab_demo_prints_the_table_and_pings_and_leaves_nothing() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let name = format!("e2e-clidemo-{}-0", std::process::id());
    let out = Command::new(env!("CARGO_BIN_EXE_vpcnet"))
        .args(["lab", "demo", "--name", &name])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");

    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 5 && f[0].starts_with('c') && f[3].starts_with("eni-"))
        .collect();
    assert_eq!(rows.len(), 12, "12 container rows:\n{stdout}");
    let devices: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[4]).collect();
    assert!(devices.contains("eth0"), "eth0 used:\n{stdout}");
    assert!(
        devices.iter().any(|d| *d != "eth0"),
        "a secondary ENI used:\n{stdout}"
    );
    for kind in ["same ENI", "across ENIs", "container -> node"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(kind))
            .unwrap_or_else(|| {
                panic!("no {kind:?} ping in:\n{stdout}");
            });
        assert!(line.trim_end().ends_with("ok"), "{line}");
    }
    assert!(!stdout.contains("FAILED"), "{stdout}");
    assert!(stderr.contains("tearing the lab down"), "{stderr}");
    assert!(
        !std::path::Path::new("/run/vpcnet-lab").join(&name).exists(),
        "lab state left behind"
    );
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
