//! Bare containers ([`Lab::containers`]) in the lab without Kubernetes: `ctr run --cni` on a
//! node (so containerd executes the node's CNI plugin as a runtime does), retried as kubelet
//! retries a sandbox while the agent grows its pool; the running ones with their addresses;
//! ping from inside one; removal the way a runtime removes a container (CNI DEL first).

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::containerd;
use crate::image;
use crate::lab::{progress, Lab};
use crate::procs::ProcRecord;
use crate::state::{self, ContainerRecord, NodeRecord};
use crate::wait::wait_for;

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

static EXEC_SEQ: AtomicU64 = AtomicU64::new(0);

/// The bare containers of a lab ([`Lab::containers`]).
#[derive(Debug, Clone, Copy)]
pub struct Containers<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// The lab's bare containers (`lab run`).
    pub fn containers(&self) -> Containers<'_> {
        Containers { lab: self }
    }
}

impl Containers<'_> {
    /// Starts containers `ids` on `node_name` in parallel (`ctr run --cni`, busybox `sleep`),
    /// and waits until each is running (its CNI ADD done). Errors name the failing container
    /// and quote ctr's output (the plugin's error).
    pub fn run(&self, node_name: &str, ids: &[String]) -> Result<Vec<ContainerInfo>> {
        self.run_with(node_name, ids, &|_| vec!["sleep".into(), "86400".into()])
    }

    /// [`Self::run`] with each container's command given by `command(id)` (e.g.
    /// [`crate::web::httpd_command`]).
    pub fn run_with(
        &self,
        node_name: &str,
        ids: &[String],
        command: &dyn Fn(&str) -> Vec<String>,
    ) -> Result<Vec<ContainerInfo>> {
        let s = self.lab.state()?;
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
            state::update(&self.lab.dir, |s| {
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
        let p = containerd::run_container(node, image::IMAGE_REF, id, &args, &self.lab.logs())?;
        state::update(&self.lab.dir, |s| {
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
            match containerd::wait_running(node, id, &p, Duration::from_secs(60), &self.lab.logs())
            {
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
        state::update(&self.lab.dir, |s| {
            if forget {
                s.containers.retain(|c| c.id != id);
            }
            s.processes.retain(|q| q.role != ctr.role || q.alive());
            Ok(())
        })
    }

    /// Next free container names "c<N>" for `count` containers.
    pub fn next_names(&self, count: usize) -> Result<Vec<String>> {
        let s = self.lab.state()?;
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
    pub fn list(&self) -> Result<Vec<ContainerInfo>> {
        let s = self.lab.state()?;
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

    /// Resolves a ping target: a node name (its primary IP), a container id (its IP) or an
    /// IPv4 address.
    pub fn resolve(&self, target: &str) -> Result<Ipv4Addr> {
        if let Ok(ip) = target.parse() {
            return Ok(ip);
        }
        let s = self.lab.state()?;
        if let Some(n) = s.nodes.iter().find(|n| n.name == target) {
            return Ok(n.primary_ip.parse()?);
        }
        self.list()?
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
        let s = self.lab.state()?;
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
    pub fn remove(&self, id: &str) -> Result<()> {
        let s = self.lab.state()?;
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
        state::update(&self.lab.dir, |s| {
            s.containers.retain(|c| c.id != id);
            s.processes.retain(|p| p.role != role);
            Ok(())
        })
    }
}
