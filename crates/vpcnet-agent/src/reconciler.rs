//! Executes the core's plans against EC2 and feeds the results back. One task; woken at
//! once by ADD/DEL, plus a periodic full pass (IMDS drift check, a describe only when needed,
//! reconcile, plan incl. freeing surplus). Backs off with jitter after EC2 errors.
//!
//! By concern: [`mod@adopt`] (EC2's view into the pool), [`drift`] (whether to describe), [`execute`] (plans → EC2 calls),
//! [`eni`] (ENI lifecycle), [`placement`] (subnet and security groups of new ENIs, custom
//! networking), [`subnet_discovery`] (the subnets a new ENI may go to without custom
//! networking), [`node_setup`] (node ENIs and firewall), [`sweep`] (leaked ENIs,
//! unrouted pod addresses), `run_loop` (the task).

pub mod adopt;
pub mod drift;
pub mod eni;
pub mod execute;
pub mod new_eni;
pub mod node_setup;
pub mod placement;
pub mod prefix_fallback;
mod run_loop;
pub mod subnet_discovery;
pub mod sweep;

pub use adopt::{adopt, manageable, observation, sync_from_ec2};
pub use execute::fill;
pub use node_setup::{setup_node_enis, setup_node_firewall};
pub use run_loop::run;
pub use sweep::{
    pods_present, reclaim_unrouted, sweep_leaked, sweep_leaked_periodically, FIRST_SWEEP_SPREAD,
    POD_RECLAIM_MISSES,
};
