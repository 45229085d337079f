//! The lab cloud ([`Lab::cloud`]): the emulator daemon in the VPC namespace, as the lab and its
//! processes reach it — the EC2 endpoint and the AWS SDK environment every lab process gets,
//! the emulator's view of the ENIs, its request log, raw EC2 Query calls, and subnet
//! fragmentation for the prefix-fallback tests.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use anyhow::{Context, Result};
pub use vpcnet_emu::{Api, EniInfo, RequestLog, RequestRecord};

use crate::lab::Lab;
use crate::{api, daemon, fabric};

/// AWS SDK environment for a lab process reaching the lab cloud's EC2 at `ec2_endpoint`:
/// region, static lab credentials, no shared config files, the endpoint under the SDK's and
/// the VPC CNI's variable names.
pub fn aws_env(ec2_endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_REGION", daemon::REGION),
        ("AWS_DEFAULT_REGION", daemon::REGION),
        ("AWS_ACCESS_KEY_ID", "AKIDVPCNETLAB"),
        ("AWS_SECRET_ACCESS_KEY", "vpcnet-lab"),
        ("AWS_CONFIG_FILE", "/dev/null"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        ("AWS_ENDPOINT_URL_EC2", ec2_endpoint),
        ("AWS_ENDPOINT_URL", ec2_endpoint),
        ("AWS_EC2_ENDPOINT", ec2_endpoint),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The ENI (and its device index on the node) that owns an address, from the emulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// `eni-...`
    pub eni_id: String,
    /// EC2 device index (the node's `eth<N>`).
    pub device_index: u32,
    /// Instance the ENI is attached to.
    pub instance_id: String,
}

/// The ENI holding `ip` as a secondary address or inside a prefix, per the emulator.
pub fn owner(enis: &[EniInfo], ip: Ipv4Addr) -> Option<Owner> {
    enis.iter()
        .find(|e| e.secondary_ips.contains(&ip) || e.prefixes.iter().any(|p| p.contains(&ip)))
        .and_then(|e| {
            let a = e.attachment.as_ref()?;
            Some(Owner {
                eni_id: e.eni_id.clone(),
                device_index: a.device_index,
                instance_id: a.instance_id.clone(),
            })
        })
}

/// The lab cloud ([`Lab::cloud`]).
#[derive(Debug, Clone, Copy)]
pub struct Cloud<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// The lab cloud (the emulator daemon).
    pub fn cloud(&self) -> Cloud<'_> {
        Cloud { lab: self }
    }
}

impl Cloud<'_> {
    /// The lab cloud's EC2 endpoint as seen from a node.
    pub fn endpoint(&self) -> Result<String> {
        self.lab
            .state()?
            .ec2_endpoint
            .context("lab has no EC2 endpoint yet")
    }

    /// What any node agent needs to reach the lab's cloud: the AWS SDK settings for the lab's
    /// EC2 endpoint and IMDS at its link-local address (both SDKs read these variables).
    pub fn env(&self) -> Result<BTreeMap<String, String>> {
        let mut env: BTreeMap<String, String> = aws_env(&self.endpoint()?).into_iter().collect();
        env.insert(
            "AWS_EC2_METADATA_SERVICE_ENDPOINT".into(),
            format!("http://{}", fabric::IMDS_ADDR),
        );
        env.insert(
            "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE".into(),
            "IPv4".into(),
        );
        Ok(env)
    }

    /// Every ENI in the lab cloud (the emulator's view).
    pub fn enis(&self) -> Result<Vec<EniInfo>> {
        api::control_get(&daemon::api_socket(&self.lab.dir), "enis")
    }

    /// Fragments subnet `subnet_id` in the emulator (one address taken in every free aligned
    /// /28, so prefix requests fail with `InsufficientCidrBlocks`), or with `fragmented`
    /// false gives those addresses back. Returns the addresses taken or given back.
    pub fn fragment_subnet(&self, subnet_id: &str, fragmented: bool) -> Result<Vec<Ipv4Addr>> {
        #[derive(serde::Deserialize)]
        struct Answer {
            addresses: Vec<Ipv4Addr>,
        }
        let method = if fragmented { "POST" } else { "DELETE" };
        let a: Answer = api::control_send(
            &daemon::api_socket(&self.lab.dir),
            method,
            &format!("subnets/{subnet_id}/fragment"),
        )?;
        Ok(a.addresses)
    }

    /// The lab cloud's request log: every EC2 and IMDS request it answered, with the calling
    /// instance and the answer ([`vpcnet_emu::request_log`]).
    pub fn requests(&self) -> Result<vpcnet_emu::RequestLog> {
        api::control_get(&daemon::api_socket(&self.lab.dir), "requests")
    }

    /// The emulator's clock (milliseconds since it started, as its request log's `at_ms`) and
    /// the local instant of that reading, taken by making one EC2 call of the lab's own
    /// (`DescribeAvailabilityZones`; no instance makes it, so no node's figures count it): the
    /// time it was logged at, and the moment its answer arrived.
    pub fn clock(&self) -> Result<(u64, std::time::Instant)> {
        self.ec2("DescribeAvailabilityZones", &[])?;
        let at = std::time::Instant::now();
        let ms = self
            .requests()?
            .records
            .last()
            .map(|r| r.at_ms)
            .context("the lab cloud logged no request for the clock reading")?;
        Ok((ms, at))
    }

    /// Sets the account's rate limits ([`vpcnet_emu::account_limits`]; off unless enabled).
    pub fn set_account_limits(&self, limits: &vpcnet_emu::AccountLimits) -> Result<()> {
        let body = serde_json::to_vec(limits)?;
        let (status, text) = api::request(
            &daemon::api_socket(&self.lab.dir),
            "PUT",
            "/_emu/account-limits",
            "application/json",
            &body,
        )?;
        if !(200..300).contains(&status) {
            anyhow::bail!("setting the lab cloud's account limits: HTTP {status}: {text}");
        }
        Ok(())
    }

    /// One EC2 Query API call against the lab cloud; returns the response XML.
    pub fn ec2(&self, action: &str, params: &[(&str, &str)]) -> Result<String> {
        api::ec2_query(&daemon::api_socket(&self.lab.dir), action, params)
    }
}
