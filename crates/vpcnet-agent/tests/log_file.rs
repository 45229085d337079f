//! `AWS_VPC_K8S_CNI_LOG_FILE` and `AWS_VPC_K8S_CNI_LOGLEVEL` with the real `vpcnet-agent`
//! binary against the emulator: the log goes to the file (not stdout), at the level asked and
//! none lower; a file already at the VPC CNI's 100 MiB (sparse: nothing that large is written)
//! is rotated to `ipamd.log.1` by the first line; a file that cannot be created stops the agent
//! at start naming the variable, the path, the OS error and the fix.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;

const VPC_CNI_MAX_BYTES: u64 = 100 * 1024 * 1024;

fn agent(lab: &Lab, log_file: &Path, level: &str) -> tokio::process::Command {
    let mut cmd = lab.bare_agent_command();
    cmd.env("AWS_VPC_K8S_CNI_LOG_FILE", log_file)
        .env("AWS_VPC_K8S_CNI_LOGLEVEL", level)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs the agent until it has written its conflist (it has started, talked to EC2 and logged
/// on the way), then stops it: its stdout and stderr.
async fn run_until_serving(lab: &Lab, log_file: &Path, level: &str) -> (String, String) {
    let _ = std::fs::remove_file(lab.conflist());
    let mut child = agent(lab, log_file, level).spawn().unwrap();
    let serving = while_agent_runs(&mut child, Duration::from_secs(60), || {
        lab.conflist().exists()
    })
    .await
    .unwrap_or_else(|out| {
        panic!(
            "{out}\nlog file:\n{}",
            std::fs::read_to_string(log_file).unwrap_or_default()
        )
    });
    assert!(serving, "no conflist");
    child.start_kill().unwrap();
    let out = child.wait_with_output().await.unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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

#[tokio::test(flavor = "multi_thread")]
async fn the_log_goes_to_the_file_at_the_level_asked() {
    let lab = lab("t3.medium").await;
    // DEBUG: debug lines and info lines, in the file; stdout carries none.
    let debug_log = lab.dir.path().join("debug/aws-routed-eni/ipamd.log");
    let (stdout, _) = run_until_serving(&lab, &debug_log, "DEBUG").await;
    let text = std::fs::read_to_string(&debug_log).unwrap();
    assert!(lines_at(&text, "DEBUG") > 0, "no DEBUG line:\n{text}");
    assert!(lines_at(&text, "INFO") > 0, "no INFO line:\n{text}");
    assert!(!text.contains('\u{1b}'), "colour codes in the file");
    assert_eq!(stdout, "", "log lines on stdout");

    // INFO: the same run logs info lines and no debug line.
    let info_log = lab.dir.path().join("info/ipamd.log");
    let (stdout, _) = run_until_serving(&lab, &info_log, "info").await;
    let text = std::fs::read_to_string(&info_log).unwrap();
    assert!(lines_at(&text, "INFO") > 0, "no INFO line:\n{text}");
    assert_eq!(lines_at(&text, "DEBUG"), 0, "DEBUG lines at INFO:\n{text}");
    assert_eq!(stdout, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_log_file_is_rotated_as_the_vpc_cni_rotates_it() {
    let lab = lab("t3.medium").await;
    let dir = lab.dir.path().join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("ipamd.log");
    // Exactly the VPC CNI's limit, sparse; and five older files, the oldest to be dropped.
    std::fs::File::create(&log)
        .unwrap()
        .set_len(VPC_CNI_MAX_BYTES)
        .unwrap();
    for n in 1..=5 {
        std::fs::write(dir.join(format!("ipamd.log.{n}")), format!("old {n}\n")).unwrap();
    }
    run_until_serving(&lab, &log, "INFO").await;
    let rotated = dir.join("ipamd.log.1");
    assert_eq!(
        std::fs::metadata(&rotated).unwrap().len(),
        VPC_CNI_MAX_BYTES
    );
    for n in 2..=5 {
        assert_eq!(
            std::fs::read_to_string(dir.join(format!("ipamd.log.{n}"))).unwrap(),
            format!("old {}\n", n - 1)
        );
    }
    assert!(!dir.join("ipamd.log.6").exists(), "more than 5 kept");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(lines_at(&text, "INFO") > 0, "{text}");
    assert!(std::fs::metadata(&log).unwrap().len() < VPC_CNI_MAX_BYTES);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_file_that_cannot_be_created_stops_the_agent_at_start() {
    let lab = lab("t3.medium").await;
    let plain = lab.dir.path().join("plain-file");
    std::fs::write(&plain, "").unwrap();
    let log = plain.join("ipamd.log");
    let out = tokio::time::timeout(Duration::from_secs(30), agent(&lab, &log, "DEBUG").output())
        .await
        .expect("the agent exits on its own")
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot log to AWS_VPC_K8S_CNI_LOG_FILE={:?}",
            log.display().to_string()
        )),
        "{err}"
    );
    assert!(err.contains("os error"), "{err}");
    assert!(err.contains("instead: "), "{err}");
    assert!(!lab.conflist().exists(), "it went on after the error");
}
