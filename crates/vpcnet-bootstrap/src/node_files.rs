//! The node's files as bootstrap sees them: where it writes them, one file to write
//! ([`NodeFile`]), what writing it changed ([`Change`]), and a node path under the root
//! directory ([`under_root`]). A leaf: the renderer, the writer, the fact gatherer and the
//! systemd reader all share these records without importing each other.

use std::path::{Path, PathBuf};

pub const KUBELET_CONFIG_PATH: &str = "/etc/kubernetes/kubelet/kubelet-config.json";
pub const CA_PATH: &str = "/etc/kubernetes/pki/ca.crt";
pub const KUBECONFIG_PATH: &str = "/var/lib/kubelet/kubeconfig";
pub const BOOTSTRAP_KUBECONFIG_PATH: &str = "/var/lib/kubelet/bootstrap-kubeconfig";
pub const DROPIN_DIR: &str = "/etc/systemd/system/kubelet.service.d";
pub const HOSTS_PATH: &str = "/etc/hosts";
pub const CONTAINERD_SOCKET: &str = "unix:///run/containerd/containerd.sock";

/// One file of the node: absolute path on the node, contents (`None`: must not exist), mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFile {
    pub path: String,
    pub content: Option<String>,
    pub mode: u32,
}

/// What applying did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Created,
    Updated,
    Unchanged,
    Removed,
    Absent,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Created => "created",
            Change::Updated => "updated",
            Change::Unchanged => "unchanged",
            Change::Removed => "removed",
            Change::Absent => "absent",
        }
    }
}

/// `path` (absolute on the node) placed under `root`.
pub fn under_root(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}
