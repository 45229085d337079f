//! The EC2 actions: parse parameters, apply them to the [`Cloud`], render the response.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;

use super::describe::{
    describe_availability_zones, describe_instance_topology, describe_instance_types,
    describe_instances, describe_network_interfaces, describe_subnets, describe_vpcs,
};
use super::filter::tag_values;
use super::params::{parse_prefix, Params};
use super::render;
use super::render::Clock;
use super::security_groups as sg;
use super::xml::Xml;
use crate::error::Ec2Error;
use crate::model::{AssignRequest, Cloud, CreateEniRequest, ModifyEniRequest};

/// Every action served, and whether it mutates state.
pub const ACTIONS: &[(&str, bool)] = &[
    ("DescribeInstances", false),
    ("DescribeInstanceTypes", false),
    ("DescribeSubnets", false),
    ("DescribeVpcs", false),
    ("DescribeAvailabilityZones", false),
    ("DescribeInstanceTopology", false),
    ("DescribeNetworkInterfaces", false),
    ("CreateNetworkInterface", true),
    ("AttachNetworkInterface", true),
    ("DetachNetworkInterface", true),
    ("DeleteNetworkInterface", true),
    ("ModifyNetworkInterfaceAttribute", true),
    ("AssignPrivateIpAddresses", true),
    ("UnassignPrivateIpAddresses", true),
    ("AssignIpv6Addresses", true),
    ("UnassignIpv6Addresses", true),
    ("CreateTags", true),
    ("DeleteTags", true),
    ("TerminateInstances", true),
    ("CreateSecurityGroup", true),
    ("DescribeSecurityGroups", false),
    ("AuthorizeSecurityGroupIngress", true),
    ("RevokeSecurityGroupIngress", true),
];

/// Whether `action` mutates; None for an action this emulator does not serve.
pub fn is_mutating(action: &str) -> Option<bool> {
    ACTIONS.iter().find(|(a, _)| *a == action).map(|(_, m)| *m)
}

/// What one call needs besides its parameters.
pub struct Ctx<'a> {
    pub cloud: &'a mut Cloud,
    pub clock: Clock,
    /// AttachNetworkInterface: time until the attachment completes.
    pub attach_delay: Duration,
    /// DescribeInstances: answer an empty PrivateDnsName.
    pub empty_dns: bool,
    pub request_id: String,
}

/// A successful call: the XML body, and an attachment to complete later (ENI, attachment ID,
/// completion time) for AttachNetworkInterface.
pub struct Done {
    pub body: String,
    pub attachment: Option<(String, String, Instant)>,
}

impl Done {
    fn body(body: String) -> Self {
        Done {
            body,
            attachment: None,
        }
    }
}

/// Run `action`. Errors are EC2's, ready for the error envelope.
pub fn handle(action: &str, p: &Params, ctx: &mut Ctx) -> Result<Done, Ec2Error> {
    if p.bool("DryRun")? == Some(true) {
        return Err(Ec2Error::new(
            "DryRunOperation",
            "Request would have succeeded, but DryRun flag is set.",
        ));
    }
    match action {
        "DescribeInstances" => describe_instances(p, ctx).map(Done::body),
        "DescribeInstanceTypes" => describe_instance_types(p, ctx).map(Done::body),
        "DescribeSubnets" => describe_subnets(p, ctx).map(Done::body),
        "DescribeVpcs" => describe_vpcs(p, ctx).map(Done::body),
        "DescribeAvailabilityZones" => describe_availability_zones(p, ctx).map(Done::body),
        "DescribeInstanceTopology" => describe_instance_topology(p, ctx).map(Done::body),
        "DescribeNetworkInterfaces" => describe_network_interfaces(p, ctx).map(Done::body),
        "CreateNetworkInterface" => create_network_interface(p, ctx).map(Done::body),
        "AttachNetworkInterface" => attach_network_interface(p, ctx),
        "DetachNetworkInterface" => detach_network_interface(p, ctx).map(Done::body),
        "DeleteNetworkInterface" => delete_network_interface(p, ctx).map(Done::body),
        "ModifyNetworkInterfaceAttribute" => {
            modify_network_interface_attribute(p, ctx).map(Done::body)
        }
        "AssignPrivateIpAddresses" => assign_private_ip_addresses(p, ctx).map(Done::body),
        "UnassignPrivateIpAddresses" => unassign_private_ip_addresses(p, ctx).map(Done::body),
        "AssignIpv6Addresses" => super::ipv6::assign_ipv6_addresses(p, ctx).map(Done::body),
        "UnassignIpv6Addresses" => super::ipv6::unassign_ipv6_addresses(p, ctx).map(Done::body),
        "CreateTags" => create_tags(p, ctx).map(Done::body),
        "DeleteTags" => delete_tags(p, ctx).map(Done::body),
        "TerminateInstances" => terminate_instances(p, ctx).map(Done::body),
        "CreateSecurityGroup" => sg::create_security_group(p, ctx).map(Done::body),
        "DescribeSecurityGroups" => sg::describe_security_groups(p, ctx).map(Done::body),
        "AuthorizeSecurityGroupIngress" => sg::authorize_ingress(p, ctx).map(Done::body),
        "RevokeSecurityGroupIngress" => sg::revoke_ingress(p, ctx).map(Done::body),
        other => Err(invalid_action(other)),
    }
}

pub fn invalid_action(action: &str) -> Ec2Error {
    Ec2Error::new(
        "InvalidAction",
        format!("The action {action} is not valid for this web service."),
    )
}

pub(super) fn start(action: &str, ctx: &Ctx) -> (Xml, String) {
    let root = format!("{action}Response");
    let mut x = Xml::response(&root);
    x.leaf("requestId", &ctx.request_id);
    (x, root)
}

fn simple_ok(action: &str, ctx: &Ctx) -> String {
    let (mut x, root) = start(action, ctx);
    x.leaf("return", true);
    x.finish(&root)
}

pub(super) fn tag_or<'a>(
    tags: &crate::model::Tags,
    name: &str,
    f: impl FnOnce(&str) -> Option<Vec<String>> + 'a,
) -> Option<Vec<String>> {
    tag_values(tags, name).or_else(|| f(name))
}

fn count(p: &Params, name: &str) -> Result<u32, Ec2Error> {
    Ok(p.u32(name)?.unwrap_or(0))
}

fn prefixes(p: &Params, name: &str, member: Option<&str>) -> Result<Vec<Ipv4Net>, Ec2Error> {
    p.parsed_list(name, member, parse_prefix)
}

fn create_network_interface(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let subnet_id = p.required("SubnetId")?.to_string();
    let mut primary_ip: Option<Ipv4Addr> = p.parsed("PrivateIpAddress", "an IPv4 address")?;
    let mut secondary_ips = Vec::new();
    for (k, s) in p.structs("PrivateIpAddresses") {
        let key = format!("{k}.PrivateIpAddress");
        let v = s
            .required("PrivateIpAddress")
            .map_err(|_| Ec2Error::missing(&key))?;
        let ip: Ipv4Addr = v
            .parse()
            .map_err(|_| Ec2Error::invalid(&key, v, "Expected an IPv4 address."))?;
        if s.bool("Primary")? == Some(true) {
            if primary_ip.is_some_and(|p| p != ip) {
                return Err(Ec2Error::combination(
                    "Only one primary private IP address can be specified",
                ));
            }
            primary_ip = Some(ip);
        } else {
            secondary_ips.push(ip);
        }
    }
    let req = CreateEniRequest {
        subnet_id,
        description: p.get("Description").unwrap_or("").to_string(),
        groups: p.strings("SecurityGroupId")?,
        tags: p.tag_specs("network-interface")?,
        primary_ip,
        secondary_ips,
        secondary_count: count(p, "SecondaryPrivateIpAddressCount")?,
        prefix_count: count(p, "Ipv4PrefixCount")?,
        prefixes: prefixes(p, "Ipv4Prefix", Some("Ipv4Prefix"))?,
        ipv6: super::ipv6::request(p, true)?,
    };
    // ClientToken: a retry of a create whose answer was lost gets the same ENI back.
    let token = p.get("ClientToken").filter(|t| !t.is_empty());
    let earlier = token
        .and_then(|t| ctx.cloud.client_tokens.get(t))
        .filter(|id| ctx.cloud.eni(id).is_some())
        .cloned();
    let id = match earlier {
        Some(id) => id,
        None => {
            let id = ctx.cloud.create_eni(req)?;
            if let Some(t) = token {
                ctx.cloud.client_tokens.insert(t.to_string(), id.clone());
            }
            id
        }
    };
    let cloud = &*ctx.cloud;
    let (mut x, root) = start("CreateNetworkInterface", ctx);
    x.open("networkInterface");
    render::network_interface(&mut x, cloud, &ctx.clock, cloud.eni(&id).expect("created"));
    x.close("networkInterface");
    if let Some(t) = p.get("ClientToken") {
        x.leaf("clientToken", t);
    }
    Ok(x.finish(&root))
}

fn attach_network_interface(p: &Params, ctx: &mut Ctx) -> Result<Done, Ec2Error> {
    let eni = p.required("NetworkInterfaceId")?;
    let instance = p.required("InstanceId")?;
    let device_index = p
        .u32("DeviceIndex")?
        .ok_or_else(|| Ec2Error::missing("DeviceIndex"))?;
    let card = p.u32("NetworkCardIndex")?;
    let now = ctx.clock.now;
    let complete_at = now + ctx.attach_delay;
    let att = ctx
        .cloud
        .attach_eni(eni, instance, device_index, card, now, complete_at)?;
    let card = ctx
        .cloud
        .eni(eni)
        .and_then(|e| e.attachment.as_ref())
        .map(|a| a.network_card)
        .unwrap_or(0);
    let (mut x, root) = start("AttachNetworkInterface", ctx);
    x.leaf("attachmentId", &att).leaf("networkCardIndex", card);
    Ok(Done {
        body: x.finish(&root),
        attachment: Some((eni.to_string(), att, complete_at)),
    })
}

fn detach_network_interface(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let att = p.required("AttachmentId")?;
    let force = p.bool("Force")?.unwrap_or(false);
    ctx.cloud.detach_eni(att, force)?;
    Ok(simple_ok("DetachNetworkInterface", ctx))
}

fn delete_network_interface(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    ctx.cloud.delete_eni(p.required("NetworkInterfaceId")?)?;
    Ok(simple_ok("DeleteNetworkInterface", ctx))
}

fn modify_network_interface_attribute(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let eni = p.required("NetworkInterfaceId")?;
    let groups = p.strings("SecurityGroupId")?;
    let att_id = p.get("Attachment.AttachmentId").filter(|s| !s.is_empty());
    let delete_on_termination = match (att_id, p.bool("Attachment.DeleteOnTermination")?) {
        (Some(a), Some(d)) => Some((a.to_string(), d)),
        (None, None) => None,
        (None, Some(_)) => return Err(Ec2Error::missing("Attachment.AttachmentId")),
        (Some(_), None) => return Err(Ec2Error::missing("Attachment.DeleteOnTermination")),
    };
    let req = ModifyEniRequest {
        description: p.get("Description.Value").map(str::to_string),
        groups: (!groups.is_empty()).then_some(groups),
        source_dest_check: p.bool("SourceDestCheck.Value")?,
        delete_on_termination,
    };
    ctx.cloud.modify_eni(eni, req)?;
    Ok(simple_ok("ModifyNetworkInterfaceAttribute", ctx))
}

fn assign_private_ip_addresses(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let eni = p.required("NetworkInterfaceId")?.to_string();
    let req = AssignRequest {
        count: count(p, "SecondaryPrivateIpAddressCount")?,
        ips: p.ipv4s("PrivateIpAddress")?,
        prefix_count: count(p, "Ipv4PrefixCount")?,
        prefixes: prefixes(p, "Ipv4Prefix", None)?,
        allow_reassignment: p.bool("AllowReassignment")?.unwrap_or(false),
    };
    let (ips, prefixes) = ctx.cloud.assign(&eni, req)?;
    let (mut x, root) = start("AssignPrivateIpAddresses", ctx);
    x.leaf("networkInterfaceId", &eni);
    x.set("assignedPrivateIpAddressesSet", ips, |x, ip| {
        x.leaf("privateIpAddress", ip);
    });
    x.set("assignedIpv4PrefixSet", prefixes, |x, p| {
        x.leaf("ipv4Prefix", p);
    });
    x.leaf("return", true);
    Ok(x.finish(&root))
}

fn unassign_private_ip_addresses(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let eni = p.required("NetworkInterfaceId")?.to_string();
    let ips = p.ipv4s("PrivateIpAddress")?;
    let prefixes = prefixes(p, "Ipv4Prefix", None)?;
    ctx.cloud.unassign(&eni, &ips, &prefixes)?;
    Ok(simple_ok("UnassignPrivateIpAddresses", ctx))
}

fn create_tags(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let resources = p.strings("ResourceId")?;
    if resources.is_empty() {
        return Err(Ec2Error::missing("ResourceId.1"));
    }
    let tags = p.tags("Tag")?;
    if tags.is_empty() {
        return Err(Ec2Error::missing("Tag.1.Key"));
    }
    ctx.cloud.create_tags(&resources, &tags)?;
    Ok(simple_ok("CreateTags", ctx))
}

fn delete_tags(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let resources = p.strings("ResourceId")?;
    if resources.is_empty() {
        return Err(Ec2Error::missing("ResourceId.1"));
    }
    let mut tags = Vec::new();
    for (k, t) in p.structs("Tag") {
        let key = t
            .required("Key")
            .map_err(|_| Ec2Error::missing(&format!("{k}.Key")))?;
        tags.push((key.to_string(), t.get("Value").map(str::to_string)));
    }
    ctx.cloud.delete_tags(&resources, &tags)?;
    Ok(simple_ok("DeleteTags", ctx))
}

fn terminate_instances(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let ids = p.strings("InstanceId")?;
    if ids.is_empty() {
        return Err(Ec2Error::missing("InstanceId.1"));
    }
    let changes = ctx.cloud.terminate_instances(&ids)?;
    let (mut x, root) = start("TerminateInstances", ctx);
    x.set("instancesSet", changes, |x, (id, prev, cur)| {
        let (pc, pn) = prev.code_name();
        let (cc, cn) = cur.code_name();
        x.leaf("instanceId", id)
            .open("currentState")
            .leaf("code", cc)
            .leaf("name", cn)
            .close("currentState")
            .open("previousState")
            .leaf("code", pc)
            .leaf("name", pn)
            .close("previousState");
    });
    Ok(x.finish(&root))
}
