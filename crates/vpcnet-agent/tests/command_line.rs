//! The `vpcnet-agent` command line: `--help` and `--version` answer whatever the environment
//! holds (even an invalid one) and touch nothing; an unknown argument is an error, never
//! ignored (the agent would otherwise start as if it had not been given).

use std::process::{Command, Output};

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vpcnet-agent"))
        .env_clear()
        // Invalid on purpose: the command line is read before the configuration.
        .env("WARM_IP_TARGET", "five")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_points_at_the_configuration_reference_and_lists_the_variables() {
    for flag in ["--help", "-h"] {
        let out = agent(&[flag]);
        assert!(out.status.success(), "{out:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("Usage: vpcnet-agent"), "{help}");
        assert!(help.contains("docs/configuration.md"), "{help}");
        assert!(help.contains("export-vpc-cni-checkpoint"), "{help}");
        for (var, default) in [
            ("WARM_ENI_TARGET", "1"),
            ("WARM_IP_TARGET", "(unset)"),
            ("VPCNET_CHECKPOINT_PATH", "/var/run/vpcnet/ipam.json"),
            ("VPCNET_EC2_CALL_TIMEOUT", "30"),
        ] {
            let line = help
                .lines()
                .find(|l| l.split_whitespace().next() == Some(var))
                .unwrap_or_else(|| panic!("{var} missing from:\n{help}"));
            assert!(line.trim_end().ends_with(default), "{line}");
        }
    }
    let out = agent(&["export-vpc-cni-checkpoint", "--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--from", "--to", "--network-name", "docs/migration.md"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn version_prints_the_version() {
    let out = agent(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("vpcnet-agent {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn an_unknown_argument_is_an_error() {
    for args in [
        &["--warm-ip-target", "5"][..],
        &["run"][..],
        &["export-vpc-cni-checkpoint", "--form", "/tmp/x"][..],
    ] {
        let out = agent(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error:"), "{args:?}: {err}");
        assert!(err.contains("--help"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
}
