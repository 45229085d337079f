//! The IMDSv2 client (feature `client`): identity, placement and the per-MAC view of attached
//! ENIs through aws-config's IMDS client, parsed by this crate's parsers. IMDS is a hint that
//! may lag EC2; never free or hand out an address on IMDS evidence alone.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::Duration;

use aws_config::imds::client::error::ImdsError as SdkImdsError;
use aws_smithy_types::error::display::DisplayErrorContext;

use crate::{parse_value, ImdsError, ImdsInterface, InterfaceTexts, META};

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

    /// Raw value of `/latest/meta-data/<path>`, trimmed. A read that fails in transport (no
    /// HTTP answer, e.g. a kept-alive connection the far end reset) is made once more on a new
    /// connection before it is reported: GET is idempotent, and the SDK client does not retry
    /// these itself.
    ///
    /// Errors: [`ImdsError::NotFound`] on 404, [`ImdsError::Request`] otherwise.
    pub async fn get(&self, path: &str) -> Result<String, ImdsError> {
        let full = format!("{META}{}", path.trim_start_matches('/'));
        let mut answer = self.client.get(full.clone()).await;
        if matches!(
            answer,
            Err(SdkImdsError::IoError(_) | SdkImdsError::Unexpected(_))
        ) {
            answer = self.client.get(full.clone()).await;
        }
        match answer {
            Ok(v) => Ok(v.as_ref().trim().to_string()),
            Err(SdkImdsError::ErrorResponse(r)) if r.response().status().as_u16() == 404 => {
                Err(ImdsError::NotFound { path: full })
            }
            Err(e) => Err(ImdsError::Request {
                path: full,
                // The whole chain with the SDK's dump, which vpcnet-bootstrap reads the
                // failed step and status from; the error itself is kept as the source.
                message: DisplayErrorContext(&e).to_string(),
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
                message: DisplayErrorContext(&e).to_string(),
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
        Ok(crate::parse_macs(
            &self.get("network/interfaces/macs/").await?,
        ))
    }

    /// The ENI with MAC `mac` as IMDS sees it (its items are read concurrently, then parsed
    /// by [`crate::parse_interface`]).
    pub async fn interface(&self, mac: &str) -> Result<ImdsInterface, ImdsError> {
        let p = |leaf: &str| crate::interface_path(mac, leaf);
        let [device_number, network_card, interface_id, subnet_id, subnet_cidr, vpc_id, vpc_cidrs, security_group_ids, local_ipv4s, ipv4_prefixes] =
            crate::INTERFACE_ITEMS.map(p);
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
            self.get(&device_number),
            self.get_opt(&network_card),
            self.get(&interface_id),
            self.get(&subnet_id),
            self.get(&subnet_cidr),
            self.get(&vpc_id),
            self.get(&vpc_cidrs),
            self.get_opt(&security_group_ids),
            self.get_opt(&local_ipv4s),
            self.get_opt(&ipv4_prefixes),
        )?;
        crate::parse_interface(
            mac,
            &InterfaceTexts {
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
            },
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_endpoint_is_reported() {
        let e = Imds::with_endpoint("not a url at all", None).unwrap_err();
        assert!(matches!(e, ImdsError::Endpoint { .. }), "{e}");
    }
}
