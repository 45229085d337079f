//! Building an [`Ec2`] client from the shared SDK configuration ([`vpcnet_aws::sdk_config`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::config::retry::RetryConfig;
use vpcnet_aws::{
    region_of, sdk_config, CallSettings, ConfigError, RegionLookup, SdkConfig, SdkOptions,
    StaticCredentials,
};

use crate::call::{caller, Caller};
use crate::{Ec2Error, Ec2Observer, NoopObserver};

/// How to reach EC2.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ec2Options {
    /// Region; when `None`: `AWS_REGION` / `AWS_DEFAULT_REGION`, then IMDS `placement/region`.
    pub region: Option<String>,
    /// EC2 endpoint URL; when `None`: `AWS_ENDPOINT_URL_EC2`, then `AWS_EC2_ENDPOINT` (the
    /// VPC CNI's variable), then `AWS_ENDPOINT_URL`, then the region's public endpoint.
    pub endpoint_url: Option<String>,
    /// IMDS endpoint used to find the region; when `None`, `AWS_EC2_METADATA_SERVICE_ENDPOINT`
    /// or `http://169.254.169.254`.
    pub imds_endpoint: Option<String>,
    /// Explicit credentials; `None` = the SDK's default credential chain.
    pub credentials: Option<StaticCredentials>,
    /// Deadlines, retries and rate limits.
    pub calls: CallSettings,
}

/// The EC2 adapter: typed async methods over aws-sdk-ec2 (see `ec2.rs` for the actions),
/// each under [`CallSettings`]. Cheap to clone; clones share the token buckets.
#[derive(Clone)]
pub struct Ec2 {
    pub(crate) client: aws_sdk_ec2::Client,
    pub(crate) caller: Caller,
    region: String,
}

impl fmt::Debug for Ec2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ec2")
            .field("region", &self.region)
            .field("settings", self.caller.settings())
            .finish()
    }
}

impl Ec2 {
    /// Build a client from `options`, reporting every request to `observer`.
    ///
    /// Errors: [`Ec2Error::Config`] when no region can be found (set `AWS_REGION`, or run on
    /// an instance whose IMDS answers `placement/region`) or an endpoint URL is malformed.
    pub async fn connect(
        options: Ec2Options,
        observer: Arc<dyn Ec2Observer>,
    ) -> Result<Ec2, Ec2Error> {
        let sdk = load_sdk_config(&options).await?;
        Ec2::from_sdk_config(&sdk, options.calls, observer)
    }

    /// Build a client from an already loaded SDK configuration. The SDK's own retries are
    /// turned off: [`CallSettings`] governs retries.
    pub fn from_sdk_config(
        sdk: &SdkConfig,
        calls: CallSettings,
        observer: Arc<dyn Ec2Observer>,
    ) -> Result<Ec2, Ec2Error> {
        let region = region_of(
            sdk,
            "no AWS region: set AWS_REGION, or run where IMDS answers placement/region",
        )
        .map_err(config_error)?;
        let conf = aws_sdk_ec2::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .build();
        Ok(Ec2 {
            client: aws_sdk_ec2::Client::from_conf(conf),
            caller: caller(calls, observer),
            region,
        })
    }

    /// [`Ec2::connect`] without an observer.
    pub async fn connect_unobserved(options: Ec2Options) -> Result<Ec2, Ec2Error> {
        Ec2::connect(options, Arc::new(NoopObserver)).await
    }

    /// The region requests go to.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Deadlines, retries and rate limits in force.
    pub fn settings(&self) -> &CallSettings {
        self.caller.settings()
    }
}

/// The shared layer's configuration error as [`Ec2Error::Config`].
fn config_error(e: ConfigError) -> Ec2Error {
    Ec2Error::Config {
        message: e.message,
        source: e.source,
    }
}

/// The endpoint to set on the SDK loader when none is given explicitly: `AWS_EC2_ENDPOINT`
/// (the VPC CNI's variable) unless `AWS_ENDPOINT_URL_EC2` is set, which the SDK reads itself
/// and which wins. `None` leaves the SDK's own order (`AWS_ENDPOINT_URL_EC2`,
/// `AWS_ENDPOINT_URL`). `var` reads an environment variable; empty values count as unset.
fn endpoint_from_env(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if set("AWS_ENDPOINT_URL_EC2").is_some() {
        return None;
    }
    set("AWS_EC2_ENDPOINT").map(|v| v.trim().to_string())
}

/// Load the SDK configuration ([`vpcnet_aws::sdk_config`]): region explicit > env > IMDS,
/// endpoint explicit > `AWS_ENDPOINT_URL_EC2` > `AWS_EC2_ENDPOINT` > `AWS_ENDPOINT_URL`,
/// credentials explicit > default chain.
async fn load_sdk_config(options: &Ec2Options) -> Result<SdkConfig, Ec2Error> {
    let endpoint = options
        .endpoint_url
        .clone()
        .or_else(|| endpoint_from_env(|name| std::env::var(name).ok()));
    sdk_config(&SdkOptions {
        service: "EC2",
        region: options.region.clone(),
        region_lookup: RegionLookup::EnvironmentThenImds {
            imds_endpoint: options.imds_endpoint.clone(),
        },
        endpoint_url: endpoint,
        credentials: options.credentials.clone(),
        connect_timeout: options.calls.attempt_timeout.min(Duration::from_secs(5)),
    })
    .await
    .map_err(config_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_region_is_a_config_error_naming_the_fix() {
        // The region must come from nowhere: a test that cannot run fails.
        assert!(
            std::env::var_os("AWS_REGION").is_none()
                && std::env::var_os("AWS_DEFAULT_REGION").is_none(),
            "this test needs AWS_REGION and AWS_DEFAULT_REGION unset (it checks the region lookup)"
        );
        // IMDS on a closed loopback port: the region lookup fails fast, nothing leaves the host.
        let e = Ec2::connect_unobserved(Ec2Options {
            imds_endpoint: Some("http://127.0.0.1:9".into()),
            endpoint_url: Some("http://127.0.0.1:9".into()),
            ..Ec2Options::default()
        })
        .await
        .unwrap_err();
        assert!(matches!(e, Ec2Error::Config { .. }), "{e}");
        assert!(e.to_string().contains("AWS_REGION"), "{e}");
    }

    #[tokio::test]
    async fn endpoint_must_be_http() {
        let e = Ec2::connect_unobserved(Ec2Options {
            region: Some("us-east-1".into()),
            endpoint_url: Some("ec2.local:8080".into()),
            ..Ec2Options::default()
        })
        .await
        .unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
    }

    #[test]
    fn aws_ec2_endpoint_sits_between_the_ec2_specific_and_the_global_variable() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        // AWS_EC2_ENDPOINT alone, or with AWS_ENDPOINT_URL: it is used.
        assert_eq!(
            endpoint_from_env(env(&[("AWS_EC2_ENDPOINT", "http://cni:1")])).as_deref(),
            Some("http://cni:1")
        );
        assert_eq!(
            endpoint_from_env(env(&[
                ("AWS_ENDPOINT_URL", "http://all:1"),
                ("AWS_EC2_ENDPOINT", "http://cni:1"),
            ]))
            .as_deref(),
            Some("http://cni:1")
        );
        // AWS_ENDPOINT_URL_EC2 wins: left to the SDK.
        assert_eq!(
            endpoint_from_env(env(&[
                ("AWS_ENDPOINT_URL_EC2", "http://ec2:1"),
                ("AWS_EC2_ENDPOINT", "http://cni:1"),
            ])),
            None
        );
        // Neither: the SDK's own order (AWS_ENDPOINT_URL, then the public endpoint).
        assert_eq!(
            endpoint_from_env(env(&[("AWS_ENDPOINT_URL", "http://all:1")])),
            None
        );
        assert_eq!(endpoint_from_env(env(&[("AWS_EC2_ENDPOINT", " ")])), None);
    }
}
