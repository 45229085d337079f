//! What the emulator's control methods take and answer about VPCs, instances and ENIs (the
//! JSON shapes of the control API), built from the cloud's model.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use crate::model::{Cloud, Eni, Instance};

/// The answer of [`Emulator::create_vpc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VpcInfo {
    pub vpc_id: String,
    pub default_security_group_id: String,
}

/// What [`Emulator::run_instance`] takes. JSON shape of `POST /_emu/instances`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunInstance {
    /// EC2 instance type, e.g. `m5.large` (compiled-in table or registered).
    pub instance_type: String,
    pub subnet_id: String,
    /// Security groups of the primary ENI; empty → the VPC's default group.
    #[serde(default)]
    pub security_group_ids: Vec<String>,
    /// Primary private IPv4 address; None → a free one of the subnet.
    #[serde(default)]
    pub private_ip: Option<Ipv4Addr>,
    #[serde(default)]
    pub tags: Vec<(String, String)>,
    /// User data (text), served by IMDS at `/latest/user-data` (e.g. a NodeConfig).
    #[serde(default)]
    pub user_data: Option<String>,
}

/// An ENI's attachment, as the control API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentInfo {
    pub attachment_id: String,
    pub instance_id: String,
    pub device_index: u32,
    pub network_card: u32,
    pub delete_on_termination: bool,
    /// `attaching` or `attached`.
    pub status: String,
}

/// An ENI, as the control API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EniInfo {
    pub eni_id: String,
    pub subnet_id: String,
    pub vpc_id: String,
    pub availability_zone: String,
    pub mac: String,
    pub description: String,
    pub primary_ip: Ipv4Addr,
    pub secondary_ips: Vec<Ipv4Addr>,
    pub prefixes: Vec<Ipv4Net>,
    /// IPv6 addresses from the subnet's /64.
    #[serde(default)]
    pub ipv6_addresses: Vec<Ipv6Addr>,
    /// IPv6 /80 prefixes.
    #[serde(default)]
    pub ipv6_prefixes: Vec<Ipv6Net>,
    pub security_group_ids: Vec<String>,
    pub tags: Vec<(String, String)>,
    pub attachment: Option<AttachmentInfo>,
}

/// An instance, as the control API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    pub instance_id: String,
    pub instance_type: String,
    /// `running` or `terminated`.
    pub state: String,
    pub availability_zone: String,
    pub subnet_id: String,
    pub vpc_id: String,
    pub private_ip: Ipv4Addr,
    pub private_dns_name: String,
    pub security_group_ids: Vec<String>,
    /// The primary ENI (device index 0); None once terminated.
    pub primary_eni: Option<EniInfo>,
}

pub(super) fn eni_info(e: &Eni, now: Instant) -> EniInfo {
    EniInfo {
        eni_id: e.id.clone(),
        subnet_id: e.subnet_id.clone(),
        vpc_id: e.vpc_id.clone(),
        availability_zone: e.az.clone(),
        mac: e.mac.clone(),
        description: e.description.clone(),
        primary_ip: e.primary_ip,
        secondary_ips: e.secondary_ips.clone(),
        prefixes: e.prefixes.clone(),
        ipv6_addresses: e.ipv6_addresses.clone(),
        ipv6_prefixes: e.ipv6_prefixes.clone(),
        security_group_ids: e.groups.clone(),
        tags: e.tags.0.clone(),
        attachment: e.attachment.as_ref().map(|a| AttachmentInfo {
            attachment_id: a.id.clone(),
            instance_id: a.instance_id.clone(),
            device_index: a.device_index,
            network_card: a.network_card,
            delete_on_termination: a.delete_on_termination,
            status: a.status(now).to_string(),
        }),
    }
}

pub(super) fn instance_info(c: &Cloud, i: &Instance, now: Instant) -> InstanceInfo {
    InstanceInfo {
        instance_id: i.id.clone(),
        instance_type: i.instance_type.clone(),
        state: i.state.code_name().1.to_string(),
        availability_zone: i.az.clone(),
        subnet_id: i.subnet_id.clone(),
        vpc_id: i.vpc_id.clone(),
        private_ip: i.private_ip,
        private_dns_name: c.private_dns_name(i.private_ip),
        security_group_ids: i.groups.clone(),
        primary_eni: c.eni(&i.primary_eni).map(|e| eni_info(e, now)),
    }
}
