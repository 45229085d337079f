//! The IPv6 parts of the EC2 Query API: AssignIpv6Addresses and UnassignIpv6Addresses, the
//! `Ipv6*` parameters of CreateNetworkInterface, and the IPv6 elements of network interfaces,
//! subnets and VPCs, named as aws-sdk-ec2's deserializers read them.

use std::net::Ipv6Addr;

use ipnet::Ipv6Net;

use super::actions::{start, Ctx};
use super::params::Params;
use super::xml::Xml;
use crate::error::Ec2Error;
use crate::model::{Cloud, Eni, Ipv6Request, Subnet, Vpc};

fn addr(key: &str, v: &str) -> Result<Ipv6Addr, Ec2Error> {
    v.trim()
        .parse()
        .map_err(|_| Ec2Error::invalid(key, v, "Expected an IPv6 address such as 2600:1f18::5."))
}

fn prefix(key: &str, v: &str) -> Result<Ipv6Net, Ec2Error> {
    v.trim().parse().map_err(|_| {
        Ec2Error::invalid(
            key,
            v,
            "Expected an IPv6 prefix such as 2600:1f18:0:100:1234::/80.",
        )
    })
}

/// The IPv6 request of AssignIpv6Addresses (`nested` false: `Ipv6Addresses.N`,
/// `Ipv6Prefix.N`) or CreateNetworkInterface (`nested` true: `Ipv6Addresses.N.Ipv6Address`,
/// `Ipv6Prefix.N.Ipv6Prefix`); None when none of its parameters is present.
pub(super) fn request(p: &Params, nested: bool) -> Result<Option<Ipv6Request>, Ec2Error> {
    let (addr_member, prefix_member) = if nested {
        (Some("Ipv6Address"), Some("Ipv6Prefix"))
    } else {
        (None, None)
    };
    let count = p.u32("Ipv6AddressCount")?;
    let prefix_count = p.u32("Ipv6PrefixCount")?;
    let req = Ipv6Request {
        count: count.unwrap_or(0),
        addresses: p.parsed_list("Ipv6Addresses", addr_member, addr)?,
        prefix_count: prefix_count.unwrap_or(0),
        prefixes: p.parsed_list("Ipv6Prefix", prefix_member, prefix)?,
    };
    let given = count.is_some() || prefix_count.is_some() || !req.is_empty();
    Ok(given.then_some(req))
}

/// AssignIpv6Addresses → `assignedIpv6Addresses`, `assignedIpv6PrefixSet` (what this call
/// assigned, as EC2 answers).
pub(super) fn assign_ipv6_addresses(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let eni = p.required("NetworkInterfaceId")?.to_string();
    let req = request(p, false)?.unwrap_or_default();
    let (addrs, prefixes) = ctx.cloud.assign_ipv6(&eni, req)?;
    Ok(answer(
        "AssignIpv6Addresses",
        "assigned",
        ctx,
        &eni,
        &addrs,
        &prefixes,
    ))
}

/// The answer of AssignIpv6Addresses (`verb` `assigned`) or UnassignIpv6Addresses
/// (`unassigned`): `networkInterfaceId`, `{verb}Ipv6Addresses`, `{verb}Ipv6PrefixSet`, each a
/// list of strings.
fn answer(
    action: &str,
    verb: &str,
    ctx: &Ctx,
    eni: &str,
    addrs: &[Ipv6Addr],
    prefixes: &[Ipv6Net],
) -> String {
    let (mut x, root) = start(action, ctx);
    x.leaf("networkInterfaceId", eni);
    x.set(&format!("{verb}Ipv6Addresses"), addrs, |x, a| {
        x.text(a);
    });
    x.set(&format!("{verb}Ipv6PrefixSet"), prefixes, |x, p| {
        x.text(p);
    });
    x.finish(&root)
}

/// UnassignIpv6Addresses (`Ipv6Addresses.N`, `Ipv6Prefix.N`) → `unassignedIpv6Addresses`,
/// `unassignedIpv6PrefixSet`.
pub(super) fn unassign_ipv6_addresses(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let eni = p.required("NetworkInterfaceId")?.to_string();
    let addrs = p.parsed_list("Ipv6Addresses", None, addr)?;
    let prefixes = p.parsed_list("Ipv6Prefix", None, prefix)?;
    let (addrs, prefixes) = ctx.cloud.unassign_ipv6(&eni, &addrs, &prefixes)?;
    Ok(answer(
        "UnassignIpv6Addresses",
        "unassigned",
        ctx,
        &eni,
        &addrs,
        &prefixes,
    ))
}

/// An ENI's `ipv6AddressesSet` (`ipv6Address`, `isPrimaryIpv6`) and `ipv6PrefixSet`
/// (`ipv6Prefix`), in NetworkInterface and InstanceNetworkInterface alike.
pub(super) fn eni_sets(x: &mut Xml, eni: &Eni) {
    x.set("ipv6AddressesSet", &eni.ipv6_addresses, |x, a| {
        x.leaf("ipv6Address", a).leaf("isPrimaryIpv6", false);
    });
    x.set("ipv6PrefixSet", &eni.ipv6_prefixes, |x, p| {
        x.leaf("ipv6Prefix", p);
    });
}

/// A subnet's `assignIpv6AddressOnCreation`, `ipv6Native` and `ipv6CidrBlockAssociationSet`.
pub(super) fn subnet_elements(x: &mut Xml, s: &Subnet) {
    x.leaf(
        "assignIpv6AddressOnCreation",
        s.ipv6.as_ref().is_some_and(|v| v.assign_on_creation),
    )
    .leaf("ipv6Native", false);
    x.set("ipv6CidrBlockAssociationSet", &s.ipv6, |x, v| {
        association(x, &v.association_id, v.cidr);
    });
}

/// A VPC's `ipv6CidrBlockAssociationSet`.
pub(super) fn vpc_elements(x: &mut Xml, cloud: &Cloud, v: &Vpc) {
    x.set("ipv6CidrBlockAssociationSet", &v.ipv6, |x, a| {
        association(x, &a.association_id, a.cidr);
        x.leaf("networkBorderGroup", cloud.region())
            .leaf("ipv6Pool", "Amazon");
    });
}

/// The members a subnet's and a VPC's IPv6 CIDR block association share.
fn association(x: &mut Xml, id: &str, cidr: Ipv6Net) {
    x.leaf("associationId", id)
        .leaf("ipv6CidrBlock", cidr)
        .open("ipv6CidrBlockState")
        .leaf("state", "associated")
        .close("ipv6CidrBlockState")
        .leaf("ipSource", "amazon");
}

/// Values of the IPv6 filters of DescribeNetworkInterfaces (`ipv6-addresses.ipv6-address`,
/// `ipv6-prefix`); None for another filter name.
pub(super) fn eni_filter(e: &Eni, name: &str) -> Option<Vec<String>> {
    match name {
        "ipv6-addresses.ipv6-address" => {
            Some(e.ipv6_addresses.iter().map(|a| a.to_string()).collect())
        }
        "ipv6-prefix" => Some(e.ipv6_prefixes.iter().map(|p| p.to_string()).collect()),
        _ => None,
    }
}

/// Values of the IPv6 filters of DescribeSubnets and DescribeVpcs
/// (`ipv6-cidr-block-association.ipv6-cidr-block`, `.association-id`, `.state`); None for
/// another filter name.
pub(super) fn cidr_filter(assoc: Option<(&str, Ipv6Net)>, name: &str) -> Option<Vec<String>> {
    let values =
        |f: &dyn Fn(&str, Ipv6Net) -> String| assoc.iter().map(|(a, c)| f(a, *c)).collect();
    match name {
        "ipv6-cidr-block-association.ipv6-cidr-block" => Some(values(&|_, c| c.to_string())),
        "ipv6-cidr-block-association.association-id" => Some(values(&|a, _| a.to_string())),
        "ipv6-cidr-block-association.state" => Some(values(&|_, _| "associated".into())),
        _ => None,
    }
}
