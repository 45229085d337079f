//! The in-place swap of a lab node's CNI with running pods, as an operator does it on a node
//! (docs/migration.md):
//!
//! - VPC CNI → vpcnet: stop ipamd, remove the VPC CNI's conflist, start vpcnet-agent (which
//!   imports `/var/run/aws-node/ipam.json`, having no checkpoint of its own, and writes its
//!   conflist).
//! - vpcnet → VPC CNI (the rollback): stop vpcnet-agent, `vpcnet-agent
//!   export-vpc-cni-checkpoint` (vpcnet's checkpoint → `/var/run/aws-node/ipam.json`), remove
//!   vpcnet's conflist, start ipamd (which adopts that checkpoint) and write its conflist.
//!
//! Running pods are left alone: their veths, routes and rules stay on the node throughout.

use std::fs;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::lab::{progress, CONFLIST};
use crate::nodes::Node;
use crate::state::{self, NodeCni};
use crate::vpc_cni::VPC_CNI_CONFLIST;

/// Node path of the VPC CNI's checkpoint (ipamd's fixed path).
pub const VPC_CNI_CHECKPOINT: &str = "/var/run/aws-node/ipam.json";

impl Node<'_> {
    /// Switches the node to `to` in place (see the module docs). Errors: the node
    /// already runs `to`, the export failed (its output quoted), or the new agent did not come
    /// up (its log quoted).
    pub fn swap_cni(&self, to: NodeCni) -> Result<()> {
        let node = self.record()?;
        let node_name = self.name();
        if node.cni == to {
            bail!("node {node_name} already runs {to:?}");
        }
        progress(&format!(
            "node {node_name}: stopping {:?}'s agent",
            node.cni
        ));
        self.stop_agent()?;
        if to == NodeCni::VpcCni {
            self.export_vpc_cni_checkpoint()?;
        }
        for f in [CONFLIST, VPC_CNI_CONFLIST] {
            let p = node.cni_conf_dir().join(f);
            if p.exists() {
                fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
            }
        }
        state::update(&self.lab().dir, |s| {
            for n in &mut s.nodes {
                if n.name == node_name {
                    n.cni = to;
                }
            }
            Ok(())
        })?;
        progress(&format!("node {node_name}: starting {to:?}'s agent"));
        self.start_agent()
    }

    /// Runs `vpcnet-agent export-vpc-cni-checkpoint` on the node (its namespaces, the agent's
    /// environment): vpcnet's checkpoint → the VPC CNI's. Returns the command's report line.
    pub fn export_vpc_cni_checkpoint(&self) -> Result<String> {
        let node = self.record()?;
        let node_name = self.name();
        let mut c = Command::new(self.lab().bin_dir().join("vpcnet-agent"));
        c.arg("export-vpc-cni-checkpoint").envs(self.agent_env()?);
        node.place().apply(&mut c)?;
        let out = c
            .output()
            .context("running vpcnet-agent export-vpc-cni-checkpoint")?;
        if !out.status.success() {
            bail!(
                "vpcnet-agent export-vpc-cni-checkpoint on {node_name} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        progress(&format!("node {node_name}: {line}"));
        Ok(line)
    }
}
