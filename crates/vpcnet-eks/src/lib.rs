//! EKS adapter: the one crate that depends on aws-sdk-eks. Node bootstrap calls
//! `DescribeCluster` (REST-JSON `GET /clusters/{name}`, SigV4 with service `eks`) for what
//! bootstrap.sh looks up when the endpoint or CA is not given: endpoint, CA, service CIDRs,
//! IP family, and the cluster ID and Outpost ARNs of a local cluster on Outposts.
//!
//! [`Eks::connect`] builds the client from the shared [`vpcnet_aws::sdk_config`]: region
//! explicit, else env, else IMDS; endpoint explicit, else `AWS_ENDPOINT_URL_EKS`, else
//! `AWS_ENDPOINT_URL`; credentials explicit, else the default chain. [`Eks::describe_cluster`]
//! returns a plain [`ClusterInfo`]. Calls run on the shared call loop ([`vpcnet_aws::Caller`]:
//! client-side token bucket, deadline) with one attempt each: the SDK's own retries are off and
//! the caller retries under its own budget ([`EksError::is_transient`]).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_eks::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use serde::{Deserialize, Serialize};
pub use vpcnet_aws::StaticCredentials;
use vpcnet_aws::{
    classify, CallError, CallSettings, NoObserver, RegionLookup, Retry, RetryPolicy, SdkOptions,
};

/// The cluster as DescribeCluster reports it (the fields node bootstrap needs).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterInfo {
    pub name: String,
    /// `CREATING`, `ACTIVE`, `DELETING`, `FAILED`, `UPDATING`, `PENDING`.
    pub status: String,
    /// API server URL (`https://...`); empty while the cluster is created.
    pub endpoint: Option<String>,
    /// `certificateAuthority.data`: base64 of the PEM CA.
    pub certificate_authority: Option<String>,
    /// `kubernetesNetworkConfig.serviceIpv4Cidr`.
    pub service_ipv4_cidr: Option<String>,
    /// `kubernetesNetworkConfig.serviceIpv6Cidr`.
    pub service_ipv6_cidr: Option<String>,
    /// `kubernetesNetworkConfig.ipFamily`: `ipv4` or `ipv6`.
    pub ip_family: Option<String>,
    /// `id`: set for local clusters on Outposts (their nodes authenticate with it).
    pub id: Option<String>,
    /// `outpostConfig.outpostArns`: non-empty for a local cluster on Outposts.
    pub outpost_arns: Vec<String>,
    /// Kubernetes version, e.g. `1.31`.
    pub version: Option<String>,
}

/// How to reach EKS.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EksOptions {
    /// Region; `None`: `AWS_REGION`, then IMDS.
    pub region: Option<String>,
    /// Endpoint URL; `None`: `AWS_ENDPOINT_URL_EKS`, `AWS_ENDPOINT_URL`, the region's endpoint.
    pub endpoint_url: Option<String>,
    /// IMDS endpoint for the region lookup; `None`: `AWS_EC2_METADATA_SERVICE_ENDPOINT` or the
    /// link-local default.
    pub imds_endpoint: Option<String>,
    /// Explicit credentials; `None`: the SDK's default chain.
    pub credentials: Option<StaticCredentials>,
    /// Deadline of one call (all its HTTP exchange); `None`: 10 s.
    pub timeout: Option<Duration>,
}

/// A failed EKS call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EksError {
    /// The client could not be configured (no region, malformed endpoint URL).
    #[error("{0}")]
    Config(String),
    /// EKS answered with an error, e.g. `ResourceNotFoundException`, `AccessDeniedException`,
    /// `ThrottlingException`, `ServerException`.
    #[error("{code}: {message}")]
    Api {
        code: String,
        message: String,
        /// HTTP status.
        status: u16,
    },
    /// No answer: connection refused, DNS, timeout.
    #[error("{0}")]
    Transport(String),
}

impl EksError {
    /// The EKS error code, if EKS answered.
    pub fn code(&self) -> Option<&str> {
        match self {
            EksError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Worth retrying: no answer, throttling, or a server-side error (5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            EksError::Transport(_) => true,
            EksError::Api { code, status, .. } => {
                *status >= 500
                    || *status == 429
                    || matches!(
                        code.as_str(),
                        "ThrottlingException" | "TooManyRequestsException" | "ServerException"
                    )
            }
            EksError::Config(_) => false,
        }
    }
}

impl CallError<&'static str> for EksError {
    fn is_retryable(&self) -> bool {
        self.is_transient()
    }

    fn is_throttle(&self) -> bool {
        matches!(self, EksError::Api { code, status, .. } if classify(code, Some(*status)) == Retry::Throttle)
    }

    fn timeout(action: &'static str, after: Duration, attempts: u32) -> Self {
        EksError::Transport(format!(
            "EKS {action} did not complete within {after:?} ({attempts} attempt(s))"
        ))
    }
}

/// The EKS client.
#[derive(Debug, Clone)]
pub struct Eks {
    client: aws_sdk_eks::Client,
    caller: vpcnet_aws::Caller<&'static str, EksError>,
}

/// One attempt per call under `timeout`, with the default token buckets: node bootstrap
/// retries under its own budget.
fn call_settings(timeout: Duration) -> CallSettings {
    CallSettings {
        operation_timeout: timeout,
        attempt_timeout: timeout,
        retry: RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        },
        ..CallSettings::default()
    }
}

impl Eks {
    /// Builds the client (no request is made).
    ///
    /// Errors: [`EksError::Config`] when no region can be found (set `AWS_REGION`) or the
    /// endpoint URL is malformed.
    pub async fn connect(options: EksOptions) -> Result<Eks, EksError> {
        let timeout = options.timeout.unwrap_or(Duration::from_secs(10));
        let sdk = vpcnet_aws::sdk_config(&SdkOptions {
            service: "EKS",
            region: options.region.clone(),
            region_lookup: RegionLookup::EnvironmentThenImds {
                imds_endpoint: options.imds_endpoint.clone(),
            },
            endpoint_url: options.endpoint_url.clone(),
            credentials: options.credentials.clone(),
            connect_timeout: timeout.min(Duration::from_secs(5)),
        })
        .await
        .map_err(|e| EksError::Config(e.to_string()))?;
        if sdk.region().is_none() {
            return Err(EksError::Config(
                "no AWS region: set AWS_REGION, or run where IMDS answers placement/region".into(),
            ));
        }
        Ok(Eks {
            client: aws_sdk_eks::Client::new(&sdk),
            caller: vpcnet_aws::Caller::new("EKS", call_settings(timeout), Arc::new(NoObserver)),
        })
    }

    /// EKS `DescribeCluster` for `name`.
    ///
    /// Errors: [`EksError::Api`] (e.g. `ResourceNotFoundException` for an unknown name,
    /// `AccessDeniedException` without `eks:DescribeCluster`), [`EksError::Transport`].
    pub async fn describe_cluster(&self, name: &str) -> Result<ClusterInfo, EksError> {
        let out = self
            .caller
            .run("DescribeCluster", || {
                let sent = self.client.describe_cluster().name(name).send();
                async move { sent.await.map_err(sdk_error) }
            })
            .await?;
        let c = out.cluster().ok_or_else(|| EksError::Api {
            code: "EmptyResponse".into(),
            message: format!("DescribeCluster {name} answered without a cluster"),
            status: 200,
        })?;
        let net = c.kubernetes_network_config();
        Ok(ClusterInfo {
            name: c.name().unwrap_or(name).to_string(),
            status: c
                .status()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            endpoint: c.endpoint().filter(|s| !s.is_empty()).map(str::to_string),
            certificate_authority: c
                .certificate_authority()
                .and_then(|ca| ca.data())
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            service_ipv4_cidr: net
                .and_then(|n| n.service_ipv4_cidr())
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            service_ipv6_cidr: net
                .and_then(|n| n.service_ipv6_cidr())
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            ip_family: net
                .and_then(|n| n.ip_family())
                .map(|f| f.as_str().to_string()),
            id: c.id().filter(|s| !s.is_empty()).map(str::to_string),
            outpost_arns: c
                .outpost_config()
                .map(|o| o.outpost_arns().to_vec())
                .unwrap_or_default(),
            version: c.version().map(str::to_string),
        })
    }
}

fn sdk_error<E>(e: SdkError<E, HttpResponse>) -> EksError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match &e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            EksError::Api {
                code: err.code().unwrap_or("Unknown").to_string(),
                message: err.message().unwrap_or("").to_string(),
                status: se.raw().status().as_u16(),
            }
        }
        _ => {
            let text = DisplayErrorContext(&e).to_string();
            // The SDK's Display chain ends with a Debug dump in parentheses: keep the readable part.
            let short = text
                .match_indices(" (")
                .find(|(i, _)| text[i + 2..].starts_with(|c: char| c.is_ascii_uppercase()))
                .map_or(text.as_str(), |(i, _)| &text[..i]);
            EksError::Transport(short.trim().to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_that_gets_no_answer_ends_at_the_deadline_as_a_transient_error() {
        // Accepts connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = listener.accept().await {
                conns.push(c);
            }
        });
        let eks = Eks::connect(EksOptions {
            region: Some("us-east-1".into()),
            endpoint_url: Some(endpoint),
            credentials: Some(StaticCredentials {
                access_key_id: "AKID".into(),
                secret_access_key: "secret".into(),
                session_token: None,
            }),
            timeout: Some(Duration::from_millis(300)),
            ..EksOptions::default()
        })
        .await
        .unwrap();
        let t0 = tokio::time::Instant::now();
        let e = eks.describe_cluster("c").await.unwrap_err();
        assert_eq!(
            e,
            EksError::Transport(
                "EKS DescribeCluster did not complete within 300ms (1 attempt(s))".into()
            )
        );
        assert!(e.is_transient());
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(3),
            "one attempt, no retries: {took:?}"
        );
        held.abort();
    }
}
