//! The README's demo command end to end: `vpcnet lab demo` (what scripts/demo.sh runs after
//! installing and building) brings the Kubernetes lab up (control plane, two m5.large nodes),
//! runs a Deployment of 12 httpd pods behind a Service, prints the nodes, the pods, the
//! pod/IP/ENI/device table with a second ENI in use, the ENIs, the ping and ClusterIP results,
//! and tears everything down. Needs root, the workspace binaries and the Kubernetes binaries
//! (scripts/test.sh provides both); fails when not root.

use std::process::Command;

#[test]
fn lab_demo_prints_nodes_pods_enis_and_checks_and_leaves_nothing() {
    vpcnet_cni_harness::netns::require_root();
    let name = format!("e2e-clidemo-{}-0", std::process::id());
    let out = Command::new(env!("CARGO_BIN_EXE_vpcnet"))
        .args(["lab", "demo", "--name", &name])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");

    // kubectl get nodes -o wide: two Ready nodes named by their EC2 private DNS names.
    let ready = stdout
        .lines()
        .filter(|l| l.starts_with("ip-10-0-1-") && l.contains(" Ready "))
        .count();
    assert_eq!(ready, 2, "two Ready nodes:\n{stdout}");
    // The pod table: 12 pods, each on an ENI, eth0 and a second ENI in use.
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 5 && f[0].starts_with("web-") && f[3].starts_with("eni-"))
        .collect();
    assert_eq!(rows.len(), 12, "12 pod rows:\n{stdout}");
    let devices: std::collections::BTreeSet<(&str, &str)> =
        rows.iter().map(|r| (r[1], r[4])).collect();
    assert!(devices.contains(&("n1", "eth0")), "eth0 used:\n{stdout}");
    assert!(
        devices.iter().any(|(n, d)| *n == "n1" && *d != "eth0"),
        "a secondary ENI used:\n{stdout}"
    );
    assert!(
        devices.iter().any(|(n, _)| *n == "n2"),
        "n2 used:\n{stdout}"
    );
    for kind in ["same ENI", "across ENIs", "across nodes", "pod -> node"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(kind))
            .unwrap_or_else(|| panic!("no {kind:?} check in:\n{stdout}"));
        assert!(line.trim_end().ends_with("ok"), "{line}");
    }
    let http = stdout
        .lines()
        .find(|l| l.starts_with("pod -> ClusterIP (HTTP)"))
        .unwrap_or_else(|| panic!("no ClusterIP check in:\n{stdout}"));
    assert!(http.contains("hello from web-"), "{http}");
    assert!(!stdout.contains("FAILED"), "{stdout}");
    assert!(stderr.contains("tearing the lab down"), "{stderr}");
    assert!(
        !std::path::Path::new("/run/vpcnet-lab").join(&name).exists(),
        "lab state left behind"
    );
}
