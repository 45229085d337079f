//! Building an [`Elbv2`] client the standard SDK way.

use aws_config::meta::region::RegionProviderChain;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_credential_types::Credentials;
use aws_types::region::Region;
use vpcnet_ec2::{CallSettings, StaticCredentials};

use crate::call::Caller;
use crate::Elbv2Error;

/// How to reach ELBv2.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Elbv2Options {
    /// Region; when None, `AWS_REGION` / `AWS_DEFAULT_REGION` (never IMDS).
    pub region: Option<String>,
    /// Endpoint URL; when None the SDK's order: `AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING_V2`,
    /// `AWS_ENDPOINT_URL`, then the region's public endpoint.
    pub endpoint_url: Option<String>,
    /// Explicit credentials; None = the SDK's default chain (environment, web identity, Pod
    /// Identity, IMDS).
    pub credentials: Option<StaticCredentials>,
    /// Deadlines, retries and client-side rate limits (vpcnet-ec2's; `describe_page_size` is
    /// capped at ELBv2's 400).
    pub calls: CallSettings,
}

/// The ELBv2 adapter: typed async methods over aws-sdk-elasticloadbalancingv2 (see
/// `elbv2.rs`), each under [`CallSettings`]. Cheap to clone; clones share the token buckets.
#[derive(Clone)]
pub struct Elbv2 {
    pub(crate) client: aws_sdk_elasticloadbalancingv2::Client,
    pub(crate) caller: Caller,
    region: String,
}

impl std::fmt::Debug for Elbv2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elbv2")
            .field("region", &self.region)
            .field("settings", &*self.caller.settings)
            .finish()
    }
}

impl Elbv2 {
    /// Build a client from `options`.
    ///
    /// Errors: [`Elbv2Error::Config`] when no region is set (set `AWS_REGION`) or the endpoint
    /// URL is not `http://` or `https://`.
    pub async fn connect(options: Elbv2Options) -> Result<Elbv2, Elbv2Error> {
        let region = RegionProviderChain::first_try(options.region.clone().map(Region::new))
            .or_else(aws_config::environment::region::EnvironmentVariableRegionProvider::new());
        let connect_timeout = options
            .calls
            .attempt_timeout
            .min(std::time::Duration::from_secs(5));
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(region)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(connect_timeout)
                    .build(),
            );
        if let Some(url) = &options.endpoint_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(Elbv2Error::Config(format!(
                    "ELBv2 endpoint URL {url:?} must start with http:// or https://"
                )));
            }
            loader = loader.endpoint_url(url);
        }
        if let Some(c) = &options.credentials {
            loader = loader.credentials_provider(Credentials::new(
                c.access_key_id.clone(),
                c.secret_access_key.clone(),
                c.session_token.clone(),
                None,
                "vpcnet-static",
            ));
        }
        Elbv2::from_sdk_config(&loader.load().await, options.calls)
    }

    /// Build a client from a loaded SDK configuration; the SDK's own retries are turned off
    /// ([`CallSettings`] governs them).
    pub fn from_sdk_config(sdk: &SdkConfig, calls: CallSettings) -> Result<Elbv2, Elbv2Error> {
        let region = sdk
            .region()
            .map(|r| r.to_string())
            .ok_or_else(|| Elbv2Error::Config("no AWS region: set AWS_REGION".into()))?;
        let conf = aws_sdk_elasticloadbalancingv2::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .build();
        Ok(Elbv2 {
            client: aws_sdk_elasticloadbalancingv2::Client::from_conf(conf),
            caller: Caller::new(calls),
            region,
        })
    }

    /// The region requests go to.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Deadlines, retries and rate limits in force.
    pub fn settings(&self) -> &CallSettings {
        &self.caller.settings
    }

    /// Page size of paginated describes: the settings' Describe page size, at most 400.
    pub(crate) fn page_size(&self) -> i32 {
        self.caller.settings.describe_page_size.clamp(1, 400) as i32
    }
}
