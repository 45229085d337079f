//! The agent's cloud seams (docs/architecture.md, principle 1): exactly the EC2 actions and IMDS
//! facts the agent uses, as two small object-safe traits, with the real adapters
//! ([`vpcnet_ec2::Ec2`], [`vpcnet_imds::Imds`]) implementing them. Tests give the agent an
//! in-process fake cloud instead ([`AgentOptions::cloud`](crate::AgentOptions::cloud)).
//!
//! The traits speak vpcnet-ec2's and vpcnet-imds's plain domain types ([`NetworkInterface`],
//! [`Ec2Error`], [`ImdsInterface`], ...), none of the SDK's: an implementation needs no AWS SDK
//! type.

use std::net::Ipv4Addr;
use std::sync::Arc;

use vpcnet_ec2::{
    AddressRelease, AddressRequest, Assigned, CreateEni, Ec2, Ec2Error, NetworkInterface, Subnet,
    Tags,
};
use vpcnet_imds::{Imds, ImdsError, ImdsInterface};
use vpcnet_limits::InstanceLimits;

pub use crate::node::BoxFuture;

/// Result of an EC2 action.
pub type Ec2Result<'a, T> = BoxFuture<'a, Result<T, Ec2Error>>;

/// The EC2 actions the agent uses. Errors are [`Ec2Error`]s with EC2's codes; an
/// implementation decides its own retries (the real one retries throttling, 5xx and
/// transport faults within its deadline, [`vpcnet_ec2::CallSettings`]).
pub trait Ec2Api: Send + Sync + 'static {
    /// `DescribeNetworkInterfaces` (filter `attachment.instance-id`): every ENI attached to
    /// the instance, sorted by network card then device index.
    fn describe_instance_network_interfaces<'a>(
        &'a self,
        instance_id: &'a str,
    ) -> Ec2Result<'a, Vec<NetworkInterface>>;

    /// `DescribeNetworkInterfaces` by ID. Errors: `InvalidNetworkInterfaceID.NotFound`.
    fn describe_network_interfaces_by_id<'a>(
        &'a self,
        eni_ids: &'a [String],
    ) -> Ec2Result<'a, Vec<NetworkInterface>>;

    /// `DescribeNetworkInterfaces` with tag `key` = `value`, optionally only in `status`
    /// (`available` = detached).
    fn describe_network_interfaces_by_tag<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        status: Option<&'a str>,
    ) -> Ec2Result<'a, Vec<NetworkInterface>>;

    /// `DescribeSubnets`.
    fn describe_subnets<'a>(&'a self, subnet_ids: &'a [String]) -> Ec2Result<'a, Vec<Subnet>>;

    /// `DescribeSubnets` of the subnets of `vpc_id` in availability zone `zone`.
    fn describe_zone_subnets<'a>(
        &'a self,
        vpc_id: &'a str,
        zone: &'a str,
    ) -> Ec2Result<'a, Vec<Subnet>>;

    /// `DescribeInstanceTypes`, as [`InstanceLimits`].
    fn describe_instance_types<'a>(
        &'a self,
        types: &'a [String],
    ) -> Ec2Result<'a, Vec<InstanceLimits>>;

    /// `CreateNetworkInterface`. Errors: `InsufficientFreeAddressesInSubnet`, ...
    fn create_network_interface<'a>(
        &'a self,
        req: &'a CreateEni,
    ) -> Ec2Result<'a, NetworkInterface>;

    /// `AttachNetworkInterface`; the attachment ID. Errors: `AttachmentLimitExceeded`, ...
    fn attach_network_interface<'a>(
        &'a self,
        eni_id: &'a str,
        instance_id: &'a str,
        device_index: u32,
        network_card_index: u32,
    ) -> Ec2Result<'a, String>;

    /// `ModifyNetworkInterfaceAttribute` (`Attachment.DeleteOnTermination`).
    fn set_delete_on_termination<'a>(
        &'a self,
        eni_id: &'a str,
        attachment_id: &'a str,
        delete: bool,
    ) -> Ec2Result<'a, ()>;

    /// `DetachNetworkInterface`. Errors: `InvalidAttachmentID.NotFound`.
    fn detach_network_interface<'a>(
        &'a self,
        attachment_id: &'a str,
        force: bool,
    ) -> Ec2Result<'a, ()>;

    /// `DeleteNetworkInterface`. Errors: `InvalidNetworkInterfaceID.NotFound`, in use.
    fn delete_network_interface<'a>(&'a self, eni_id: &'a str) -> Ec2Result<'a, ()>;

    /// `AssignPrivateIpAddresses`; what EC2 assigned.
    fn assign_private_ips<'a>(
        &'a self,
        eni_id: &'a str,
        req: AddressRequest,
    ) -> Ec2Result<'a, Assigned>;

    /// `UnassignPrivateIpAddresses`.
    fn unassign_private_ips<'a>(
        &'a self,
        eni_id: &'a str,
        release: &'a AddressRelease,
    ) -> Ec2Result<'a, ()>;

    /// `CreateTags`.
    fn create_tags<'a>(&'a self, resource_ids: &'a [String], tags: &'a Tags) -> Ec2Result<'a, ()>;
}

/// Result of an IMDS read.
pub type ImdsResult<'a, T> = BoxFuture<'a, Result<T, ImdsError>>;

/// The IMDS facts the agent reads (hints: never used alone to hand out or release an address,
/// docs/architecture.md, principle 2): identity at start, the attached ENIs for the periodic
/// drift check.
pub trait MetadataApi: Send + Sync + 'static {
    /// `instance-id`.
    fn instance_id(&self) -> ImdsResult<'_, String>;
    /// `instance-type`.
    fn instance_type(&self) -> ImdsResult<'_, String>;
    /// `mac`: the primary ENI's MAC.
    fn mac(&self) -> ImdsResult<'_, String>;
    /// `placement/region`.
    fn region(&self) -> ImdsResult<'_, String>;
    /// `placement/availability-zone`.
    fn availability_zone(&self) -> ImdsResult<'_, String>;
    /// `local-ipv4`: the primary address.
    fn local_ipv4(&self) -> ImdsResult<'_, Ipv4Addr>;
    /// `network/interfaces/macs/<mac>/`.
    fn interface<'a>(&'a self, mac: &'a str) -> ImdsResult<'a, ImdsInterface>;
    /// Every attached ENI (`network/interfaces/macs/`, then each one's items), sorted by
    /// network card then device number: the reconciler's periodic drift check, which asks EC2
    /// only when this disagrees with the pool.
    fn interfaces(&self) -> ImdsResult<'_, Vec<ImdsInterface>>;
}

/// The cloud the agent talks to: EC2 and IMDS.
#[derive(Clone)]
pub struct CloudApis {
    pub ec2: Arc<dyn Ec2Api>,
    pub metadata: Arc<dyn MetadataApi>,
}

impl Ec2Api for Ec2 {
    fn describe_instance_network_interfaces<'a>(
        &'a self,
        instance_id: &'a str,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(Ec2::describe_instance_network_interfaces(self, instance_id))
    }
    fn describe_network_interfaces_by_id<'a>(
        &'a self,
        eni_ids: &'a [String],
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(Ec2::describe_network_interfaces_by_id(self, eni_ids))
    }
    fn describe_network_interfaces_by_tag<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        status: Option<&'a str>,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(Ec2::describe_network_interfaces_by_tag(
            self, key, value, status,
        ))
    }
    fn describe_subnets<'a>(&'a self, subnet_ids: &'a [String]) -> Ec2Result<'a, Vec<Subnet>> {
        Box::pin(Ec2::describe_subnets(self, subnet_ids))
    }
    fn describe_zone_subnets<'a>(
        &'a self,
        vpc_id: &'a str,
        zone: &'a str,
    ) -> Ec2Result<'a, Vec<Subnet>> {
        Box::pin(Ec2::describe_zone_subnets(self, vpc_id, zone))
    }
    fn describe_instance_types<'a>(
        &'a self,
        types: &'a [String],
    ) -> Ec2Result<'a, Vec<InstanceLimits>> {
        Box::pin(Ec2::describe_instance_types(self, types))
    }
    fn create_network_interface<'a>(
        &'a self,
        req: &'a CreateEni,
    ) -> Ec2Result<'a, NetworkInterface> {
        Box::pin(Ec2::create_network_interface(self, req))
    }
    fn attach_network_interface<'a>(
        &'a self,
        eni_id: &'a str,
        instance_id: &'a str,
        device_index: u32,
        network_card_index: u32,
    ) -> Ec2Result<'a, String> {
        Box::pin(Ec2::attach_network_interface(
            self,
            eni_id,
            instance_id,
            device_index,
            network_card_index,
        ))
    }
    fn set_delete_on_termination<'a>(
        &'a self,
        eni_id: &'a str,
        attachment_id: &'a str,
        delete: bool,
    ) -> Ec2Result<'a, ()> {
        Box::pin(Ec2::set_delete_on_termination(
            self,
            eni_id,
            attachment_id,
            delete,
        ))
    }
    fn detach_network_interface<'a>(
        &'a self,
        attachment_id: &'a str,
        force: bool,
    ) -> Ec2Result<'a, ()> {
        Box::pin(Ec2::detach_network_interface(self, attachment_id, force))
    }
    fn delete_network_interface<'a>(&'a self, eni_id: &'a str) -> Ec2Result<'a, ()> {
        Box::pin(Ec2::delete_network_interface(self, eni_id))
    }
    fn assign_private_ips<'a>(
        &'a self,
        eni_id: &'a str,
        req: AddressRequest,
    ) -> Ec2Result<'a, Assigned> {
        Box::pin(Ec2::assign_private_ips(self, eni_id, req))
    }
    fn unassign_private_ips<'a>(
        &'a self,
        eni_id: &'a str,
        release: &'a AddressRelease,
    ) -> Ec2Result<'a, ()> {
        Box::pin(Ec2::unassign_private_ips(self, eni_id, release))
    }
    fn create_tags<'a>(&'a self, resource_ids: &'a [String], tags: &'a Tags) -> Ec2Result<'a, ()> {
        Box::pin(Ec2::create_tags(self, resource_ids, tags))
    }
}

impl MetadataApi for Imds {
    fn instance_id(&self) -> ImdsResult<'_, String> {
        Box::pin(Imds::instance_id(self))
    }
    fn instance_type(&self) -> ImdsResult<'_, String> {
        Box::pin(Imds::instance_type(self))
    }
    fn mac(&self) -> ImdsResult<'_, String> {
        Box::pin(Imds::mac(self))
    }
    fn region(&self) -> ImdsResult<'_, String> {
        Box::pin(Imds::region(self))
    }
    fn availability_zone(&self) -> ImdsResult<'_, String> {
        Box::pin(Imds::availability_zone(self))
    }
    fn local_ipv4(&self) -> ImdsResult<'_, Ipv4Addr> {
        Box::pin(Imds::local_ipv4(self))
    }
    fn interface<'a>(&'a self, mac: &'a str) -> ImdsResult<'a, ImdsInterface> {
        Box::pin(Imds::interface(self, mac))
    }
    fn interfaces(&self) -> ImdsResult<'_, Vec<ImdsInterface>> {
        Box::pin(Imds::interfaces(self))
    }
}
