//! gRPC client of the agent (`vpcnet.cni.v1.CniBackend`) over its Unix socket, every call with a
//! deadline. gRPC statuses map to CNI errors: UNAVAILABLE → 11 (try again later),
//! RESOURCE_EXHAUSTED → 101, FAILED_PRECONDITION → 102, INVALID_ARGUMENT → 103, UNIMPLEMENTED
//! (a call the agent does not know: versions differ) → 106; an unreachable socket or a missed
//! deadline → 100. Every call carries the plugin's version (the handshake).

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
        // The handshake: the agent logs a plugin of another version.
        r.metadata_mut().insert(
            vpcnet_proto::PLUGIN_VERSION_HEADER,
            tonic::metadata::MetadataValue::from_static(vpcnet_proto::VERSION),
        );
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

/// An error with its sources, `: `-separated.
pub(crate) fn source_chain(e: &dyn std::error::Error) -> String {
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
        Code::Unavailable
            if s.metadata().get(vpcnet_proto::REASON_HEADER).and_then(|v| v.to_str().ok())
                == Some(vpcnet_proto::REASON_CHECKPOINT_WRITE) =>
        {
            CniError::new(
                code::TRY_AGAIN_LATER,
                format!("vpcnet-agent could not record {what} in its checkpoint"),
                format!("{m}; nothing was changed and the runtime retries the pod, but the retry fails until the agent's checkpoint directory is writable (disk full or read-only?): see the agent's log"),
            )
        }
        Code::Unavailable
            if s.metadata().get(vpcnet_proto::REASON_HEADER).and_then(|v| v.to_str().ok())
                == Some(vpcnet_proto::REASON_NETWORK_POLICY) =>
        {
            CniError::new(
                code::TRY_AGAIN_LATER,
                "vpcnet-agent could not put the pod's network policy in place",
                format!("{m}; the runtime retries the pod"),
            )
        }
        Code::Unavailable
            if s.metadata().get(vpcnet_proto::REASON_HEADER).and_then(|v| v.to_str().ok())
                == Some(vpcnet_proto::REASON_POD_ANNOTATION) =>
        {
            CniError::new(
                code::TRY_AGAIN_LATER,
                "vpcnet-agent could not annotate the pod with its address",
                format!("{m}; the runtime retries the pod"),
            )
        }
        Code::Unavailable => CniError::new(
            code::TRY_AGAIN_LATER,
            "no free IP address on this node right now",
            format!("{m}; the runtime retries the pod"),
        ),
        Code::ResourceExhausted
            if s.metadata().get(vpcnet_proto::REASON_HEADER).and_then(|v| v.to_str().ok())
                == Some(vpcnet_proto::REASON_PROVISIONING_DISABLED) =>
        {
            CniError::new(
                code::NODE_AT_LIMIT,
                "no IP address for this pod",
                format!("{m}; the runtime retries the pod, which fits once more addresses are attached to the node"),
            )
        }
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
        Code::Unimplemented => {
            let agent = s
                .metadata()
                .get(vpcnet_proto::AGENT_VERSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("unknown, older than the version handshake")
                .to_string();
            CniError::new(
                code::VERSION_MISMATCH,
                format!(
                    "vpcnet-agent does not know {what}: plugin version {} and agent version {agent} do not match",
                    vpcnet_proto::VERSION
                ),
                format!(
                    "{m}; the plugin on this node is newer than the agent: roll out the vpcnet-agent of version {} (the DaemonSet image), or install the vpcnet-cni binary shipped with the agent's version",
                    vpcnet_proto::VERSION
                ),
            )
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_call_names_the_mismatch_and_the_fix() {
        let mut s = Status::unimplemented("");
        s.metadata_mut().insert(
            vpcnet_proto::AGENT_VERSION_HEADER,
            tonic::metadata::MetadataValue::from_static("0.0.9"),
        );
        let e = map_status("/s", "NewCall", s);
        assert_eq!(e.code, code::VERSION_MISMATCH);
        assert!(
            e.msg.contains("0.0.9") && e.msg.contains(vpcnet_proto::VERSION),
            "{e:?}"
        );
        assert!(e.details.contains("vpcnet-agent of version"), "{e:?}");
        // An agent from before the handshake sends no version.
        let e = map_status("/s", "NewCall", Status::unimplemented("unknown method"));
        assert!(e.msg.contains("older than the version handshake"), "{e:?}");
    }

    #[test]
    fn unavailable_from_a_checkpoint_failure_is_not_reported_as_an_empty_pool() {
        let mut s = Status::unavailable("cannot write checkpoint /x: no space left on device");
        s.metadata_mut().insert(
            vpcnet_proto::REASON_HEADER,
            tonic::metadata::MetadataValue::from_static(vpcnet_proto::REASON_CHECKPOINT_WRITE),
        );
        let e = map_status("/s", "AddNetwork", s);
        assert_eq!(e.code, code::TRY_AGAIN_LATER);
        assert!(
            e.msg.contains("checkpoint") && !e.msg.contains("no free IP"),
            "{e:?}"
        );
        assert!(e.details.contains("no space left on device"), "{e:?}");
        let e = map_status("/s", "AddNetwork", Status::unavailable("pool empty"));
        assert!(e.msg.contains("no free IP"), "{e:?}");
    }

    #[test]
    fn network_policy_and_annotation_failures_are_not_reported_as_an_empty_pool() {
        for (reason, want) in [
            (vpcnet_proto::REASON_NETWORK_POLICY, "network policy"),
            (vpcnet_proto::REASON_POD_ANNOTATION, "annotate"),
        ] {
            let mut s = Status::unavailable("the cause; the address was not handed out");
            s.metadata_mut().insert(
                vpcnet_proto::REASON_HEADER,
                tonic::metadata::MetadataValue::from_static(reason),
            );
            let e = map_status("/s", "AddNetwork", s);
            assert_eq!(e.code, code::TRY_AGAIN_LATER);
            assert!(
                e.msg.contains(want) && !e.msg.contains("no free IP"),
                "{e:?}"
            );
            assert!(e.details.contains("the cause"), "{e:?}");
        }
    }

    #[test]
    fn an_exhausted_pool_without_provisioning_does_not_advise_prefix_delegation() {
        let mut s = Status::resource_exhausted(
            "no free IP: ... network resource provisioning is disabled ...: attach more",
        );
        s.metadata_mut().insert(
            vpcnet_proto::REASON_HEADER,
            tonic::metadata::MetadataValue::from_static(vpcnet_proto::REASON_PROVISIONING_DISABLED),
        );
        let e = map_status("/s", "AddNetwork", s);
        assert_eq!(e.code, code::NODE_AT_LIMIT);
        assert!(e.details.contains("attach more"), "{e:?}");
        assert!(
            !e.details.contains("prefix delegation") && e.details.contains("attached to the node"),
            "{e:?}"
        );
        // At the node's limit the advice stays.
        let e = map_status("/s", "AddNetwork", Status::resource_exhausted("at limit"));
        assert!(e.details.contains("prefix delegation"), "{e:?}");
    }
}
