//! What every adapter's error shares: the classification of AWS error codes into throttling,
//! transient (retryable) and permanent errors, the contract the call loop needs from an
//! adapter's error ([`CallError`]), the shared cause type and the error-chain formatter.
//! Service-specific predicates (`is_limit`, `is_not_found`, ...) stay in each adapter.

use std::sync::Arc;
use std::time::Duration;

/// The underlying cause of an adapter's error (the SDK's error with its own chain, an I/O
/// error, ...), shared so that the error stays `Clone`. Shown by `{:#}` / error-chain
/// formatters through [`std::error::Error::source`].
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// `error: cause: cause ...`: an error and its [`std::error::Error::source`] chain on one
/// line (what `{:#}` shows for an `anyhow::Error`), for log lines that must say why a call
/// failed, not only that it did. A cause whose text the line already holds is not repeated.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

/// How an error code / HTTP status should be treated by the retry loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The service throttled the request (`RequestLimitExceeded`, `Throttling`, ...): retry
    /// after backoff.
    Throttle,
    /// A server-side or transport fault (5xx, `InternalError`, ...): retry after backoff.
    Transient,
    /// A client error (validation, not found, limits): retrying cannot help.
    Never,
}

/// Error codes EC2 and the rest of the SDK family use for throttling.
const THROTTLE_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    "BandwidthLimitExceeded",
];

/// Error codes that mean "the service failed, try again".
const TRANSIENT_CODES: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "RequestTimeout",
    "RequestTimeoutException",
    "IDPCommunicationError",
];

/// Classify an AWS error code and HTTP status (if any) for the retry loop.
///
/// Throttling codes win over the status; then known transient codes; then any 5xx status
/// (and HTTP 429) counts as transient; everything else (4xx validation, `*.NotFound`,
/// limit errors) is never retried.
pub fn classify(code: &str, status: Option<u16>) -> Retry {
    if THROTTLE_CODES.contains(&code) || status == Some(429) {
        Retry::Throttle
    } else if TRANSIENT_CODES.contains(&code) || status.is_some_and(|s| (500..600).contains(&s)) {
        Retry::Transient
    } else {
        Retry::Never
    }
}

/// What the call loop ([`crate::Caller::run`]) needs from an adapter's error type: whether
/// to retry, whether the service throttled, and how to say that a deadline passed.
pub trait CallError<A>: std::error::Error + Sized + 'static {
    /// Whether retrying the same request may succeed: throttling, 5xx, transport faults and
    /// attempt timeouts. Never true for 4xx validation, not-found or limit errors.
    fn is_retryable(&self) -> bool;

    /// The service throttled the request; the loop then drains the client's token bucket and
    /// backs off from the longer throttle delay.
    fn is_throttle(&self) -> bool;

    /// The error for `action` when one attempt's or the whole call's deadline (`after`)
    /// passed, after `attempts` attempts.
    fn timeout(action: A, after: Duration, attempts: u32) -> Self;
}

/// A client could not be configured: no region, a malformed endpoint URL. Adapters turn it
/// into their own `Config` error; the message names the service and the fix.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub message: String,
    /// Why, when another error said so (e.g. the URL parser's).
    #[source]
    pub source: Option<Cause>,
}

impl ConfigError {
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            message: message.into(),
            source: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_codes_and_429_are_throttles() {
        assert_eq!(classify("RequestLimitExceeded", Some(503)), Retry::Throttle);
        assert_eq!(classify("Throttling", Some(400)), Retry::Throttle);
        assert_eq!(classify("ThrottlingException", Some(400)), Retry::Throttle);
        assert_eq!(classify("", Some(429)), Retry::Throttle);
    }

    #[test]
    fn server_errors_are_transient() {
        for (code, status) in [
            ("InternalError", Some(500)),
            ("Unavailable", Some(503)),
            ("Whatever", Some(502)),
            ("InternalError", None),
        ] {
            assert_eq!(
                classify(code, status),
                Retry::Transient,
                "{code} {status:?}"
            );
        }
    }

    #[test]
    fn client_errors_are_never_retried() {
        for code in [
            "InvalidParameterValue",
            "PrivateIpAddressLimitExceeded",
            "InvalidNetworkInterfaceID.NotFound",
            "TooManyTargets",
            "UnauthorizedOperation",
        ] {
            assert_eq!(classify(code, Some(400)), Retry::Never, "{code}");
        }
        assert_eq!(classify("Unknown", None), Retry::Never);
    }

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Middle);
    #[derive(Debug, thiserror::Error)]
    #[error("middle")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn error_chain_joins_causes_and_skips_repeats() {
        let e = Outer(Middle(std::io::Error::other("refused")));
        assert_eq!(error_chain(&e), "outer: middle: refused");
        let repeated = Outer(Middle(std::io::Error::other("outer")));
        assert_eq!(error_chain(&repeated), "outer: middle");
        let c = ConfigError {
            message: "bad URL".into(),
            source: Some(Arc::new(std::io::Error::other("no scheme"))),
        };
        assert_eq!(error_chain(&c), "bad URL: no scheme");
    }
}
