//! Building an [`Elbv2`] client from the shared SDK configuration ([`vpcnet_aws::sdk_config`]).

use aws_sdk_elasticloadbalancingv2::config::retry::RetryConfig;
use vpcnet_aws::{
    region_of, sdk_config, CallSettings, NoObserver, RegionLookup, SdkConfig, SdkOptions,
    StaticCredentials,
};

use crate::Elbv2Error;

/// The call loop of an [`Elbv2`] client: the shared one, with ELBv2's action names (a
/// `Describe*` action draws from the Describe bucket, the rest from the mutating one).
pub(crate) type Caller = vpcnet_aws::Caller<&'static str, Elbv2Error>;

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
    /// Deadlines, retries and client-side rate limits (the shared
    /// [`CallSettings`]; `describe_page_size` is capped at ELBv2's 400).
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
            .field("settings", self.caller.settings())
            .finish()
    }
}

impl Elbv2 {
    /// Build a client from `options`.
    ///
    /// Errors: [`Elbv2Error::Config`] when no region is set (set `AWS_REGION`) or the endpoint
    /// URL is not `http://` or `https://`.
    pub async fn connect(options: Elbv2Options) -> Result<Elbv2, Elbv2Error> {
        let sdk = sdk_config(&SdkOptions {
            service: "ELBv2",
            region: options.region.clone(),
            region_lookup: RegionLookup::Environment,
            endpoint_url: options.endpoint_url.clone(),
            credentials: options.credentials.clone(),
            connect_timeout: options
                .calls
                .attempt_timeout
                .min(std::time::Duration::from_secs(5)),
        })
        .await
        .map_err(|e| Elbv2Error::Config(e.to_string()))?;
        Elbv2::from_sdk_config(&sdk, options.calls)
    }

    /// Build a client from a loaded SDK configuration; the SDK's own retries are turned off
    /// ([`CallSettings`] governs them).
    pub fn from_sdk_config(sdk: &SdkConfig, calls: CallSettings) -> Result<Elbv2, Elbv2Error> {
        let region = region_of(sdk, "no AWS region: set AWS_REGION")
            .map_err(|e| Elbv2Error::Config(e.to_string()))?;
        let conf = aws_sdk_elasticloadbalancingv2::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .build();
        Ok(Elbv2 {
            client: aws_sdk_elasticloadbalancingv2::Client::from_conf(conf),
            caller: Caller::new("ELBv2", calls, std::sync::Arc::new(NoObserver)),
            region,
        })
    }

    /// The region requests go to.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Deadlines, retries and rate limits in force.
    pub fn settings(&self) -> &CallSettings {
        self.caller.settings()
    }

    /// Page size of paginated describes: the settings' Describe page size, at most 400.
    pub(crate) fn page_size(&self) -> i32 {
        self.caller.settings().describe_page_size.clamp(1, 400) as i32
    }
}
