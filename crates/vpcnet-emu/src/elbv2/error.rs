//! ELBv2's error codes (the `Code` of its `<ErrorResponse>`), as [`ElbError`] values: the same
//! code + message pair as the EC2 side, with ELBv2's own codes and HTTP statuses (every client
//! error, `Throttling` included, is 400; `InternalFailure` 500; `ServiceUnavailable` 503).

pub use crate::error::Ec2Error as ElbError;

/// `ValidationError` with `message` (ELBv2's code for every malformed parameter).
pub fn validation(message: impl Into<String>) -> ElbError {
    ElbError::new("ValidationError", message)
}

/// `ValidationError` for a value outside an enumeration, in ELBv2's wording.
pub fn enum_value(field: &str, value: &str, allowed: &[&str]) -> ElbError {
    validation(format!(
        "1 validation error detected: Value '{value}' at '{field}' failed to satisfy constraint: Member must satisfy enum value set: [{}]",
        allowed.join(", ")
    ))
}

/// Any parameter error of the shared Query parser (`MissingParameter`,
/// `InvalidParameterValue`) re-coded as ELBv2's `ValidationError`, message kept.
pub fn revalidate(e: ElbError) -> ElbError {
    validation(e.message)
}

pub fn load_balancer_not_found() -> ElbError {
    ElbError::new(
        "LoadBalancerNotFound",
        "One or more load balancers not found",
    )
}

pub fn target_group_not_found(arn: &str) -> ElbError {
    ElbError::new(
        "TargetGroupNotFound",
        format!("One or more target groups not found ({arn})"),
    )
}

pub fn listener_not_found() -> ElbError {
    ElbError::new("ListenerNotFound", "One or more listeners not found")
}

/// ELBv2's throttling answer: `Throttling`, "Rate exceeded", HTTP 400 (the SDKs retry it).
pub fn throttling() -> ElbError {
    ElbError::new("Throttling", "Rate exceeded")
}

pub fn invalid_action(action: &str) -> ElbError {
    ElbError::new(
        "InvalidAction",
        format!("The action {action} is not valid for this web service (ELBv2 2015-12-01)."),
    )
}
