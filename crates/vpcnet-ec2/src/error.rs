//! The typed error of every EC2 call and EC2's own predicates (`is_limit`, `is_not_found`,
//! ...); the classification of error codes into throttling, transient and permanent errors is
//! the shared one ([`vpcnet_aws::classify`]).

use std::sync::Arc;
use std::time::Duration;

use vpcnet_aws::{classify, Cause, Retry};

use crate::Action;

/// Error of an EC2 call made through [`crate::Ec2`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum Ec2Error {
    /// EC2 answered with an error document (`<Response><Errors><Error><Code>`).
    #[error("EC2 {action} failed: {code}: {message}{}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Api {
        action: Action,
        /// EC2's error code, e.g. `AttachmentLimitExceeded`.
        code: String,
        message: String,
        /// HTTP status of the answer, when one was received.
        status: Option<u16>,
        /// Whether the retry loop treats the error as retryable (throttling or transient).
        retryable: bool,
        /// What the answer was made from, when it was not EC2's own error document (e.g. the
        /// SDK's error for a 5xx without one).
        #[source]
        source: Option<Cause>,
    },
    /// The call's deadline (operation timeout) or a single attempt's timeout expired.
    #[error("EC2 {action} did not complete within {after:?} ({attempts} attempt(s)); raise the EC2 operation timeout or check connectivity to the EC2 endpoint")]
    Timeout {
        action: Action,
        after: Duration,
        attempts: u32,
    },
    /// The request never got an answer: connection refused, DNS, TLS, I/O.
    #[error("EC2 {action}: transport error: {message}; check the EC2 endpoint (AWS_ENDPOINT_URL_EC2 or AWS_EC2_ENDPOINT) and network")]
    Transport {
        action: Action,
        message: String,
        /// The SDK's error (connector, I/O, timeout) with its own chain.
        #[source]
        source: Option<Cause>,
    },
    /// EC2 answered but the answer lacked a field vpcnet needs or could not be parsed.
    #[error("EC2 {action}: unexpected response: {message}")]
    InvalidResponse {
        action: Action,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    /// The request could not be built or sent (bad argument, missing credentials/region).
    #[error("EC2 {action}: cannot send request: {message}")]
    Request {
        action: Action,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    /// Client construction failed (no region, bad endpoint URL, ...).
    #[error("EC2 client configuration: {message}")]
    Config {
        message: String,
        #[source]
        source: Option<Cause>,
    },
}

impl Ec2Error {
    /// The action that failed (`None` for [`Ec2Error::Config`]).
    pub fn action(&self) -> Option<Action> {
        match self {
            Ec2Error::Api { action, .. }
            | Ec2Error::Timeout { action, .. }
            | Ec2Error::Transport { action, .. }
            | Ec2Error::InvalidResponse { action, .. }
            | Ec2Error::Request { action, .. } => Some(*action),
            Ec2Error::Config { .. } => None,
        }
    }

    /// EC2's error code for [`Ec2Error::Api`]; a short code for the others
    /// (`Timeout`, `Transport`, `InvalidResponse`, `Request`, `Config`), suitable as a
    /// metrics label.
    pub fn code(&self) -> &str {
        match self {
            Ec2Error::Api { code, .. } => code,
            Ec2Error::Timeout { .. } => "Timeout",
            Ec2Error::Transport { .. } => "Transport",
            Ec2Error::InvalidResponse { .. } => "InvalidResponse",
            Ec2Error::Request { .. } => "Request",
            Ec2Error::Config { .. } => "Config",
        }
    }

    /// HTTP status of an API error answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Ec2Error::Api { status, .. } => *status,
            _ => None,
        }
    }

    /// Whether retrying the same request may succeed: throttling, 5xx, transport faults and
    /// attempt timeouts. Never true for 4xx validation, not-found or limit errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            Ec2Error::Api { retryable, .. } => *retryable,
            Ec2Error::Timeout { .. } | Ec2Error::Transport { .. } => true,
            _ => false,
        }
    }

    /// EC2 throttled the request (`RequestLimitExceeded` and kin).
    pub fn is_throttle(&self) -> bool {
        matches!(self, Ec2Error::Api { code, status, .. } if classify(code, *status) == Retry::Throttle)
    }

    /// The instance is at an ENI or IP limit: `AttachmentLimitExceeded` (no more ENIs on the
    /// instance) or `PrivateIpAddressLimitExceeded` (no more addresses/prefixes on the ENI).
    pub fn is_limit(&self) -> bool {
        matches!(
            self.code(),
            "AttachmentLimitExceeded" | "PrivateIpAddressLimitExceeded"
        )
    }

    /// The referenced resource does not exist (`InvalidNetworkInterfaceID.NotFound`,
    /// `InvalidAttachmentID.NotFound`, `InvalidInstanceID.NotFound`, ...).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Ec2Error::Api { code, .. } if code.ends_with(".NotFound"))
    }

    /// The subnet has no free addresses (`InsufficientFreeAddressesInSubnet`) or no free
    /// aligned /28 block (`InsufficientCidrBlocks`).
    pub fn is_insufficient_addresses(&self) -> bool {
        matches!(
            self.code(),
            "InsufficientFreeAddressesInSubnet" | "InsufficientCidrBlocks"
        )
    }

    /// Build an [`Ec2Error::Api`] from a code, message and status, classifying it.
    pub fn api(
        action: Action,
        code: impl Into<String>,
        message: impl Into<String>,
        status: Option<u16>,
    ) -> Self {
        let code = code.into();
        let retryable = classify(&code, status) != Retry::Never;
        Ec2Error::Api {
            action,
            code,
            message: message.into(),
            status,
            retryable,
            source: None,
        }
    }

    /// A configuration error (no cause).
    pub fn config(message: impl Into<String>) -> Self {
        Ec2Error::Config {
            message: message.into(),
            source: None,
        }
    }

    /// The same error with `cause` as its [`std::error::Error::source`] (no effect on
    /// [`Ec2Error::Timeout`], which has no cause).
    pub fn with_source(self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.with_cause(Arc::new(cause))
    }

    /// [`Ec2Error::with_source`] for a cause already boxed or shared (`Arc::from(box_error)`).
    pub fn with_cause(mut self, cause: Cause) -> Self {
        match &mut self {
            Ec2Error::Api { source, .. }
            | Ec2Error::Transport { source, .. }
            | Ec2Error::InvalidResponse { source, .. }
            | Ec2Error::Request { source, .. }
            | Ec2Error::Config { source, .. } => *source = Some(cause),
            Ec2Error::Timeout { .. } => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Action = Action::AssignPrivateIpAddresses;

    #[test]
    fn throttling_is_retryable_and_flagged() {
        let e = Ec2Error::api(
            A,
            "RequestLimitExceeded",
            "Request limit exceeded.",
            Some(503),
        );
        assert!(e.is_throttle());
        assert!(e.is_retryable());
        assert!(!e.is_limit());
    }

    /// The classification itself is vpcnet-aws's (tested there); these are its EC2 errors.
    #[test]
    fn server_errors_are_retryable_not_throttles() {
        for (code, status) in [
            ("InternalError", Some(500)),
            ("Unavailable", Some(503)),
            ("Whatever", Some(502)),
            ("InternalError", None),
        ] {
            let e = Ec2Error::api(A, code, "", status);
            assert!(e.is_retryable());
            assert!(!e.is_throttle());
        }
    }

    #[test]
    fn client_errors_are_never_retried() {
        for code in [
            "InvalidParameterValue",
            "PrivateIpAddressLimitExceeded",
            "AttachmentLimitExceeded",
            "InvalidNetworkInterfaceID.NotFound",
            "InsufficientFreeAddressesInSubnet",
            "UnauthorizedOperation",
        ] {
            let e = Ec2Error::api(A, code, "m", Some(400));
            assert!(!e.is_retryable(), "{code}");
            assert!(!e.is_throttle(), "{code}");
        }
    }

    #[test]
    fn helper_predicates() {
        assert!(Ec2Error::api(A, "AttachmentLimitExceeded", "", Some(400)).is_limit());
        assert!(Ec2Error::api(A, "PrivateIpAddressLimitExceeded", "", Some(400)).is_limit());
        assert!(!Ec2Error::api(A, "InvalidParameterValue", "", Some(400)).is_limit());
        assert!(
            Ec2Error::api(A, "InvalidNetworkInterfaceID.NotFound", "", Some(400)).is_not_found()
        );
        assert!(Ec2Error::api(A, "InvalidAttachmentID.NotFound", "", Some(400)).is_not_found());
        assert!(
            !Ec2Error::api(A, "InvalidNetworkInterfaceID.Malformed", "", Some(400)).is_not_found()
        );
        assert!(
            Ec2Error::api(A, "InsufficientFreeAddressesInSubnet", "", Some(400))
                .is_insufficient_addresses()
        );
        assert!(
            Ec2Error::api(A, "InsufficientCidrBlocks", "", Some(400)).is_insufficient_addresses()
        );
        let t = Ec2Error::Timeout {
            action: A,
            after: Duration::from_secs(1),
            attempts: 2,
        };
        assert!(t.is_retryable() && !t.is_throttle() && t.code() == "Timeout");
        assert_eq!(t.action(), Some(A));
    }

    #[test]
    fn display_names_action_code_and_status() {
        let e = Ec2Error::api(A, "PrivateIpAddressLimitExceeded", "too many", Some(400));
        let s = e.to_string();
        assert!(
            s.contains("AssignPrivateIpAddresses")
                && s.contains("PrivateIpAddressLimitExceeded")
                && s.contains("400"),
            "{s}"
        );
    }
}
