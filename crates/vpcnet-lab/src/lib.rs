//! The local VPC lab: namespaces, VPC fabric, per-node containerd, driven by vpcnet-emu hooks;
//! load balancers served by HAProxy in namespaces of their own ([`lb`], driven by the
//! emulator's ELBv2), operated with [`lbctl`], loaded with [`load`].
//!
//! Everything the lab creates (network namespaces, processes, containers, mounts, directories)
//! is recorded in `/run/vpcnet-lab/<name>/state.json` before it is created, and
//! [`teardown::teardown`] removes all of it, on `lab down` and on any failure. The root network
//! namespace is never changed.

pub mod api;
mod build;
pub mod cloud;
pub mod cmd;
pub mod containerd;
pub mod containers;
pub mod daemon;
pub mod fabric;
pub mod fleet;
pub mod haproxy;
pub mod hooks;
pub mod image;
pub mod kube;
pub mod lab;
pub mod lb;
pub mod lbctl;
pub mod load;
pub mod machine;
pub mod netns;
pub mod nodes;
pub mod processes;
pub mod procs;
pub mod registry;
pub mod runtime;
pub mod security_groups;
pub mod spawn;
pub mod state;
pub mod swap;
pub mod teardown;
pub mod vpc_cni;
pub mod wait;
pub mod web;
