//! The SDK configuration every vpcnet AWS adapter starts from: region, endpoint, credentials,
//! connect timeout, the SDK's own retries off.

use std::fmt;
use std::time::Duration;

use aws_config::imds::region::ImdsRegionProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use aws_credential_types::Credentials;
use aws_types::region::Region;
use aws_types::SdkConfig;

use crate::ConfigError;

/// Access key credentials given explicitly (tests, the lab). In production leave them unset:
/// the SDK's default chain then reads the environment (`AWS_ACCESS_KEY_ID`, ...), web identity
/// (IRSA), ECS/EKS Pod Identity or IMDS.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .finish()
    }
}

/// Where the region comes from when none is given explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionLookup {
    /// `AWS_REGION` / `AWS_DEFAULT_REGION` only (a controller that may run off EC2).
    Environment,
    /// The environment, then IMDS `placement/region` at `imds_endpoint` (else
    /// `AWS_EC2_METADATA_SERVICE_ENDPOINT` or the link-local default).
    EnvironmentThenImds { imds_endpoint: Option<String> },
}

/// What [`sdk_config`] builds the configuration from.
#[derive(Debug, Clone, PartialEq)]
pub struct SdkOptions {
    /// The service's short name (`EC2`, `ELBv2`, `EKS`), named in configuration errors.
    pub service: &'static str,
    /// Region; `None`: [`SdkOptions::region_lookup`].
    pub region: Option<String>,
    pub region_lookup: RegionLookup,
    /// Endpoint URL (http or https); `None`: the SDK's own `AWS_ENDPOINT_URL_<SERVICE>`, then
    /// `AWS_ENDPOINT_URL`, then the region's public endpoint.
    pub endpoint_url: Option<String>,
    /// Explicit credentials; `None`: the SDK's default credential chain.
    pub credentials: Option<StaticCredentials>,
    /// Deadline of establishing a connection.
    pub connect_timeout: Duration,
}

impl SdkOptions {
    /// Options for `service` with everything from the environment (and IMDS for the region),
    /// connections timing out after 5 s.
    pub fn new(service: &'static str) -> Self {
        SdkOptions {
            service,
            region: None,
            region_lookup: RegionLookup::EnvironmentThenImds {
                imds_endpoint: None,
            },
            endpoint_url: None,
            credentials: None,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

fn imds_client(endpoint: Option<&str>) -> Result<aws_config::imds::Client, ConfigError> {
    let builder = aws_config::imds::Client::builder();
    let builder = match endpoint {
        Some(url) => builder.endpoint(url).map_err(|e| ConfigError {
            message: format!("bad IMDS endpoint {url:?}"),
            source: Some(e.into()),
        })?,
        None => builder,
    };
    Ok(builder.build())
}

/// Load the SDK configuration every vpcnet AWS adapter starts from: region explicit >
/// `AWS_REGION`/`AWS_DEFAULT_REGION` > IMDS `placement/region` (when
/// [`RegionLookup::EnvironmentThenImds`]); endpoint explicit > the SDK's own
/// `AWS_ENDPOINT_URL_<SERVICE>` > `AWS_ENDPOINT_URL`; credentials explicit > the default chain;
/// the SDK's own retries off (adapters retry under [`crate::CallSettings`]); connections time
/// out after `connect_timeout`. A missing region is not an error here: see [`region_of`].
///
/// Errors: [`ConfigError`] for a malformed IMDS endpoint, or an endpoint URL that is not
/// http(s) (the message names `service`).
pub async fn sdk_config(options: &SdkOptions) -> Result<SdkConfig, ConfigError> {
    let env = || aws_config::environment::region::EnvironmentVariableRegionProvider::new();
    let explicit = RegionProviderChain::first_try(options.region.clone().map(Region::new));
    let region = match &options.region_lookup {
        RegionLookup::Environment => explicit.or_else(env()),
        RegionLookup::EnvironmentThenImds { imds_endpoint } => {
            let imds = ImdsRegionProvider::builder()
                .imds_client(imds_client(imds_endpoint.as_deref())?)
                .build();
            explicit.or_else(env()).or_else(imds)
        }
    };
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(region)
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(options.connect_timeout)
                .build(),
        );
    if let Some(url) = &options.endpoint_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ConfigError::new(format!(
                "{} endpoint URL {url:?} must start with http:// or https://",
                options.service
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
    Ok(loader.load().await)
}

/// The region of a loaded configuration. Errors: [`ConfigError`] with `missing`, the message
/// that tells the operator how to set one, when there is none.
pub fn region_of(sdk: &SdkConfig, missing: &str) -> Result<String, ConfigError> {
    sdk.region()
        .map(|r| r.to_string())
        .ok_or_else(|| ConfigError::new(missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endpoint_must_be_http_and_the_error_names_the_service() {
        let mut o = SdkOptions::new("ELBv2");
        o.region = Some("us-east-1".into());
        o.endpoint_url = Some("elb.local:8080".into());
        let e = sdk_config(&o).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "ELBv2 endpoint URL \"elb.local:8080\" must start with http:// or https://"
        );
    }

    #[tokio::test]
    async fn explicit_region_endpoint_and_credentials_are_used() {
        let mut o = SdkOptions::new("EC2");
        o.region = Some("eu-west-3".into());
        o.region_lookup = RegionLookup::Environment;
        o.endpoint_url = Some("http://127.0.0.1:9".into());
        o.credentials = Some(StaticCredentials {
            access_key_id: "AKID".into(),
            secret_access_key: "secret".into(),
            session_token: None,
        });
        let sdk = sdk_config(&o).await.unwrap();
        assert_eq!(region_of(&sdk, "none").unwrap(), "eu-west-3");
        assert_eq!(sdk.endpoint_url(), Some("http://127.0.0.1:9"));
        assert!(sdk.credentials_provider().is_some());
        assert_eq!(
            sdk.timeout_config().and_then(|t| t.connect_timeout()),
            Some(Duration::from_secs(5))
        );
    }

    #[tokio::test]
    async fn a_malformed_imds_endpoint_is_a_config_error() {
        let mut o = SdkOptions::new("EKS");
        o.region_lookup = RegionLookup::EnvironmentThenImds {
            imds_endpoint: Some("not a url at all".into()),
        };
        let e = sdk_config(&o).await.unwrap_err();
        assert!(e.to_string().starts_with("bad IMDS endpoint"), "{e}");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn credentials_debug_redacts_the_secret() {
        let c = StaticCredentials {
            access_key_id: "AKID".into(),
            secret_access_key: "s3cr3t".into(),
            session_token: None,
        };
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }
}
