//! The plugin's log (`pluginLogFile`, `pluginLogLevel`; the VPC CNI's
//! AWS_VPC_K8S_PLUGIN_LOG_FILE / _LEVEL) with the real `vpcnet-cni` binary: lines at the level
//! asked go to the file, none to stdout (the CNI result's); a file already at the VPC CNI's
//! 100 MiB (sparse: nothing that large is written) is rotated to `plugin.log.1`; a file that
//! cannot be created changes nothing in the plugin's answer. Each run is a STATUS against an
//! absent agent: no namespace, no root.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_vpcnet-cni");
const VPC_CNI_MAX_BYTES: u64 = 100 * 1024 * 1024;

fn status(dir: &Path, log_file: &str, level: &str) -> Output {
    let conf = json!({
        "cniVersion": "1.1.0",
        "name": "aws-cni",
        "type": "vpcnet-cni",
        "agentSocket": dir.join("no-agent.sock"),
        "agentTimeout": "1s",
        "pluginLogFile": log_file,
        "pluginLogLevel": level,
    });
    let mut child = Command::new(PLUGIN)
        .env_clear()
        .env("CNI_COMMAND", "STATUS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The CNI error the plugin answered (STATUS without an agent fails), as JSON.
fn answer(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not the CNI answer alone ({e}): {out:?}"))
}

/// The lines of `log` at `level`; every line must be a JSON object with the VPC CNI's keys
/// (`level`, `ts`, `caller`, `msg`).
fn lines_at(log: &str, level: &str) -> usize {
    log.lines()
        .filter(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"));
            for key in ["level", "ts", "caller", "msg"] {
                assert!(v[key].is_string(), "no {key} in {l}");
            }
            v["level"] == level.to_ascii_lowercase()
        })
        .count()
}

#[test]
fn lines_at_the_level_asked_go_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let debug_log = dir.path().join("debug/plugin.log");
    let out = status(dir.path(), debug_log.to_str().unwrap(), "Debug");
    assert_ne!(out.status.code(), Some(0));
    assert!(answer(&out)["code"].as_u64().is_some(), "{out:?}");
    let text = std::fs::read_to_string(&debug_log).unwrap();
    assert!(lines_at(&text, "DEBUG") > 0, "{text}");
    assert!(lines_at(&text, "ERROR") > 0, "{text}");

    let warn_log = dir.path().join("warn/plugin.log");
    status(dir.path(), warn_log.to_str().unwrap(), "Warn");
    let text = std::fs::read_to_string(&warn_log).unwrap();
    assert!(lines_at(&text, "ERROR") > 0, "{text}");
    assert_eq!(
        lines_at(&text, "DEBUG") + lines_at(&text, "INFO"),
        0,
        "{text}"
    );
}

#[test]
fn a_full_log_file_is_rotated_as_the_vpc_cni_rotates_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("plugin.log");
    std::fs::File::create(&log)
        .unwrap()
        .set_len(VPC_CNI_MAX_BYTES)
        .unwrap();
    for n in 1..=5 {
        std::fs::write(
            dir.path().join(format!("plugin.log.{n}")),
            format!("old {n}\n"),
        )
        .unwrap();
    }
    let out = status(dir.path(), log.to_str().unwrap(), "Debug");
    answer(&out);
    assert_eq!(
        std::fs::metadata(dir.path().join("plugin.log.1"))
            .unwrap()
            .len(),
        VPC_CNI_MAX_BYTES
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("plugin.log.5")).unwrap(),
        "old 4\n"
    );
    assert!(!dir.path().join("plugin.log.6").exists());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(lines_at(&text, "DEBUG") > 0, "{text}");
}

#[test]
fn a_log_file_that_cannot_be_created_changes_nothing_in_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain-file");
    std::fs::write(&plain, "").unwrap();
    let bad = status(
        dir.path(),
        plain.join("plugin.log").to_str().unwrap(),
        "Debug",
    );
    let none = status(dir.path(), "", "Debug");
    assert_eq!(bad.status.code(), none.status.code());
    assert_eq!(answer(&bad), answer(&none));
    assert_eq!(bad.stderr, none.stderr);
}
