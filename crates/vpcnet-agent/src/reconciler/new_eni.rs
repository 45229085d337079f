//! What a new ENI is created with, shared by the two ways of choosing it (custom networking's
//! ENIConfig, [`super::placement`], and subnet discovery, [`super::subnet_discovery`]), so
//! neither imports the other's types.

use ipnet::Ipv4Net;

/// Subnet and security groups of a new ENI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniPlacement {
    /// Subnet ID (`subnet-...`).
    pub subnet_id: String,
    /// Security group IDs (`sg-...`).
    pub security_group_ids: Vec<String>,
    /// The ENIConfig it comes from (custom networking), for error messages.
    pub eniconfig: Option<String>,
}

/// A subnet a new ENI may be created in, with its CIDR (for the ENI's routes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub placement: EniPlacement,
    pub cidr: Ipv4Net,
}
