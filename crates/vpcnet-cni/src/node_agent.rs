//! Client of the AWS network policy agent (`aws-eks-nodeagent`), `rpc.NPBackend` on its Unix
//! socket (`nodeAgentSocket`, default `/var/run/aws-node/npa.sock`), as the VPC CNI's plugin
//! calls it: only when the agent's Add/Del answer carries a network policy mode
//! (`VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent`). The connection must be up within
//! [`CONNECT_TIMEOUT`] (the VPC CNI plugin's 2 s); the call has the plugin's `agentTimeout`.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use vpcnet_proto::aws_rpc::np_backend_client::NpBackendClient;
use vpcnet_proto::aws_rpc::{DeleteNpRequest, EnforceNpRequest};

use crate::agent_client::source_chain;
use crate::cni::error::{code, CniError};

/// Deadline of the connection to the node agent.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the node agent is asked about: the pod.
#[derive(Debug, Clone)]
pub struct Pod<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
}

async fn connect(socket: &str) -> Result<NpBackendClient<Channel>, String> {
    let path = socket.to_string();
    let endpoint =
        Endpoint::from_static("http://aws-eks-nodeagent").connect_timeout(CONNECT_TIMEOUT);
    let connect = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
    }));
    let channel = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| format!("no connection to {socket} within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot connect to {socket}: {}", source_chain(&e)))?;
    Ok(NpBackendClient::new(channel))
}

/// EnforceNpToPod: the node agent puts the pod's policies (or the mode's default) in place.
/// `interfaces`: the pod's interfaces with an address.
///
/// Errors: code [`code::NODE_AGENT`] when the node agent cannot be reached, fails the call,
/// misses the deadline or answers `Success=false`; the message names the node agent, its
/// socket and what to check.
pub async fn enforce(
    socket: &str,
    timeout: Duration,
    pod: &Pod<'_>,
    mode: &str,
    interfaces: usize,
) -> Result<(), CniError> {
    let why = async {
        let mut c = connect(socket).await?;
        let mut req = tonic::Request::new(EnforceNpRequest {
            k8s_pod_name: pod.name.to_string(),
            k8s_pod_namespace: pod.namespace.to_string(),
            network_policy_mode: mode.to_string(),
            interface_count: interfaces as i32,
        });
        req.set_timeout(timeout);
        match tokio::time::timeout(timeout, c.enforce_np_to_pod(req)).await {
            Err(_) => Err(format!("EnforceNpToPod got no answer within {timeout:?}")),
            Ok(Err(s)) => Err(format!(
                "EnforceNpToPod failed: {:?}: {}",
                s.code(),
                s.message()
            )),
            Ok(Ok(r)) if !r.get_ref().success => {
                Err("EnforceNpToPod answered Success=false".to_string())
            }
            Ok(Ok(_)) => Ok(()),
        }
    }
    .await;
    why.map_err(|why| {
        CniError::new(
            code::NODE_AGENT,
            format!(
                "the AWS network policy agent (aws-eks-nodeagent) did not set up network policy \
                 for pod {}/{}",
                pod.namespace, pod.name
            ),
            format!(
                "{why}; the pod's network was removed and its address given back, and the \
                 runtime retries the pod. Check that the aws-eks-nodeagent container runs on \
                 this node and serves {socket} (its log: \
                 /var/log/aws-routed-eni/network-policy-agent.log), or set \
                 VPCNET_NETWORK_POLICY_AGENT=vpcnet on vpcnet-agent if no node agent is meant \
                 to run"
            ),
        )
    })
}

/// DeletePodNp: the node agent forgets the pod. Never fails the DEL: a failure is logged (the
/// node agent cleans up after pods it no longer sees itself).
pub async fn delete(socket: &str, timeout: Duration, pod: &Pod<'_>) {
    let done = async {
        let mut c = connect(socket).await?;
        let mut req = tonic::Request::new(DeleteNpRequest {
            k8s_pod_name: pod.name.to_string(),
            k8s_pod_namespace: pod.namespace.to_string(),
        });
        req.set_timeout(timeout);
        match tokio::time::timeout(timeout, c.delete_pod_np(req)).await {
            Err(_) => Err(format!("DeletePodNp got no answer within {timeout:?}")),
            Ok(Err(s)) => Err(format!(
                "DeletePodNp failed: {:?}: {}",
                s.code(),
                s.message()
            )),
            Ok(Ok(r)) if !r.get_ref().success => Err("DeletePodNp answered Success=false".into()),
            Ok(Ok(_)) => Ok(()),
        }
    }
    .await;
    match done {
        Ok(()) => {
            tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), "the node agent forgot the pod")
        }
        Err(e) => {
            tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), socket, "the AWS network policy agent did not delete the pod's policy state: {e}; the DEL goes on")
        }
    }
}
