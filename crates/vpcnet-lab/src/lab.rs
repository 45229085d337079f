//! The lab as a whole: `up` (VPC namespace with the fabric and the cloud daemon; the Kubernetes
//! control plane on its own host; one network and mount namespace per node with containerd,
//! vpcnet-agent, and, with Kubernetes, vpcnet-bootstrap, kubelet and kube-proxy; the images
//! imported), `run` (bare containers through `ctr run --cni`, which executes vpcnet-cni),
//! `status`, `ping`, container removal, agent stop/start, and `down`. Every step records what it
//! creates first, and any failure tears the whole lab down before returning the error.

use std::collections::BTreeMap;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
pub use vpcnet_emu::{Api, EniInfo, RequestLog, RequestRecord};

use crate::containerd;
use crate::daemon;
use crate::image;
use crate::procs::{self, ProcRecord};
use crate::spawn::Place;
use crate::state::{self, ContainerRecord, LabState, NodeCni, NodeRecord};
use crate::teardown;
use crate::wait::{log_tail, wait_for};
use crate::{api, fabric};

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
    /// Number of nodes (1 to 8).
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
    /// Start kube-proxy on every node (false: tests start it later with
    /// [`Lab::start_kube_proxy`]).
    pub kube_proxy: bool,
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
    /// [`CNI_TIMING_LOG`] ([`Lab::cni_timings`]). Conflists are not touched.
    pub cni_timing: bool,
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
            cluster_endpoint: false,
            wait_ready: true,
            cni: Vec::new(),
            layout: VpcLayout::Basic,
            cni_timing: false,
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

/// AWS SDK environment for a lab process reaching the lab cloud's EC2 at `ec2_endpoint`:
/// region, static lab credentials, no shared config files, the endpoint under the SDK's and
/// the VPC CNI's variable names.
pub fn aws_env(ec2_endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_REGION", daemon::REGION),
        ("AWS_DEFAULT_REGION", daemon::REGION),
        ("AWS_ACCESS_KEY_ID", "AKIDVPCNETLAB"),
        ("AWS_SECRET_ACCESS_KEY", "vpcnet-lab"),
        ("AWS_CONFIG_FILE", "/dev/null"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        ("AWS_ENDPOINT_URL_EC2", ec2_endpoint),
        ("AWS_ENDPOINT_URL", ec2_endpoint),
        ("AWS_EC2_ENDPOINT", ec2_endpoint),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
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

/// A running container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    /// containerd id.
    pub id: String,
    /// Node name.
    pub node: String,
    /// The container's IPv4 address (on its eth0).
    pub ip: Ipv4Addr,
    /// Host pid of its init process.
    pub pid: i32,
}

/// The ENI (and its device index on the node) that owns an address, from the emulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// `eni-...`
    pub eni_id: String,
    /// EC2 device index (the node's `eth<N>`).
    pub device_index: u32,
    /// Instance the ENI is attached to.
    pub instance_id: String,
}

static EXEC_SEQ: AtomicU64 = AtomicU64::new(0);

fn random_prefix() -> String {
    format!("vl{:05x}", rand::random::<u32>() & 0xf_ffff)
}

impl Lab {
    /// Builds a lab. On any failure everything created so far is removed and the error is
    /// returned. Errors: invalid name, a lab of that name exists, a binary is missing
    /// (build with `cargo build -p vpcnet-cli -p vpcnet-agent -p vpcnet-cni`), a component
    /// failed to start (the error quotes its log).
    pub fn up(opts: &UpOptions) -> Result<Lab> {
        state::check_name(&opts.name)?;
        if !(1..=8).contains(&opts.nodes) {
            bail!("--nodes must be between 1 and 8 (got {})", opts.nodes);
        }
        if vpcnet_limits::lookup(&opts.instance_type).is_none() {
            bail!(
                "unknown instance type {:?}: use an EC2 type such as m5.large",
                opts.instance_type
            );
        }
        let mut ours = vec!["vpcnet", "vpcnet-agent", "vpcnet-cni"];
        if opts.kubernetes {
            ours.push("vpcnet-bootstrap");
        }
        for b in ours {
            if !opts.bin_dir.join(b).is_file() {
                bail!(
                    "{} not found: build it with `cargo build -p vpcnet-cli -p vpcnet-agent -p vpcnet-cni -p vpcnet-bootstrap`",
                    opts.bin_dir.join(b).display()
                );
            }
        }
        let k8s_bin_dir = if opts.kubernetes {
            Some(crate::kube::bins::locate(opts.k8s_bin_dir.as_deref())?)
        } else {
            None
        };
        let dir = state::lab_dir(&opts.name);
        if dir.join("state.json").exists() {
            bail!(
                "lab {:?} already exists: remove it with `vpcnet lab down --name {}`",
                opts.name,
                opts.name
            );
        }
        fs::create_dir_all(dir.join("logs"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let prefix = random_prefix();
        LabState {
            name: opts.name.clone(),
            prefix: prefix.clone(),
            instance_type: opts.instance_type.clone(),
            ..Default::default()
        }
        .save(&dir)?;
        let lab = Lab { dir: dir.clone() };
        match lab.build(opts, &prefix, k8s_bin_dir.as_deref()) {
            Ok(()) => Ok(lab),
            Err(e) => {
                progress("lab up failed: tearing down");
                let problems = teardown::teardown(&dir);
                if !problems.is_empty() {
                    eprintln!("teardown problems: {}", problems.join("; "));
                }
                Err(e)
            }
        }
    }

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

    /// The lab cloud's EC2 endpoint as seen from a node.
    pub(crate) fn ec2_endpoint(&self) -> Result<String> {
        self.state()?
            .ec2_endpoint
            .context("lab has no EC2 endpoint yet")
    }

    /// Starts `cmd` in `place` as a recorded lab process (its log is
    /// `logs/<role with '-' for ' '>.log`).
    pub fn start_process(&self, role: &str, cmd: Command, place: &Place) -> Result<ProcRecord> {
        let log = self.logs().join(format!("{}.log", role.replace(' ', "-")));
        let p = procs::spawn(role, cmd, place, &log)?;
        state::update(&self.dir, |s| {
            s.processes.push(p.clone());
            Ok(())
        })?;
        Ok(p)
    }

    /// Errors naming the first of `procs` that is no longer running, with the end of its log.
    pub fn check_alive(&self, procs: &[&ProcRecord]) -> Result<()> {
        for p in procs {
            if !p.alive() {
                let log = self
                    .logs()
                    .join(format!("{}.log", p.role.replace(' ', "-")));
                bail!("{} exited:\n{}", p.role, log_tail(&log));
            }
        }
        Ok(())
    }

    /// [`wait_for`] that also fails as soon as one of `procs` exits (naming it, with the end of
    /// its log).
    pub fn wait_ready<T>(
        &self,
        what: &str,
        timeout: Duration,
        procs: &[&ProcRecord],
        mut check: impl FnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        wait_for(what, timeout, || {
            self.check_alive(procs)?;
            check()
        })
    }

    /// What any node agent needs to reach the lab's cloud: the AWS SDK settings for the lab's
    /// EC2 endpoint and IMDS at its link-local address (both SDKs read these variables).
    pub(crate) fn cloud_env(&self) -> Result<BTreeMap<String, String>> {
        let mut env: BTreeMap<String, String> =
            aws_env(&self.ec2_endpoint()?).into_iter().collect();
        env.insert(
            "AWS_EC2_METADATA_SERVICE_ENDPOINT".into(),
            format!("http://{}", fabric::IMDS_ADDR),
        );
        env.insert(
            "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE".into(),
            "IPv4".into(),
        );
        Ok(env)
    }

    /// The extra agent environment saved for `node` (`--agent-env`, [`Self::set_agent_env`]).
    pub(crate) fn saved_agent_env(&self, node: &NodeRecord) -> Vec<(String, String)> {
        fs::read(self.dir.join(format!("{}-agent-env.json", node.name)))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The environment vpcnet-agent gets on `node` (with the saved extra environment).
    pub(crate) fn node_agent_env(&self, node: &NodeRecord) -> Result<Vec<(String, String)>> {
        self.agent_env(node, &self.saved_agent_env(node))
    }

    fn agent_env(
        &self,
        node: &NodeRecord,
        extra: &[(String, String)],
    ) -> Result<Vec<(String, String)>> {
        let s = self.state()?;
        let mut env = self.cloud_env()?;
        for (k, v) in [
            ("VPCNET_NODE_DATAPATH", "true".to_string()),
            ("INTROSPECTION_BIND_ADDRESS", "127.0.0.1:61679".to_string()),
            ("VPCNET_METRICS_BIND_ADDRESS", "127.0.0.1:61678".to_string()),
            ("AWS_VPC_K8S_CNI_LOG_FILE", "stderr".to_string()),
            ("RUST_LOG", "info".to_string()),
        ] {
            env.insert(k.to_string(), v);
        }
        if let Some(cp) = &s.control_plane {
            // What the agent's DaemonSet pod would get: its node name from the downward API,
            // the `kubernetes` Service from kubelet (reachable once kube-proxy programs it).
            env.insert("MY_NODE_NAME".into(), node.k8s_name.clone());
            env.insert(
                "CLUSTER_NAME".into(),
                crate::kube::control_plane::CLUSTER_NAME.into(),
            );
            env.insert(
                "KUBERNETES_SERVICE_HOST".into(),
                crate::kube::control_plane::KUBERNETES_SERVICE_IP.to_string(),
            );
            env.insert("KUBERNETES_SERVICE_PORT".into(), "443".into());
            if fs::read_to_string(self.dir.join("cluster_endpoint")).is_ok_and(|v| v == "true") {
                env.insert("CLUSTER_ENDPOINT".into(), cp.endpoint());
            }
        }
        for (k, v) in extra {
            env.insert(k.clone(), v.clone());
        }
        Ok(env.into_iter().collect())
    }

    /// Records the node agent's extra environment (`--agent-env`), read back on restarts.
    pub(crate) fn save_agent_env(&self, node: &NodeRecord, opts: &UpOptions) -> Result<()> {
        fs::write(
            self.dir.join(format!("{}-agent-env.json", node.name)),
            serde_json::to_vec(&opts.agent_env)?,
        )?;
        Ok(())
    }

    pub(crate) fn start_agent_with(&self, node: &NodeRecord, opts: &UpOptions) -> Result<()> {
        self.save_agent_env(node, opts)?;
        fs::write(
            self.dir.join("cluster_endpoint"),
            opts.cluster_endpoint.to_string(),
        )?;
        self.start_agent(&node.name)
    }

    /// Replaces the extra agent environment of `node_name` (what `--agent-env` gave), for its
    /// next [`Self::start_agent`].
    pub fn set_agent_env(&self, node_name: &str, extra: &[(String, String)]) -> Result<()> {
        self.state()?.node(node_name)?;
        fs::write(
            self.dir.join(format!("{node_name}-agent-env.json")),
            serde_json::to_vec(extra)?,
        )?;
        Ok(())
    }

    /// GETs `path` (e.g. `/v1/enis`) from the node's agent introspection (its default
    /// address, 127.0.0.1:61679, in the node's network namespace) through the introspection
    /// client, within 5 s, and returns the status code and body.
    pub fn agent_get(&self, node_name: &str, path: &str) -> Result<(u16, String)> {
        use vpcnet_introspection::client::{get, Endpoint, DEFAULT_ENDPOINT};
        let netns = self.state()?.node(node_name)?.netns.clone();
        let path = path.to_string();
        crate::spawn::in_netns_async(&netns, move || async move {
            let ep = Endpoint::parse(DEFAULT_ENDPOINT)?;
            let r = tokio::time::timeout(Duration::from_secs(5), get(&ep, &path))
                .await
                .map_err(|_| {
                    anyhow::anyhow!("GET {path} from the agent at {ep}: no answer within 5 s")
                })??;
            Ok((r.status, r.body))
        })
    }

    /// Starts the node's vpcnet-agent (in the node namespace) and waits (60 s) until it has
    /// written the conflist, i.e. can serve the plugin. A conflist of an earlier run stays in
    /// place meanwhile, as on a node whose agent restarts, so the runtime keeps calling the
    /// plugin (which fails ADDs until the agent serves); the wait is for the new file the
    /// agent renames over it.
    /// On a node running the VPC CNI, starts its ipamd instead ([`Self::start_vpc_cni`]).
    pub fn start_agent(&self, node_name: &str) -> Result<()> {
        let s = self.state()?;
        let node = s.node(node_name)?.clone();
        if node.cni == NodeCni::VpcCni {
            return self.start_vpc_cni(node_name);
        }
        let bin_dir = self.bin_dir();
        let conflist = node.cni_conf_dir().join(CONFLIST);
        let inode = |p: &Path| {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(p).ok().map(|m| m.ino())
        };
        let old = inode(&conflist);
        let mut c = Command::new(bin_dir.join("vpcnet-agent"));
        c.envs(self.node_agent_env(&node)?);
        let log = self.logs().join(format!("agent-{}.log", node.name));
        let p = self.start_process(&format!("agent {}", node.name), c, &node.place())?;
        wait_for(
            &format!(
                "vpcnet-agent on {} to write {}",
                node.name,
                conflist.display()
            ),
            Duration::from_secs(60),
            || {
                if inode(&conflist).is_some_and(|i| Some(i) != old) {
                    return Ok(Some(()));
                }
                if !p.alive() {
                    bail!("vpcnet-agent on {} exited:\n{}", node.name, log_tail(&log));
                }
                Ok(None)
            },
        )
    }

    /// Kills the node's vpcnet-agent with SIGKILL (a crash: no shutdown path runs) and waits
    /// until it is gone. Returns whether one was running.
    pub fn kill_agent(&self, node_name: &str) -> Result<bool> {
        let role = format!("agent {node_name}");
        let recs: Vec<ProcRecord> = self
            .state()?
            .processes
            .into_iter()
            .filter(|p| p.role == role && p.alive())
            .collect();
        for p in &recs {
            p.signal(nix::sys::signal::Signal::SIGKILL);
        }
        wait_for(
            &format!("vpcnet-agent on {node_name} to die of SIGKILL"),
            Duration::from_secs(10),
            || Ok(recs.iter().all(|p| !p.alive()).then_some(())),
        )?;
        state::update(&self.dir, |s| {
            s.processes.retain(|p| p.role != role || p.alive());
            Ok(())
        })?;
        Ok(!recs.is_empty())
    }

    /// Stops the node's vpcnet-agent (SIGTERM, then SIGKILL after 10 s).
    pub fn stop_agent(&self, node_name: &str) -> Result<()> {
        self.stop_role(&format!("agent {node_name}")).map(|_| ())
    }

    /// Stops every recorded lab process with `role` (e.g. `kube-apiserver`, `kube-proxy n1`):
    /// SIGTERM, then SIGKILL after 10 s; drops them from the record. Returns how many there
    /// were.
    pub fn stop_role(&self, role: &str) -> Result<usize> {
        let recs: Vec<ProcRecord> = self
            .state()?
            .processes
            .into_iter()
            .filter(|p| p.role == role)
            .collect();
        for p in &recs {
            p.stop(Duration::from_secs(10));
        }
        state::update(&self.dir, |s| {
            s.processes.retain(|p| p.role != role || p.alive());
            Ok(())
        })?;
        Ok(recs.len())
    }

    /// Starts containers `ids` on `node_name` in parallel (`ctr run --cni`, busybox `sleep`),
    /// and waits until each is running (its CNI ADD done). Errors name the failing container
    /// and quote ctr's output (the plugin's error).
    pub fn run(&self, node_name: &str, ids: &[String]) -> Result<Vec<ContainerInfo>> {
        self.run_with(node_name, ids, &|_| vec!["sleep".into(), "86400".into()])
    }

    /// [`Lab::run`] with each container's command given by `command(id)` (e.g.
    /// [`crate::web::httpd_command`]).
    pub fn run_with(
        &self,
        node_name: &str,
        ids: &[String],
        command: &dyn Fn(&str) -> Vec<String>,
    ) -> Result<Vec<ContainerInfo>> {
        let s = self.state()?;
        let node = s.node(node_name)?.clone();
        for id in ids {
            if id.is_empty()
                || !id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                bail!("invalid container name {id:?}: use letters, digits, '-' and '_'");
            }
            if s.containers.iter().any(|c| &c.id == id) {
                bail!("container {id} already exists in lab {}", s.name);
            }
        }
        let mut started = Vec::new();
        for id in ids {
            state::update(&self.dir, |s| {
                s.containers.push(ContainerRecord {
                    id: id.clone(),
                    node: node.name.clone(),
                });
                Ok(())
            })?;
            let args = command(id);
            started.push((id.clone(), self.start_container(&node, id, &args)?, args));
        }
        // Wait for every container, even after one failed, so none is left half-made.
        let mut out = Vec::new();
        let mut failed = Vec::new();
        for (id, p, args) in &started {
            let info = self.wait_started(&node, id, p.clone(), args).and_then(|t| {
                let ip = containerd::container_ip(t.pid)?
                    .parse()
                    .context("container address")?;
                Ok(ContainerInfo {
                    id: id.clone(),
                    node: node.name.clone(),
                    ip,
                    pid: t.pid,
                })
            });
            match info {
                Ok(i) => out.push(i),
                Err(e) => failed.push(format!("{id}: {e:#}")),
            }
        }
        if !failed.is_empty() {
            let ok: Vec<&str> = out.iter().map(|c| c.id.as_str()).collect();
            bail!(
                "{} of {} containers did not start (started: {}):\n{}",
                failed.len(),
                started.len(),
                if ok.is_empty() {
                    "none".to_string()
                } else {
                    ok.join(", ")
                },
                failed.join("\n")
            );
        }
        Ok(out)
    }

    fn start_container(&self, node: &NodeRecord, id: &str, args: &[String]) -> Result<ProcRecord> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let p = containerd::run_container(node, image::IMAGE_REF, id, &args, &self.logs())?;
        state::update(&self.dir, |s| {
            s.processes.push(p.clone());
            Ok(())
        })?;
        Ok(p)
    }

    /// Waits for a container started by [`Self::start_container`]; when its CNI ADD failed
    /// (e.g. "try again later" while the agent grows the warm pool), removes the half-made
    /// container and starts it again, as kubelet retries a pod sandbox, for up to 90 s.
    fn wait_started(
        &self,
        node: &NodeRecord,
        id: &str,
        mut p: ProcRecord,
        args: &[String],
    ) -> Result<containerd::Task> {
        let t0 = Instant::now();
        loop {
            match containerd::wait_running(node, id, &p, Duration::from_secs(60), &self.logs()) {
                Ok(t) => return Ok(t),
                // A full node (the agent's RESOURCE_EXHAUSTED, plugin code 101) does not
                // clear by waiting: fail at once instead of retrying.
                Err(e)
                    if format!("{e:#}").contains("(add)")
                        && !format!("{e:#}").contains("at its ENI/IP limit")
                        && t0.elapsed() < Duration::from_secs(90) =>
                {
                    let msg = format!("{e:#}");
                    let why = msg
                        .split_once("(add): ")
                        .map(|(_, w)| w.split(';').next().unwrap_or(w))
                        .unwrap_or("CNI ADD failed");
                    progress(&format!("{id}: {why}; retrying as a kubelet would"));
                    self.discard_failed(node, id, &p, false)?;
                    std::thread::sleep(Duration::from_secs(1));
                    p = self.start_container(node, id, args)?;
                }
                Err(e) => {
                    // Leave nothing half-made, so `lab run` can be tried again.
                    self.discard_failed(node, id, &p, true)?;
                    return Err(e);
                }
            }
        }
    }

    /// Removes a container whose CNI ADD failed from containerd (best effort) and its exited
    /// `ctr run` from the lab's record; `forget` also drops the container record itself.
    fn discard_failed(
        &self,
        node: &NodeRecord,
        id: &str,
        ctr: &ProcRecord,
        forget: bool,
    ) -> Result<()> {
        let _ = containerd::ctr(node, &["tasks", "delete", "-f", id]);
        let _ = containerd::delete(node, id);
        state::update(&self.dir, |s| {
            if forget {
                s.containers.retain(|c| c.id != id);
            }
            s.processes.retain(|q| q.role != ctr.role || q.alive());
            Ok(())
        })
    }

    /// Next free container names "c<N>" for `count` containers.
    pub fn next_names(&self, count: usize) -> Result<Vec<String>> {
        let s = self.state()?;
        let mut n = s.containers.len() + 1;
        let mut v = Vec::new();
        while v.len() < count {
            let id = format!("c{n}");
            if !s.containers.iter().any(|c| c.id == id) {
                v.push(id);
            }
            n += 1;
        }
        Ok(v)
    }

    /// Running containers of every node, with their addresses.
    pub fn containers(&self) -> Result<Vec<ContainerInfo>> {
        let s = self.state()?;
        let mut out = Vec::new();
        for c in &s.containers {
            let node = s.node(&c.node)?;
            let Some(t) = containerd::tasks(node)?
                .into_iter()
                .find(|t| t.id == c.id && t.status == "RUNNING")
            else {
                continue;
            };
            if let Ok(ip) = containerd::container_ip(t.pid) {
                out.push(ContainerInfo {
                    id: c.id.clone(),
                    node: c.node.clone(),
                    ip: ip.parse()?,
                    pid: t.pid,
                });
            }
        }
        Ok(out)
    }

    /// Every ENI in the lab cloud (the emulator's view).
    pub fn enis(&self) -> Result<Vec<EniInfo>> {
        api::control_get(&daemon::api_socket(&self.dir), "enis")
    }

    /// Fragments subnet `subnet_id` in the emulator (one address taken in every free aligned
    /// /28, so prefix requests fail with `InsufficientCidrBlocks`), or with `fragmented`
    /// false gives those addresses back. Returns the addresses taken or given back.
    pub fn fragment_subnet(&self, subnet_id: &str, fragmented: bool) -> Result<Vec<Ipv4Addr>> {
        #[derive(serde::Deserialize)]
        struct Answer {
            addresses: Vec<Ipv4Addr>,
        }
        let method = if fragmented { "POST" } else { "DELETE" };
        let a: Answer = api::control_send(
            &daemon::api_socket(&self.dir),
            method,
            &format!("subnets/{subnet_id}/fragment"),
        )?;
        Ok(a.addresses)
    }

    /// The lab cloud's request log: every EC2 and IMDS request it answered, with the calling
    /// instance and the answer ([`vpcnet_emu::request_log`]).
    pub fn requests(&self) -> Result<vpcnet_emu::RequestLog> {
        api::control_get(&daemon::api_socket(&self.dir), "requests")
    }

    /// The requests node `node_name`'s instance made (EC2 by its source address, IMDS by the
    /// instance answered for): what its agent (vpcnet-agent or the VPC CNI's ipamd),
    /// vpcnet-bootstrap and kubelet asked the cloud.
    pub fn node_requests(&self, node_name: &str) -> Result<Vec<vpcnet_emu::RequestRecord>> {
        let id = self.state()?.node(node_name)?.instance_id.clone();
        Ok(self
            .requests()?
            .records
            .into_iter()
            .filter(|r| r.instance_id.as_deref() == Some(id.as_str()))
            .collect())
    }

    /// The plugin invocations the timing shim logged on `node_name` (empty when the lab runs
    /// without [`UpOptions::cni_timing`] or nothing ran yet), oldest first. Errors: unknown
    /// node, or a log line that is not a [`CniTiming`].
    pub fn cni_timings(&self, node_name: &str) -> Result<Vec<CniTiming>> {
        let log = self.state()?.node(node_name)?.path(CNI_TIMING_LOG);
        let text = match fs::read_to_string(&log) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", log.display())),
        };
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .with_context(|| format!("{}: malformed line {l:?}", log.display()))
            })
            .collect()
    }

    /// One EC2 Query API call against the lab cloud; returns the response XML.
    pub fn ec2(&self, action: &str, params: &[(&str, &str)]) -> Result<String> {
        api::ec2_query(&daemon::api_socket(&self.dir), action, params)
    }

    /// The ENI holding `ip` as a secondary address or inside a prefix, per the emulator.
    pub fn owner(enis: &[EniInfo], ip: Ipv4Addr) -> Option<Owner> {
        enis.iter()
            .find(|e| e.secondary_ips.contains(&ip) || e.prefixes.iter().any(|p| p.contains(&ip)))
            .and_then(|e| {
                let a = e.attachment.as_ref()?;
                Some(Owner {
                    eni_id: e.eni_id.clone(),
                    device_index: a.device_index,
                    instance_id: a.instance_id.clone(),
                })
            })
    }

    /// Resolves a ping target: a node name (its primary IP), a container id (its IP) or an
    /// IPv4 address.
    pub fn resolve(&self, target: &str) -> Result<Ipv4Addr> {
        if let Ok(ip) = target.parse() {
            return Ok(ip);
        }
        let s = self.state()?;
        if let Some(n) = s.nodes.iter().find(|n| n.name == target) {
            return Ok(n.primary_ip.parse()?);
        }
        self.containers()?
            .into_iter()
            .find(|c| c.id == target)
            .map(|c| c.ip)
            .with_context(|| {
                format!("{target:?} is not a node, a running container or an IPv4 address")
            })
    }

    /// Pings `to` once (2 s deadline) from inside container `from` (its own busybox `ping`).
    /// Returns whether the echo came back.
    pub fn ping(&self, from: &str, to: Ipv4Addr) -> Result<bool> {
        let s = self.state()?;
        let c = s
            .containers
            .iter()
            .find(|c| c.id == from)
            .with_context(|| format!("no container {from:?}"))?;
        let node = s.node(&c.node)?;
        let exec_id = format!(
            "ping-{}-{}",
            std::process::id(),
            EXEC_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let out = containerd::exec(
            node,
            from,
            &exec_id,
            &["ping", "-c", "1", "-W", "2", &to.to_string()],
        )?;
        Ok(out.status.success())
    }

    /// Stops and deletes a container the way a runtime does: SIGKILL its task; the `ctr run`
    /// that owns it then calls the CNI DEL (empty netns path) and deletes the task; then the
    /// container is deleted. Waits up to 20 s for the DEL.
    pub fn remove_container(&self, id: &str) -> Result<()> {
        let s = self.state()?;
        let c = s
            .containers
            .iter()
            .find(|c| c.id == id)
            .with_context(|| format!("no container {id:?}"))?
            .clone();
        let node = s.node(&c.node)?.clone();
        let role = format!("ctr {id}");
        let ctr: Vec<ProcRecord> = s
            .processes
            .iter()
            .filter(|p| p.role == role)
            .cloned()
            .collect();
        containerd::kill(&node, id)?;
        wait_for(
            &format!("ctr run of {id} to exit (CNI DEL)"),
            Duration::from_secs(20),
            || Ok(ctr.iter().all(|p| !p.alive()).then_some(())),
        )?;
        containerd::delete(&node, id)?;
        state::update(&self.dir, |s| {
            s.containers.retain(|c| c.id != id);
            s.processes.retain(|p| p.role != role);
            Ok(())
        })
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
