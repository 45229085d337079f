//! Pod and node datapath over netlink (rtnetlink): veth pairs, addresses, routes, policy rules,
//! neighbours and the per-ENI route tables. The shape is the VPC CNI's:
//!
//! - pod: its VPC IPv4 as a /32 on the pod interface, `169.254.1.1` scope link, default via
//!   `169.254.1.1`, a permanent neighbour `169.254.1.1 → host veth MAC` ([`pod`]);
//! - node: a /32 route to the pod via the host veth, rule `to <ip> lookup main` at priority 512
//!   and, for an IP on a secondary ENI, `from <ip> lookup <table>` at priority 1536 ([`host`]);
//! - node: one route table per secondary ENI (table = device number + 1, as the VPC CNI numbers them) ([`node`]);
//! - node: the periodic audit that repairs and reports drift of all this ([`audit`] for pods,
//!   [`prereq`] for forwarding, ENI tables, firewall) and link removals as they happen
//!   ([`link_watch`]);
//! - node: deleting the connection-tracking entries of released pod addresses before reuse
//!   ([`conntrack`]);
//! - node: SNAT of VPC-external traffic to the primary IP and the connmark that sends replies
//!   out of the primary ENI, as one nftables table `ip vpcnet` ([`firewall`]);
//! - node: NetworkPolicy, each local pod's allow rules and the peer sets they name, as one
//!   nftables table `inet vpcnet_policy` replaced or updated in place ([`policy`]).
//!
//! Every function takes an [`rtnetlink::Handle`] bound to the namespace it acts in; use
//! [`netns::connect`] / [`netns::connect_in`] to get one. No function changes the calling
//! thread's network namespace.

pub mod audit;
pub mod conntrack;
pub mod error;
pub mod firewall;
pub mod host;
pub mod link_watch;
pub mod names;
pub mod netns;
pub mod nflog;
mod nft;
pub mod nl;
pub mod node;
pub mod pod;
pub mod policy;
pub mod policy_events;
pub mod prereq;
pub mod sysctl;

pub use error::{Error, Result};
/// The netlink handle every function takes (bound to one namespace).
pub use rtnetlink::Handle;

use std::net::Ipv4Addr;

/// Link-local next hop of every pod (the VPC CNI's): resolved by a permanent neighbour entry.
pub const POD_GATEWAY: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// Priority of the rule `to <pod ip> lookup main` (VPC CNI `toContainerRulePriority`).
pub const PRIO_TO_POD: u32 = 512;
/// Priority of the rule `from <pod ip> lookup <ENI table>` (VPC CNI `fromContainerRulePriority`).
pub const PRIO_FROM_POD: u32 = 1536;
/// The main routing table id.
pub const MAIN_TABLE: u32 = 254;
