//! CNI error results (spec section "Error"): `{"cniVersion", "code", "msg", "details"}` on stdout
//! with a non-zero exit status. Codes below 100 are the spec's well-known codes; 100+ are ours.

use serde_json::json;

/// Error codes. 1–11 and 50–51 are the spec's; 100+ are vpcnet-cni's.
pub mod code {
    /// Incompatible CNI version (`cniVersion` not supported).
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Unsupported field in network configuration.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// Container unknown or does not exist (CHECK on a container we never set up).
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Invalid necessary environment variables (missing CNI_COMMAND, CNI_NETNS on ADD, ...).
    pub const INVALID_ENV: u32 = 4;
    /// I/O failure.
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content (stdin is not JSON).
    pub const DECODE: u32 = 6;
    /// Invalid network configuration.
    pub const INVALID_CONFIG: u32 = 7;
    /// Try again later: the warm pool is empty right now.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin cannot serve ADD now.
    pub const NOT_AVAILABLE: u32 = 50;
    /// The agent cannot be reached on its socket (not running, wrong path, deadline).
    pub const AGENT_UNREACHABLE: u32 = 100;
    /// The node is at its ENI/IP limit (agent: RESOURCE_EXHAUSTED).
    pub const NODE_AT_LIMIT: u32 = 101;
    /// The agent is not ready yet (agent: FAILED_PRECONDITION).
    pub const AGENT_NOT_READY: u32 = 102;
    /// The agent rejected the request (agent: INVALID_ARGUMENT).
    pub const AGENT_REJECTED: u32 = 103;
    /// Building or checking the datapath failed.
    pub const DATAPATH: u32 = 104;
    /// CHECK found the datapath different from prevResult.
    pub const CHECK_FAILED: u32 = 105;
    /// The agent does not know a call the plugin made: plugin and agent versions differ.
    pub const VERSION_MISMATCH: u32 = 106;
    /// The AWS node agent (`aws-eks-nodeagent`, VPCNET_NETWORK_POLICY_AGENT) did not put the
    /// pod's network policy in place.
    pub const NODE_AGENT: u32 = 107;
    /// Anything else.
    pub const GENERIC: u32 = 999;
}

/// A CNI error: a code, a short message and details that say what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}: {details}")]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> Self {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// The error JSON for `cni_version` (the request's version, or the newest when unknown).
    pub fn to_json(&self, cni_version: &str) -> String {
        json!({
            "cniVersion": cni_version,
            "code": self.code,
            "msg": self.msg,
            "details": self.details,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_has_spec_fields() {
        let e = CniError::new(code::TRY_AGAIN_LATER, "no free IP", "retry");
        let v: serde_json::Value = serde_json::from_str(&e.to_json("1.0.0")).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["code"], 11);
        assert_eq!(v["msg"], "no free IP");
        assert_eq!(v["details"], "retry");
    }
}
