//! The agent's dependencies: the handles through which it reaches the world (the cloud's EC2
//! and IMDS, the node's network, the checkpoint store, the Kubernetes API), handed to
//! [`crate::start`] beside its settings ([`crate::AgentOptions`], values only), the way kube-rs
//! hands a controller its context. `Default` is production without the node datapath: the
//! real IMDS and EC2 adapters (built from the options' endpoints and credentials), no
//! node-side setup, the checkpoint file at `checkpoint_path`, the API server the options name
//! (`CLUSTER_ENDPOINT` or the `kubernetes` Service) with the pod's service account. Tests swap
//! in fakes with the `with_*` builders.
//!
//! The clock is tokio's ([`crate::clock`]): every timer, deadline and cooldown of the agent
//! reads it, so a test pauses and advances it (`#[tokio::test(start_paused = true)]`) instead
//! of injecting another one.

use std::sync::Arc;

use crate::checkpoint_file::{CheckpointStore, FileCheckpoint};
use crate::cloud::CloudApis;
use crate::config::Config;
use crate::node::NodeNetwork;
use crate::options::AgentOptions;

/// What the agent talks to (see the module doc).
#[derive(Clone, Default)]
pub struct AgentDeps {
    /// The cloud; `None` = the real adapters: IMDS at the options' `imds_endpoint` and EC2
    /// through the SDK (`ec2_endpoint`, `region`, `credentials`, `ec2_calls`). Tests pass an
    /// in-process fake cloud here.
    pub cloud: Option<CloudApis>,
    /// Node-side setup of secondary ENIs (interface, MTU, route table N) and the node firewall
    /// (SNAT, connmark); `None` = off (emulator-only tests). The lab and production use
    /// [`crate::node::NetlinkNode`].
    pub node_network: Option<Arc<dyn NodeNetwork>>,
    /// Where the checkpoint is kept; `None` = the file at the options' `checkpoint_path`
    /// (tests inject failing stores here).
    pub checkpoint_store: Option<Arc<dyn CheckpointStore>>,
    /// The Kubernetes API; `None` = the API server chosen from the options' `api` settings
    /// (`CLUSTER_ENDPOINT`, else the `kubernetes` Service; none configured = no API), reached
    /// with the pod's service account. Tests pass a client over an in-memory API server here
    /// (`kube::Client::new` over a tower service).
    pub kube: Option<kube::Client>,
}

impl AgentDeps {
    /// Production's dependencies for this configuration: the real cloud adapters, the
    /// checkpoint file, and the netlink node datapath unless `VPCNET_NODE_DATAPATH=false`.
    pub fn from_config(c: &Config) -> Self {
        AgentDeps {
            node_network: c
                .node_datapath
                .then(|| Arc::new(crate::node::NetlinkNode::default()) as Arc<dyn NodeNetwork>),
            ..AgentDeps::default()
        }
    }

    /// These dependencies with `cloud` as EC2 and IMDS.
    pub fn with_cloud(mut self, cloud: CloudApis) -> Self {
        self.cloud = Some(cloud);
        self
    }

    /// These dependencies with `node` as the node's network.
    pub fn with_node_network(mut self, node: Arc<dyn NodeNetwork>) -> Self {
        self.node_network = Some(node);
        self
    }

    /// These dependencies with `store` as the checkpoint store.
    pub fn with_checkpoint_store(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.checkpoint_store = Some(store);
        self
    }

    /// These dependencies with `client` as the Kubernetes API.
    pub fn with_kube(mut self, client: kube::Client) -> Self {
        self.kube = Some(client);
        self
    }

    /// The checkpoint store: the injected [`Self::checkpoint_store`], else the file at
    /// `opts.checkpoint_path`. Built once, at start.
    pub fn store(&self, opts: &AgentOptions) -> Arc<dyn CheckpointStore> {
        self.checkpoint_store.clone().unwrap_or_else(|| {
            Arc::new(FileCheckpoint {
                path: opts.checkpoint_path.clone(),
            })
        })
    }
}

impl std::fmt::Debug for AgentDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentDeps")
            .field("cloud", &self.cloud.is_some())
            .field("node_network", &self.node_network.is_some())
            .field("checkpoint_store", &self.checkpoint_store.is_some())
            .field("kube", &self.kube.is_some())
            .finish()
    }
}
