//! The `vpcnet-agent` binary with an invalid environment: it stops before touching anything,
//! with exit status 2 and one line per invalid variable (name, value, what is accepted), all
//! at once, so an operator fixes a DaemonSet in one round.

use std::process::Command;

#[test]
fn every_invalid_variable_is_reported_in_one_run() {
    let out = Command::new(env!("CARGO_BIN_EXE_vpcnet-agent"))
        .env_clear()
        .env("WARM_IP_TARGET", "five")
        .env("AWS_VPC_ENI_MTU", "100000")
        .env("CLUSTER_NAME", "fine")
        .env("INTROSPECTION_BIND_ADDRESS", "localhost")
        .env("VPCNET_NODE_DATAPATH", "maybe")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("4 invalid variables"), "{err}");
    for (var, value, accepted) in [
        ("WARM_IP_TARGET", "five", "integer"),
        ("AWS_VPC_ENI_MTU", "100000", "576 to 9001"),
        ("VPCNET_NODE_DATAPATH", "maybe", "true, false"),
        ("INTROSPECTION_BIND_ADDRESS", "localhost", "host:port"),
    ] {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("{var}=\"{value}\"")))
            .unwrap_or_else(|| panic!("{var} missing from:\n{err}"));
        assert!(line.contains(accepted), "{line}");
    }
    assert!(!err.contains("CLUSTER_NAME"), "{err}");
}
