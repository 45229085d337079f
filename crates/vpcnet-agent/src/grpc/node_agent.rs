//! The AWS node agent's side of the contract (`VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent`):
//! `rpc.ConfigServerBackend/GetNetworkPolicyConfigs` on `VPCNET_IPAMD_SOCKET`
//! (`/var/run/aws-node/ipamd.sock`), which the node agent calls when it starts, and the mode
//! put into the plugin's Add/Del replies, which makes the plugin call the node agent on
//! `npa.sock`. vpcnet enforces nothing itself in this mode.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use vpcnet_proto::aws_rpc::config_server_backend_server::{
    ConfigServerBackend, ConfigServerBackendServer,
};
use vpcnet_proto::aws_rpc::{NetworkPolicyAgentConfigReply, NetworkPolicyConfigsRequest};

use crate::options::AgentOptions;
use crate::state::Shared;

/// The `network_policy_mode` of the plugin's replies: the mode when the node agent enforces,
/// empty (the plugin calls no node agent) otherwise.
pub fn mode(opts: &AgentOptions) -> String {
    opts.node_agent
        .as_ref()
        .map(|n| n.mode.clone())
        .unwrap_or_default()
}

/// The service.
pub struct ConfigServer {
    pub shared: Arc<Shared>,
}

#[tonic::async_trait]
impl ConfigServerBackend for ConfigServer {
    async fn get_network_policy_configs(
        &self,
        _req: Request<NetworkPolicyConfigsRequest>,
    ) -> Result<Response<NetworkPolicyAgentConfigReply>, Status> {
        let f = &self.shared.facts;
        let reply = NetworkPolicyAgentConfigReply {
            network_policy_mode: mode(&self.shared.opts),
            multi_nic_enabled: self.shared.opts.targets.multi_nic,
            node_i_pv4: f.primary_ip.to_string(),
            node_i_pv6: String::new(),
            instance_id: f.instance_id.clone(),
            region: f.region.clone(),
        };
        tracing::info!(mode = %reply.network_policy_mode, multi_nic = reply.multi_nic_enabled,
            node_ip = %reply.node_i_pv4, "the node agent asked for its configuration");
        Ok(Response::new(reply))
    }
}

/// Serves `ConfigServerBackend` on `listener` until `stop` flips.
pub async fn serve(
    shared: Arc<Shared>,
    listener: tokio::net::UnixListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let res = tonic::transport::Server::builder()
        .add_service(ConfigServerBackendServer::new(ConfigServer { shared }))
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.changed().await;
        })
        .await;
    if let Err(e) = res {
        tracing::error!(
            "gRPC server of the node agent's socket failed: {}",
            crate::errors::chain(&e)
        );
    }
}
