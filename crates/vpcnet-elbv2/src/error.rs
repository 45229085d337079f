//! The typed error of every ELBv2 call and ELBv2's own predicates. Retry classification is the
//! shared one ([`vpcnet_aws::classify`]): ELBv2 throttles with `Throttling` (HTTP 400), which
//! counts as throttling; 5xx and transport faults are transient; everything else is final.

use std::time::Duration;

use aws_sdk_elasticloadbalancingv2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use vpcnet_aws::{classify, CallError, Retry};

/// Error of an ELBv2 call made through [`crate::Elbv2`]. `action` is the ELBv2 action name.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Elbv2Error {
    /// ELBv2 answered with an error document (`<ErrorResponse><Error><Code>`).
    #[error("ELBv2 {action} failed: {code}: {message}{}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Api {
        action: &'static str,
        /// ELBv2's error code, e.g. `TooManyTargets`.
        code: String,
        message: String,
        status: Option<u16>,
        /// Throttling or transient: the call loop retries it.
        retryable: bool,
    },
    /// The call's deadline or one attempt's deadline expired.
    #[error("ELBv2 {action} did not complete within {after:?} ({attempts} attempt(s)); raise the operation timeout or check connectivity to the ELBv2 endpoint")]
    Timeout {
        action: &'static str,
        after: Duration,
        attempts: u32,
    },
    /// The request never got an answer: connection refused, DNS, TLS, I/O.
    #[error("ELBv2 {action}: transport error: {message}; check the ELBv2 endpoint (AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING_V2 or AWS_ENDPOINT_URL) and network")]
    Transport {
        action: &'static str,
        message: String,
    },
    /// The answer lacked a field vpcnet needs or could not be parsed.
    #[error("ELBv2 {action}: unexpected response: {message}")]
    InvalidResponse {
        action: &'static str,
        message: String,
    },
    /// The request could not be built or sent (bad argument, missing credentials or region).
    #[error("ELBv2 {action}: cannot send request: {message}")]
    Request {
        action: &'static str,
        message: String,
    },
    /// Client construction failed (no region, bad endpoint URL).
    #[error("ELBv2 client configuration: {0}")]
    Config(String),
}

impl Elbv2Error {
    /// An [`Elbv2Error::Api`] classified for retries.
    pub fn api(
        action: &'static str,
        code: impl Into<String>,
        message: impl Into<String>,
        status: Option<u16>,
    ) -> Self {
        let code = code.into();
        let retryable = classify(&code, status) != Retry::Never;
        Elbv2Error::Api {
            action,
            code,
            message: message.into(),
            status,
            retryable,
        }
    }

    /// ELBv2's code for [`Elbv2Error::Api`]; `Timeout`, `Transport`, `InvalidResponse`,
    /// `Request` or `Config` for the others (a metrics label).
    pub fn code(&self) -> &str {
        match self {
            Elbv2Error::Api { code, .. } => code,
            Elbv2Error::Timeout { .. } => "Timeout",
            Elbv2Error::Transport { .. } => "Transport",
            Elbv2Error::InvalidResponse { .. } => "InvalidResponse",
            Elbv2Error::Request { .. } => "Request",
            Elbv2Error::Config(_) => "Config",
        }
    }

    /// Whether the same request may succeed later: throttling, 5xx, transport, timeouts.
    pub fn is_retryable(&self) -> bool {
        match self {
            Elbv2Error::Api { retryable, .. } => *retryable,
            Elbv2Error::Timeout { .. } | Elbv2Error::Transport { .. } => true,
            _ => false,
        }
    }

    /// ELBv2 throttled the request (`Throttling`).
    pub fn is_throttle(&self) -> bool {
        matches!(self, Elbv2Error::Api { code, status, .. } if classify(code, *status) == Retry::Throttle)
    }

    /// The named resource does not exist: `LoadBalancerNotFound`, `TargetGroupNotFound`,
    /// `ListenerNotFound`.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.code(),
            "LoadBalancerNotFound" | "TargetGroupNotFound" | "ListenerNotFound"
        )
    }

    /// A target was refused (`InvalidTarget`: outside the VPC, not running, not registered).
    pub fn is_invalid_target(&self) -> bool {
        self.code() == "InvalidTarget"
    }

    /// A quota was reached (`TooManyTargets`, `TooManyLoadBalancers`, `TooManyTargetGroups`,
    /// `TooManyListeners`, `TooManyTags`).
    pub fn is_quota(&self) -> bool {
        self.code().starts_with("TooMany")
    }
}

impl CallError<&'static str> for Elbv2Error {
    fn is_retryable(&self) -> bool {
        Elbv2Error::is_retryable(self)
    }

    fn is_throttle(&self) -> bool {
        Elbv2Error::is_throttle(self)
    }

    fn timeout(action: &'static str, after: Duration, attempts: u32) -> Self {
        Elbv2Error::Timeout {
            action,
            after,
            attempts,
        }
    }
}

/// Map an SDK error to [`Elbv2Error`], keeping ELBv2's code and HTTP status.
pub(crate) fn sdk_error<E>(action: &'static str, err: SdkError<E, HttpResponse>) -> Elbv2Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &err {
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status().as_u16();
            Elbv2Error::api(
                action,
                err.code().unwrap_or("Unknown"),
                err.message().unwrap_or_default(),
                Some(status),
            )
        }
        SdkError::ResponseError(ctx) if ctx.raw().status().as_u16() >= 500 => {
            let status = ctx.raw().status().as_u16();
            Elbv2Error::api(
                action,
                format!("HTTP{status}"),
                DisplayErrorContext(&err).to_string(),
                Some(status),
            )
        }
        SdkError::ResponseError(_) => Elbv2Error::InvalidResponse {
            action,
            message: DisplayErrorContext(&err).to_string(),
        },
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => Elbv2Error::Transport {
            action,
            message: DisplayErrorContext(&err).to_string(),
        },
        _ => Elbv2Error::Request {
            action,
            message: DisplayErrorContext(&err).to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_is_retried_client_errors_are_not() {
        let t = Elbv2Error::api("RegisterTargets", "Throttling", "Rate exceeded", Some(400));
        assert!(t.is_throttle() && t.is_retryable());
        for code in [
            "TooManyTargets",
            "InvalidTarget",
            "TargetGroupNotFound",
            "ValidationError",
        ] {
            let e = Elbv2Error::api("RegisterTargets", code, "", Some(400));
            assert!(!e.is_retryable(), "{code}");
        }
        let e = Elbv2Error::api("DescribeTargetHealth", "InternalFailure", "", Some(500));
        assert!(e.is_retryable() && !e.is_throttle());
        assert!(Elbv2Error::api("X", "TooManyTargets", "", Some(400)).is_quota());
        assert!(Elbv2Error::api("X", "ListenerNotFound", "", Some(400)).is_not_found());
        let s =
            Elbv2Error::api("RegisterTargets", "InvalidTarget", "outside", Some(400)).to_string();
        assert!(
            s.contains("RegisterTargets") && s.contains("InvalidTarget") && s.contains("400"),
            "{s}"
        );
    }
}
