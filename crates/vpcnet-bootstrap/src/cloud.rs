//! The two cloud services bootstrap reads, behind small traits: IMDSv2 and EC2.
//!
//! [`AwsImds`] and [`AwsEc2`] are the real adapters (through the SDK re-exported by
//! `vpcnet-ec2`); tests pass the emulator's endpoints to them, or implement the traits with
//! fakes.

use std::fmt;

use tokio::sync::OnceCell;
use vpcnet_ec2::aws_config;
use vpcnet_ec2::aws_sdk_ec2;
use vpcnet_limits::{Hypervisor, InstanceLimits, NetworkCard};

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

/// IMDSv2 reads (paths relative to `/latest/`, e.g. `meta-data/mac`).
#[allow(async_fn_in_trait)]
pub trait Imds {
    /// The body at `path`, `Ok(None)` when IMDS answers 404 (no such item).
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError>;
}

/// The EC2 actions bootstrap and `vpcnet max-pods` use.
#[allow(async_fn_in_trait)]
pub trait Ec2 {
    /// `DescribeInstanceTypes` for one type, as the limits the max-pods formula needs.
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError>;

    /// `DescribeInstances` for one instance: its `PrivateDnsName` (may be empty while EC2 is
    /// still filling it in right after launch).
    async fn private_dns_name(&self, instance_id: &str) -> Result<String, CloudError>;
}

/// IMDSv2 through `aws_config::imds` (endpoint from `AWS_EC2_METADATA_SERVICE_ENDPOINT`,
/// default `http://169.254.169.254`).
pub struct AwsImds {
    client: aws_config::imds::Client,
}

impl AwsImds {
    pub fn from_env() -> Self {
        Self {
            client: aws_config::imds::Client::builder().build(),
        }
    }

    /// IMDS at `endpoint` (e.g. an emulator's per-instance `http://127.0.0.1:PORT`).
    ///
    /// Errors: `endpoint` is not a URL.
    pub fn with_endpoint(endpoint: &str) -> Result<Self, CloudError> {
        let b = aws_config::imds::Client::builder()
            .endpoint(endpoint)
            .map_err(|e| CloudError {
                action: "IMDS endpoint".into(),
                code: None,
                message: format!("{endpoint}: {e}"),
            })?;
        Ok(Self { client: b.build() })
    }
}

impl Imds for AwsImds {
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
        let full = format!("/latest/{path}");
        match self.client.get(full.clone()).await {
            Ok(v) => Ok(Some(v.as_ref().to_string())),
            Err(aws_config::imds::client::error::ImdsError::ErrorResponse(r))
                if r.response().status().as_u16() == 404 =>
            {
                Ok(None)
            }
            Err(e) => Err(CloudError {
                action: format!("IMDS GET {full}"),
                code: None,
                message: e.to_string(),
            }),
        }
    }
}

/// EC2 through `aws_sdk_ec2`, with the default credential chain and endpoint resolution
/// (`AWS_ENDPOINT_URL_EC2` / `AWS_ENDPOINT_URL` redirect it, e.g. to the emulator). The client
/// is built on first use, so a run that never calls EC2 needs no credentials.
pub struct AwsEc2 {
    region: Option<String>,
    client: OnceCell<aws_sdk_ec2::Client>,
}

impl AwsEc2 {
    /// `region`: the instance's region from IMDS; `None` uses the default chain (`AWS_REGION`...).
    pub fn new(region: Option<String>) -> Self {
        Self {
            region,
            client: OnceCell::new(),
        }
    }

    /// Uses an already configured client (e.g. one pointed at the emulator).
    pub fn from_client(client: aws_sdk_ec2::Client) -> Self {
        Self {
            region: None,
            client: OnceCell::new_with(Some(client)),
        }
    }

    async fn client(&self) -> &aws_sdk_ec2::Client {
        self.client
            .get_or_init(|| async {
                let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
                if let Some(r) = &self.region {
                    loader = loader.region(aws_config::Region::new(r.clone()));
                }
                aws_sdk_ec2::Client::new(&loader.load().await)
            })
            .await
    }
}

fn sdk_error<E, R>(action: &str, e: aws_sdk_ec2::error::SdkError<E, R>) -> CloudError
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: fmt::Debug,
{
    use aws_sdk_ec2::error::ProvideErrorMetadata;
    let code = e.code().map(str::to_string);
    let message = match e.message() {
        Some(m) => m.to_string(),
        None => aws_sdk_ec2::error::DisplayErrorContext(&e).to_string(),
    };
    CloudError {
        action: action.into(),
        code,
        message,
    }
}

impl Ec2 for AwsEc2 {
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError> {
        const ACTION: &str = "DescribeInstanceTypes";
        let out = self
            .client()
            .await
            .describe_instance_types()
            .instance_types(aws_sdk_ec2::types::InstanceType::from(instance_type))
            .send()
            .await
            .map_err(|e| sdk_error(ACTION, e))?;
        let info = out.instance_types().first().ok_or_else(|| CloudError {
            action: ACTION.into(),
            code: None,
            message: format!("no such instance type {instance_type}"),
        })?;
        let net = info.network_info().ok_or_else(|| CloudError {
            action: ACTION.into(),
            code: None,
            message: format!("{instance_type} has no NetworkInfo"),
        })?;
        let cards: Vec<NetworkCard> = net
            .network_cards()
            .iter()
            .map(|c| NetworkCard {
                index: c.network_card_index().unwrap_or(0).max(0) as u32,
                max_enis: c.maximum_network_interfaces().unwrap_or(0).max(0) as u32,
            })
            .collect();
        let hypervisor = match info.hypervisor() {
            Some(aws_sdk_ec2::types::InstanceTypeHypervisor::Nitro) => Hypervisor::Nitro,
            Some(aws_sdk_ec2::types::InstanceTypeHypervisor::Xen) => Hypervisor::Xen,
            _ => Hypervisor::Unknown,
        };
        Ok(limits_from_describe(TypeFacts {
            instance_type,
            maximum_network_interfaces: net.maximum_network_interfaces(),
            ipv4_addresses_per_interface: net.ipv4_addresses_per_interface(),
            default_network_card_index: net.default_network_card_index(),
            network_cards: cards,
            hypervisor,
            bare_metal: info.bare_metal().unwrap_or(false),
            vcpus: info.v_cpu_info().and_then(|v| v.default_v_cpus()),
        }))
    }

    async fn private_dns_name(&self, instance_id: &str) -> Result<String, CloudError> {
        const ACTION: &str = "DescribeInstances";
        let out = self
            .client()
            .await
            .describe_instances()
            .instance_ids(instance_id)
            .send()
            .await
            .map_err(|e| sdk_error(ACTION, e))?;
        let inst = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .next()
            .ok_or_else(|| CloudError {
                action: ACTION.into(),
                code: None,
                message: format!("no instance {instance_id}"),
            })?;
        Ok(inst.private_dns_name().unwrap_or_default().to_string())
    }
}

/// The fields of an EC2 `InstanceTypeInfo` that the limits need.
pub struct TypeFacts<'a> {
    pub instance_type: &'a str,
    pub maximum_network_interfaces: Option<i32>,
    pub ipv4_addresses_per_interface: Option<i32>,
    pub default_network_card_index: Option<i32>,
    pub network_cards: Vec<NetworkCard>,
    pub hypervisor: Hypervisor,
    pub bare_metal: bool,
    pub vcpus: Option<i32>,
}

/// Builds [`InstanceLimits`] like the compiled table does: ENIs of the default network card
/// (falling back to `MaximumNetworkInterfaces` when EC2 lists no cards).
pub fn limits_from_describe(f: TypeFacts<'_>) -> InstanceLimits {
    let default_card = f.default_network_card_index.unwrap_or(0).max(0) as u32;
    let total = f.maximum_network_interfaces.unwrap_or(0).max(0) as u32;
    let mut cards = f.network_cards;
    if cards.is_empty() {
        cards.push(NetworkCard {
            index: 0,
            max_enis: total,
        });
    }
    let eni_limit = cards
        .iter()
        .find(|c| c.index == default_card)
        .map(|c| c.max_enis)
        .unwrap_or(total);
    InstanceLimits {
        instance_type: f.instance_type.to_string(),
        eni_limit,
        ipv4_per_eni: f.ipv4_addresses_per_interface.unwrap_or(0).max(0) as u32,
        default_network_card: default_card,
        network_cards: cards,
        hypervisor: f.hypervisor,
        bare_metal: f.bare_metal,
        vcpus: f.vcpus.filter(|v| *v > 0).map(|v| v as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_card_enis_only() {
        let l = limits_from_describe(TypeFacts {
            instance_type: "x9.big",
            maximum_network_interfaces: Some(16),
            ipv4_addresses_per_interface: Some(50),
            default_network_card_index: Some(0),
            network_cards: vec![
                NetworkCard {
                    index: 0,
                    max_enis: 8,
                },
                NetworkCard {
                    index: 1,
                    max_enis: 8,
                },
            ],
            hypervisor: Hypervisor::Nitro,
            bare_metal: false,
            vcpus: Some(64),
        });
        assert_eq!((l.eni_limit, l.ipv4_per_eni, l.vcpus), (8, 50, Some(64)));
        let l = limits_from_describe(TypeFacts {
            instance_type: "x9.small",
            maximum_network_interfaces: Some(3),
            ipv4_addresses_per_interface: Some(10),
            default_network_card_index: None,
            network_cards: vec![],
            hypervisor: Hypervisor::Xen,
            bare_metal: false,
            vcpus: None,
        });
        assert_eq!((l.eni_limit, l.network_cards.len()), (3, 1));
    }
}
