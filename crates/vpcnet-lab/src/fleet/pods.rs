//! Pods on a fleet node, without a container runtime: the node's conflist executed by the CNI
//! harness's runtime ([`vpcnet_cni_harness::runtime`]) with every plugin started inside the
//! node's mount and network namespaces (`nsenter`), as containerd would run them there, for a
//! pod network namespace made inside the node's own `/run/netns`. What the node's agent hands
//! out and the datapath the plugins build are the real ones.

use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use vpcnet_cni_harness::runtime::{Attachment, Runtime};

use crate::nodes::Node;

/// A pod of a fleet node: its names and the attachment its ADD used.
#[derive(Debug, Clone)]
pub struct FleetPod {
    pub name: String,
    pub ip: Ipv4Addr,
    attachment: Attachment,
}

impl Node<'_> {
    /// The node's conflist (the one file in its CNI configuration directory, as its agent or
    /// the lab wrote it).
    fn conflist_text(&self) -> Result<String> {
        let dir = self.record()?.cni_conf_dir();
        let mut found = Vec::new();
        for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "conflist") {
                found.push(p);
            }
        }
        match found.as_slice() {
            [one] => Ok(std::fs::read_to_string(one)?),
            [] => bail!(
                "node {} has no conflist in {}: its agent does not serve yet",
                self.name(),
                dir.display()
            ),
            many => bail!(
                "node {} has {} conflists: {many:?}",
                self.name(),
                many.len()
            ),
        }
    }

    /// The CNI runtime for the node's conflist, running its plugins in the node.
    fn cni_runtime(&self) -> Result<Runtime> {
        let node = self.record()?;
        Ok(
            Runtime::new(&self.conflist_text()?, vec![node.cni_bin_dir()], None)?
                .with_launcher(node.place().launcher()?),
        )
    }

    /// Runs `ip netns <verb> <name>` inside the node's mount namespace (its own `/run/netns`).
    fn pod_netns(&self, verb: &str, name: &str) -> Result<()> {
        let node = self.record()?;
        let mut c = Command::new("ip");
        c.args(["netns", verb, name]);
        crate::spawn::Place::default()
            .mount_ns(&node.mntns)
            .apply(&mut c)?;
        let out = c.output().context("running ip netns in the node")?;
        if !out.status.success() {
            bail!(
                "ip netns {verb} {name} on node {}: {}",
                self.name(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Adds pod `name` (namespace `default`): its network namespace, then CNI ADD through the
    /// node's conflist. Returns the pod with the IPv4 address the chain gave it. On a failed
    /// ADD the namespace is deleted again and the error is the plugin's.
    pub fn add_pod(&self, name: &str) -> Result<FleetPod> {
        self.pod_netns("add", name)?;
        let container_id = format!(
            "{:016x}{:016x}",
            rand::random::<u64>(),
            rand::random::<u64>()
        );
        let attachment = Attachment {
            container_id: container_id.clone(),
            netns: format!("/run/netns/{name}"),
            ifname: "eth0".into(),
            args: vec![
                ("IgnoreUnknown".into(), "1".into()),
                ("K8S_POD_NAMESPACE".into(), "default".into()),
                ("K8S_POD_NAME".into(), name.into()),
                ("K8S_POD_INFRA_CONTAINER_ID".into(), container_id),
            ],
            capability_args: Value::Null,
        };
        let added = self.cni_runtime().and_then(|rt| {
            rt.add(&attachment)
                .map_err(|e| anyhow::anyhow!("CNI ADD of pod {name} on {}: {e}", self.name()))
        });
        let result = match added {
            Ok(r) => r,
            Err(e) => {
                let _ = self.pod_netns("delete", name);
                return Err(e);
            }
        };
        let ip = result["ips"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["address"].as_str()?.split('/').next()?.parse().ok())
            .next()
            .with_context(|| format!("CNI ADD of pod {name} returned no IPv4 address: {result}"))?;
        Ok(FleetPod {
            name: name.into(),
            ip,
            attachment,
        })
    }

    /// Deletes `pod`: CNI DEL through the node's conflist, then its network namespace.
    pub fn delete_pod(&self, pod: &FleetPod) -> Result<()> {
        self.cni_runtime()?
            .del(&pod.attachment)
            .map_err(|e| anyhow::anyhow!("CNI DEL of pod {} on {}: {e}", pod.name, self.name()))?;
        self.pod_netns("delete", &pod.name)
    }
}
