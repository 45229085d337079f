//! `vpcnet-agent`: the node agent (the VPC CNI's ipamd). Keeps a warm pool of VPC addresses
//! on the node's ENIs through EC2, answers the CNI plugin over gRPC on a Unix socket,
//! checkpoints its state, serves introspection and Prometheus metrics, and talks to the
//! Kubernetes API in the background (never waiting for it).
//!
//! Entry points: [`start`] (in-process, returns an [`AgentHandle`] once the pool can serve;
//! used by the integration tests) and [`run`] (until SIGTERM; the binary), each handed the
//! settings ([`AgentOptions`], values only, built from the environment by
//! [`options_from_config`] + [`config::Config::from_process_env`]) and the dependencies
//! ([`AgentDeps`]: cloud, node network, checkpoint store; [`AgentDeps::from_config`] in
//! production, fakes in tests).

mod agent;
pub mod checkpoint_file;
pub mod clock;
pub mod cloud;
pub mod cni_cache;
pub mod config;
pub mod conntrack;
pub mod datapath_audit;
pub mod deps;
mod docs;
pub mod errors;
pub mod grpc;
pub mod introspection;
pub mod kubernetes;
pub mod log_file;
pub mod metrics;
pub mod network_policy;
pub mod node;
pub mod options;
pub mod provisioning;
pub mod reconciler;
pub mod recovery;
pub mod state;
pub mod vpc_cni_checkpoint;

pub use agent::{run, start, AgentHandle, EssentialTaskFailed};
pub use deps::AgentDeps;
pub use options::{options_from_config, AgentOptions, Targets};
