//! One containerd per node, inside the node's network namespace with its own root, state,
//! socket and plugin directory, and the `ctr` invocations the lab makes against it.
//!
//! containerd 1.6's `ctr run --cni` reads the CNI configuration from `/etc/cni/net.d` and
//! plugins from `/opt/cni/bin`, with no flag to change either; the lab therefore runs each
//! node's `ctr` in a private mount namespace where the node's own directories are bind-mounted
//! on those two paths (see [`ctr_place`]). Containers run attached (`ctr run` without `-d`) in
//! a background `ctr` process: when the task exits, that `ctr` calls the CNI DEL (with an empty
//! netns path, as containerd does) before deleting the task, as a runtime would.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cmd;
use crate::procs::{self, ProcRecord};
use crate::spawn::Place;
use crate::state::NodeRecord;

/// The runtime's default CNI configuration directory (what `ctr run --cni` reads).
pub const CNI_CONF_TARGET: &str = "/etc/cni/net.d";
/// The runtime's default CNI plugin directory (what `ctr run --cni` executes from).
pub const CNI_BIN_TARGET: &str = "/opt/cni/bin";
/// Snapshotter the lab uses (works on ext4 and tmpfs).
pub const SNAPSHOTTER: &str = "overlayfs";

/// containerd's configuration for a node: everything under the node directory, CRI and the
/// snapshotters the lab does not use disabled.
pub fn config_toml(node: &NodeRecord) -> String {
    let d = node.dir.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"
"#
    )
}

/// Makes sure the runtime's default CNI paths exist on the host so they can serve as bind
/// mount targets (empty directories; nothing is written into them).
pub fn ensure_cni_mount_targets() -> Result<()> {
    for d in [CNI_CONF_TARGET, CNI_BIN_TARGET] {
        fs::create_dir_all(d).with_context(|| format!("creating {d}"))?;
    }
    Ok(())
}

/// Where this node's `ctr` runs: the node's network namespace, with the node's CNI
/// directories mounted on the runtime's defaults.
pub fn ctr_place(node: &NodeRecord) -> Place {
    Place::netns(&node.netns)
        .bind(node.cni_conf_dir(), CNI_CONF_TARGET)
        .bind(node.cni_bin_dir(), CNI_BIN_TARGET)
}

/// Starts the node's containerd (in the node namespace), waits until it answers (up to 30 s).
pub fn start(node: &NodeRecord, logs: &Path) -> Result<ProcRecord> {
    fs::create_dir_all(node.dir.join("containerd"))?;
    let cfg = node.dir.join("containerd.toml");
    fs::write(&cfg, config_toml(node))?;
    let mut c = Command::new("containerd");
    c.arg("--config").arg(&cfg);
    let rec = procs::spawn(
        &format!("containerd {}", node.name),
        c,
        &Place::netns(&node.netns),
        &logs.join(format!("containerd-{}.log", node.name)),
    )?;
    let t0 = Instant::now();
    loop {
        if ctr(node, &["version"]).is_ok() {
            return Ok(rec);
        }
        if !rec.alive() {
            bail!(
                "containerd for node {} exited at start; see {}",
                node.name,
                logs.join(format!("containerd-{}.log", node.name)).display()
            );
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!(
                "containerd for node {} did not answer within 30 s",
                node.name
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `ctr -a <node socket> -n <node namespace> args...` and returns stdout.
pub fn ctr(node: &NodeRecord, args: &[&str]) -> Result<String> {
    let sock = node.containerd_socket().display().to_string();
    let ns = node.ctr_namespace();
    let mut v = vec!["-a", sock.as_str(), "-n", ns.as_str()];
    v.extend_from_slice(args);
    cmd::run("ctr", &v)
}

/// Imports an image tarball into the node's containerd (unpacked for [`SNAPSHOTTER`]).
pub fn import(node: &NodeRecord, tarball: &Path) -> Result<()> {
    let t = tarball.display().to_string();
    ctr(
        node,
        &["images", "import", "--snapshotter", SNAPSHOTTER, &t],
    )
    .with_context(|| format!("importing the lab image on node {}", node.name))?;
    Ok(())
}

/// Starts container `id` from `image` running `args`, attached to a background `ctr run
/// --cni` process (so the CNI ADD runs now and DEL when the task exits). Returns that process.
pub fn run_container(
    node: &NodeRecord,
    image: &str,
    id: &str,
    args: &[&str],
    logs: &Path,
) -> Result<ProcRecord> {
    let mut c = Command::new("ctr");
    c.arg("-a")
        .arg(node.containerd_socket())
        .arg("-n")
        .arg(node.ctr_namespace())
        .args([
            "run",
            "--cni",
            "--null-io",
            "--snapshotter",
            SNAPSHOTTER,
            image,
            id,
        ])
        .args(args);
    procs::spawn(
        &format!("ctr {id}"),
        c,
        &ctr_place(node),
        &logs.join(format!("ctr-{id}.log")),
    )
}

/// A task as `ctr tasks ls` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Container id.
    pub id: String,
    /// Pid of the container's init process (host pid namespace).
    pub pid: i32,
    /// RUNNING, STOPPED, CREATED, ...
    pub status: String,
}

/// Parses `ctr tasks ls` output (header, then `TASK PID STATUS` rows).
pub fn parse_tasks(out: &str) -> Vec<Task> {
    out.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(Task {
                id: f.first()?.to_string(),
                pid: f.get(1)?.parse().ok()?,
                status: f.get(2)?.to_string(),
            })
        })
        .collect()
}

/// Tasks of the node.
pub fn tasks(node: &NodeRecord) -> Result<Vec<Task>> {
    Ok(parse_tasks(&ctr(node, &["tasks", "ls"])?))
}

/// Waits until container `id`'s task is RUNNING (which `ctr run --cni` reaches only after
/// the CNI ADD succeeded) and returns it. Errors after `timeout` or when the `ctr` process
/// exited (the ADD failed: its log says why).
pub fn wait_running(
    node: &NodeRecord,
    id: &str,
    ctr_proc: &ProcRecord,
    timeout: Duration,
    logs: &Path,
) -> Result<Task> {
    let t0 = Instant::now();
    loop {
        if let Some(t) = tasks(node)?.into_iter().find(|t| t.id == id) {
            if t.status == "RUNNING" {
                return Ok(t);
            }
        }
        if !ctr_proc.alive() {
            let log = logs.join(format!("ctr-{id}.log"));
            let text = fs::read_to_string(&log).unwrap_or_default();
            bail!(
                "container {id} on node {} failed to start: {}",
                node.name,
                text.trim()
            );
        }
        if t0.elapsed() > timeout {
            bail!(
                "container {id} on node {} not running after {timeout:?}",
                node.name
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs a command inside a running container (`ctr tasks exec`), returning its full output.
pub fn exec(
    node: &NodeRecord,
    id: &str,
    exec_id: &str,
    args: &[&str],
) -> Result<std::process::Output> {
    let sock = node.containerd_socket().display().to_string();
    let ns = node.ctr_namespace();
    let mut v = vec![
        "-a",
        sock.as_str(),
        "-n",
        ns.as_str(),
        "tasks",
        "exec",
        "--exec-id",
        exec_id,
        id,
    ];
    v.extend_from_slice(args);
    cmd::output("ctr", &v)
}

/// Kills a container's task with SIGKILL (its `ctr run` process then runs CNI DEL and exits).
pub fn kill(node: &NodeRecord, id: &str) -> Result<()> {
    ctr(node, &["tasks", "kill", "-s", "SIGKILL", id])?;
    Ok(())
}

/// Deletes a container (and its snapshot). Errors when it still has a task.
pub fn delete(node: &NodeRecord, id: &str) -> Result<()> {
    ctr(node, &["containers", "delete", id])?;
    Ok(())
}

/// The IPv4 address of `eth0` inside the network namespace of process `pid` (a container's
/// init), as `a.b.c.d`.
pub fn container_ip(pid: i32) -> Result<String> {
    let netns = format!("--net=/proc/{pid}/ns/net");
    let out = cmd::run(
        "nsenter",
        &[&netns, "ip", "-4", "-o", "addr", "show", "dev", "eth0"],
    )?;
    parse_ip_addr(&out).with_context(|| format!("no IPv4 address on eth0 of pid {pid}: {out}"))
}

/// First IPv4 address (without prefix length) in `ip -4 -o addr` output.
pub fn parse_ip_addr(out: &str) -> Option<String> {
    let f: Vec<&str> = out.split_whitespace().collect();
    let i = f.iter().position(|w| *w == "inet")?;
    Some(f.get(i + 1)?.split('/').next()?.to_string())
}

/// Paths of a node's directories the lab creates.
pub fn node_dirs(node: &NodeRecord) -> Vec<PathBuf> {
    vec![node.dir.clone(), node.cni_conf_dir(), node.cni_bin_dir()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tasks() {
        let out = "TASK    PID     STATUS    \nc1      4242    RUNNING\nc2      0       STOPPED\n";
        let t = parse_tasks(out);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0],
            Task {
                id: "c1".into(),
                pid: 4242,
                status: "RUNNING".into()
            }
        );
        assert_eq!(t[1].status, "STOPPED");
    }

    #[test]
    fn parses_ip() {
        let out = "2: eth0    inet 10.0.1.57/32 scope global eth0\\       valid_lft forever\n";
        assert_eq!(parse_ip_addr(out).as_deref(), Some("10.0.1.57"));
        assert_eq!(parse_ip_addr("nothing"), None);
    }
}
