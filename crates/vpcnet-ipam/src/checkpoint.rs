//! The persisted model (JSON): assignments and cooldown timestamps, versioned.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// Current checkpoint format version.
pub const CHECKPOINT_VERSION: u32 = 1;

/// What the agent writes to its checkpoint file on every change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version ([`CHECKPOINT_VERSION`]).
    pub version: u32,
    pub assignments: Vec<CheckpointAssignment>,
    /// Release times of addresses, so a restart keeps their cooldown.
    pub cooldowns: Vec<CheckpointCooldown>,
}

/// One pod's address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointAssignment {
    pub container_id: String,
    pub if_name: String,
    pub ip: Ipv4Addr,
    pub eni_id: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
    /// ms since the Unix epoch.
    pub assigned_at_ms: u64,
    /// See [`crate::Assignment::foreign_datapath`]; absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub foreign_datapath: bool,
    /// Network card of the ENI (ENABLE_MULTI_NIC); absent when 0. Informational: a restore
    /// takes the ENI from `eni_id`; the export to the VPC CNI's per-card files uses it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub network_card: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One released address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointCooldown {
    pub ip: Ipv4Addr,
    /// ms since the Unix epoch.
    pub released_at_ms: u64,
}

/// A checkpoint that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint is not valid JSON of the expected shape: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("checkpoint version {found} is not supported (this agent reads version {supported})")]
    Version { found: u32, supported: u32 },
    #[error("checkpoint assigns {ip} twice")]
    DuplicateIp { ip: Ipv4Addr },
    #[error("checkpoint assigns container {container_id:?} interface {if_name:?} twice")]
    DuplicateKey {
        container_id: String,
        if_name: String,
    },
    #[error("checkpoint has an assignment with an empty container ID")]
    EmptyContainerId,
}

impl Checkpoint {
    /// Parses and checks a checkpoint file's contents.
    pub fn from_json(text: &str) -> Result<Self, CheckpointError> {
        let cp: Checkpoint = serde_json::from_str(text)?;
        cp.check()?;
        Ok(cp)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("checkpoint serializes")
    }

    /// Version and consistency checks.
    pub fn check(&self) -> Result<(), CheckpointError> {
        if self.version != CHECKPOINT_VERSION {
            return Err(CheckpointError::Version {
                found: self.version,
                supported: CHECKPOINT_VERSION,
            });
        }
        let mut ips = BTreeSet::new();
        let mut keys = BTreeSet::new();
        for a in &self.assignments {
            if a.container_id.is_empty() {
                return Err(CheckpointError::EmptyContainerId);
            }
            if !ips.insert(a.ip) {
                return Err(CheckpointError::DuplicateIp { ip: a.ip });
            }
            if !keys.insert((&a.container_id, &a.if_name)) {
                return Err(CheckpointError::DuplicateKey {
                    container_id: a.container_id.clone(),
                    if_name: a.if_name.clone(),
                });
            }
        }
        Ok(())
    }
}
