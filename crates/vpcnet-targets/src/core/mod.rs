//! The pure core of the controller: which targets each target group should hold, the
//! changes that get it there, and when to ask ELBv2 about waiting readiness gates. Synchronous
//! and deterministic: no I/O, no clock (time is passed in), no Kubernetes or AWS types (the
//! adapters in `views` and `group` convert to and from them).

pub mod desired;
pub mod plan;
pub mod recheck;
pub mod usage;
