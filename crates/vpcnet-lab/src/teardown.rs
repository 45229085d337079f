//! Removing everything a lab created, from its state record, in an order that works from any
//! half-built state: containers (so the CNI DEL runs), recorded processes, any process left in
//! the lab's namespaces or cgroups (containerd shims, container and pod processes), mounts under
//! the lab directory (the nodes' mount namespace files: with their last process gone, each
//! namespace and every mount inside it, pod volumes and container root filesystems included,
//! disappears), the network namespaces, and the directory itself. Each step is best effort and
//! idempotent; what could not be removed is reported.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::containerd;
use crate::netns;
use crate::procs::{self, ProcRecord};
use crate::state::LabState;

/// Cgroup v1 controller roots and the v2 root, where runc puts `/<ctr namespace>/<id>`.
const CGROUP_ROOTS: &[&str] = &[
    "/sys/fs/cgroup",
    "/sys/fs/cgroup/unified",
    "/sys/fs/cgroup/systemd",
    "/sys/fs/cgroup/cpu",
    "/sys/fs/cgroup/cpuacct",
    "/sys/fs/cgroup/cpuset",
    "/sys/fs/cgroup/memory",
    "/sys/fs/cgroup/devices",
    "/sys/fs/cgroup/freezer",
    "/sys/fs/cgroup/blkio",
    "/sys/fs/cgroup/pids",
    "/sys/fs/cgroup/net_cls",
    "/sys/fs/cgroup/perf_event",
    "/sys/fs/cgroup/hugetlb",
];

/// Removes the lab in `dir`. Returns the problems met (empty when everything went). A missing
/// state file means there is nothing recorded; the directory is still removed.
pub fn teardown(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let state = match LabState::load(dir) {
        Ok(s) => s,
        Err(_) => {
            let _ = fs::remove_dir_all(dir);
            return problems;
        }
    };
    stop_containers(&state);
    // The node agents all at once (a fleet has hundreds, each given the same grace), then the
    // other recorded processes, newest first (ctr runs, containerds, emulator).
    let (agents, others): (Vec<&ProcRecord>, Vec<&ProcRecord>) = state
        .processes
        .iter()
        .partition(|p| p.role.starts_with("agent "));
    for p in procs::stop_all(&agents, Duration::from_secs(5)) {
        problems.push(format!("{} (pid {}) did not stop", p.role, p.pid));
    }
    for p in others.iter().rev() {
        if !p.stop(Duration::from_secs(5)) {
            problems.push(format!("{} (pid {}) did not stop", p.role, p.pid));
        }
    }
    // Anything else still in the lab's namespaces (containerd shims, stray children).
    for ns in &state.namespaces {
        for pid in netns::pids_in(ns) {
            procs::kill_pid(pid);
        }
    }
    // Containers of `lab run` (`/<ctr namespace>/<id>`) and kubelet's pods (cgroup root
    // `/<ctr namespace>/kubepods/...`) share one top cgroup per node.
    for node in &state.nodes {
        remove_cgroups(&node.ctr_namespace());
    }
    unmount_under(dir);
    for ns in state.namespaces.iter().rev() {
        // A namespace lingers while a process is inside: retry briefly after the kills.
        let t0 = Instant::now();
        loop {
            for pid in netns::pids_in(ns) {
                procs::kill_pid(pid);
            }
            match netns::delete(ns) {
                Ok(()) => break,
                Err(e) if t0.elapsed() > Duration::from_secs(5) => {
                    problems.push(format!("{e:#}"));
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
    if let Err(e) = fs::remove_dir_all(dir) {
        if dir.exists() {
            problems.push(format!("removing {}: {e}", dir.display()));
        }
    }
    problems
}

/// Kills every container task (SIGKILL) so each background `ctr run` performs its CNI DEL and
/// exits, waits for them (10 s in all), then deletes the containers.
fn stop_containers(state: &LabState) {
    // Only nodes whose containerd runs (a fleet's nodes have none, and `ctr` would wait for a
    // socket that never answers).
    let with_containerd = |name: &str| {
        state
            .processes
            .iter()
            .any(|p| p.role == format!("containerd {name}") && p.alive())
    };
    for node in state.nodes.iter().filter(|n| with_containerd(&n.name)) {
        let Ok(tasks) = containerd::tasks(node) else {
            continue;
        };
        for t in &tasks {
            let _ = containerd::kill(node, &t.id);
        }
    }
    let ctrs: Vec<&ProcRecord> = state
        .processes
        .iter()
        .filter(|p| p.role.starts_with("ctr "))
        .collect();
    let t0 = Instant::now();
    while ctrs.iter().any(|p| p.alive()) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    for c in &state.containers {
        if let Ok(node) = state.node(&c.node) {
            let _ = containerd::delete(node, &c.id);
        }
    }
}

/// Kills the processes in, and removes, every cgroup `/<ctr_ns>/...` under each hierarchy.
fn remove_cgroups(ctr_ns: &str) {
    for root in CGROUP_ROOTS {
        let top = Path::new(root).join(ctr_ns);
        if !top.is_dir() {
            continue;
        }
        let mut dirs = Vec::new();
        collect_dirs(&top, &mut dirs);
        for d in &dirs {
            if let Ok(text) = fs::read_to_string(d.join("cgroup.procs")) {
                for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    procs::kill_pid(pid);
                }
            }
        }
        // Deepest first.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in &dirs {
            for _ in 0..20 {
                if fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn collect_dirs(d: &Path, out: &mut Vec<PathBuf>) {
    out.push(d.to_path_buf());
    if let Ok(rd) = fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

/// Mount points at or under `dir` in our mount namespace, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(unescape_mount_path)
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect();
    v.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    v.dedup();
    v
}

fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn unmount_under(dir: &Path) {
    for _ in 0..3 {
        let m = mounts_under(dir);
        if m.is_empty() {
            return;
        }
        for p in m {
            let _ = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Convenience for callers that want an error when anything was left.
pub fn teardown_checked(dir: &Path) -> Result<()> {
    let problems = teardown(dir);
    if problems.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("lab teardown left things behind: {}", problems.join("; "))
    }
}
