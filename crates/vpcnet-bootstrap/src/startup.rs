//! Node start-up after the files are in place, as bootstrap.sh does it: systemd reloads its
//! units, mounts bpffs, restarts containerd for a new configuration, and enables and starts
//! kubelet. [`steps`] decides what to run from what changed (pure, so a rerun that changed
//! nothing restarts nothing); [`System`] runs one step: [`Systemctl`] on a node, a
//! [`RecordingSystem`] in tests and in the lab (which has no systemd and starts kubelet itself).

use std::fmt;
use std::sync::Mutex;

use crate::error::BootstrapError;
use crate::node_files::Change;

/// systemd unit that mounts the BPF file system (written when none is mounted).
pub const BPF_MOUNT_UNIT: &str = "sys-fs-bpf.mount";
/// The AL2 AMI's unit that pulls the pause image (kubelet's AMI unit requires it).
pub const SANDBOX_IMAGE_UNIT: &str = "sandbox-image.service";
/// Where [`BPF_MOUNT_UNIT`] is written.
pub const BPF_MOUNT_UNIT_PATH: &str = "/etc/systemd/system/sys-fs-bpf.mount";

/// The mount unit for /sys/fs/bpf (a unit, so the mount comes back after a reboot).
pub const BPF_MOUNT_UNIT_TEXT: &str = "\
# Written by vpcnet-bootstrap (--mount-bpf-fs true): the BPF file system for eBPF programs and maps.
[Unit]
Description=BPF file system
Documentation=https://docs.kernel.org/bpf/
DefaultDependencies=no
Before=local-fs.target umount.target
After=swap.target

[Mount]
What=bpffs
Where=/sys/fs/bpf
Type=bpf
Options=rw,nosuid,nodev,noexec,relatime,mode=700

[Install]
WantedBy=multi-user.target
";

/// One start-up command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `systemctl daemon-reload`: reread unit files and drop-ins.
    DaemonReload,
    /// `systemctl enable UNIT`: start it at every boot.
    Enable(String),
    /// `systemctl start UNIT`: start it unless running (no-op then).
    Start(String),
    /// `systemctl restart UNIT`: (re)start it, so it reads changed files.
    Restart(String),
}

impl Step {
    /// `systemctl`'s arguments for this step.
    pub fn systemctl_args(&self) -> Vec<&str> {
        match self {
            Step::DaemonReload => vec!["daemon-reload"],
            Step::Enable(u) => vec!["enable", u],
            Step::Start(u) => vec!["start", u],
            Step::Restart(u) => vec!["restart", u],
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "systemctl {}", self.systemctl_args().join(" "))
    }
}

/// Runs start-up steps on the node.
pub trait System {
    /// Runs one step. Errors: [`BootstrapError::System`] with the command and its stderr.
    fn run(&self, step: &Step) -> Result<(), BootstrapError>;
}

/// The real node: `systemctl` from PATH.
pub struct Systemctl;

impl System for Systemctl {
    fn run(&self, step: &Step) -> Result<(), BootstrapError> {
        let out = std::process::Command::new("systemctl")
            .args(step.systemctl_args())
            .output()
            .map_err(|e| BootstrapError::System {
                command: step.to_string(),
                problem: format!(
                    "cannot run systemctl ({e}); this node does not look like it runs systemd"
                ),
            })?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(BootstrapError::System {
            command: step.to_string(),
            problem: format!("{} ({})", stderr.trim(), out.status),
        })
    }
}

/// Records steps instead of running them (tests, and the lab: it has no systemd).
#[derive(Debug, Default)]
pub struct RecordingSystem {
    steps: Mutex<Vec<Step>>,
    fail_on: Option<Step>,
}

impl RecordingSystem {
    /// A recorder on which `step` fails when run (tests of the failure path).
    pub fn failing_on(step: Step) -> Self {
        RecordingSystem {
            fail_on: Some(step),
            ..Default::default()
        }
    }

    /// The steps run so far, in order.
    pub fn steps(&self) -> Vec<Step> {
        self.steps.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl System for RecordingSystem {
    fn run(&self, step: &Step) -> Result<(), BootstrapError> {
        self.steps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(step.clone());
        if self.fail_on.as_ref() == Some(step) {
            return Err(BootstrapError::System {
                command: step.to_string(),
                problem: "injected failure".into(),
            });
        }
        Ok(())
    }
}

/// What start-up should do besides reacting to changed files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupOptions {
    /// bpffs is to be mounted through [`BPF_MOUNT_UNIT`] (`--mount-bpf-fs` and none mounted).
    pub mount_bpffs: bool,
    /// The node has `sandbox-image.service` (the AL2 AMI's pause image pull): enabled and
    /// restarted with containerd, as bootstrap.sh does.
    pub sandbox_image: bool,
}

/// The steps after writing, from each file's [`Change`] (paths absolute on the node):
/// 1. `daemon-reload` if a unit file or drop-in under /etc/systemd/system changed;
/// 2. `enable` + `start` the bpffs mount unit when asked to mount it;
/// 3. `enable` + `restart` containerd if its configuration changed, then (on nodes with
///    `sandbox-image.service`) `enable` + `restart` that, so the pause image of the new
///    configuration is pulled;
/// 4. `enable` kubelet, then `restart` it if one of its files changed, else `start` it
///    (a no-op when it runs), so a rerun that changed nothing disturbs nothing.
pub fn steps(changes: &[(String, Change)], opts: StartupOptions) -> Vec<Step> {
    let changed =
        |p: &(String, Change)| matches!(p.1, Change::Created | Change::Updated | Change::Removed);
    let any = |pred: &dyn Fn(&str) -> bool| changes.iter().any(|c| changed(c) && pred(&c.0));
    let mut out = Vec::new();
    if any(&|p: &str| p.starts_with("/etc/systemd/system/")) {
        out.push(Step::DaemonReload);
    }
    if opts.mount_bpffs {
        out.push(Step::Enable(BPF_MOUNT_UNIT.into()));
        out.push(Step::Start(BPF_MOUNT_UNIT.into()));
    }
    let containerd_changed = any(&|p: &str| p == crate::containerd::CONFIG_PATH);
    if containerd_changed {
        out.push(Step::Enable("containerd.service".into()));
        out.push(Step::Restart("containerd.service".into()));
    }
    let sandbox_unit = crate::kubelet_unit::SANDBOX_IMAGE_UNIT_PATH;
    if opts.sandbox_image && (containerd_changed || any(&|p: &str| p == sandbox_unit)) {
        out.push(Step::Enable(SANDBOX_IMAGE_UNIT.into()));
        out.push(Step::Restart(SANDBOX_IMAGE_UNIT.into()));
    }
    let kubelet_files = |p: &str| -> bool {
        p.starts_with("/etc/kubernetes/")
            || p.starts_with("/var/lib/kubelet/")
            || p.starts_with("/etc/eks/kubelet/")
            || p.starts_with(crate::credential_provider::BIN_DIR)
            || p.starts_with("/etc/systemd/system/kubelet.service")
            || p == crate::containerd::CONFIG_PATH
    };
    out.push(Step::Enable("kubelet.service".into()));
    out.push(if any(&kubelet_files) {
        Step::Restart("kubelet.service".into())
    } else {
        Step::Start("kubelet.service".into())
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(path: &str, c: Change) -> (String, Change) {
        (path.to_string(), c)
    }

    #[test]
    fn first_run_reloads_restarts_and_starts() {
        let changes = [
            ch(
                "/etc/kubernetes/kubelet/kubelet-config.json",
                Change::Created,
            ),
            ch("/etc/systemd/system/kubelet.service", Change::Created),
            ch("/etc/containerd/config.toml", Change::Created),
        ];
        let got: Vec<String> = steps(
            &changes,
            StartupOptions {
                mount_bpffs: true,
                sandbox_image: false,
            },
        )
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            got,
            [
                "systemctl daemon-reload",
                "systemctl enable sys-fs-bpf.mount",
                "systemctl start sys-fs-bpf.mount",
                "systemctl enable containerd.service",
                "systemctl restart containerd.service",
                "systemctl enable kubelet.service",
                "systemctl restart kubelet.service",
            ]
        );
    }

    #[test]
    fn unchanged_rerun_only_makes_sure_kubelet_runs() {
        let changes = [
            ch(
                "/etc/kubernetes/kubelet/kubelet-config.json",
                Change::Unchanged,
            ),
            ch(
                "/etc/systemd/system/kubelet.service.d/30-kubelet-extra-args.conf",
                Change::Absent,
            ),
            ch("/etc/containerd/config.toml", Change::Unchanged),
        ];
        assert_eq!(
            steps(
                &changes,
                StartupOptions {
                    mount_bpffs: false,
                    sandbox_image: false,
                }
            ),
            vec![
                Step::Enable("kubelet.service".into()),
                Step::Start("kubelet.service".into())
            ]
        );
        // A removed drop-in is a change: reload and restart.
        let changes = [ch(
            "/etc/systemd/system/kubelet.service.d/30-kubelet-extra-args.conf",
            Change::Removed,
        )];
        let s = steps(
            &changes,
            StartupOptions {
                mount_bpffs: false,
                sandbox_image: false,
            },
        );
        assert_eq!(s.first(), Some(&Step::DaemonReload));
        assert_eq!(s.last(), Some(&Step::Restart("kubelet.service".into())));
    }

    #[test]
    fn sandbox_image_follows_containerd_like_bootstrap_sh() {
        let opts = StartupOptions {
            mount_bpffs: false,
            sandbox_image: true,
        };
        let got: Vec<String> = steps(&[ch("/etc/containerd/config.toml", Change::Updated)], opts)
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "systemctl enable containerd.service",
                "systemctl restart containerd.service",
                "systemctl enable sandbox-image.service",
                "systemctl restart sandbox-image.service",
                "systemctl enable kubelet.service",
                "systemctl restart kubelet.service",
            ]
        );
        // Nothing changed: sandbox-image is left alone (kubelet's Requires= starts it).
        let s = steps(
            &[ch("/etc/containerd/config.toml", Change::Unchanged)],
            opts,
        );
        assert!(
            !s.contains(&Step::Restart(SANDBOX_IMAGE_UNIT.into())),
            "{s:?}"
        );
    }
}
