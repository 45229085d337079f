//! EC2-shaped errors: a code from EC2's error-code list, a message and the HTTP status
//! EC2 answers it with.

use std::fmt;

/// An EC2 API error as it appears in the Query protocol's `<Errors><Error>` envelope.
///
/// `code` is EC2's own error code (e.g. `AttachmentLimitExceeded`), which aws-sdk-ec2 surfaces
/// through `ProvideErrorMetadata::code()`. The HTTP status follows EC2: 5xx for server-side
/// faults (retryable), 403 for authorization, 400 for everything else.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Ec2Error {
    pub code: String,
    pub message: String,
}

impl fmt::Display for Ec2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl Ec2Error {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }

    /// HTTP status EC2 uses for this code: `RequestLimitExceeded` and `Unavailable` → 503,
    /// `InternalError`/`InternalFailure` → 500, `UnauthorizedOperation`/`AuthFailure` → 403,
    /// anything else → 400.
    pub fn status(&self) -> u16 {
        status_for_code(&self.code)
    }

    pub fn missing(param: &str) -> Self {
        Self::new(
            "MissingParameter",
            format!("The request must contain the parameter {param}"),
        )
    }

    pub fn invalid(param: &str, value: &str, why: &str) -> Self {
        Self::new(
            "InvalidParameterValue",
            format!("Value ({value}) for parameter {param} is invalid. {why}"),
        )
    }

    pub fn invalid_value(message: impl Into<String>) -> Self {
        Self::new("InvalidParameterValue", message)
    }

    pub fn combination(message: impl Into<String>) -> Self {
        Self::new("InvalidParameterCombination", message)
    }

    pub fn eni_not_found(id: &str) -> Self {
        Self::new(
            "InvalidNetworkInterfaceID.NotFound",
            format!("The networkInterface ID '{id}' does not exist"),
        )
    }

    pub fn instance_not_found(id: &str) -> Self {
        Self::new(
            "InvalidInstanceID.NotFound",
            format!("The instance ID '{id}' does not exist"),
        )
    }

    pub fn subnet_not_found(id: &str) -> Self {
        Self::new(
            "InvalidSubnetID.NotFound",
            format!("The subnet ID '{id}' does not exist"),
        )
    }

    pub fn vpc_not_found(id: &str) -> Self {
        Self::new(
            "InvalidVpcID.NotFound",
            format!("The vpc ID '{id}' does not exist"),
        )
    }

    pub fn group_not_found(id: &str, vpc: &str) -> Self {
        Self::new(
            "InvalidGroup.NotFound",
            format!("The security group '{id}' does not exist in VPC '{vpc}'"),
        )
    }

    pub fn eni_in_use(id: &str) -> Self {
        Self::new(
            "InvalidNetworkInterface.InUse",
            format!("Interface: [{id}] in use."),
        )
    }

    pub fn ip_limit() -> Self {
        Self::new(
            "PrivateIpAddressLimitExceeded",
            "Number of private addresses will exceed limit.",
        )
    }

    pub fn no_free_addresses() -> Self {
        Self::new(
            "InsufficientFreeAddressesInSubnet",
            "The specified subnet does not have enough free addresses to satisfy the request.",
        )
    }

    pub fn no_free_cidr_blocks() -> Self {
        Self::new(
            "InsufficientCidrBlocks",
            "The specified subnet does not have enough free cidr blocks to satisfy the request.",
        )
    }

    pub fn throttled() -> Self {
        Self::new("RequestLimitExceeded", "Request limit exceeded.")
    }
}

/// HTTP status EC2 answers error `code` with (see [`Ec2Error::status`]).
pub fn status_for_code(code: &str) -> u16 {
    match code {
        "RequestLimitExceeded" | "Unavailable" | "ServiceUnavailable" => 503,
        "InternalError" | "InternalFailure" => 500,
        "UnauthorizedOperation" | "AuthFailure" | "Blocked" => 403,
        "DryRunOperation" => 412,
        _ => 400,
    }
}
