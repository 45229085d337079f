//! A node datapath that only reports what the test says is there: /32 routes, pod rules and
//! link names. Network policy scripts are recorded, not run.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::Duration;

use vpcnet_agent::node::{BoxFuture, NodeEni, NodeFirewall, NodeNetwork};

#[derive(Default)]
pub struct FakeNode {
    pub routes: Mutex<BTreeSet<Ipv4Addr>>,
    pub rules: Mutex<BTreeSet<Ipv4Addr>>,
    pub links: Mutex<BTreeSet<String>>,
    /// How long listing the pod routes takes (tokio's clock): a slow start-up.
    pub listing_delay: Mutex<Duration>,
    /// The network policy scripts (`nft -f` input) applied so far, in order.
    pub policy: Mutex<Vec<String>>,
    /// While set, applying a network policy script fails with this message (as `nft`
    /// refusing it) and nothing is recorded.
    pub policy_error: Mutex<Option<String>>,
}

impl FakeNode {
    /// The network policy scripts applied so far, in order.
    pub fn policy_scripts(&self) -> Vec<String> {
        self.policy.lock().unwrap().clone()
    }
}

impl NodeNetwork for FakeNode {
    fn setup_eni<'a>(&'a self, _eni: &'a NodeEni) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn pod_route_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>> {
        let delay = *self.listing_delay.lock().unwrap();
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(self.routes.lock().unwrap().clone())
        })
    }
    fn pod_rule_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>> {
        Box::pin(async { Ok(self.rules.lock().unwrap().clone()) })
    }
    fn link_names(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<String>>> {
        Box::pin(async { Ok(self.links.lock().unwrap().clone()) })
    }
    fn setup_node_firewall<'a>(
        &'a self,
        _fw: &'a NodeFirewall,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn apply_policy<'a>(&'a self, script: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            if let Some(e) = self.policy_error.lock().unwrap().clone() {
                anyhow::bail!("{e}");
            }
            self.policy.lock().unwrap().push(script.to_string());
            Ok(())
        })
    }
}

/// The host veth the plugin names for `add_req(id)`'s pod (default/pod-<id>).
pub fn veth_of(id: &str) -> String {
    vpcnet_datapath::names::host_veth_name("eni", "default", &format!("pod-{id}"))
}

/// What containerd's libcni writes under `cache_dir` after a successful ADD of `add_req(id)`.
pub fn write_cni_cache(cache_dir: &std::path::Path, id: &str, ip: Ipv4Addr) {
    let results = cache_dir.join("results");
    std::fs::create_dir_all(&results).unwrap();
    let entry = serde_json::json!({
        "kind": "cniCacheV1",
        "containerId": id,
        "config": "e30=",
        "ifName": "eth0",
        "networkName": "aws-cni",
        "netns": format!("/var/run/netns/{id}"),
        "cniArgs": [["K8S_POD_NAMESPACE", "default"], ["K8S_POD_NAME", format!("pod-{id}")]],
        "result": {"cniVersion": "1.0.0", "ips": [{"address": format!("{ip}/32")}]},
    });
    std::fs::write(
        results.join(format!("aws-cni-{id}-eth0")),
        entry.to_string(),
    )
    .unwrap();
}

/// What libcni removes after a successful DEL.
pub fn remove_cni_cache(cache_dir: &std::path::Path, id: &str) {
    let _ = std::fs::remove_file(cache_dir.join(format!("results/aws-cni-{id}-eth0")));
}
