//! Capacity planning on vpcnet's IPAM core (`vpcnet plan`). Pure: no I/O.
//!
//! Given subnets (free addresses, zone, tags), node groups (instance type, count, pods per
//! node, subnets) and the VPC CNI's warm-pool settings, it tells:
//! - what one node holds and calls for: [`node::settle`] drives the agent's own IPAM core
//!   ([`vpcnet_ipam::Pool`]) from a fresh node to its steady state, against a cloud that
//!   grants every request, and counts the EC2 calls the agent makes for each step
//!   ([`calls`]);
//! - what the fleet draws from each subnet, the headroom left, the fleet size at which each
//!   subnet runs out, and in prefix mode the /28 fragmentation risk ([`fleet::plan`],
//!   [`subnets`]);
//! - what adding K nodes costs in EC2 calls, and the least time the account's request-token
//!   buckets allow for it ([`rates`]);
//! - what N nodes joining together see, in virtual time against the account's buckets, with
//!   the agent's client-side buckets and retries ([`sim`]).

pub mod calls;
pub mod fleet;
pub mod node;
pub mod rates;
pub mod settings;
pub mod sim;
pub mod subnets;

pub use fleet::{plan, FleetPlan, FleetSpec, NodeGroup};
pub use settings::WarmSettings;
pub use subnets::SubnetSpec;

/// Why a fleet cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The input is inconsistent; the message names the field and the fix.
    #[error("{0}")]
    Input(String),
    #[error("node group {group}: {cause}")]
    Group {
        group: String,
        cause: Box<PlanError>,
    },
    #[error("unknown instance type {0:?}: use an EC2 instance type name such as m5.large (`vpcnet max-pods --instance-type TYPE` knows the same table)")]
    UnknownInstanceType(String),
    #[error("settings do not work on {instance_type}: {message}")]
    Settings {
        instance_type: String,
        message: String,
    },
    #[error("{pods} pods do not fit on one node: it holds {max_ips} pod addresses with these settings ({placed} placed): lower pods_per_node")]
    PodsDoNotFit {
        pods: u32,
        placed: u32,
        max_ips: u32,
    },
    #[error(
        "the IPAM core did not settle: this is a bug in vpcnet, please report it with the input"
    )]
    NoSteadyState,
}
