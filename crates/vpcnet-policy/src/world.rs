//! The cluster's current state as the compiler needs it.

/// Namespaces, pods and policies, changed one object at a time.
#[derive(Debug, Clone, Default)]
pub struct World {}
