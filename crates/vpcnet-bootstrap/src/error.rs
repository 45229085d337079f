//! Errors of node bootstrap.

use thiserror::Error;

/// Why a bootstrap run stopped. Every variant but [`BootstrapError::System`] is raised before
/// any file is written.
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

    /// EKS DescribeCluster failed (bootstrap looks up the endpoint, CA, service CIDR, IP family
    /// and Outposts cluster ID there when `--apiserver-endpoint` or `--b64-cluster-ca` is
    /// missing).
    #[error("EKS {action}: {problem}. Fix: {fix}")]
    Eks {
        action: String,
        problem: String,
        fix: String,
    },

    /// A systemd unit file that cannot be read the way systemd reads it; `path` may end in
    /// `:LINE`.
    #[error("{path}: {problem}")]
    Unit { path: String, problem: String },

    /// Something on the node itself (kubelet binary, DNS lookup, file system).
    #[error("{0}")]
    Host(String),

    /// A node start-up command (`systemctl ...`) failed after the files were written.
    #[error("{command} failed: {problem}. The files are in place; fix the cause and rerun (a rerun changes only what differs), or pass --files-only to skip start-up")]
    System { command: String, problem: String },
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

    /// Whether this is bad input (exit code 2) rather than a failure at run time (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            BootstrapError::Invalid { .. }
                | BootstrapError::Missing { .. }
                | BootstrapError::NodeConfig { .. }
        )
    }

    /// Shorthand for [`BootstrapError::Missing`].
    pub fn missing(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::Missing {
            what: what.into(),
            fix: fix.into(),
        }
    }
}
