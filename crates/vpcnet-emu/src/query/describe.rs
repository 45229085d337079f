//! The EC2 Describe actions: filters over ENIs and instances, pages, and the XML of network
//! interfaces, instances, instance types, subnets, VPCs, availability zones and the instance
//! topology.

use std::time::Instant;

use super::actions::{start, tag_or, Ctx};
use super::filter::{matches, page};
use super::params::Params;
use super::render;
use crate::error::Ec2Error;
use crate::model::{Cloud, Eni, Instance};

fn eni_filter_values(cloud: &Cloud, now: Instant, e: &Eni, name: &str) -> Option<Vec<String>> {
    let one = |s: String| Some(vec![s]);
    let att = e.attachment.as_ref();
    tag_or(&e.tags, name, |name| match name {
        "network-interface-id" => one(e.id.clone()),
        "subnet-id" => one(e.subnet_id.clone()),
        "vpc-id" => one(e.vpc_id.clone()),
        "availability-zone" => one(e.az.clone()),
        "status" => one(e.status().to_string()),
        "description" => one(e.description.clone()),
        "mac-address" => one(e.mac.clone()),
        "owner-id" => one(cloud.account_id.clone()),
        "interface-type" => one("interface".into()),
        "requester-managed" => one("false".into()),
        "source-dest-check" => one(e.source_dest_check.to_string()),
        "group-id" => Some(e.groups.clone()),
        "private-ip-address" | "addresses.private-ip-address" => Some(
            std::iter::once(e.primary_ip)
                .chain(e.secondary_ips.iter().copied())
                .map(|i| i.to_string())
                .collect(),
        ),
        "ipv4-prefix" => Some(e.prefixes.iter().map(|p| p.to_string()).collect()),
        "attachment.instance-id" => Some(att.map(|a| a.instance_id.clone()).into_iter().collect()),
        "attachment.attachment-id" => Some(att.map(|a| a.id.clone()).into_iter().collect()),
        "attachment.device-index" => Some(
            att.map(|a| a.device_index.to_string())
                .into_iter()
                .collect(),
        ),
        "attachment.network-card-index" => Some(
            att.map(|a| a.network_card.to_string())
                .into_iter()
                .collect(),
        ),
        "attachment.status" => Some(att.map(|a| a.status(now).to_string()).into_iter().collect()),
        "attachment.delete-on-termination" => Some(
            att.map(|a| a.delete_on_termination.to_string())
                .into_iter()
                .collect(),
        ),
        other => super::ipv6::eni_filter(e, other),
    })
}

pub(super) fn describe_network_interfaces(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let ids = p.strings("NetworkInterfaceId")?;
    let filters = p.filters()?;
    let max = p.u32("MaxResults")?;
    let cloud = &*ctx.cloud;
    for id in &ids {
        if cloud.eni(id).is_none() {
            return Err(Ec2Error::eni_not_found(id));
        }
    }
    let mut selected = Vec::new();
    for e in cloud.enis() {
        if !ids.is_empty() && !ids.contains(&e.id) {
            continue;
        }
        if matches(&filters, |n| eni_filter_values(cloud, ctx.clock.now, e, n))? {
            selected.push((e.id.clone(), e));
        }
    }
    let (items, token) = page(selected, max, (5, 1000), p.get("NextToken"))?;
    let (mut x, root) = start("DescribeNetworkInterfaces", ctx);
    x.set("networkInterfaceSet", items, |x, e| {
        render::network_interface(x, cloud, &ctx.clock, e)
    });
    if let Some(t) = token {
        x.leaf("nextToken", t);
    }
    Ok(x.finish(&root))
}

fn instance_filter_values(cloud: &Cloud, i: &Instance, name: &str) -> Option<Vec<String>> {
    let one = |s: String| Some(vec![s]);
    let enis: Vec<&Eni> = cloud
        .enis()
        .filter(|e| e.attachment.as_ref().is_some_and(|a| a.instance_id == i.id))
        .collect();
    tag_or(&i.tags, name, |name| match name {
        "instance-id" => one(i.id.clone()),
        "instance-type" => one(i.instance_type.clone()),
        "instance-state-name" => one(i.state.code_name().1.to_string()),
        "instance-state-code" => one(i.state.code_name().0.to_string()),
        "vpc-id" => one(i.vpc_id.clone()),
        "subnet-id" => one(i.subnet_id.clone()),
        "availability-zone" => one(i.az.clone()),
        "private-ip-address" => one(i.private_ip.to_string()),
        "private-dns-name" => one(cloud.private_dns_name(i.private_ip)),
        "image-id" => one(i.image_id.clone()),
        "reservation-id" => one(i.reservation_id.clone()),
        "network-interface.network-interface-id" => {
            Some(enis.iter().map(|e| e.id.clone()).collect())
        }
        "network-interface.subnet-id" => Some(enis.iter().map(|e| e.subnet_id.clone()).collect()),
        "network-interface.addresses.private-ip-address" => Some(
            enis.iter()
                .flat_map(|e| std::iter::once(e.primary_ip).chain(e.secondary_ips.iter().copied()))
                .map(|ip| ip.to_string())
                .collect(),
        ),
        _ => None,
    })
}

pub(super) fn describe_instances(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let ids = p.strings("InstanceId")?;
    let filters = p.filters()?;
    let max = p.u32("MaxResults")?;
    let cloud = &*ctx.cloud;
    for id in &ids {
        if cloud.instance(id).is_none() {
            return Err(Ec2Error::instance_not_found(id));
        }
    }
    let mut selected = Vec::new();
    for i in cloud.instances() {
        if !ids.is_empty() && !ids.contains(&i.id) {
            continue;
        }
        if matches(&filters, |n| instance_filter_values(cloud, i, n))? {
            selected.push((i.id.clone(), i));
        }
    }
    let (items, token) = page(selected, max, (5, 1000), p.get("NextToken"))?;
    let (mut x, root) = start("DescribeInstances", ctx);
    x.set("reservationSet", items, |x, i| {
        x.leaf("reservationId", &i.reservation_id)
            .leaf("ownerId", &cloud.account_id);
        x.set("groupSet", std::iter::empty::<()>(), |_, _| {});
        x.set("instancesSet", [i], |x, i| {
            render::instance(x, cloud, &ctx.clock, i, ctx.empty_dns)
        });
    });
    if let Some(t) = token {
        x.leaf("nextToken", t);
    }
    Ok(x.finish(&root))
}

pub(super) fn describe_instance_types(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let wanted = p.strings("InstanceType")?;
    let filters = p.filters()?;
    let max = p.u32("MaxResults")?;
    let cloud = &*ctx.cloud;
    let mut selected = Vec::new();
    if wanted.is_empty() {
        for l in cloud.all_instance_types() {
            selected.push((l.instance_type.clone(), l));
        }
    } else {
        let unknown: Vec<&String> = wanted
            .iter()
            .filter(|t| cloud.instance_limits(t).is_none())
            .collect();
        if !unknown.is_empty() {
            let list: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
            return Err(Ec2Error::new(
                "InvalidInstanceType",
                format!(
                    "The following supplied instance types do not exist: [{}]",
                    list.join(", ")
                ),
            ));
        }
        for t in &wanted {
            let l = cloud.instance_limits(t).expect("checked");
            if !selected.iter().any(|(k, _)| k == t) {
                selected.push((t.clone(), l));
            }
        }
        selected.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let mut kept = Vec::new();
    for (k, l) in selected {
        let ok = matches(&filters, |n| match n {
            "instance-type" => Some(vec![l.instance_type.clone()]),
            "bare-metal" => Some(vec![l.bare_metal.to_string()]),
            "hypervisor" => Some(vec![format!("{:?}", l.hypervisor).to_lowercase()]),
            _ => None,
        })?;
        if ok {
            kept.push((k, l));
        }
    }
    // EC2 pages DescribeInstanceTypes by 100 at most
    let (items, token) = page(kept, Some(max.unwrap_or(100)), (5, 100), p.get("NextToken"))?;
    let (mut x, root) = start("DescribeInstanceTypes", ctx);
    x.set("instanceTypeSet", items, |x, l| {
        render::instance_type(x, &l)
    });
    if let Some(t) = token {
        x.leaf("nextToken", t);
    }
    Ok(x.finish(&root))
}

pub(super) fn describe_subnets(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let ids = p.strings("SubnetId")?;
    let filters = p.filters()?;
    let max = p.u32("MaxResults")?;
    let cloud = &*ctx.cloud;
    for id in &ids {
        if cloud.subnet(id).is_none() {
            return Err(Ec2Error::subnet_not_found(id));
        }
    }
    let mut selected = Vec::new();
    for s in cloud.subnets() {
        if !ids.is_empty() && !ids.contains(&s.id) {
            continue;
        }
        let one = |v: String| Some(vec![v]);
        let ok = matches(&filters, |n| {
            tag_or(&s.tags, n, |n| match n {
                "subnet-id" => one(s.id.clone()),
                "vpc-id" => one(s.vpc_id.clone()),
                "availability-zone" => one(s.az.clone()),
                "availability-zone-id" => one(s.az_id.clone()),
                "cidr-block" | "cidr" | "cidrBlock" => one(s.cidr.to_string()),
                "state" => one("available".into()),
                "available-ip-address-count" => one(s.available().to_string()),
                other => super::ipv6::cidr_filter(
                    s.ipv6.as_ref().map(|v| (v.association_id.as_str(), v.cidr)),
                    other,
                ),
            })
        })?;
        if ok {
            selected.push((s.id.clone(), s));
        }
    }
    let (items, token) = page(selected, max, (5, 1000), p.get("NextToken"))?;
    let (mut x, root) = start("DescribeSubnets", ctx);
    x.set("subnetSet", items, |x, s| render::subnet(x, cloud, s));
    if let Some(t) = token {
        x.leaf("nextToken", t);
    }
    Ok(x.finish(&root))
}

pub(super) fn describe_vpcs(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let ids = p.strings("VpcId")?;
    let filters = p.filters()?;
    let max = p.u32("MaxResults")?;
    let cloud = &*ctx.cloud;
    for id in &ids {
        if cloud.vpc(id).is_none() {
            return Err(Ec2Error::vpc_not_found(id));
        }
    }
    let mut selected = Vec::new();
    for v in cloud.vpcs() {
        if !ids.is_empty() && !ids.contains(&v.id) {
            continue;
        }
        let ok = matches(&filters, |n| {
            tag_or(&v.tags, n, |n| match n {
                "vpc-id" => Some(vec![v.id.clone()]),
                "cidr" => Some(vec![v.cidrs[0].1.to_string()]),
                "cidr-block-association.cidr-block" => {
                    Some(v.cidrs.iter().map(|(_, c)| c.to_string()).collect())
                }
                "state" => Some(vec!["available".into()]),
                "is-default" => Some(vec!["false".into()]),
                other => super::ipv6::cidr_filter(
                    v.ipv6.as_ref().map(|a| (a.association_id.as_str(), a.cidr)),
                    other,
                ),
            })
        })?;
        if ok {
            selected.push((v.id.clone(), v));
        }
    }
    let (items, token) = page(selected, max, (5, 1000), p.get("NextToken"))?;
    let (mut x, root) = start("DescribeVpcs", ctx);
    x.set("vpcSet", items, |x, v| render::vpc(x, cloud, v));
    if let Some(t) = token {
        x.leaf("nextToken", t);
    }
    Ok(x.finish(&root))
}

/// DescribeAvailabilityZones: the region's zones ([`Cloud::availability_zones`]), all
/// `available`, selected by `ZoneName.N`, `ZoneId.N` and the filters `zone-name`, `zone-id`,
/// `region-name`, `state`, `zone-type`. An unknown name or ID is `InvalidParameterValue`, as
/// on EC2.
pub(super) fn describe_availability_zones(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let names = p.strings("ZoneName")?;
    let ids = p.strings("ZoneId")?;
    let filters = p.filters()?;
    let cloud = &*ctx.cloud;
    let region = cloud.region().to_string();
    let zones = cloud.availability_zones();
    for n in names.iter().chain(&ids) {
        if !zones.iter().any(|(zn, zi)| zn == n || zi == n) {
            return Err(Ec2Error::new(
                "InvalidParameterValue",
                format!("The zone '{n}' does not exist."),
            ));
        }
    }
    let mut selected = Vec::new();
    for (name, id) in &zones {
        if (!names.is_empty() || !ids.is_empty()) && !names.contains(name) && !ids.contains(id) {
            continue;
        }
        let ok = matches(&filters, |f| match f {
            "zone-name" => Some(vec![name.clone()]),
            "zone-id" => Some(vec![id.clone()]),
            "region-name" => Some(vec![region.clone()]),
            "state" => Some(vec!["available".into()]),
            "zone-type" => Some(vec!["availability-zone".into()]),
            _ => None,
        })?;
        if ok {
            selected.push((name.clone(), id.clone()));
        }
    }
    let (mut x, root) = start("DescribeAvailabilityZones", ctx);
    x.set("availabilityZoneInfo", selected, |x, (name, id)| {
        x.leaf("zoneName", name)
            .leaf("zoneState", "available")
            .leaf("regionName", &region)
            .leaf("zoneId", id)
            .leaf("zoneType", "availability-zone")
            .leaf("optInStatus", "opt-in-not-required")
            .leaf("groupName", &region)
            .leaf("networkBorderGroup", &region)
            .open("messageSet")
            .close("messageSet");
    });
    Ok(x.finish(&root))
}

/// DescribeInstanceTopology: EC2 answers only for instance types with network topology data
/// (p3dn, p4d, p5, trn1, ... families, which the emulator does not model): for every other
/// instance the answer is an empty set, as EC2 gives it. Unknown instance IDs are
/// `InvalidInstanceID.NotFound`.
pub(super) fn describe_instance_topology(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    for id in p.strings("InstanceId")? {
        if ctx.cloud.instance(&id).is_none() {
            return Err(Ec2Error::new(
                "InvalidInstanceID.NotFound",
                format!("The instance ID '{id}' does not exist"),
            ));
        }
    }
    let (mut x, root) = start("DescribeInstanceTopology", ctx);
    x.set("instanceSet", Vec::<()>::new(), |_, _| {});
    Ok(x.finish(&root))
}
