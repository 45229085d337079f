//! The pure core of the controller: which targets each target group should hold and the
//! changes that get it there. Synchronous and deterministic: no I/O, no clock, no Kubernetes
//! or AWS types (the adapters in `views` and `group` convert to and from them).

pub mod desired;
pub mod plan;
pub mod usage;
