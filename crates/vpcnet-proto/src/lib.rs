//! Generated gRPC types for the plugin ↔ agent API (`proto/vpcnet/cni/v1/backend.proto`).
//! Needs `protoc` at build time (Debian `protobuf-compiler`, installed by scripts/install-deps.sh).
#![allow(clippy::all)]

/// `vpcnet.cni.v1`: AddNetwork, DelNetwork, Status, GarbageCollect.
pub mod v1 {
    tonic::include_proto!("vpcnet.cni.v1");
}

pub use v1::*;

/// Default path of the agent's Unix socket.
pub const DEFAULT_SOCKET: &str = "/var/run/vpcnet/agent.sock";
