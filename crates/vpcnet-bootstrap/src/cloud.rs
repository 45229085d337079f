//! The cloud services bootstrap reads, behind small traits: IMDSv2, EC2 and EKS.
//!
//! The real adapters are `vpcnet-imds`'s [`vpcnet_imds::Imds`], [`AwsEc2`] (a lazily built
//! [`vpcnet_ec2::Ec2`], with its deadlines, retries and rate limits) and [`AwsEks`] (a lazily
//! built [`vpcnet_eks::Eks`]); tests point them at the emulator, or implement the traits with
//! fakes.

use std::fmt;
use std::time::Duration;

use tokio::sync::OnceCell;
use vpcnet_ec2::{CallSettings, Ec2Error, Ec2Options};
use vpcnet_imds::ImdsError;
use vpcnet_limits::InstanceLimits;

/// A failed cloud call: the action, EC2's error code when there is one, and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudError {
    /// e.g. `DescribeInstanceTypes`, `IMDS GET /latest/meta-data/mac`.
    pub action: String,
    /// EC2 error code, e.g. `UnauthorizedOperation`.
    pub code: Option<String>,
    pub message: String,
}

impl fmt::Display for CloudError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(c) => write!(f, "{} failed: {c}: {}", self.action, self.message),
            None => write!(f, "{} failed: {}", self.action, self.message),
        }
    }
}

impl std::error::Error for CloudError {}

impl CloudError {
    /// Worth another attempt: no answer at all (no code), throttling, a server-side error, or
    /// an instance EC2 does not list yet (eventual consistency right after launch).
    pub fn is_transient(&self) -> bool {
        matches!(
            self.code.as_deref(),
            None | Some(
                "RequestLimitExceeded"
                    | "Throttling"
                    | "ThrottlingException"
                    | "TooManyRequestsException"
                    | "InternalError"
                    | "InternalFailure"
                    | "ServerException"
                    | "ServiceUnavailable"
                    | "ServiceUnavailableException"
                    | "Unavailable"
                    | "InvalidInstanceID.NotFound"
            )
        )
    }
}

/// IMDSv2 reads; paths are relative to `/latest/meta-data/` (e.g. `mac`).
#[allow(async_fn_in_trait)]
pub trait Imds {
    /// The trimmed body at `path`, `Ok(None)` when IMDS answers 404 (no such item).
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError>;

    /// The instance's user data (`/latest/user-data`), `Ok(None)` when it has none.
    async fn user_data(&self) -> Result<Option<String>, CloudError>;
}

/// The EKS action bootstrap uses.
#[allow(async_fn_in_trait)]
pub trait Eks {
    /// `DescribeCluster` for the cluster `name`.
    async fn describe_cluster(&self, name: &str) -> Result<vpcnet_eks::ClusterInfo, CloudError>;
}

/// The EC2 actions bootstrap and `vpcnet max-pods` use.
#[allow(async_fn_in_trait)]
pub trait Ec2 {
    /// `DescribeInstanceTypes` for one type, as the limits the max-pods formula needs.
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError>;

    /// `DescribeInstances` for one instance: its `PrivateDnsName` (empty while EC2 has none
    /// yet, e.g. right after launch).
    async fn private_dns_name(&self, instance_id: &str) -> Result<String, CloudError>;
}

impl Imds for vpcnet_imds::Imds {
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
        self.get_opt(path)
            .await
            .map_err(|e| imds_error(&format!("/latest/meta-data/{path}"), &e))
    }

    async fn user_data(&self) -> Result<Option<String>, CloudError> {
        vpcnet_imds::Imds::user_data(self)
            .await
            .map_err(|e| imds_error("/latest/user-data", &e))
    }
}

fn imds_error(path: &str, e: &ImdsError) -> CloudError {
    CloudError {
        action: format!("IMDS GET {path}"),
        code: None,
        message: match e {
            ImdsError::Request { message, .. } => imds_cause(message),
            other => other.to_string(),
        },
    }
}

/// A short cause of a failed IMDS request from the SDK's error chain text, e.g.
/// `connection refused on the session token request` or `HTTP 403 on the session token
/// request`; without a known cause, the Display chain with the SDK's Debug dump cut off.
pub fn imds_cause(chain: &str) -> String {
    let lower = chain.to_ascii_lowercase();
    let step = if lower.contains("session token") {
        " on the session token request"
    } else {
        ""
    };
    let status = chain
        .split("StatusCode(")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .filter(|code| code.bytes().all(|b| b.is_ascii_digit()))
        .or_else(|| {
            chain
                .split("status: ")
                .nth(1)
                .and_then(|rest| rest.get(..3))
                .filter(|code| code.bytes().all(|b| b.is_ascii_digit()))
        });
    let cause = if lower.contains("connection refused") {
        "connection refused".to_string()
    } else if lower.contains("timed out") || lower.contains("timeout") {
        "timed out".to_string()
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        "the IMDS host name does not resolve".to_string()
    } else if let Some(code) = status {
        format!("HTTP {code}")
    } else {
        // DisplayErrorContext ends with ` (<Debug of the error>)`: keep the readable part.
        let cut = chain
            .match_indices(" (")
            .find(|(i, _)| {
                chain[i + 2..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_uppercase())
            })
            .map_or(chain.len(), |(i, _)| i);
        return chain[..cut].trim().to_string();
    };
    format!("{cause}{step}")
}

/// EC2 call settings for bootstrap: a short deadline per call (10 s, each HTTP attempt 5 s)
/// and at most two attempts per call, because the caller retries within its own overall
/// budget and must see each answer (e.g. `InternalError`) to name the last real cause.
pub fn bootstrap_call_settings() -> CallSettings {
    CallSettings {
        operation_timeout: Duration::from_secs(10),
        attempt_timeout: Duration::from_secs(5),
        retry: vpcnet_ec2::RetryPolicy {
            max_attempts: 2,
            ..Default::default()
        },
        ..CallSettings::default()
    }
}

/// EC2 through [`vpcnet_ec2::Ec2`], connected on first use so that a run which never calls
/// EC2 needs neither credentials nor a reachable endpoint.
pub struct AwsEc2 {
    options: Ec2Options,
    client: OnceCell<Result<vpcnet_ec2::Ec2, Ec2Error>>,
}

impl AwsEc2 {
    /// `options.region`: the instance's region (from IMDS); `None` uses `AWS_REGION`, then IMDS.
    /// `options.endpoint_url`: `None` honours `AWS_ENDPOINT_URL_EC2`, `AWS_EC2_ENDPOINT`,
    /// `AWS_ENDPOINT_URL`. Bootstrap passes [`bootstrap_call_settings`] as `options.calls`.
    pub fn new(options: Ec2Options) -> Self {
        Self {
            options,
            client: OnceCell::new(),
        }
    }

    /// Uses an already connected client (e.g. one pointed at the emulator).
    pub fn from_client(client: vpcnet_ec2::Ec2) -> Self {
        Self {
            options: Ec2Options::default(),
            client: OnceCell::new_with(Some(Ok(client))),
        }
    }

    async fn client(&self, action: &str) -> Result<&vpcnet_ec2::Ec2, CloudError> {
        self.client
            .get_or_init(|| vpcnet_ec2::Ec2::connect_unobserved(self.options.clone()))
            .await
            .as_ref()
            .map_err(|e| cloud_error(action, e))
    }
}

fn cloud_error(action: &str, e: &Ec2Error) -> CloudError {
    match e {
        Ec2Error::Api { code, message, .. } => CloudError {
            action: action.into(),
            code: Some(code.clone()),
            message: message.clone(),
        },
        other => CloudError {
            action: action.into(),
            code: None,
            message: other.to_string(),
        },
    }
}

impl Ec2 for AwsEc2 {
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError> {
        const ACTION: &str = "DescribeInstanceTypes";
        let client = self.client(ACTION).await?;
        let types = client
            .describe_instance_types(&[instance_type.to_string()])
            .await
            .map_err(|e| cloud_error(ACTION, &e))?;
        types
            .into_iter()
            .find(|l| l.instance_type == instance_type)
            .ok_or_else(|| CloudError {
                action: ACTION.into(),
                code: None,
                message: format!("EC2 does not know instance type {instance_type}"),
            })
    }

    async fn private_dns_name(&self, instance_id: &str) -> Result<String, CloudError> {
        const ACTION: &str = "DescribeInstances";
        let client = self.client(ACTION).await?;
        let inst = client
            .describe_instance(instance_id)
            .await
            .map_err(|e| cloud_error(ACTION, &e))?;
        Ok(inst.private_dns_name.unwrap_or_default())
    }
}

/// EKS through [`vpcnet_eks::Eks`], connected on first use so that a run given the endpoint
/// and CA needs neither EKS credentials nor a reachable endpoint.
pub struct AwsEks {
    options: vpcnet_eks::EksOptions,
    client: OnceCell<Result<vpcnet_eks::Eks, vpcnet_eks::EksError>>,
}

impl AwsEks {
    /// `options.region`: the instance's region (from IMDS). Endpoint: `options.endpoint_url`,
    /// else `AWS_ENDPOINT_URL_EKS`, else `AWS_ENDPOINT_URL`.
    pub fn new(options: vpcnet_eks::EksOptions) -> Self {
        Self {
            options,
            client: OnceCell::new(),
        }
    }
}

impl Eks for AwsEks {
    async fn describe_cluster(&self, name: &str) -> Result<vpcnet_eks::ClusterInfo, CloudError> {
        const ACTION: &str = "DescribeCluster";
        let fail = |e: &vpcnet_eks::EksError| CloudError {
            action: ACTION.into(),
            code: e.code().map(str::to_string),
            message: match e {
                vpcnet_eks::EksError::Api { message, .. } => message.clone(),
                other => other.to_string(),
            },
        };
        let client = self
            .client
            .get_or_init(|| vpcnet_eks::Eks::connect(self.options.clone()))
            .await
            .as_ref()
            .map_err(fail)?;
        client.describe_cluster(name).await.map_err(|e| fail(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::imds_cause;

    #[test]
    fn imds_cause_is_short_and_names_the_step() {
        let refused = "failed to load IMDS session token: dispatch failure: io error: client error (Connect): tcp connect error: Connection refused (os error 111) (FailedToLoadToken(FailedToLoadToken { source: DispatchFailure(DispatchFailure { source: ConnectorError { kind: Io } }) }))";
        assert_eq!(
            imds_cause(refused),
            "connection refused on the session token request"
        );
        let forbidden = "failed to load IMDS session token: service error (FailedToLoadToken(FailedToLoadToken { source: ServiceError(ServiceError { raw: Response { status: StatusCode(403), headers: {} } }) }))";
        assert_eq!(
            imds_cause(forbidden),
            "HTTP 403 on the session token request"
        );
        assert_eq!(
            imds_cause("io error: operation timed out (Io(...))"),
            "timed out"
        );
        assert_eq!(
            imds_cause("unexpected answer (Unhandled(Something))"),
            "unexpected answer"
        );
    }
}
