//! The lab as a whole: what `lab up` builds ([`UpOptions`], the VPC's shape and fixed
//! addresses), the [`Lab`] handle on a running lab's directory, and the guard that tears it
//! down. `Lab` itself only opens, reads its record and tears down; the lab's parts are
//! components reached from it, each in its own module: [`Lab::up`] (the build steps,
//! `build`), [`Lab::processes`], [`Lab::cloud`], [`Lab::node`], [`Lab::containers`],
//! [`Lab::registry`], [`Lab::lbs`], and with Kubernetes [`Lab::kube`], [`Lab::workloads`],
//! [`Lab::aws_lbc`], [`Lab::targets_controller`] and [`Lab::addons`]. A component is a
//! borrowed view of the lab (`Component<'a> { lab: &'a Lab }`): it adds methods without
//! growing `Lab`, and reads the record ([`crate::state`]) when it needs it.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::daemon;
pub use crate::kube::addons::KubeProxyMode;
use crate::state::{self, AgentInstall, LabState, NodeCni};
use crate::teardown;

/// VPC CIDR of every lab.
pub const VPC_CIDR: &str = "10.0.0.0/16";
/// The lab's node subnet.
pub const SUBNET: &str = "10.0.1.0/24";
/// The subnet of the Kubernetes control-plane host.
pub const CONTROL_PLANE_SUBNET: &str = "10.0.0.0/24";
/// Name of the control-plane host in the lab cloud (its `Name` tag).
pub const CONTROL_PLANE_NAME: &str = "control-plane";
/// Secondary VPC CIDR of the [`VpcLayout::TwoZones`] lab (custom networking's usual choice).
pub const SECONDARY_CIDR: &str = "100.64.0.0/16";
/// The network outside the VPC ([`VpcLayout::TwoZones`]), routed through the VPC router.
pub const OUTSIDE_CIDR: &str = "10.200.0.0/24";
/// The host in [`OUTSIDE_CIDR`].
pub const OUTSIDE_HOST: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 10);

/// The lab VPC's shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VpcLayout {
    /// 10.0.0.0/16 in us-east-1a: the node subnet [`SUBNET`] (and, with Kubernetes, the
    /// control plane's [`CONTROL_PLANE_SUBNET`]). Every lab's default.
    #[default]
    Basic,
    /// What custom networking needs: 10.0.0.0/16 plus [`SECONDARY_CIDR`]; the subnets of
    /// [`TWO_ZONE_SUBNETS`] (a node subnet and pod subnets per zone, tagged `Name`); node `n<i>`
    /// in zone a for odd `i`, zone b for even `i`; ENIs reach each other only through the VPC
    /// router ([`fabric::ISOLATE_ENIS`]); and a host outside the VPC ([`OUTSIDE_HOST`] in
    /// [`OUTSIDE_CIDR`], its own namespace) routed through the VPC router, standing in for an
    /// on-premises network over a VPN.
    TwoZones,
    /// A fleet of agent-only nodes ([`UpOptions::fleet`]): 10.0.0.0/16 as the four /18s of
    /// [`FLEET_SUBNETS`] in us-east-1a, node `n<i>` in subnet `(i − 1) mod 4`. Four bridges,
    /// because a Linux bridge takes at most 1,024 ports (one per attached ENI).
    Fleet,
}

/// A subnet of a lab layout: `Name` tag, CIDR, availability zone.
pub type LabSubnet = (&'static str, &'static str, &'static str);

/// The subnets of [`VpcLayout::TwoZones`], in bridge order (`br0`, `br1`, ...).
pub const TWO_ZONE_SUBNETS: &[LabSubnet] = &[
    ("nodes-a", SUBNET, "us-east-1a"),
    ("control-plane", CONTROL_PLANE_SUBNET, "us-east-1a"),
    ("nodes-b", "10.0.2.0/24", "us-east-1b"),
    ("pods-a", "100.64.0.0/24", "us-east-1a"),
    ("pods-b", "100.64.1.0/24", "us-east-1b"),
    ("pods-a2", "100.64.2.0/24", "us-east-1a"),
    ("pods-a3", "100.64.3.0/24", "us-east-1a"),
];

/// The subnets of [`VpcLayout::Fleet`], in bridge order: 16,379 usable addresses each.
pub const FLEET_SUBNETS: &[LabSubnet] = &[
    ("fleet-0", "10.0.0.0/18", "us-east-1a"),
    ("fleet-1", "10.0.64.0/18", "us-east-1a"),
    ("fleet-2", "10.0.128.0/18", "us-east-1a"),
    ("fleet-3", "10.0.192.0/18", "us-east-1a"),
];

/// Most nodes a fleet lab takes ([`UpOptions::fleet`]): the four bridges' 4,096 ports hold
/// 1,000 nodes of up to four ENIs. What one machine holds is usually less: see
/// `docs/lab.md#a-fleet`.
pub const MAX_FLEET_NODES: usize = 1_000;

/// File name of the conflist the agent writes in the node's CNI directory.
pub const CONFLIST: &str = "10-vpcnet.conflist";

/// Prints a progress line on stderr.
pub fn progress(msg: &str) {
    eprintln!("==> {msg}");
}

/// What `lab up` builds.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Lab name (directory under /run/vpcnet-lab), `[a-z0-9-]{1,32}`.
    pub name: String,
    /// EC2 instance type of every node, e.g. "m5.large".
    pub instance_type: String,
    /// Number of nodes (1 to 8; with [`Self::fleet`] up to [`MAX_FLEET_NODES`]).
    pub nodes: usize,
    /// Directory holding the `vpcnet`, `vpcnet-agent` and `vpcnet-cni` binaries.
    pub bin_dir: PathBuf,
    /// Extra environment for every agent (e.g. WARM_IP_TARGET), applied last.
    pub agent_env: Vec<(String, String)>,
    /// Run Kubernetes (control plane, kubelet, kube-proxy); false gives the bare lab of
    /// containerd + agent that `lab run` drives with `ctr`.
    pub kubernetes: bool,
    /// Directory of the Kubernetes binaries (default: see [`crate::kube::bins::locate`]).
    pub k8s_bin_dir: Option<PathBuf>,
    /// Start kube-proxy on every node during `lab up` (false: hold it back; tests start it
    /// later with [`crate::kube::cluster::Kube::start_kube_proxy`] per node in
    /// [`KubeProxyMode::Process`], or [`crate::kube::addons::Addons::start_kube_proxy`] in
    /// [`KubeProxyMode::DaemonSet`]).
    pub kube_proxy: bool,
    /// How vpcnet's agent runs on the nodes (with Kubernetes): lab processes (the default), or
    /// installed with its Helm chart as the `aws-node` DaemonSet.
    pub agent_install: AgentInstall,
    /// How kube-proxy runs: a lab process per node (default) or EKS's add-on DaemonSet.
    pub kube_proxy_mode: KubeProxyMode,
    /// Install CoreDNS as EKS does (Deployment `coredns` behind Service `kube-dns`, from the
    /// lab's image of CoreDNS built by `scripts/build-coredns.sh`).
    pub coredns: bool,
    /// Directory of the CoreDNS binary (default: see [`crate::kube::bins::locate_coredns`]).
    pub coredns_bin_dir: Option<PathBuf>,
    /// Give every agent `CLUSTER_ENDPOINT` = the API server's address, so it reaches the API
    /// server without the `kubernetes` Service (that is, before kube-proxy runs).
    pub cluster_endpoint: bool,
    /// Wait for the nodes to be Ready (false: return once kubelets are started).
    pub wait_ready: bool,
    /// CNI per node: `(node name, cni)`; node name `*` = every node. Later entries win; nodes
    /// not named run vpcnet.
    pub cni: Vec<(String, NodeCni)>,
    /// The VPC's shape (default [`VpcLayout::Basic`]).
    pub layout: VpcLayout,
    /// Put the timing shim (`vpcnet-cni-timing`, from [`UpOptions::bin_dir`]) in place of
    /// every node's CNI plugins (`vpcnet-cni`, `aws-cni`, `egress-cni`, `portmap`), so each
    /// invocation the runtime makes is logged with its wall time and peak RSS to the node's
    /// [`CNI_TIMING_LOG`] ([`crate::nodes::Node::cni_timings`]). Conflists are not touched.
    pub cni_timing: bool,
    /// A fleet of agent-only nodes, as `lab fleet` runs them: each node is its network and
    /// mount namespace with its ENIs as interfaces and its CNI's plugins, but no containerd, no
    /// images, and no agent: `lab up` leaves the agents for the caller to start (all at once,
    /// [`crate::fleet`]). Needs no Kubernetes and the [`VpcLayout::Fleet`] layout.
    pub fleet: bool,
}

/// Node path of the timing shim's log (one JSON line per plugin invocation, see
/// [`UpOptions::cni_timing`]); `/var/lib/cni` is node-private in the lab.
pub const CNI_TIMING_LOG: &str = vpcnet_cni_harness::timing::DEFAULT_LOG;

/// One plugin invocation the timing shim logged (re-exported for `vpcnet-bench`).
pub use vpcnet_cni_harness::timing::Record as CniTiming;

/// The plugins the timing shim wraps when present ([`UpOptions::cni_timing`]).
pub(crate) const TIMED_PLUGINS: [&str; 4] = ["vpcnet-cni", "aws-cni", "egress-cni", "portmap"];

/// `--agent-env KEY=VALUE` arguments (of `vpcnet lab` and `vpcnet-bench`) as the pairs of
/// [`UpOptions::agent_env`]; the error names a malformed one.
pub fn parse_agent_env(kvs: &[String]) -> Result<Vec<(String, String)>> {
    kvs.iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("--agent-env {kv:?}: expected KEY=VALUE"),
        })
        .collect()
}

impl UpOptions {
    /// The CNI of node `name` (see [`UpOptions::cni`]).
    pub fn cni_of(&self, name: &str) -> NodeCni {
        self.cni
            .iter()
            .rev()
            .find(|(n, _)| n == "*" || n == name)
            .map(|(_, c)| *c)
            .unwrap_or_default()
    }

    /// Defaults: one m5.large node with Kubernetes, binaries next to the running executable.
    pub fn new(name: &str) -> Self {
        UpOptions {
            name: name.to_string(),
            instance_type: "m5.large".into(),
            nodes: 1,
            bin_dir: default_bin_dir(),
            agent_env: Vec::new(),
            kubernetes: true,
            k8s_bin_dir: None,
            kube_proxy: true,
            agent_install: AgentInstall::Process,
            kube_proxy_mode: KubeProxyMode::Process,
            coredns: false,
            coredns_bin_dir: None,
            cluster_endpoint: false,
            wait_ready: true,
            cni: Vec::new(),
            layout: VpcLayout::Basic,
            cni_timing: false,
            fleet: false,
        }
    }

    /// The subnets the lab builds, in bridge order, and the subnet index of node `n<i>`.
    pub fn subnets(&self) -> (Vec<LabSubnet>, Box<dyn Fn(usize) -> usize>) {
        match self.layout {
            VpcLayout::Basic => {
                let mut v = vec![("", SUBNET, daemon::AZ)];
                if self.kubernetes {
                    v.push(("", CONTROL_PLANE_SUBNET, daemon::AZ));
                }
                (v, Box::new(|_| 0))
            }
            VpcLayout::TwoZones => (
                TWO_ZONE_SUBNETS.to_vec(),
                Box::new(|i| if i % 2 == 1 { 0 } else { 2 }),
            ),
            VpcLayout::Fleet => (
                FLEET_SUBNETS.to_vec(),
                Box::new(|i| (i - 1) % FLEET_SUBNETS.len()),
            ),
        }
    }

    /// A fleet of `nodes` agent-only nodes ([`Self::fleet`]).
    pub fn fleet(name: &str, nodes: usize) -> Self {
        UpOptions {
            kubernetes: false,
            fleet: true,
            layout: VpcLayout::Fleet,
            nodes,
            ..Self::new(name)
        }
    }

    /// The same without Kubernetes (the bare containerd lab).
    pub fn bare(name: &str) -> Self {
        UpOptions {
            kubernetes: false,
            ..Self::new(name)
        }
    }
}

/// The directory of the running executable (where cargo puts all the workspace's binaries).
pub fn default_bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A running lab (a handle on its state directory).
#[derive(Debug, Clone)]
pub struct Lab {
    /// The lab directory, `/run/vpcnet-lab/<name>`.
    pub dir: PathBuf,
}

impl Lab {
    /// Opens an existing lab by name.
    pub fn open(name: &str) -> Result<Lab> {
        state::check_name(name)?;
        let dir = state::lab_dir(name);
        LabState::load(&dir)?;
        Ok(Lab { dir })
    }

    /// The lab's recorded state.
    pub fn state(&self) -> Result<LabState> {
        LabState::load(&self.dir)
    }

    pub(crate) fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// Directory of the lab's own binaries (`vpcnet`, `vpcnet-agent`, ...).
    pub(crate) fn bin_dir(&self) -> PathBuf {
        PathBuf::from(fs::read_to_string(self.dir.join("bin_dir")).unwrap_or_default())
    }

    /// Removes everything the lab created. Errors list what could not be removed.
    pub fn down(&self) -> Result<()> {
        teardown::teardown_checked(&self.dir)
    }
}

/// Builds a lab with `opts`, runs `f` on it and always tears it down (also when `f` fails or
/// panics), for the one-shot commands (`lab demo`, `vpcnet-bench`). Returns `f`'s result;
/// when `f` succeeded, a teardown problem is the error.
pub fn with_lab<T>(opts: &UpOptions, f: impl FnOnce(&Lab) -> Result<T>) -> Result<T> {
    let guard = LabGuard::new(Lab::up(opts)?);
    let result = f(guard.lab());
    progress("tearing the lab down");
    let down = guard.down();
    let value = result?;
    down?;
    Ok(value)
}

/// Tears a lab down when dropped (tests and `lab demo`), unless [`LabGuard::keep`] was called.
pub struct LabGuard {
    lab: Option<Lab>,
}

impl LabGuard {
    /// Guards `lab`.
    pub fn new(lab: Lab) -> Self {
        LabGuard { lab: Some(lab) }
    }
    /// The guarded lab.
    pub fn lab(&self) -> &Lab {
        self.lab.as_ref().expect("guard holds a lab until dropped")
    }
    /// Tears down now, reporting problems.
    pub fn down(mut self) -> Result<()> {
        match self.lab.take() {
            Some(l) => l.down(),
            None => Ok(()),
        }
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        if let Some(l) = self.lab.take() {
            let problems = teardown::teardown(&l.dir);
            if !problems.is_empty() {
                eprintln!("lab teardown problems: {}", problems.join("; "));
            }
        }
    }
}
