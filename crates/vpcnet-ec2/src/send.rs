//! How an EC2 action is sent: on the shared call loop ([`vpcnet_aws::Caller`]), with the SDK's
//! errors mapped to [`Ec2Error`] (EC2's code and HTTP status kept, every other error as the
//! source, so its chain reaches the logs).

use std::future::Future;

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

use crate::convert::invalid;
use crate::{Action, Ec2, Ec2Error};

/// Map an SDK error to [`Ec2Error`], keeping EC2's error code and HTTP status.
pub(crate) fn sdk_error<E>(action: Action, err: SdkError<E, HttpResponse>) -> Ec2Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    // EC2's own error document carries the code and message; every other error keeps the
    // SDK's error as its source, so its chain (connector, I/O, ...) reaches the logs.
    match &err {
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status().as_u16();
            let code = err.code().unwrap_or("Unknown").to_string();
            let message = err.message().unwrap_or_default().to_string();
            Ec2Error::api(action, code, message, Some(status))
        }
        SdkError::ResponseError(ctx) => {
            let status = ctx.raw().status().as_u16();
            if status >= 500 || status == 429 {
                Ec2Error::api(
                    action,
                    format!("HTTP{status}"),
                    format!("HTTP {status} without an EC2 error document"),
                    Some(status),
                )
                .with_source(err)
            } else {
                invalid(action, format!("HTTP {status}")).with_source(err)
            }
        }
        SdkError::DispatchFailure(_) => Ec2Error::Transport {
            action,
            message: "the request could not be delivered".into(),
            source: Some(std::sync::Arc::new(err)),
        },
        SdkError::TimeoutError(_) => Ec2Error::Transport {
            action,
            message: "no answer in time".into(),
            source: Some(std::sync::Arc::new(err)),
        },
        _ => Ec2Error::Request {
            action,
            message: "the SDK refused the request".into(),
            source: Some(std::sync::Arc::new(err)),
        },
    }
}

impl Ec2 {
    /// One logical call on the shared call loop: `request()` builds and sends the request
    /// (once per attempt); SDK errors become [`Ec2Error`]s.
    pub(crate) async fn send<O, E, F, Fut>(&self, action: Action, request: F) -> Result<O, Ec2Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<O, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.caller
            .run(action, || {
                let sent = request();
                async move { sent.await.map_err(|e| sdk_error(action, e)) }
            })
            .await
    }

    /// Every page of a NextToken-paginated Describe ([`vpcnet_aws::Caller::pages`]):
    /// `request(token)` sends one page's request, `take` converts its items and returns its
    /// NextToken.
    pub(crate) async fn pages<O, E, T, F, Fut>(
        &self,
        action: Action,
        request: F,
        take: impl FnMut(O, &mut Vec<T>) -> Result<Option<String>, Ec2Error>,
    ) -> Result<Vec<T>, Ec2Error>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<O, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let request = &request;
        self.caller
            .pages(
                action,
                |token| {
                    let sent = request(token);
                    async move { sent.await.map_err(|e| sdk_error(action, e)) }
                },
                take,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Action;
    use aws_sdk_ec2::operation::assign_private_ip_addresses::AssignPrivateIpAddressesError;
    use aws_smithy_runtime_api::client::result::ConnectorError;

    #[test]
    fn a_transport_errors_cause_chain_survives() {
        let io = std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "tcp connect error: Connection refused (os error 111)",
        );
        let sdk: SdkError<AssignPrivateIpAddressesError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io(Box::new(io)));
        let e = sdk_error(Action::AssignPrivateIpAddresses, sdk);
        assert!(matches!(e, Ec2Error::Transport { .. }), "{e:?}");
        assert!(e.is_retryable());
        let chain = vpcnet_aws::error_chain(&e);
        assert!(
            chain.starts_with("EC2 AssignPrivateIpAddresses: transport error")
                && chain.contains("Connection refused (os error 111)"),
            "{chain}"
        );
        // The I/O error itself is reachable through source(), not only its text.
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        let mut found = false;
        while let Some(c) = cur {
            found |= c
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
            cur = c.source();
        }
        assert!(found, "the io::Error is in the chain");
        // A clone keeps it too (the error is shared by retries and observers).
        assert_eq!(vpcnet_aws::error_chain(&e.clone()), chain);
    }
}
