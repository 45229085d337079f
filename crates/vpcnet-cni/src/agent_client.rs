//! gRPC client of the agent (`vpcnet.cni.v1.CniBackend`) over its Unix socket, every call with a
//! deadline. gRPC statuses map to CNI errors: UNAVAILABLE → 11 (try again later),
//! RESOURCE_EXHAUSTED → 101, FAILED_PRECONDITION → 102, INVALID_ARGUMENT → 103; an unreachable
//! socket or a missed deadline → 100.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};
use vpcnet_proto::cni_backend_client::CniBackendClient;
use vpcnet_proto::{
    AddNetworkReply, AddNetworkRequest, Attachment, DelNetworkReply, DelNetworkRequest,
    GarbageCollectReply, GarbageCollectRequest, StatusReply, StatusRequest,
};

use crate::cni::error::{code, CniError};

/// A connected agent client.
pub struct Agent {
    client: CniBackendClient<Channel>,
    socket: String,
    timeout: Duration,
}

fn unreachable(socket: &str, why: impl std::fmt::Display) -> CniError {
    CniError::new(
        code::AGENT_UNREACHABLE,
        format!("cannot reach vpcnet-agent at {socket}"),
        format!("{why}; check that the vpcnet-agent pod runs on this node and that agentSocket in the conflist is its socket"),
    )
}

impl Agent {
    /// Connects to the agent's Unix socket within `timeout`.
    ///
    /// Errors: code 100 when the socket is missing, refuses, or the deadline passes.
    pub async fn connect(socket: &str, timeout: Duration) -> Result<Agent, CniError> {
        let path = socket.to_string();
        let endpoint = Endpoint::from_static("http://vpcnet-agent").connect_timeout(timeout);
        let connect = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }));
        let channel = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| unreachable(socket, format!("no connection within {timeout:?}")))?
            .map_err(|e| unreachable(socket, source_chain(&e)))?;
        Ok(Agent {
            client: CniBackendClient::new(channel),
            socket: socket.to_string(),
            timeout,
        })
    }

    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.set_timeout(self.timeout);
        r
    }

    async fn call<F, T>(&self, what: &str, f: F) -> Result<T, CniError>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    {
        match tokio::time::timeout(self.timeout, f).await {
            Err(_) => Err(unreachable(
                &self.socket,
                format!("{what} got no answer within {:?}", self.timeout),
            )),
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(map_status(&self.socket, what, s)),
        }
    }

    /// AddNetwork: an IPv4 for the container (idempotent per container ID + ifname).
    pub async fn add(&mut self, req: AddNetworkRequest) -> Result<AddNetworkReply, CniError> {
        let mut c = self.client.clone();
        let r = self.request(req);
        self.call("AddNetwork", c.add_network(r)).await
    }

    /// DelNetwork: releases the container's IPv4 (succeeds for an unknown container).
    pub async fn del(&mut self, req: DelNetworkRequest) -> Result<DelNetworkReply, CniError> {
        let mut c = self.client.clone();
        let r = self.request(req);
        self.call("DelNetwork", c.del_network(r)).await
    }

    /// Status: whether the agent can hand out addresses now.
    pub async fn status(&mut self) -> Result<StatusReply, CniError> {
        let mut c = self.client.clone();
        let r = self.request(StatusRequest {});
        self.call("Status", c.status(r)).await
    }

    /// GarbageCollect: releases every assignment not in `valid`.
    pub async fn gc(&mut self, valid: Vec<Attachment>) -> Result<GarbageCollectReply, CniError> {
        let mut c = self.client.clone();
        let r = self.request(GarbageCollectRequest {
            valid_attachments: valid,
        });
        self.call("GarbageCollect", c.garbage_collect(r)).await
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Maps an agent gRPC status to a CNI error.
pub fn map_status(socket: &str, what: &str, s: Status) -> CniError {
    let m = s.message();
    match s.code() {
        Code::Unavailable if is_transport(&s) => unreachable(socket, format!("{what}: {m}")),
        Code::Unavailable => CniError::new(
            code::TRY_AGAIN_LATER,
            "no free IP address on this node right now",
            format!("the agent is growing its warm pool ({m}); the runtime retries the pod"),
        ),
        Code::ResourceExhausted => CniError::new(
            code::NODE_AT_LIMIT,
            "no IP address for this pod",
            format!("{m}; no more pods fit on this node: lower max pods or use a larger instance type or prefix delegation"),
        ),
        Code::FailedPrecondition => CniError::new(
            code::AGENT_NOT_READY,
            "vpcnet-agent is not ready yet",
            format!("{m}; the agent is starting: the runtime retries the pod"),
        ),
        Code::InvalidArgument => CniError::new(
            code::AGENT_REJECTED,
            format!("vpcnet-agent rejected {what}"),
            format!("{m}; check the CNI_CONTAINERID / CNI_IFNAME the runtime passes"),
        ),
        Code::DeadlineExceeded | Code::Cancelled => {
            unreachable(socket, format!("{what} missed its deadline: {m}"))
        }
        other => CniError::new(
            code::GENERIC,
            format!("vpcnet-agent failed {what} ({other:?})"),
            format!("{m}; see the agent's log"),
        ),
    }
}

/// Whether an UNAVAILABLE status comes from the transport (connection lost) rather than the agent.
fn is_transport(s: &Status) -> bool {
    std::error::Error::source(s).is_some()
}
