//! One containerd per node, inside the node's network and mount namespaces (see
//! [`crate::machine`]), so it uses its default paths (`/etc/containerd/config.toml`,
//! `/var/lib/containerd`, `/run/containerd/containerd.sock`) and its CRI plugin uses the
//! runtime's default CNI directories (`/etc/cni/net.d`, `/opt/cni/bin`), all the node's own; and
//! the `ctr` invocations the lab makes against it.
//!
//! kubelet reaches containerd over CRI; `vpcnet lab run` containers use `ctr run --cni` (run in
//! the node's namespaces, so it reads the node's CNI directories) attached in a background `ctr`
//! process: when the task exits, that `ctr` calls the CNI DEL (with an empty netns path, as
//! containerd does) before deleting the task, as a runtime would.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cmd;
use crate::image;
use crate::procs::{self, ProcRecord};
use crate::state::NodeRecord;

/// Snapshotter the lab uses (works on ext4 and tmpfs).
pub const SNAPSHOTTER: &str = "overlayfs";
/// containerd namespace of the CRI plugin (kubelet's pods and the images they use).
pub const CRI_NAMESPACE: &str = "k8s.io";
/// Node path of containerd's configuration.
pub const CONFIG: &str = "/etc/containerd/config.toml";

/// containerd's configuration for a lab node: default paths (they are the node's own), CRI with
/// the lab's pause image as sandbox image, OOM scores clamped to containerd's own (see the
/// comment in the file), runc with the cgroupfs driver (kubelet's), the runtime's default CNI
/// directories; snapshotters and tracing the lab does not use disabled.
/// `sandbox_image` is the pause image reference (or `SANDBOX_IMAGE`, the placeholder
/// vpcnet-bootstrap's `--containerd-config-file` replaces).
pub fn config_toml(sandbox_image: &str) -> String {
    format!(
        r#"version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  disable_apparmor = true
  # kubelet asks for negative OOM scores (-998 for pod sandboxes); lowering a score needs
  # CAP_SYS_RESOURCE, which sandboxed machines (this lab's CI among them) may not grant:
  # clamp to containerd's own score instead of failing every sandbox.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{SNAPSHOTTER}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
  # Registry host configuration (hosts.toml per registry name): the lab's private registry
  # under an ECR-shaped name (see crate::registry).
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
"#,
        pause = sandbox_image,
    )
}

/// Writes the node's containerd configuration unless one exists (vpcnet-bootstrap may have
/// written it), starts containerd in the node's namespaces and waits until it answers (30 s).
pub fn start(node: &NodeRecord, logs: &Path) -> Result<ProcRecord> {
    let cfg = node.path(CONFIG);
    if !cfg.exists() {
        fs::write(&cfg, config_toml(image::PAUSE_REF))?;
    }
    let mut c = Command::new("containerd");
    c.args(["--config", CONFIG]);
    let rec = procs::spawn(
        &format!("containerd {}", node.name),
        c,
        &node.place(),
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
    ctr_ns(node, &node.ctr_namespace(), args)
}

/// Node path of containerd's socket.
pub const SOCKET: &str = "/run/containerd/containerd.sock";

/// `ctr -a <socket> -n <namespace> args...` placed in the node's namespaces: `ctr` must share
/// the node's filesystem view with containerd's shims (the FIFOs of `tasks exec` live under the
/// node's `/run/containerd`).
fn ctr_command(node: &NodeRecord, namespace: &str, args: &[&str]) -> Result<Command> {
    let mut c = Command::new("ctr");
    c.args(["-a", SOCKET, "-n", namespace]).args(args);
    node.place().apply(&mut c)?;
    Ok(c)
}

/// Runs `ctr` ([`ctr_command`]) and returns its output whatever the exit status.
fn ctr_output(node: &NodeRecord, namespace: &str, args: &[&str]) -> Result<std::process::Output> {
    ctr_command(node, namespace, args)?
        .stdin(std::process::Stdio::null())
        .output()
        .context("cannot run `ctr`: is containerd installed? (run scripts/install-deps.sh)")
}

/// Runs `ctr -a <node socket> -n <namespace> args...` in the node and returns stdout; a
/// failure quotes ctr's stderr.
pub fn ctr_ns(node: &NodeRecord, namespace: &str, args: &[&str]) -> Result<String> {
    let out = ctr_output(node, namespace, args)?;
    if !out.status.success() {
        bail!(
            "`ctr -n {namespace} {}` on node {} failed ({}): {}",
            args.join(" "),
            node.name,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Imports an image tarball into the node's containerd namespace `namespace` (unpacked for
/// [`SNAPSHOTTER`]).
pub fn import(node: &NodeRecord, namespace: &str, tarball: &Path) -> Result<()> {
    let t = tarball.display().to_string();
    ctr_ns(
        node,
        namespace,
        &["images", "import", "--snapshotter", SNAPSHOTTER, &t],
    )
    .with_context(|| {
        format!(
            "importing {} into containerd namespace {namespace} on node {}",
            tarball.display(),
            node.name
        )
    })?;
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
    c.args(["-a", SOCKET, "-n", &node.ctr_namespace()])
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
        &node.place(),
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

/// Tasks of the node's containerd namespace `namespace` (kubelet's: [`CRI_NAMESPACE`]).
pub fn tasks_in(node: &NodeRecord, namespace: &str) -> Result<Vec<Task>> {
    Ok(parse_tasks(&ctr_ns(node, namespace, &["tasks", "ls"])?))
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
    let mut v = vec!["tasks", "exec", "--exec-id", exec_id, id];
    v.extend_from_slice(args);
    ctr_output(node, &node.ctr_namespace(), &v)
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
