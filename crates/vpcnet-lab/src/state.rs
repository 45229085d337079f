//! The lab's record of everything it created (`/run/vpcnet-lab/<name>/state.json`), written
//! before each thing is created so `lab down` and failure paths can remove all of it. Records
//! only: this module imports nothing of the lab, every other part stands on it.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Root of all lab state directories.
pub const LAB_ROOT: &str = "/run/vpcnet-lab";

/// One node (EC2 instance) of the lab.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Short name used on the command line: "n1", "n2", ...
    pub name: String,
    /// Network namespace of the node.
    pub netns: String,
    /// EC2 instance id in the emulator ("i-..."), once known.
    pub instance_id: String,
    /// Primary private IPv4 address of the instance (on `eth0`).
    pub primary_ip: String,
    /// Node directory: `root/` (what the node sees at its standard paths, see
    /// `machine`), `bin/`, scratch files.
    pub dir: PathBuf,
    /// The node's persistent mount namespace (see the `machine` module).
    #[serde(default)]
    pub mntns: PathBuf,
    /// The Kubernetes node name (the instance's EC2 private DNS name), once known.
    #[serde(default)]
    pub k8s_name: String,
    /// The node's CNI (its agent and plugin).
    #[serde(default)]
    pub cni: NodeCni,
    /// The instance's availability zone (e.g. `us-east-1a`), once known (the lab's cloud
    /// controller manager labels the Node `topology.kubernetes.io/zone` with it).
    #[serde(default)]
    pub zone: String,
}

/// Which CNI a lab node runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeCni {
    /// vpcnet-agent and vpcnet-cni (chained with portmap).
    #[default]
    Vpcnet,
    /// The peer, AWS's VPC CNI unmodified: ipamd (`aws-k8s-agent`) and its conflist
    /// (`aws-cni` → `egress-cni` → `portmap`).
    VpcCni,
}

impl std::fmt::Display for NodeCni {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NodeCni::Vpcnet => "vpcnet",
            NodeCni::VpcCni => "vpc-cni",
        })
    }
}

/// How vpcnet's agent runs on the nodes of a lab with Kubernetes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentInstall {
    /// A lab process per node, started by the lab with the environment a DaemonSet pod would
    /// get; the plugins copied into the node's `/opt/cni/bin` by the lab.
    #[default]
    Process,
    /// Installed as an operator installs it: the node image imported into every node's
    /// containerd and `charts/vpcnet` installed with Helm; kubelet starts the `aws-node`
    /// DaemonSet's pods, whose init container installs the plugins
    /// ([`crate::kube::vpcnet_chart`]).
    Chart,
}

impl std::str::FromStr for AgentInstall {
    type Err = anyhow::Error;
    /// `process` or `chart`.
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "process" => Ok(AgentInstall::Process),
            "chart" => Ok(AgentInstall::Chart),
            _ => anyhow::bail!("unknown agent install {s:?}: use process or chart"),
        }
    }
}

impl NodeCni {
    /// The name `--cni` takes: `vpcnet` or `vpc-cni`.
    pub fn name(self) -> &'static str {
        match self {
            NodeCni::Vpcnet => "vpcnet",
            NodeCni::VpcCni => "vpc-cni",
        }
    }
}

impl std::str::FromStr for NodeCni {
    type Err = anyhow::Error;
    /// `vpcnet` or `vpc-cni` ([`NodeCni::name`]).
    fn from_str(s: &str) -> anyhow::Result<Self> {
        [NodeCni::Vpcnet, NodeCni::VpcCni]
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| anyhow::anyhow!("unknown CNI {s:?}: use vpcnet or vpc-cni"))
    }
}

impl NodeRecord {
    /// The node's root directory: node path `/x` is host path `root/x`.
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
    /// Host path of the node path `node_path` (e.g. `/etc/cni/net.d`).
    pub fn path(&self, node_path: &str) -> PathBuf {
        host_path(&self.root(), node_path)
    }
    /// containerd's gRPC socket of this node (host path of `/run/containerd/containerd.sock`).
    pub fn containerd_socket(&self) -> PathBuf {
        self.path("/run/containerd/containerd.sock")
    }
    /// Host path of the node's CNI configuration directory `/etc/cni/net.d`.
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.path("/etc/cni/net.d")
    }
    /// Host path of the node's CNI plugin directory `/opt/cni/bin`.
    pub fn cni_bin_dir(&self) -> PathBuf {
        self.path("/opt/cni/bin")
    }
    /// containerd namespace the lab's containers live in on this node (unique per lab run,
    /// so cgroup paths of concurrent labs never collide).
    pub fn ctr_namespace(&self) -> String {
        self.netns.clone()
    }
    /// Host path of the agent's gRPC socket (its default, `/var/run/vpcnet/agent.sock`).
    pub fn agent_socket(&self) -> PathBuf {
        self.path("/run/vpcnet/agent.sock")
    }
    /// Host path of the agent's checkpoint file (its default, `/var/run/vpcnet/ipam.json`).
    pub fn checkpoint_path(&self) -> PathBuf {
        self.path("/run/vpcnet/ipam.json")
    }
}

/// A container started by `lab run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// containerd container id.
    pub id: String,
    /// Node name ("n1").
    pub node: String,
}

/// Everything one lab created, in creation order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabState {
    /// Lab name (directory name under [`LAB_ROOT`]).
    pub name: String,
    /// Per-run prefix of every namespace name, e.g. "vl3f2a1".
    pub prefix: String,
    /// EC2 instance type of the nodes, e.g. "m5.large".
    pub instance_type: String,
    /// Network namespaces created (VPC first, then nodes).
    pub namespaces: Vec<String>,
    /// Processes started (stopped in reverse order).
    pub processes: Vec<ProcRecord>,
    /// Nodes.
    pub nodes: Vec<NodeRecord>,
    /// Containers started.
    pub containers: Vec<ContainerRecord>,
    /// EC2 endpoint URL as seen from a node, once the emulator runs.
    pub ec2_endpoint: Option<String>,
    /// The Kubernetes control plane, in a lab with Kubernetes.
    #[serde(default)]
    pub control_plane: Option<ControlPlaneRecord>,
    /// The host outside the VPC (the two-zone layout).
    #[serde(default)]
    pub outside: Option<OutsideRecord>,
    /// How vpcnet's agent runs on the nodes.
    #[serde(default)]
    pub agent_install: AgentInstall,
}

/// A host outside the VPC, routed through the VPC router: a stand-in for an on-premises
/// network reached over a VPN or Direct Connect.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OutsideRecord {
    /// Its network namespace.
    pub netns: String,
    /// Its address (on its `eth0`), e.g. 10.200.0.10.
    pub ip: std::net::Ipv4Addr,
    /// The outside network, e.g. 10.200.0.0/24 (its router, the VPC's, is the first address).
    pub cidr: ipnet::Ipv4Net,
}

/// Directory of the lab named `name`.
pub fn lab_dir(name: &str) -> PathBuf {
    Path::new(LAB_ROOT).join(name)
}

/// Checks a lab name: 1 to 32 of `[a-z0-9-]`, so it is safe as a directory name.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !ok {
        bail!("invalid lab name {name:?}: use 1 to 32 characters of a-z, 0-9 and '-'");
    }
    Ok(())
}

impl LabState {
    /// The state file path.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("state.json")
    }

    /// Loads the state of the lab in `dir`. Errors name the lab and say how to list labs.
    pub fn load(dir: &Path) -> Result<LabState> {
        let p = Self::path(dir);
        let text = fs::read_to_string(&p).with_context(|| {
            format!(
                "no lab state at {} (is the lab up? `vpcnet lab up`; labs live in {LAB_ROOT})",
                p.display()
            )
        })?;
        serde_json::from_str(&text).with_context(|| format!("corrupt lab state {}", p.display()))
    }

    /// Writes the state atomically (temp file + rename).
    pub fn save(&self, dir: &Path) -> Result<()> {
        let p = Self::path(dir);
        let tmp = dir.join("state.json.tmp");
        fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))?;
        Ok(())
    }

    /// Node by name ("n1"). Errors list the nodes there are.
    pub fn node(&self, name: &str) -> Result<&NodeRecord> {
        self.nodes.iter().find(|n| n.name == name).with_context(|| {
            let names: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
            format!(
                "no node {name:?} in lab {} (nodes: {})",
                self.name,
                names.join(", ")
            )
        })
    }
}

/// Runs `f` on the lab state under an exclusive lock (`state.lock`), saving it afterwards even
/// when `f` fails (so what was recorded before the failure is kept for cleanup).
pub fn update<T>(dir: &Path, f: impl FnOnce(&mut LabState) -> Result<T>) -> Result<T> {
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("state.lock"))
        .with_context(|| format!("locking lab state in {}", dir.display()))?;
    // Released when `_lock` is dropped, after the state is saved.
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .with_context(|| format!("flock {}", dir.join("state.lock").display()))?;
    let mut state = LabState::load(dir)?;
    let result = f(&mut state);
    state.save(dir)?;
    result
}

/// A process the lab started: role (e.g. "containerd n1"), pid and start time in clock ticks
/// since boot (field 22 of `/proc/<pid>/stat`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRecord {
    /// What it is, for messages: "emulator", "containerd n1", "agent n1", "ctr c1".
    pub role: String,
    /// Process id.
    pub pid: i32,
    /// Start time in clock ticks since boot; identifies the process across pid reuse.
    pub start_time: u64,
}

/// What the lab records about its control plane.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlPlaneRecord {
    /// Network namespace of the control-plane host.
    pub netns: String,
    /// Its EC2 instance ID in the lab cloud.
    pub instance_id: String,
    /// Its address (the API server endpoint is `https://<ip>:6443`).
    pub ip: String,
    /// Directory of the Kubernetes binaries used.
    pub bin_dir: PathBuf,
    /// Admin kubeconfig (`system:masters`).
    pub admin_kubeconfig: PathBuf,
    /// The cluster CA certificate (PEM file).
    pub ca_file: PathBuf,
}

/// Host path of the node path `node_path` in a node whose root directory is `root` (node path
/// `/x` is `root/x`).
pub fn host_path(root: &Path, node_path: &str) -> PathBuf {
    root.join(node_path.trim_start_matches('/'))
}

/// Names of the labs that have a state directory.
pub fn list_labs() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(LAB_ROOT)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("state.json").exists())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("lab").is_ok());
        assert!(check_name("e2e-123-4").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("../etc").is_err());
        assert!(check_name("Lab").is_err());
        assert!(check_name(&"a".repeat(33)).is_err());
    }

    #[test]
    fn update_saves_what_was_recorded_before_an_error() {
        let dir = tempfile::tempdir().unwrap();
        LabState {
            name: "t".into(),
            ..Default::default()
        }
        .save(dir.path())
        .unwrap();
        let r: Result<()> = update(dir.path(), |s| {
            s.namespaces.push("vlx-vpc".into());
            bail!("boom")
        });
        assert!(r.is_err());
        assert_eq!(
            LabState::load(dir.path()).unwrap().namespaces,
            vec!["vlx-vpc"]
        );
    }
}
