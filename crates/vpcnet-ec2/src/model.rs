//! Plain domain structs returned by [`crate::Ec2`]: no SDK types leak out of this crate.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

/// Tags of an EC2 resource, key → value.
pub type Tags = BTreeMap<String, String>;

/// An EC2 instance as `DescribeInstances` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// `i-...`
    pub instance_id: String,
    /// e.g. `m5.large`
    pub instance_type: String,
    /// e.g. `ip-10-0-1-23.ec2.internal`; `None` when EC2 reports none.
    pub private_dns_name: Option<String>,
    /// Primary private IPv4 address of the primary ENI.
    pub private_ip: Option<Ipv4Addr>,
    /// `Placement.AvailabilityZone`, e.g. `us-east-1a`.
    pub availability_zone: String,
    /// Subnet of the primary ENI.
    pub subnet_id: String,
    pub vpc_id: String,
    /// Security groups of the instance (`sg-...`).
    pub security_group_ids: Vec<String>,
    pub tags: Tags,
}

/// A VPC subnet as `DescribeSubnets` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subnet {
    pub subnet_id: String,
    pub vpc_id: String,
    pub availability_zone: String,
    /// The subnet's IPv4 CIDR block.
    pub cidr_block: Ipv4Net,
    /// Free IPv4 addresses in the subnet (a count of addresses).
    pub available_ip_address_count: u32,
    pub tags: Tags,
}

/// Attachment of an ENI to an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EniAttachment {
    /// `eni-attach-...`
    pub attachment_id: String,
    pub instance_id: Option<String>,
    /// Device index on the instance (0 = primary ENI).
    pub device_index: u32,
    /// Network card index (0 unless the type has several cards).
    pub network_card_index: u32,
    /// `attaching`, `attached`, `detaching` or `detached`.
    pub status: String,
    pub delete_on_termination: bool,
}

/// An elastic network interface as `DescribeNetworkInterfaces` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkInterface {
    /// `eni-...`
    pub eni_id: String,
    /// MAC address, lower-case, colon-separated.
    pub mac: String,
    pub description: String,
    pub subnet_id: String,
    pub vpc_id: String,
    pub availability_zone: String,
    /// The ENI's primary private IPv4 address.
    pub primary_ip: Ipv4Addr,
    /// Secondary private IPv4 addresses (the primary excluded), in EC2's order.
    pub secondary_ips: Vec<Ipv4Addr>,
    /// Delegated IPv4 prefixes (/28 blocks).
    pub prefixes: Vec<Ipv4Net>,
    pub attachment: Option<EniAttachment>,
    /// `available`, `attaching`, `in-use`, `detaching` or `associated`.
    pub status: String,
    pub security_group_ids: Vec<String>,
    /// e.g. `interface`, `trunk`, `branch`, `efa`.
    pub interface_type: String,
    /// Whether an AWS service manages the ENI (never touch such ENIs).
    pub requester_managed: bool,
    pub tags: Tags,
}

impl NetworkInterface {
    /// Device index of the attachment, if attached.
    pub fn device_index(&self) -> Option<u32> {
        self.attachment.as_ref().map(|a| a.device_index)
    }
}

/// A filter of a Describe call (EC2 `Filter.N.Name` / `Filter.N.Value.M`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

impl Filter {
    pub fn new(
        name: impl Into<String>,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Filter {
            name: name.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// `tag:<key>` = `value`.
    pub fn tag(key: &str, value: impl Into<String>) -> Self {
        Filter::new(format!("tag:{key}"), [value.into()])
    }

    /// `attachment.instance-id` = `instance_id`.
    pub fn attached_to(instance_id: impl Into<String>) -> Self {
        Filter::new("attachment.instance-id", [instance_id.into()])
    }

    /// `status` = `status` (e.g. `available` for detached ENIs).
    pub fn status(status: impl Into<String>) -> Self {
        Filter::new("status", [status.into()])
    }

    /// `description` = `pattern` (EC2 accepts `*` and `?` wildcards).
    pub fn description(pattern: impl Into<String>) -> Self {
        Filter::new("description", [pattern.into()])
    }
}

/// What to put on an ENI when creating it or assigning to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AddressRequest {
    /// This many secondary private IPv4 addresses (`SecondaryPrivateIpAddressCount`).
    SecondaryIps(u32),
    /// This many /28 IPv4 prefixes (`Ipv4PrefixCount`).
    Prefixes(u32),
}

/// Addresses to remove from an ENI (`UnassignPrivateIpAddresses`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AddressRelease {
    /// Secondary private IPv4 addresses.
    SecondaryIps(Vec<Ipv4Addr>),
    /// /28 IPv4 prefixes.
    Prefixes(Vec<Ipv4Net>),
}

/// What `AssignPrivateIpAddresses` assigned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assigned {
    pub ips: Vec<Ipv4Addr>,
    pub prefixes: Vec<Ipv4Net>,
}

/// Arguments of `CreateNetworkInterface`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateEni {
    pub subnet_id: String,
    /// Security groups; empty = the VPC's default group.
    pub security_group_ids: Vec<String>,
    pub description: String,
    /// Tags applied at creation (`TagSpecification` for `network-interface`).
    pub tags: Tags,
    /// Secondary addresses or prefixes to assign at creation; `None` = primary IP only.
    pub addresses: Option<AddressRequest>,
    /// Idempotency token (`ClientToken`). When `None`, a random one is generated per call
    /// and reused across that call's retries, so a retried create cannot make two ENIs.
    pub client_token: Option<String>,
}
