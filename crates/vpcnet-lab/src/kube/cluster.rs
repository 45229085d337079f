//! Bringing lab nodes into the Kubernetes cluster and watching them: boot through
//! vpcnet-bootstrap, kubelet and kube-proxy processes, node readiness.

use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::control_plane::ControlPlaneRecord;
use super::kubectl::Kubectl;
use super::node;
use super::pki::Ca;
use crate::cloud::aws_env;
use crate::lab::{progress, Lab};
use crate::procs::ProcRecord;
use crate::state::NodeRecord;

/// The taint kubelet adds with `--cloud-provider=external` until the cloud controller
/// manager has initialized the Node.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// What the readiness wait found for one Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// Node name.
    pub name: String,
    /// `Ready` condition is True.
    pub ready: bool,
    /// The cloud controller manager removed [`UNINITIALIZED_TAINT`].
    pub initialized: bool,
}

/// Reads the readiness of every Node in a `kubectl get nodes -o json` list.
pub fn node_statuses(list: &Value) -> Vec<NodeStatus> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|n| NodeStatus {
                    name: n["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    ready: n["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    }),
                    initialized: !n["spec"]["taints"]
                        .as_array()
                        .is_some_and(|ts| ts.iter().any(|t| t["key"] == UNINITIALIZED_TAINT)),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// PATH of a node's Kubernetes processes: the node's `aws` stand-in, the Kubernetes binaries,
/// the system directories.
fn node_path(node: &NodeRecord, cp: &ControlPlaneRecord) -> String {
    format!(
        "{}:{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        node.dir.join("bin").display(),
        cp.bin_dir.display()
    )
}

/// The lab's Kubernetes cluster ([`Lab::kube`]): control plane, kubectl, kubelets and kube-proxies.
#[derive(Debug, Clone, Copy)]
pub struct Kube<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// The lab's Kubernetes cluster.
    pub fn kube(&self) -> Kube<'_> {
        Kube { lab: self }
    }
}

impl Kube<'_> {
    /// The control plane of a lab with Kubernetes. Errors for a lab without (`--no-kubernetes`).
    pub fn control_plane(&self) -> Result<ControlPlaneRecord> {
        self.lab.state()?.control_plane.with_context(|| {
            format!(
                "lab {} runs without Kubernetes (it was started with --no-kubernetes)",
                self.lab.dir.display()
            )
        })
    }

    /// kubectl (admin) for this lab's cluster.
    pub fn kubectl(&self) -> Result<Kubectl> {
        Ok(self.control_plane()?.kubectl())
    }

    /// Boots `node` as a Kubernetes worker up to (not including) its container runtime and
    /// kubelet: credentials and NodeConfig, its cgroup root, then `vpcnet-bootstrap` run inside
    /// the node against its IMDS and the lab cloud's EC2, writing the files only (no systemd in
    /// the lab): kubelet configuration, kubeconfig, CA, kubelet unit and drop-ins, and
    /// containerd's configuration from the lab's template (`--containerd-config-file`, as an
    /// operator customizes it on EKS) with the lab's pause image; and, for an agent the lab runs
    /// as a process, its service-account token.
    pub(crate) fn bootstrap_node(
        &self,
        node: &NodeRecord,
        ca: &Ca,
        cp: &ControlPlaneRecord,
    ) -> Result<()> {
        node::write_node_files(node, &node.root(), ca, cp)?;
        node::create_cgroup_root(node)?;
        let bin_dir = self.lab.bin_dir();
        let ep = self.lab.cloud().endpoint()?;
        // The AMI ships ecr-credential-provider and its config; the lab installs them when
        // VPCNET_ECR_CREDENTIAL_PROVIDER names the binary, and vpcnet-bootstrap adds the flags.
        crate::registry::install_provider(&node.root(), &ep)?;
        let mut c = Command::new(bin_dir.join("vpcnet-bootstrap"));
        c.args([
            "--config",
            node::NODE_CONFIG,
            "--files-only",
            "--mount-bpf-fs",
            "false",
            "--containerd-config-file",
            node::CONTAINERD_TEMPLATE,
            "--pause-container-image",
            crate::image::PAUSE_REF,
        ]);
        c.envs(aws_env(&ep));
        c.env(
            "AWS_EC2_METADATA_SERVICE_ENDPOINT",
            format!("http://{}", crate::fabric::IMDS_ADDR),
        );
        c.env("PATH", node_path(node, cp));
        node.place().apply(&mut c)?;
        // Not a recorded process: it runs to completion here, like the AMI's boot script.
        let out = c
            .stdin(std::process::Stdio::null())
            .output()
            .context("running vpcnet-bootstrap")?;
        let log = self.lab.logs().join(format!("bootstrap-{}.log", node.name));
        std::fs::write(&log, [&out.stdout[..], &out.stderr[..]].concat())?;
        if !out.status.success() {
            bail!(
                "vpcnet-bootstrap on {} failed ({}):\n{}",
                node.name,
                out.status,
                crate::wait::log_tail(&log)
            );
        }
        let argv = node::kubelet_argv(&node.root(), &cp.bin_dir.join("kubelet"))?;
        std::fs::write(node.dir.join("kubelet.cmdline"), argv.join(" ") + "\n")?;
        if self.lab.state()?.agent_install == crate::state::AgentInstall::Chart {
            // kubelet projects the token into the agent's pod.
            return Ok(());
        }
        node::write_agent_token(cp, &node.root())
    }

    /// Starts kubelet on `node_name` with the command line built from the unit drop-ins
    /// vpcnet-bootstrap wrote (see [`node::kubelet_argv`]).
    pub fn start_kubelet(&self, node_name: &str) -> Result<ProcRecord> {
        let s = self.lab.state()?;
        let node = s.node(node_name)?.clone();
        let cp = self.control_plane()?;
        let argv = node::kubelet_argv(&node.root(), &cp.bin_dir.join("kubelet"))?;
        let mut c = node::command(&argv)?;
        c.env("PATH", node_path(&node, &cp));
        self.lab
            .processes()
            .start(&format!("kubelet {node_name}"), c, &node.place())
    }

    /// Restarts kubelet on `node_name` with the unit's command line minus every argument that
    /// starts with one of `drop` (e.g. the credential provider flags, for a negative control).
    /// Returns the arguments dropped.
    pub fn restart_kubelet_without(&self, node_name: &str, drop: &[&str]) -> Result<Vec<String>> {
        let s = self.lab.state()?;
        let node = s.node(node_name)?.clone();
        let cp = self.control_plane()?;
        let argv = node::kubelet_argv(&node.root(), &cp.bin_dir.join("kubelet"))?;
        let (dropped, kept): (Vec<String>, Vec<String>) = argv
            .into_iter()
            .partition(|a| drop.iter().any(|d| a.starts_with(d)));
        let role = format!("kubelet {node_name}");
        self.lab.processes().stop_role(&role)?;
        let mut c = node::command(&kept)?;
        c.env("PATH", node_path(&node, &cp));
        self.lab.processes().start(&role, c, &node.place())?;
        Ok(dropped)
    }

    /// Starts kube-proxy (iptables mode) on `node_name`.
    pub fn start_kube_proxy(&self, node_name: &str) -> Result<ProcRecord> {
        let s = self.lab.state()?;
        let node = s.node(node_name)?.clone();
        let cp = self.control_plane()?;
        let mut c = Command::new(cp.bin_dir.join("kube-proxy"));
        c.arg(format!("--config={}", node::KUBE_PROXY_CONFIG));
        self.lab
            .processes()
            .start(&format!("kube-proxy {node_name}"), c, &node.place())
    }

    /// Every Node's readiness as the API server reports it.
    pub fn node_statuses(&self) -> Result<Vec<NodeStatus>> {
        Ok(node_statuses(&self.kubectl()?.json(&["get", "nodes"])?))
    }

    /// Waits until kubelet of `node` has registered its Node object (ready or not); fails
    /// early when a cluster process exits.
    pub fn wait_node_registered(&self, node: &NodeRecord, timeout: Duration) -> Result<()> {
        let procs: Vec<ProcRecord> = self.lab.state()?.processes;
        let refs: Vec<&ProcRecord> = procs
            .iter()
            .filter(|p| !p.role.starts_with("ctr ") && !p.role.starts_with("agent "))
            .collect();
        self.lab.processes().wait_ready(
            &format!(
                "kubelet of {} to register Node {}",
                node.name, node.k8s_name
            ),
            timeout,
            &refs,
            || {
                Ok(self
                    .node_statuses()?
                    .iter()
                    .any(|n| n.name == node.k8s_name)
                    .then_some(()))
            },
        )
    }

    /// Waits until every lab node is a Ready Node initialized by the cloud controller manager;
    /// while waiting, checks that the cluster's processes still run (an exit is named with the
    /// end of its log).
    pub fn wait_nodes_ready(&self, timeout: Duration) -> Result<()> {
        let s = self.lab.state()?;
        let want: Vec<String> = s.nodes.iter().map(|n| n.k8s_name.clone()).collect();
        let procs: Vec<ProcRecord> = s.processes.clone();
        let refs: Vec<&ProcRecord> = procs
            .iter()
            .filter(|p| !p.role.starts_with("ctr "))
            .collect();
        let mut last = Vec::new();
        let r = self.lab.processes().wait_ready(
            "every node Ready and initialized",
            timeout,
            &refs,
            || {
                last = self.node_statuses()?;
                Ok(want
                    .iter()
                    .all(|w| {
                        last.iter()
                            .any(|n| &n.name == w && n.ready && n.initialized)
                    })
                    .then_some(()))
            },
        );
        if let Err(e) = r {
            let missing: Vec<String> = want
                .iter()
                .map(|w| match last.iter().find(|n| &n.name == w) {
                    None => format!("{w}: not registered (see its kubelet log)"),
                    Some(n) if !n.ready => format!("{w}: not Ready (kubelet / CNI: is the conflist written?)"),
                    Some(n) if !n.initialized => format!(
                        "{w}: still tainted {UNINITIALIZED_TAINT} (the cloud controller manager has not initialized it; see aws-cloud-controller-manager.log)"
                    ),
                    Some(_) => format!("{w}: ok"),
                })
                .collect();
            bail!("{e:#}\n{}", missing.join("\n"));
        }
        Ok(())
    }

    /// Starts kube-proxy (unless `kube_proxy` is false) and kubelet on every node, then (if
    /// `wait`) waits (3 min) for all of them to be Ready and initialized.
    pub(crate) fn join_nodes(&self, kube_proxy: bool, wait: bool) -> Result<()> {
        let nodes = self.lab.state()?.nodes;
        let t0 = std::time::Instant::now();
        for n in &nodes {
            if kube_proxy {
                self.start_kube_proxy(&n.name)?;
            }
            progress(&format!(
                "node {}: starting kubelet as {}",
                n.name, n.k8s_name
            ));
            self.start_kubelet(&n.name)?;
        }
        if !wait {
            return Ok(());
        }
        progress("waiting for the nodes to register, turn Ready and be initialized by the cloud controller manager");
        self.wait_nodes_ready(Duration::from_secs(180))?;
        progress(&format!(
            "nodes Ready and initialized {:.1} s after their kubelets started{}",
            t0.elapsed().as_secs_f64(),
            if kube_proxy {
                ""
            } else {
                " (no kube-proxy process)"
            }
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn readiness_needs_the_condition_and_no_uninitialized_taint() {
        let list = json!({"items": [
            {"metadata": {"name": "a"}, "spec": {"taints": [{"key": UNINITIALIZED_TAINT}]},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            {"metadata": {"name": "b"}, "spec": {},
             "status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            {"metadata": {"name": "c"}, "spec": {},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        ]});
        let s = node_statuses(&list);
        assert_eq!(
            s[0],
            NodeStatus {
                name: "a".into(),
                ready: true,
                initialized: false
            }
        );
        assert_eq!(
            s[1],
            NodeStatus {
                name: "b".into(),
                ready: false,
                initialized: true
            }
        );
        assert_eq!(
            s[2],
            NodeStatus {
                name: "c".into(),
                ready: true,
                initialized: true
            }
        );
    }
}
