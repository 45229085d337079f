//! Showing an error with its causes, for logs and for the reconciler's last error.

/// `error: cause: cause ...`, the error's [`std::error::Error::source`] chain on one line
/// (what `{:#}` shows for an [`anyhow::Error`]), so a log line keeps why an EC2 call failed,
/// not only that it did. See [`vpcnet_aws::error_chain`].
pub use vpcnet_aws::error_chain as chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn chain_lists_every_cause_once() {
        let e = Outer(std::io::Error::other("disk full"));
        assert_eq!(chain(&e), "outer: disk full");
        let e = Repeats(std::io::Error::other("disk full"));
        assert_eq!(chain(&e), "outer: disk full");
        let io = std::io::Error::other("alone");
        assert_eq!(chain(&io), "alone");
    }
}
