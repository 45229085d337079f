//! A node of the lab ([`Lab::node`]): its record, its agent (vpcnet-agent, or the VPC CNI's
//! ipamd on a node that runs the VPC CNI: [`crate::vpc_cni`]) with the environment a DaemonSet
//! pod would get, the agent's introspection, the requests its instance made of the lab cloud,
//! and the plugin timings of the timing shim. Swapping a node's CNI in place is
//! [`crate::swap`].

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::cloud::RequestRecord;
use crate::lab::{CniTiming, Lab, UpOptions, CNI_TIMING_LOG, CONFLIST};
use crate::procs::ProcRecord;
use crate::state::{self, AgentInstall, NodeCni, NodeRecord};
use crate::wait::{log_tail, wait_for};

/// One node of a lab ([`Lab::node`]): a name; the node's record is read when a method needs
/// it, so a method on a node the lab does not have fails naming it.
#[derive(Debug, Clone)]
pub struct Node<'a> {
    lab: &'a Lab,
    name: String,
}

impl Lab {
    /// Node `name` (e.g. `n1`).
    pub fn node(&self, name: &str) -> Node<'_> {
        Node {
            lab: self,
            name: name.to_string(),
        }
    }
}

impl<'a> Node<'a> {
    /// The node's name in the lab (`n1`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lab the node belongs to.
    pub(crate) fn lab(&self) -> &Lab {
        self.lab
    }

    /// The node's record. Errors: no such node in the lab.
    pub fn record(&self) -> Result<NodeRecord> {
        Ok(self.lab.state()?.node(&self.name)?.clone())
    }

    /// The file holding the node agent's extra environment.
    fn agent_env_file(&self) -> PathBuf {
        self.lab.dir.join(format!("{}-agent-env.json", self.name))
    }

    /// The extra agent environment saved for the node (`--agent-env`, [`Self::set_agent_env`]).
    pub(crate) fn saved_agent_env(&self) -> Vec<(String, String)> {
        fs::read(self.agent_env_file())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The environment vpcnet-agent gets on the node (with the saved extra environment).
    pub(crate) fn agent_env(&self) -> Result<Vec<(String, String)>> {
        let s = self.lab.state()?;
        let node = s.node(&self.name)?;
        let mut env = self.lab.cloud().env()?;
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
            if fs::read_to_string(self.lab.dir.join("cluster_endpoint")).is_ok_and(|v| v == "true")
            {
                env.insert("CLUSTER_ENDPOINT".into(), cp.endpoint());
            }
        }
        for (k, v) in self.saved_agent_env() {
            env.insert(k, v);
        }
        Ok(env.into_iter().collect())
    }

    /// Records the node agent's extra environment (`--agent-env`), read back on restarts.
    pub(crate) fn save_agent_env(&self, opts: &UpOptions) -> Result<()> {
        fs::write(self.agent_env_file(), serde_json::to_vec(&opts.agent_env)?)?;
        Ok(())
    }

    /// [`Self::start_agent`] as `lab up` does: with the extra environment and the
    /// `CLUSTER_ENDPOINT` choice of `opts` recorded first.
    pub(crate) fn start_agent_with(&self, opts: &UpOptions) -> Result<()> {
        self.save_agent_env(opts)?;
        fs::write(
            self.lab.dir.join("cluster_endpoint"),
            opts.cluster_endpoint.to_string(),
        )?;
        self.start_agent()
    }

    /// Replaces the node agent's extra environment (what `--agent-env` gave), for its next
    /// [`Self::start_agent`].
    pub fn set_agent_env(&self, extra: &[(String, String)]) -> Result<()> {
        self.record()?;
        fs::write(self.agent_env_file(), serde_json::to_vec(extra)?)?;
        Ok(())
    }

    /// GETs `path` (e.g. `/v1/enis`) from the node's agent introspection (its default
    /// address, 127.0.0.1:61679, in the node's network namespace) through the introspection
    /// client, within 5 s, and returns the status code and body.
    pub fn agent_get(&self, path: &str) -> Result<(u16, String)> {
        use vpcnet_introspection::client::{get, Endpoint, DEFAULT_ENDPOINT};
        let netns = self.record()?.netns;
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

    /// The node's agent metrics ([`agent_metrics_in`] its network namespace).
    pub fn agent_metrics(&self) -> Result<String> {
        agent_metrics_in(&self.record()?.netns)
    }

    /// Starts the node's vpcnet-agent (in the node namespace) and waits (60 s) until it has
    /// written the conflist, i.e. can serve the plugin. A conflist of an earlier run stays in
    /// place meanwhile, as on a node whose agent restarts, so the runtime keeps calling the
    /// plugin (which fails ADDs until the agent serves); the wait is for the new file the
    /// agent renames over it.
    /// On a node running the VPC CNI, starts its ipamd instead ([`Self::start_vpc_cni`]).
    pub fn start_agent(&self) -> Result<()> {
        self.launch_agent()?.wait()
    }

    /// Starts the node's agent (vpcnet-agent, or the VPC CNI's ipamd on a VPC CNI node)
    /// without waiting: [`Starting::serving`] says when it serves, [`Starting::wait`] waits
    /// for it. A fleet starts all its agents this way, at once.
    pub fn launch_agent(&self) -> Result<Starting<'a>> {
        let node = self.record()?;
        if node.cni == NodeCni::VpcCni {
            return self.launch_vpc_cni();
        }
        if self.lab.state()?.agent_install == AgentInstall::Chart {
            bail!(
                "the agent of node {} runs as a pod of the aws-node DaemonSet (the lab installed \
                 vpcnet with its chart): kubelet starts and restarts it; delete the pod \
                 (kubectl -n kube-system delete pod) for a new one",
                node.name
            );
        }
        let bin_dir = self.lab.bin_dir();
        let conflist = node.cni_conf_dir().join(CONFLIST);
        let old = inode(&conflist);
        let mut c = Command::new(bin_dir.join("vpcnet-agent"));
        c.envs(self.agent_env()?);
        let role = format!("agent {}", node.name);
        let log = self.lab.processes().log(&role);
        let proc = self.lab.processes().start(&role, c, &node.place())?;
        Ok(Starting {
            node: self.clone(),
            proc,
            log,
            probe: Probe::Conflist {
                path: conflist,
                old,
            },
        })
    }

    /// Kills the node's vpcnet-agent with SIGKILL (a crash: no shutdown path runs) and waits
    /// until it is gone. Returns whether one was running.
    pub fn kill_agent(&self) -> Result<bool> {
        let role = format!("agent {}", self.name);
        let recs: Vec<ProcRecord> = self
            .lab
            .state()?
            .processes
            .into_iter()
            .filter(|p| p.role == role && p.alive())
            .collect();
        for p in &recs {
            p.signal(nix::sys::signal::Signal::SIGKILL);
        }
        wait_for(
            &format!("vpcnet-agent on {} to die of SIGKILL", self.name),
            Duration::from_secs(10),
            || Ok(recs.iter().all(|p| !p.alive()).then_some(())),
        )?;
        state::update(&self.lab.dir, |s| {
            s.processes.retain(|p| p.role != role || p.alive());
            Ok(())
        })?;
        Ok(!recs.is_empty())
    }

    /// Stops the node's vpcnet-agent (SIGTERM, then SIGKILL after 10 s).
    pub fn stop_agent(&self) -> Result<()> {
        self.lab
            .processes()
            .stop_role(&format!("agent {}", self.name))
            .map(|_| ())
    }

    /// The requests the node's instance made (EC2 by its source address, IMDS by the
    /// instance answered for): what its agent (vpcnet-agent or the VPC CNI's ipamd),
    /// vpcnet-bootstrap and kubelet asked the cloud.
    pub fn requests(&self) -> Result<Vec<RequestRecord>> {
        let id = self.record()?.instance_id;
        Ok(self
            .lab
            .cloud()
            .requests()?
            .records
            .into_iter()
            .filter(|r| r.instance_id.as_deref() == Some(id.as_str()))
            .collect())
    }

    /// The plugin invocations the timing shim logged on the node (empty when the lab runs
    /// without [`UpOptions::cni_timing`] or nothing ran yet), oldest first. Errors: unknown
    /// node, or a log line that is not a [`CniTiming`].
    pub fn cni_timings(&self) -> Result<Vec<CniTiming>> {
        let log = self.record()?.path(CNI_TIMING_LOG);
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
}

/// The agent metrics (Prometheus text) from 127.0.0.1:61678, the lab's
/// `VPCNET_METRICS_BIND_ADDRESS`, in the node network namespace `netns`, within 5 s.
pub fn agent_metrics_in(netns: &str) -> Result<String> {
    use vpcnet_introspection::client::{get, Endpoint};
    crate::spawn::in_netns_async(netns, move || async move {
        let ep = Endpoint::parse("http://127.0.0.1:61678")?;
        let r = tokio::time::timeout(Duration::from_secs(5), get(&ep, "/metrics"))
            .await
            .map_err(|_| {
                anyhow::anyhow!("GET /metrics from the agent at {ep}: no answer within 5 s")
            })??;
        anyhow::ensure!(
            r.status == 200,
            "GET /metrics from the agent: HTTP {}",
            r.status
        );
        Ok(r.body)
    })
}

/// The inode of `p`, if it exists.
fn inode(p: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(p).ok().map(|m| m.ino())
}

/// A node agent started but perhaps not yet serving ([`Node::launch_agent`]).
#[derive(Debug)]
pub struct Starting<'a> {
    node: Node<'a>,
    proc: ProcRecord,
    log: PathBuf,
    probe: Probe,
}

/// How a [`Starting`] agent shows that it serves.
#[derive(Debug)]
pub(crate) enum Probe {
    /// vpcnet-agent: it has renamed a new conflist over the one at `path` (inode `old`).
    Conflist { path: PathBuf, old: Option<u64> },
    /// The VPC CNI's ipamd: its introspection lists ENIs; then the lab writes `conflist` as
    /// the `aws-node` entrypoint does once ipamd answers.
    VpcCni { conflist: PathBuf },
}

impl<'a> Starting<'a> {
    pub(crate) fn new(node: Node<'a>, proc: ProcRecord, log: PathBuf, probe: Probe) -> Self {
        Starting {
            node,
            proc,
            log,
            probe,
        }
    }

    /// The node.
    pub fn node(&self) -> &Node<'a> {
        &self.node
    }

    /// Whether the agent's process has exited.
    pub fn exited(&self) -> bool {
        !self.proc.alive()
    }

    /// The last line of the agent's log (why it exited, usually).
    pub fn last_log_line(&self) -> String {
        log_tail(&self.log)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()
    }

    /// Whether the agent serves the plugin now (vpcnet-agent: its conflist is written; the
    /// VPC CNI: ipamd answers, and the lab has written its conflist). Errors: the agent
    /// exited (with the end of its log).
    pub fn serving(&self) -> Result<bool> {
        let serving = match &self.probe {
            Probe::Conflist { path, old } => inode(path).is_some_and(|i| Some(i) != *old),
            Probe::VpcCni { conflist } => {
                if conflist.exists() {
                    true
                } else if let Ok((200, _)) = self.node.agent_get("/v1/enis") {
                    fs::write(conflist, crate::vpc_cni::vpc_cni_conflist())?;
                    true
                } else {
                    false
                }
            }
        };
        if !serving && !self.proc.alive() {
            bail!(
                "{} on {} exited:\n{}",
                self.agent_name(),
                self.node.name,
                log_tail(&self.log)
            );
        }
        Ok(serving)
    }

    fn agent_name(&self) -> &'static str {
        match self.probe {
            Probe::Conflist { .. } => "vpcnet-agent",
            Probe::VpcCni { .. } => "the VPC CNI's ipamd (aws-k8s-agent)",
        }
    }

    /// Waits until the agent serves: 60 s for vpcnet-agent, 120 s for the VPC CNI's ipamd.
    pub fn wait(self) -> Result<()> {
        let (timeout, what) = match &self.probe {
            Probe::Conflist { path, .. } => (
                Duration::from_secs(60),
                format!(
                    "vpcnet-agent on {} to write {}",
                    self.node.name,
                    path.display()
                ),
            ),
            Probe::VpcCni { .. } => (
                Duration::from_secs(120),
                format!("the VPC CNI's ipamd on {} to serve", self.node.name),
            ),
        };
        wait_for(&what, timeout, || Ok(self.serving()?.then_some(())))
    }
}
