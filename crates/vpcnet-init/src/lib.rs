//! The node install step, run as the init container of the node DaemonSet before the agent
//! (the role of the VPC CNI's `aws-vpc-cni-init`):
//! 1. [`install`]: copies `vpcnet-cni` and the reference plugins the conflist chains
//!    ([`plugins`]) from the image into the host's CNI bin directory, each atomically (written
//!    beside the target, synced, made 0755, renamed over it), so a runtime executing a plugin
//!    during an upgrade runs the old file or the new one, never half of one;
//! 2. [`sysctl`]: `rp_filter=2` on the primary interface ([`primary`]: the interface of the
//!    main table's default route) and `tcp_early_demux` per `DISABLE_TCP_EARLY_DEMUX`.
//!
//! It does not write the CNI conflist: the agent writes it once it can serve.

pub mod flags;
pub mod install;
pub mod plugins;
pub mod primary;
pub mod sysctl;
