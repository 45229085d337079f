//! A timing shim in front of a CNI plugin, so plugin-level ADD/DEL latency and plugin memory
//! are measured the same way for any plugin while the real runtime (kubelet → containerd)
//! drives it. Two ways to install it in the runtime's CNI bin directory:
//! - **beside** the plugin, as `timed-<plugin>`, named so in the conflist's `type`: it executes
//!   `<plugin>` from `CNI_PATH` (CNI spec, "Section 3: Execution Protocol");
//! - **in place of** the plugin (conflists untouched, also ones an agent writes): the plugin
//!   renamed to `<plugin>.untimed` ([`UNTIMED_SUFFIX`]) and the shim installed as `<plugin>`;
//!   it executes the `.untimed` file next to itself ([`install_in_place`]).
//!
//! Either way the plugin gets the same stdin, environment and stdout, and the shim appends one
//! JSON line per invocation to the log named by `VPCNET_CNI_TIMING_LOG` (or [`DEFAULT_LOG`],
//! in the CNI state directory): command, container ID, plugin, wall time from exec to
//! exit, the child's peak RSS (`getrusage(RUSAGE_CHILDREN)`), exit code.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// Prefix of the shim's name when installed beside the plugin; the rest is the plugin it runs.
pub const SHIM_PREFIX: &str = "timed-";

/// The log when `VPCNET_CNI_TIMING_LOG` is not set.
pub const DEFAULT_LOG: &str = "/var/lib/cni/cni-timing.jsonl";

/// Suffix of the real plugin's file when the shim is installed in its place.
pub const UNTIMED_SUFFIX: &str = ".untimed";

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
/// Errors: a name that is `timed-` alone.
pub fn plugin_name(argv0: &str) -> Result<String> {
    match shim_name(argv0).strip_prefix(SHIM_PREFIX) {
        Some("") => {
            bail!("the timing shim must be installed as {SHIM_PREFIX}<plugin>, not {SHIM_PREFIX:?}")
        }
        Some(p) => Ok(p.to_string()),
        None => Ok(shim_name(argv0).to_string()),
    }
}

fn shim_name(argv0: &str) -> &str {
    Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
}

/// The executable a shim at `exe` (its own path) named `argv0` runs: `<plugin>` from
/// `cni_path` when named `timed-<plugin>`, else `<exe>.untimed` next to it. Errors: the plugin
/// is not there (the message names where it looked).
pub fn plugin_path(argv0: &str, exe: &Path, cni_path: &str) -> Result<(String, PathBuf)> {
    let plugin = plugin_name(argv0)?;
    if shim_name(argv0).starts_with(SHIM_PREFIX) {
        let path = find_plugin(cni_path, &plugin)?;
        return Ok((plugin, path));
    }
    let mut untimed = exe.as_os_str().to_owned();
    untimed.push(UNTIMED_SUFFIX);
    let untimed = PathBuf::from(untimed);
    if !untimed.is_file() {
        bail!(
            "the timing shim runs as {plugin:?} but {} is missing: install it with \
             `install_in_place` (the plugin renamed to <plugin>{UNTIMED_SUFFIX}) or as \
             {SHIM_PREFIX}<plugin>",
            untimed.display()
        );
    }
    Ok((plugin, untimed))
}

/// Puts the shim `shim` in front of the plugin `dir/plugin`: the plugin is renamed to
/// `<plugin>.untimed` and the shim copied as `<plugin>`. Idempotent (a plugin already wrapped
/// keeps its `.untimed` file). Errors: the plugin or the shim is missing, or I/O.
pub fn install_in_place(dir: &Path, plugin: &str, shim: &Path) -> Result<()> {
    let real = dir.join(plugin);
    let untimed = dir.join(format!("{plugin}{UNTIMED_SUFFIX}"));
    if !untimed.is_file() {
        std::fs::rename(&real, &untimed)
            .with_context(|| format!("moving {} aside for the timing shim", real.display()))?;
    }
    std::fs::copy(shim, &real).with_context(|| {
        format!(
            "installing the timing shim {} as {}",
            shim.display(),
            real.display()
        )
    })?;
    Ok(())
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
    let exe = std::env::current_exe().context("locating the timing shim's executable")?;
    let (plugin, path) = plugin_path(argv0, &exe, &std::env::var("CNI_PATH").unwrap_or_default())?;
    let mut stdin = Vec::new();
    std::io::stdin()
        .read_to_end(&mut stdin)
        .context("reading the network configuration from stdin")?;
    let r = run(&plugin, &path, &stdin)?;
    let log = std::env::var_os("VPCNET_CNI_TIMING_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_LOG));
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
        assert_eq!(
            plugin_name("/opt/cni/bin/vpcnet-cni").unwrap(),
            "vpcnet-cni"
        );
    }

    #[test]
    fn in_place_the_shim_runs_the_untimed_plugin_next_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("plug"), "real").unwrap();
        std::fs::write(d.join("shim"), "shim").unwrap();
        install_in_place(d, "plug", &d.join("shim")).unwrap();
        // Twice: the real plugin is not overwritten by the shim.
        install_in_place(d, "plug", &d.join("shim")).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("plug.untimed")).unwrap(),
            "real"
        );
        assert_eq!(std::fs::read_to_string(d.join("plug")).unwrap(), "shim");
        let (name, path) = plugin_path("/opt/cni/bin/plug", &d.join("plug"), "").unwrap();
        assert_eq!((name.as_str(), path), ("plug", d.join("plug.untimed")));
        // Beside the plugin, it is found in CNI_PATH.
        let (name, path) =
            plugin_path("timed-plug.untimed", &d.join("x"), &d.display().to_string()).unwrap();
        assert_eq!(
            (name.as_str(), path),
            ("plug.untimed", d.join("plug.untimed"))
        );
        // Not wrapped: the error names the missing file.
        let e = plugin_path("other", &d.join("other"), "").unwrap_err();
        assert!(format!("{e:#}").contains("other.untimed"), "{e:#}");
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
