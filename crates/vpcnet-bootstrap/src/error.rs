//! Errors of node bootstrap.

use thiserror::Error;

/// Why a bootstrap run stopped. Every variant is raised before any file is written.
#[derive(Debug, Error)]
pub enum BootstrapError {
    /// Bad input: a flag (or NodeConfig field) with a value that cannot work. The message names
    /// the flag, the problem and the fix.
    #[error("invalid {flag} {value:?}: {problem}. Fix: {fix}")]
    Invalid {
        flag: String,
        value: String,
        problem: String,
        fix: String,
    },

    /// A required input is missing.
    #[error("missing {what}. Fix: {fix}")]
    Missing { what: String, fix: String },

    /// The NodeConfig file could not be read or parsed.
    #[error("NodeConfig {path}: {problem}")]
    NodeConfig { path: String, problem: String },

    /// IMDS did not answer a required path.
    #[error("IMDS {path}: {problem}")]
    Imds { path: String, problem: String },

    /// An EC2 call failed where no fallback exists (e.g. the private DNS name that kubelet's
    /// node name must equal under the external cloud provider).
    #[error("EC2 {action}: {problem}. Fix: {fix}")]
    Ec2 {
        action: String,
        problem: String,
        fix: String,
    },

    /// Something on the node itself (kubelet binary, DNS lookup, file system).
    #[error("{0}")]
    Host(String),
}

impl BootstrapError {
    /// Shorthand for [`BootstrapError::Invalid`].
    pub fn invalid(
        flag: impl Into<String>,
        value: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            flag: flag.into(),
            value: value.into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    /// Shorthand for [`BootstrapError::Missing`].
    pub fn missing(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::Missing {
            what: what.into(),
            fix: fix.into(),
        }
    }
}
