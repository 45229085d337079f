//! Generated gRPC types for the plugin ↔ agent API (`proto/vpcnet/cni/v1/backend.proto`), and
//! for the part of the VPC CNI's API that the AWS node agent (`aws-eks-nodeagent`) speaks
//! (`proto/aws/rpc/network_policy.proto`, module [`aws_rpc`]).
//! Needs `protoc` at build time (Debian `protobuf-compiler`, installed by scripts/install-deps.sh).
#![allow(clippy::all)]

/// `vpcnet.cni.v1`: AddNetwork, DelNetwork, Status, GarbageCollect.
pub mod v1 {
    tonic::include_proto!("vpcnet.cni.v1");
}

pub use v1::*;

/// `rpc` (the VPC CNI's package name, part of each method's path): `NPBackend`, which the node
/// agent serves on [`aws_rpc::NPA_SOCKET`], and `ConfigServerBackend`, which the IPAM daemon
/// serves on [`aws_rpc::IPAMD_SOCKET`].
pub mod aws_rpc {
    tonic::include_proto!("rpc");

    /// Where the node agent serves `NPBackend` (the VPC CNI plugin's fixed path).
    pub const NPA_SOCKET: &str = "/var/run/aws-node/npa.sock";
    /// Where the node agent asks for `GetNetworkPolicyConfigs` (its fixed path).
    pub const IPAMD_SOCKET: &str = "/var/run/aws-node/ipamd.sock";
}

/// Default path of the agent's Unix socket.
pub const DEFAULT_SOCKET: &str = "/var/run/vpcnet/agent.sock";

/// Request metadata key carrying the plugin's version on every call (the version handshake).
pub const PLUGIN_VERSION_HEADER: &str = "x-vpcnet-plugin-version";
/// Response metadata key carrying the agent's version on every answer, errors included, so a
/// plugin that calls something the agent does not know can name both versions.
pub const AGENT_VERSION_HEADER: &str = "x-vpcnet-agent-version";
/// Response metadata key of an error status that says why, where the gRPC code alone is
/// ambiguous (UNAVAILABLE: empty pool, [`REASON_CHECKPOINT_WRITE`], [`REASON_NETWORK_POLICY`] or
/// [`REASON_POD_ANNOTATION`]; RESOURCE_EXHAUSTED: the node's limit or
/// [`REASON_PROVISIONING_DISABLED`]).
pub const REASON_HEADER: &str = "x-vpcnet-reason";
/// [`REASON_HEADER`] value: the call was undone because the agent could not write its
/// checkpoint (disk full, read-only); retrying helps only once the disk is fixed.
pub const REASON_CHECKPOINT_WRITE: &str = "checkpoint-write-failed";
/// [`REASON_HEADER`] value: no free address, and the agent provisions none itself
/// (`DISABLE_NETWORK_RESOURCE_PROVISIONING` or `ENABLE_IMDS_ONLY_MODE`): more pods fit only once
/// someone attaches more addresses to the node's ENIs (or a pod is deleted).
pub const REASON_PROVISIONING_DISABLED: &str = "provisioning-disabled";
/// [`REASON_HEADER`] value: the ADD was undone because the pod's network policy could not be
/// put in place (the API objects not read yet, the pod not readable, nft refused).
pub const REASON_NETWORK_POLICY: &str = "network-policy";
/// [`REASON_HEADER`] value: the ADD was undone because `ANNOTATE_POD_IP` could not annotate
/// the pod.
pub const REASON_POD_ANNOTATION: &str = "pod-annotation";
/// The release of plugin and agent built from this tree (the workspace version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
