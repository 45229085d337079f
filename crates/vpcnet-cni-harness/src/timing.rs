//! A timing shim in front of a CNI plugin, so plugin-level ADD/DEL latency and plugin memory
//! are measured the same way for any plugin while the real runtime (kubelet → containerd)
//! drives it. Installed under the name `timed-<plugin>` in the runtime's CNI bin directory and
//! named so in the conflist's `type`, it executes `<plugin>` from `CNI_PATH` (CNI spec,
//! "Section 3: Execution Protocol") with the same stdin, environment and stdout, and appends
//! one JSON line per invocation to the log named by `VPCNET_CNI_TIMING_LOG` (or
//! `<CNI bin dir>/../cni-timing.jsonl`): command, container ID, plugin, wall time from exec to
//! exit, the child's peak RSS (`getrusage(RUSAGE_CHILDREN)`), exit code.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// Prefix of the shim's name; the rest is the plugin it runs.
pub const SHIM_PREFIX: &str = "timed-";

/// One invocation, as logged.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// The plugin run (`aws-cni`, `vpcnet-cni`, ...).
    pub plugin: String,
    /// `CNI_COMMAND` (ADD, DEL, CHECK, VERSION, STATUS, GC).
    pub command: String,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// From the plugin's exec to its exit, microseconds.
    pub wall_us: u64,
    /// The plugin's peak resident set, KiB.
    pub max_rss_kib: u64,
    /// Its exit code (-1: killed by a signal).
    pub exit_code: i32,
}

/// The plugin behind a shim named `argv0` (`timed-aws-cni` → `aws-cni`).
pub fn plugin_name(argv0: &str) -> Result<String> {
    let name = Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    match name.strip_prefix(SHIM_PREFIX) {
        Some(p) if !p.is_empty() => Ok(p.to_string()),
        _ => bail!("the timing shim must be installed as {SHIM_PREFIX}<plugin>, not {name:?}"),
    }
}

/// The first `plugin` in the `CNI_PATH` directories (colon-separated).
pub fn find_plugin(cni_path: &str, plugin: &str) -> Result<PathBuf> {
    cni_path
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(plugin))
        .find(|p| p.is_file())
        .with_context(|| format!("plugin {plugin} not found in CNI_PATH {cni_path:?}"))
}

/// Runs `plugin` at `path` with `stdin` as its standard input (stdout and stderr are this
/// process's), and returns its record with the exit code.
pub fn run(plugin: &str, path: &Path, stdin: &[u8]) -> Result<Record> {
    let t0 = Instant::now();
    let mut child = Command::new(path)
        .stdin(Stdio::piped())
        .spawn()
        .with_context(|| format!("executing {}", path.display()))?;
    if let Some(mut pipe) = child.stdin.take() {
        // A plugin that exits without reading its stdin closes the pipe: not our failure.
        let _ = pipe.write_all(stdin);
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for {}", path.display()))?;
    let wall = t0.elapsed();
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .context("getrusage(RUSAGE_CHILDREN)")?;
    Ok(Record {
        plugin: plugin.to_string(),
        command: std::env::var("CNI_COMMAND").unwrap_or_default(),
        container_id: std::env::var("CNI_CONTAINERID").unwrap_or_default(),
        wall_us: wall.as_micros() as u64,
        max_rss_kib: usage.max_rss().max(0) as u64,
        exit_code: status.code().unwrap_or(-1),
    })
}

/// Appends `r` as one JSON line to `log` (created if missing).
pub fn append(log: &Path, r: &Record) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut line = serde_json::to_vec(r)?;
    line.push(b'\n');
    f.write_all(&line)
        .with_context(|| format!("writing {}", log.display()))
}

/// The shim's main: reads stdin, runs the plugin, logs, and returns the plugin's exit code.
/// A log that cannot be written is reported on stderr and never fails the pod.
pub fn main_with(argv0: &str) -> Result<i32> {
    let plugin = plugin_name(argv0)?;
    let path = find_plugin(&std::env::var("CNI_PATH").unwrap_or_default(), &plugin)?;
    let mut stdin = Vec::new();
    std::io::stdin()
        .read_to_end(&mut stdin)
        .context("reading the network configuration from stdin")?;
    let r = run(&plugin, &path, &stdin)?;
    let log = std::env::var_os("VPCNET_CNI_TIMING_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().unwrap_or_default();
            exe.parent()
                .and_then(Path::parent)
                .unwrap_or(Path::new("/tmp"))
                .join("cni-timing.jsonl")
        });
    if let Err(e) = append(&log, &r) {
        eprintln!("vpcnet-cni-timing: {e:#}");
    }
    Ok(r.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_is_named_by_the_shim() {
        assert_eq!(
            plugin_name("/opt/cni/bin/timed-aws-cni").unwrap(),
            "aws-cni"
        );
        assert!(plugin_name("/opt/cni/bin/timed-").is_err());
        assert!(plugin_name("vpcnet-cni-timing").is_err());
    }

    #[test]
    fn the_plugin_gets_stdin_and_its_time_memory_and_exit_are_recorded() {
        let dir = tempfile::tempdir().unwrap();
        // A plugin that echoes its stdin to a file, allocates ~20 MiB, and fails with 3.
        let plugin = dir.path().join("fake");
        let seen = dir.path().join("seen");
        std::fs::write(
            &plugin,
            format!(
                "#!/bin/sh\ncat > {}\nhead -c 20000000 /dev/zero | tr '\\0' a | (x=$(cat); true)\nexit 3\n",
                seen.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = find_plugin(&format!("/nonexistent:{}", dir.path().display()), "fake").unwrap();
        let r = run("fake", &path, b"{\"cniVersion\":\"1.0.0\"}").unwrap();
        assert_eq!(std::fs::read(&seen).unwrap(), b"{\"cniVersion\":\"1.0.0\"}");
        assert_eq!(r.exit_code, 3);
        assert!(r.wall_us > 0);
        assert!(r.max_rss_kib > 0, "{r:?}");
        let log = dir.path().join("log.jsonl");
        append(&log, &r).unwrap();
        append(&log, &r).unwrap();
        let lines: Vec<Record> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, vec![r.clone(), r]);
    }
}
