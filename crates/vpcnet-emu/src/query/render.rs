//! Model → EC2 XML shapes, with the element names aws-sdk-ec2's deserializers read
//! (`protocol_serde/shape_*.rs`): lists are `<item>` elements inside `...Set` elements.

use std::time::Instant;

use chrono::{DateTime, Utc};
use vpcnet_limits::{Hypervisor, InstanceLimits};

use super::xml::Xml;
use crate::model::{Cloud, Eni, Instance, InstanceState, Subnet, Tags, Vpc};

/// Converts the emulator's monotonic instants into wall-clock timestamps.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now: Instant,
    pub base_instant: Instant,
    pub base_wall: DateTime<Utc>,
}

impl Clock {
    /// EC2's timestamp format, e.g. `2026-11-30T15:11:07.000Z`.
    pub fn ts(&self, at: Instant) -> String {
        let wall = if at >= self.base_instant {
            self.base_wall + (at - self.base_instant)
        } else {
            self.base_wall - (self.base_instant - at)
        };
        wall.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    }
}

pub fn tags(x: &mut Xml, t: &Tags) {
    x.set("tagSet", &t.0, |x, (k, v)| {
        x.leaf("key", k).leaf("value", v);
    });
}

fn groups(x: &mut Xml, cloud: &Cloud, ids: &[String]) {
    x.set("groupSet", ids, |x, g| {
        x.leaf("groupId", g);
        if let Some(sg) = cloud.group(g) {
            x.leaf("groupName", &sg.name);
        }
    });
}

fn private_ips(x: &mut Xml, cloud: &Cloud, eni: &Eni) {
    let all = std::iter::once((eni.primary_ip, true))
        .chain(eni.secondary_ips.iter().map(|ip| (*ip, false)));
    x.set("privateIpAddressesSet", all, |x, (ip, primary)| {
        x.leaf("privateIpAddress", ip)
            .leaf("privateDnsName", cloud.private_dns_name(ip))
            .leaf("primary", primary);
    });
    x.set("ipv4PrefixSet", &eni.prefixes, |x, p| {
        x.leaf("ipv4Prefix", p);
    });
}

/// `NetworkInterface` (CreateNetworkInterface, DescribeNetworkInterfaces).
pub fn network_interface(x: &mut Xml, cloud: &Cloud, clock: &Clock, eni: &Eni) {
    x.leaf("networkInterfaceId", &eni.id)
        .leaf("subnetId", &eni.subnet_id)
        .leaf("vpcId", &eni.vpc_id)
        .leaf("availabilityZone", &eni.az);
    if let Some(s) = cloud.subnet(&eni.subnet_id) {
        x.leaf("availabilityZoneId", &s.az_id);
    }
    x.leaf("description", &eni.description)
        .leaf("ownerId", &cloud.account_id)
        .leaf("requesterManaged", false)
        .leaf("status", eni.status())
        .leaf("macAddress", &eni.mac)
        .leaf("privateIpAddress", eni.primary_ip)
        .leaf("privateDnsName", cloud.private_dns_name(eni.primary_ip))
        .leaf("sourceDestCheck", eni.source_dest_check)
        .leaf("interfaceType", "interface");
    groups(x, cloud, &eni.groups);
    if let Some(a) = &eni.attachment {
        x.open("attachment")
            .leaf("attachmentId", &a.id)
            .leaf("instanceId", &a.instance_id)
            .leaf("instanceOwnerId", &cloud.account_id)
            .leaf("deviceIndex", a.device_index)
            .leaf("networkCardIndex", a.network_card)
            .leaf("status", a.status(clock.now))
            .leaf("attachTime", clock.ts(a.attach_time))
            .leaf("deleteOnTermination", a.delete_on_termination)
            .close("attachment");
    }
    tags(x, &eni.tags);
    private_ips(x, cloud, eni);
    super::ipv6::eni_sets(x, eni);
}

/// `InstanceNetworkInterface` (DescribeInstances).
fn instance_network_interface(x: &mut Xml, cloud: &Cloud, clock: &Clock, eni: &Eni) {
    x.leaf("networkInterfaceId", &eni.id)
        .leaf("subnetId", &eni.subnet_id)
        .leaf("vpcId", &eni.vpc_id)
        .leaf("description", &eni.description)
        .leaf("ownerId", &cloud.account_id)
        .leaf("status", eni.status())
        .leaf("macAddress", &eni.mac)
        .leaf("privateIpAddress", eni.primary_ip)
        .leaf("privateDnsName", cloud.private_dns_name(eni.primary_ip))
        .leaf("sourceDestCheck", eni.source_dest_check)
        .leaf("interfaceType", "interface");
    groups(x, cloud, &eni.groups);
    if let Some(a) = &eni.attachment {
        x.open("attachment")
            .leaf("attachmentId", &a.id)
            .leaf("deviceIndex", a.device_index)
            .leaf("networkCardIndex", a.network_card)
            .leaf("status", a.status(clock.now))
            .leaf("attachTime", clock.ts(a.attach_time))
            .leaf("deleteOnTermination", a.delete_on_termination)
            .close("attachment");
    }
    private_ips(x, cloud, eni);
    super::ipv6::eni_sets(x, eni);
}

/// `Instance` (DescribeInstances). `empty_dns` answers an empty `privateDnsName`.
pub fn instance(x: &mut Xml, cloud: &Cloud, clock: &Clock, i: &Instance, empty_dns: bool) {
    let (code, name) = i.state.code_name();
    x.leaf("instanceId", &i.id)
        .leaf("imageId", &i.image_id)
        .open("instanceState")
        .leaf("code", code)
        .leaf("name", name)
        .close("instanceState")
        .leaf(
            "privateDnsName",
            if empty_dns {
                String::new()
            } else {
                cloud.private_dns_name(i.private_ip)
            },
        )
        .leaf("dnsName", "")
        .leaf("amiLaunchIndex", 0)
        .leaf("instanceType", &i.instance_type)
        .leaf("launchTime", clock.ts(i.launch_time))
        .open("placement")
        .leaf("availabilityZone", &i.az)
        .leaf("tenancy", "default")
        .close("placement")
        .open("monitoring")
        .leaf("state", "disabled")
        .close("monitoring")
        .leaf("architecture", "x86_64")
        .leaf("rootDeviceType", "ebs")
        .leaf("rootDeviceName", "/dev/xvda")
        .leaf("virtualizationType", "hvm")
        .leaf("hypervisor", "xen");
    if i.state == InstanceState::Running {
        x.leaf("subnetId", &i.subnet_id)
            .leaf("vpcId", &i.vpc_id)
            .leaf("privateIpAddress", i.private_ip)
            .leaf("sourceDestCheck", true);
    }
    groups(x, cloud, &i.groups);
    let mut enis: Vec<&Eni> = cloud
        .enis()
        .filter(|e| e.attachment.as_ref().is_some_and(|a| a.instance_id == i.id))
        .collect();
    enis.sort_by_key(|e| {
        e.attachment
            .as_ref()
            .map(|a| (a.network_card, a.device_index))
    });
    x.set("networkInterfaceSet", enis, |x, e| {
        instance_network_interface(x, cloud, clock, e)
    });
    tags(x, &i.tags);
}

pub fn subnet(x: &mut Xml, cloud: &Cloud, s: &Subnet) {
    x.leaf("subnetId", &s.id)
        .leaf(
            "subnetArn",
            format!(
                "arn:aws:ec2:{}:{}:subnet/{}",
                cloud.region, cloud.account_id, s.id
            ),
        )
        .leaf("state", "available")
        .leaf("vpcId", &s.vpc_id)
        .leaf("cidrBlock", s.cidr)
        .leaf("availableIpAddressCount", s.available())
        .leaf("availabilityZone", &s.az)
        .leaf("availabilityZoneId", &s.az_id)
        .leaf("defaultForAz", false)
        .leaf("mapPublicIpOnLaunch", false)
        .leaf("ownerId", &cloud.account_id);
    super::ipv6::subnet_elements(x, s);
    tags(x, &s.tags);
}

pub fn vpc(x: &mut Xml, cloud: &Cloud, v: &Vpc) {
    x.leaf("vpcId", &v.id)
        .leaf("ownerId", &cloud.account_id)
        .leaf("state", "available")
        .leaf("cidrBlock", v.cidrs[0].1)
        .leaf("dhcpOptionsId", "default")
        .leaf("instanceTenancy", "default")
        .leaf("isDefault", false);
    x.set("cidrBlockAssociationSet", &v.cidrs, |x, (assoc, cidr)| {
        x.leaf("associationId", assoc)
            .leaf("cidrBlock", cidr)
            .open("cidrBlockState")
            .leaf("state", "associated")
            .close("cidrBlockState");
    });
    super::ipv6::vpc_elements(x, cloud, v);
    tags(x, &v.tags);
}

/// `InstanceTypeInfo` (DescribeInstanceTypes): NetworkInfo, VCpuInfo, Hypervisor, BareMetal.
pub fn instance_type(x: &mut Xml, l: &InstanceLimits) {
    x.leaf("instanceType", &l.instance_type)
        .leaf("currentGeneration", true)
        .leaf("bareMetal", l.bare_metal);
    match l.hypervisor {
        Hypervisor::Nitro => {
            x.leaf("hypervisor", "nitro");
        }
        Hypervisor::Xen => {
            x.leaf("hypervisor", "xen");
        }
        Hypervisor::Unknown => {}
    }
    if let Some(v) = l.vcpus {
        x.open("vCpuInfo").leaf("defaultVCpus", v).close("vCpuInfo");
    }
    x.open("networkInfo")
        .leaf("maximumNetworkInterfaces", l.total_enis())
        .leaf("maximumNetworkCards", l.network_cards.len())
        .leaf("defaultNetworkCardIndex", l.default_network_card)
        .leaf("ipv4AddressesPerInterface", l.ipv4_per_eni)
        .leaf("ipv6AddressesPerInterface", l.ipv4_per_eni)
        .leaf("ipv6Supported", true)
        .leaf(
            "enaSupport",
            if l.hypervisor == Hypervisor::Xen {
                "supported"
            } else {
                "required"
            },
        );
    x.set("networkCards", &l.network_cards, |x, c| {
        x.leaf("networkCardIndex", c.index)
            .leaf("maximumNetworkInterfaces", c.max_enis);
    });
    x.close("networkInfo");
}
