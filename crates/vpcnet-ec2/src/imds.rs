//! Instance metadata (IMDSv2) through aws-config's IMDS client: identity, placement and the
//! per-MAC view of attached ENIs. IMDS is a hint that may lag EC2; never free or hand out an
//! address on IMDS evidence alone.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::Duration;

use aws_config::imds::client::error::ImdsError as SdkImdsError;
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

const META: &str = "/latest/meta-data/";

/// Error of an IMDS read; always names the metadata path.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ImdsError {
    /// IMDS answered 404: the item does not exist (yet) for this instance.
    #[error("IMDS {path}: not found (404)")]
    NotFound { path: String },
    /// IMDS could not be reached or answered an error (token, timeout, 5xx, ...).
    #[error("IMDS {path}: {message}; check that the instance metadata service is reachable (AWS_EC2_METADATA_SERVICE_ENDPOINT) and allows IMDSv2 with hop limit ≥ 2 for pods")]
    Request {
        path: String,
        message: String,
        /// The SDK client's error, with its chain.
        #[source]
        source: Option<crate::error::Cause>,
    },
    /// The value is not what the path should hold.
    #[error("IMDS {path}: cannot parse {value:?}: {message}")]
    Parse {
        path: String,
        value: String,
        message: String,
    },
    /// The endpoint URL is malformed.
    #[error("IMDS endpoint {endpoint:?}: {message}")]
    Endpoint {
        endpoint: String,
        message: String,
        #[source]
        source: Option<crate::error::Cause>,
    },
}

impl ImdsError {
    /// The metadata path the error is about (empty for [`ImdsError::Endpoint`]).
    pub fn path(&self) -> &str {
        match self {
            ImdsError::NotFound { path }
            | ImdsError::Request { path, .. }
            | ImdsError::Parse { path, .. } => path,
            ImdsError::Endpoint { .. } => "",
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, ImdsError::NotFound { .. })
    }
}

/// One ENI as IMDS `network/interfaces/macs/<mac>/` describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImdsInterface {
    /// MAC address, lower-case.
    pub mac: String,
    /// `device-number` (0 = primary ENI).
    pub device_number: u32,
    /// `network-card` (0 when IMDS does not list it).
    pub network_card: u32,
    /// `interface-id` (`eni-...`).
    pub interface_id: String,
    pub subnet_id: String,
    /// `subnet-ipv4-cidr-block`.
    pub subnet_cidr: Ipv4Net,
    pub vpc_id: String,
    /// `vpc-ipv4-cidr-blocks` (the primary CIDR first).
    pub vpc_cidrs: Vec<Ipv4Net>,
    /// `security-group-ids`.
    pub security_group_ids: Vec<String>,
    /// `local-ipv4s`: the primary address first, then the secondary ones.
    pub local_ipv4s: Vec<Ipv4Addr>,
    /// `ipv4-prefix`: delegated /28 prefixes (empty when none).
    pub ipv4_prefixes: Vec<Ipv4Net>,
}

/// Reader of the instance metadata service (IMDSv2, session token handled by aws-config).
#[derive(Debug, Clone)]
pub struct Imds {
    client: aws_config::imds::Client,
}

impl Imds {
    /// Client for the endpoint in `AWS_EC2_METADATA_SERVICE_ENDPOINT`, else
    /// `http://169.254.169.254`.
    pub fn new() -> Self {
        Imds {
            client: aws_config::imds::Client::builder().build(),
        }
    }

    /// Client for an explicit endpoint such as `http://127.0.0.1:1338` (the emulator).
    /// `timeout` bounds each read (all attempts).
    pub fn with_endpoint(endpoint: &str, timeout: Option<Duration>) -> Result<Self, ImdsError> {
        let builder = aws_config::imds::Client::builder()
            .endpoint(endpoint)
            .map_err(|e| ImdsError::Endpoint {
                endpoint: endpoint.to_string(),
                message: "not a usable URL".into(),
                source: Some(e.into()),
            })?;
        let builder = match timeout {
            Some(t) => builder.operation_timeout(t),
            None => builder,
        };
        Ok(Imds {
            client: builder.build(),
        })
    }

    /// Wrap an aws-config IMDS client configured elsewhere.
    pub fn from_client(client: aws_config::imds::Client) -> Self {
        Imds { client }
    }

    /// Raw value of `/latest/meta-data/<path>`, trimmed.
    ///
    /// Errors: [`ImdsError::NotFound`] on 404, [`ImdsError::Request`] otherwise.
    pub async fn get(&self, path: &str) -> Result<String, ImdsError> {
        let full = format!("{META}{}", path.trim_start_matches('/'));
        match self.client.get(full.clone()).await {
            Ok(v) => Ok(v.as_ref().trim().to_string()),
            Err(SdkImdsError::ErrorResponse(r)) if r.response().status().as_u16() == 404 => {
                Err(ImdsError::NotFound { path: full })
            }
            Err(e) => Err(ImdsError::Request {
                path: full,
                // The whole chain with the SDK's dump, which vpcnet-bootstrap reads the
                // failed step and status from; the error itself is kept as the source.
                message: aws_sdk_ec2::error::DisplayErrorContext(&e).to_string(),
                source: Some(std::sync::Arc::new(e)),
            }),
        }
    }

    /// The instance's user data (`/latest/user-data`), `Ok(None)` when it has none (404).
    /// Errors: as [`Imds::get`]; user data that is not UTF-8 text (e.g. gzip) is a
    /// [`ImdsError::Request`] from the SDK client.
    pub async fn user_data(&self) -> Result<Option<String>, ImdsError> {
        const PATH: &str = "/latest/user-data";
        match self.client.get(PATH).await {
            Ok(v) => Ok(Some(v.as_ref().to_string())),
            Err(SdkImdsError::ErrorResponse(r)) if r.response().status().as_u16() == 404 => {
                Ok(None)
            }
            Err(e) => Err(ImdsError::Request {
                path: PATH.into(),
                // The whole chain with the SDK's dump, which vpcnet-bootstrap reads the
                // failed step and status from; the error itself is kept as the source.
                message: aws_sdk_ec2::error::DisplayErrorContext(&e).to_string(),
                source: Some(std::sync::Arc::new(e)),
            }),
        }
    }

    /// Like [`Imds::get`] but a 404 is `Ok(None)`.
    pub async fn get_opt(&self, path: &str) -> Result<Option<String>, ImdsError> {
        match self.get(path).await {
            Ok(v) => Ok(Some(v)),
            Err(ImdsError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn parsed<T: FromStr>(&self, path: &str) -> Result<T, ImdsError>
    where
        T::Err: std::fmt::Display,
    {
        let v = self.get(path).await?;
        parse_value(path, &v)
    }

    async fn lines(&self, path: &str, optional: bool) -> Result<Vec<String>, ImdsError> {
        let v = if optional {
            self.get_opt(path).await?.unwrap_or_default()
        } else {
            self.get(path).await?
        };
        Ok(v.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect())
    }

    async fn parsed_lines<T: FromStr>(
        &self,
        path: &str,
        optional: bool,
    ) -> Result<Vec<T>, ImdsError>
    where
        T::Err: std::fmt::Display,
    {
        self.lines(path, optional)
            .await?
            .iter()
            .map(|l| parse_value(path, l))
            .collect()
    }

    /// `instance-id` (`i-...`).
    pub async fn instance_id(&self) -> Result<String, ImdsError> {
        self.get("instance-id").await
    }

    /// `instance-type` (e.g. `m5.large`).
    pub async fn instance_type(&self) -> Result<String, ImdsError> {
        self.get("instance-type").await
    }

    /// `mac`: MAC of the primary ENI, lower-case.
    pub async fn mac(&self) -> Result<String, ImdsError> {
        Ok(self.get("mac").await?.to_ascii_lowercase())
    }

    /// `local-ipv4`: the primary private IPv4 address.
    pub async fn local_ipv4(&self) -> Result<Ipv4Addr, ImdsError> {
        self.parsed("local-ipv4").await
    }

    /// `ipv6`: the primary IPv6 address, `None` when the instance has none (404).
    pub async fn local_ipv6(&self) -> Result<Option<Ipv6Addr>, ImdsError> {
        match self.get_opt("ipv6").await? {
            Some(v) => parse_value("ipv6", &v).map(Some),
            None => Ok(None),
        }
    }

    /// `placement/availability-zone` (e.g. `us-east-1a`).
    pub async fn availability_zone(&self) -> Result<String, ImdsError> {
        self.get("placement/availability-zone").await
    }

    /// `placement/region` (e.g. `us-east-1`).
    pub async fn region(&self) -> Result<String, ImdsError> {
        self.get("placement/region").await
    }

    /// MACs of every attached ENI (`network/interfaces/macs/`), lower-case, IMDS order.
    pub async fn macs(&self) -> Result<Vec<String>, ImdsError> {
        Ok(self
            .lines("network/interfaces/macs/", false)
            .await?
            .into_iter()
            .map(|l| l.trim_end_matches('/').to_ascii_lowercase())
            .collect())
    }

    /// The ENI with MAC `mac` as IMDS sees it (its items are read concurrently).
    pub async fn interface(&self, mac: &str) -> Result<ImdsInterface, ImdsError> {
        let p = |leaf: &str| format!("network/interfaces/macs/{mac}/{leaf}");
        let paths: [String; 10] = [
            p("device-number"),
            p("network-card"),
            p("interface-id"),
            p("subnet-id"),
            p("subnet-ipv4-cidr-block"),
            p("vpc-id"),
            p("vpc-ipv4-cidr-blocks"),
            p("security-group-ids"),
            p("local-ipv4s"),
            p("ipv4-prefix"),
        ];
        let (
            device_number,
            network_card,
            interface_id,
            subnet_id,
            subnet_cidr,
            vpc_id,
            vpc_cidrs,
            security_group_ids,
            local_ipv4s,
            ipv4_prefixes,
        ) = tokio::try_join!(
            self.parsed::<u32>(&paths[0]),
            self.get_opt(&paths[1]),
            self.get(&paths[2]),
            self.get(&paths[3]),
            self.parsed::<Ipv4Net>(&paths[4]),
            self.get(&paths[5]),
            self.parsed_lines::<Ipv4Net>(&paths[6], false),
            self.lines(&paths[7], true),
            self.parsed_lines::<Ipv4Addr>(&paths[8], true),
            self.parsed_lines::<Ipv4Net>(&paths[9], true),
        )?;
        Ok(ImdsInterface {
            mac: mac.to_ascii_lowercase(),
            device_number,
            network_card: match network_card {
                Some(v) => parse_value(&paths[1], &v)?,
                None => 0,
            },
            interface_id,
            subnet_id,
            subnet_cidr,
            vpc_id,
            vpc_cidrs,
            security_group_ids,
            local_ipv4s,
            ipv4_prefixes,
        })
    }

    /// Every attached ENI, sorted by network card then device number.
    pub async fn interfaces(&self) -> Result<Vec<ImdsInterface>, ImdsError> {
        let macs = self.macs().await?;
        let mut all = futures::future::try_join_all(macs.iter().map(|m| self.interface(m))).await?;
        all.sort_by_key(|i| (i.network_card, i.device_number));
        Ok(all)
    }
}

impl Default for Imds {
    fn default() -> Self {
        Imds::new()
    }
}

fn parse_value<T: FromStr>(path: &str, value: &str) -> Result<T, ImdsError>
where
    T::Err: std::fmt::Display,
{
    value.trim().parse().map_err(|e: T::Err| ImdsError::Parse {
        path: format!("{META}{path}"),
        value: value.to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_name_path_and_value() {
        let e = parse_value::<Ipv4Addr>("local-ipv4", "10.0.0.999").unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("/latest/meta-data/local-ipv4") && s.contains("10.0.0.999"),
            "{s}"
        );
        assert_eq!(e.path(), "/latest/meta-data/local-ipv4");
        assert_eq!(parse_value::<u32>("x", " 2 ").unwrap(), 2);
    }

    #[test]
    fn bad_endpoint_is_reported() {
        let e = Imds::with_endpoint("not a url at all", None).unwrap_err();
        assert!(matches!(e, ImdsError::Endpoint { .. }), "{e}");
    }
}
