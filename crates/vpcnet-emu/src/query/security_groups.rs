//! The security-group actions: CreateSecurityGroup, DescribeSecurityGroups,
//! AuthorizeSecurityGroupIngress and RevokeSecurityGroupIngress, with EC2's parameters
//! (`IpPermissions.N.IpProtocol|FromPort|ToPort`, `IpPermissions.N.IpRanges.M.CidrIp`,
//! `IpPermissions.N.Groups.M.GroupId`, or the top-level `IpProtocol`/`FromPort`/`ToPort`/
//! `CidrIp` form), XML shapes (`securityGroupInfo`, `ipPermissions` grouped by protocol and
//! ports) and error codes.

use ipnet::Ipv4Net;

use super::actions::{start, tag_or, Ctx};
use super::filter::{matches, page};
use super::params::Params;
use super::xml::Xml;
use crate::error::Ec2Error;
use crate::model::{Cloud, IngressRule, Permission, SecurityGroup, Source};

fn not_found(id: &str) -> Ec2Error {
    Ec2Error::new(
        "InvalidGroup.NotFound",
        format!("The security group '{id}' does not exist"),
    )
}

/// The group a call names by `GroupId`, or by `GroupName` (unique across the cloud's VPCs).
fn target_group(p: &Params, cloud: &Cloud) -> Result<String, Ec2Error> {
    if let Some(id) = p.get("GroupId").filter(|s| !s.is_empty()) {
        return cloud
            .group(id)
            .map(|g| g.id.clone())
            .ok_or_else(|| not_found(id));
    }
    let name = p
        .get("GroupName")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Ec2Error::missing("GroupId"))?;
    let found: Vec<&SecurityGroup> = cloud.groups().filter(|g| g.name == name).collect();
    match found.as_slice() {
        [g] => Ok(g.id.clone()),
        [] => Err(not_found(name)),
        _ => Err(Ec2Error::new(
            "InvalidParameterValue",
            format!("Several VPCs have a security group named '{name}': name it by GroupId."),
        )),
    }
}

fn int(p: &Params, name: &str) -> Result<Option<i32>, Ec2Error> {
    p.parsed(name, "an integer")
}

fn cidr(key: &str, v: &str) -> Result<Ipv4Net, Ec2Error> {
    v.parse::<Ipv4Net>()
        .map(|c| c.trunc())
        .map_err(|_| Ec2Error::invalid(key, v, "Expected an IPv4 CIDR such as 10.0.0.0/16."))
}

/// The rules of an Authorize/Revoke call, one per (permission, source).
fn rules(p: &Params) -> Result<Vec<IngressRule>, Ec2Error> {
    let mut out = Vec::new();
    for (k, perm) in p.structs("IpPermissions") {
        let proto = perm
            .get("IpProtocol")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Ec2Error::missing(&format!("{k}.IpProtocol")))?;
        let permission = Permission::new(proto, int(&perm, "FromPort")?, int(&perm, "ToPort")?)?;
        let before = out.len();
        for (rk, r) in perm.structs("IpRanges") {
            let key = format!("{k}.{rk}.CidrIp");
            let v = r.required("CidrIp").map_err(|_| Ec2Error::missing(&key))?;
            out.push(IngressRule {
                permission: permission.clone(),
                source: Source::Cidr(cidr(&key, v)?),
            });
        }
        for (gk, g) in perm.structs("Groups") {
            let key = format!("{k}.{gk}.GroupId");
            let v = g.required("GroupId").map_err(|_| Ec2Error::missing(&key))?;
            out.push(IngressRule {
                permission: permission.clone(),
                source: Source::Group(v.to_string()),
            });
        }
        if out.len() == before {
            return Err(Ec2Error::missing(&format!("{k}.IpRanges.1.CidrIp")));
        }
    }
    if let Some(c) = p.get("CidrIp").filter(|s| !s.is_empty()) {
        let proto = p.required("IpProtocol")?;
        out.push(IngressRule {
            permission: Permission::new(proto, int(p, "FromPort")?, int(p, "ToPort")?)?,
            source: Source::Cidr(cidr("CidrIp", c)?),
        });
    }
    if out.is_empty() {
        return Err(Ec2Error::missing("IpPermissions"));
    }
    Ok(out)
}

/// CreateSecurityGroup: `GroupName`, `GroupDescription` (both required), `VpcId` (required when
/// the cloud has several VPCs: EC2's `VPCIdNotSpecified`), `TagSpecification.N` of type
/// `security-group`. Errors: `InvalidVpcID.NotFound`, `InvalidGroup.Duplicate`.
pub fn create_security_group(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let name = p.required("GroupName")?.to_string();
    let description = p.required("GroupDescription")?.to_string();
    if name.to_ascii_lowercase().starts_with("sg-") {
        return Err(Ec2Error::invalid(
            "GroupName",
            &name,
            "Group names may not be in the format sg-*.",
        ));
    }
    let vpc_id = match p.get("VpcId").filter(|s| !s.is_empty()) {
        Some(v) => v.to_string(),
        None => {
            let vpcs: Vec<String> = ctx.cloud.vpcs().map(|v| v.id.clone()).collect();
            match vpcs.as_slice() {
                [only] => only.clone(),
                _ => {
                    return Err(Ec2Error::new(
                        "VPCIdNotSpecified",
                        "No default VPC for this user. GroupName is only supported for EC2-Classic and default VPC.",
                    ))
                }
            }
        }
    };
    let tags = p.tag_specs("security-group")?;
    let id = ctx
        .cloud
        .create_security_group(&vpc_id, &name, &description)?;
    if !tags.is_empty() {
        ctx.cloud.create_tags(std::slice::from_ref(&id), &tags)?;
    }
    let (mut x, root) = start("CreateSecurityGroup", ctx);
    x.leaf("return", true).leaf("groupId", &id);
    let g = ctx.cloud.group(&id).expect("created");
    super::render::tags(&mut x, &g.tags);
    Ok(x.finish(&root))
}

fn group_filter_values(cloud: &Cloud, g: &SecurityGroup, name: &str) -> Option<Vec<String>> {
    let one = |s: String| Some(vec![s]);
    let perms = || g.ingress.iter().map(|r| &r.permission);
    tag_or(&g.tags, name, |name| match name {
        "group-id" => one(g.id.clone()),
        "group-name" => one(g.name.clone()),
        "description" => one(g.description.clone()),
        "vpc-id" => one(g.vpc_id.clone()),
        "owner-id" => one(cloud.account_id.clone()),
        "ip-permission.protocol" => Some(perms().map(|p| p.protocol.clone()).collect()),
        "ip-permission.from-port" => Some(
            perms()
                .filter_map(|p| p.from_port.map(|v| v.to_string()))
                .collect(),
        ),
        "ip-permission.to-port" => Some(
            perms()
                .filter_map(|p| p.to_port.map(|v| v.to_string()))
                .collect(),
        ),
        "ip-permission.cidr" => Some(
            g.ingress
                .iter()
                .filter_map(|r| match &r.source {
                    Source::Cidr(c) => Some(c.to_string()),
                    Source::Group(_) => None,
                })
                .collect(),
        ),
        "ip-permission.group-id" => Some(
            g.ingress
                .iter()
                .filter_map(|r| match &r.source {
                    Source::Group(s) => Some(s.clone()),
                    Source::Cidr(_) => None,
                })
                .collect(),
        ),
        _ => None,
    })
}

/// DescribeSecurityGroups: `GroupId.N`, `GroupName.N`, filters (`group-id`, `group-name`,
/// `description`, `vpc-id`, `owner-id`, `ip-permission.*`, tags), `MaxResults` 5..1000 with
/// `NextToken`. Errors: `InvalidGroup.NotFound` for an unknown ID or name.
pub fn describe_security_groups(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let ids = p.strings("GroupId")?;
    let names = p.strings("GroupName")?;
    let filters = p.filters()?;
    let max = p.u32("MaxResults")?;
    let cloud = &*ctx.cloud;
    for id in &ids {
        if cloud.group(id).is_none() {
            return Err(not_found(id));
        }
    }
    for n in &names {
        if !cloud.groups().any(|g| &g.name == n) {
            return Err(not_found(n));
        }
    }
    let mut selected = Vec::new();
    for g in cloud.groups() {
        if !ids.is_empty() && !ids.contains(&g.id) {
            continue;
        }
        if !names.is_empty() && !names.contains(&g.name) {
            continue;
        }
        if matches(&filters, |n| group_filter_values(cloud, g, n))? {
            selected.push((g.id.clone(), g));
        }
    }
    let (items, token) = page(selected, max, (5, 1000), p.get("NextToken"))?;
    let (mut x, root) = start("DescribeSecurityGroups", ctx);
    x.set("securityGroupInfo", items, |x, g| render_group(x, cloud, g));
    if let Some(t) = token {
        x.leaf("nextToken", t);
    }
    Ok(x.finish(&root))
}

/// `SecurityGroup`: ingress rules grouped per (protocol, ports) in the order first authorized,
/// each with its `ipRanges` and `groups`; egress is EC2's default (all to 0.0.0.0/0).
fn render_group(x: &mut Xml, cloud: &Cloud, g: &SecurityGroup) {
    x.leaf("ownerId", &cloud.account_id)
        .leaf("groupId", &g.id)
        .leaf("groupName", &g.name)
        .leaf("groupDescription", &g.description)
        .leaf("vpcId", &g.vpc_id);
    let mut perms: Vec<(&Permission, Vec<&Source>)> = Vec::new();
    for r in &g.ingress {
        match perms.iter_mut().find(|(p, _)| *p == &r.permission) {
            Some((_, s)) => s.push(&r.source),
            None => perms.push((&r.permission, vec![&r.source])),
        }
    }
    x.set("ipPermissions", perms, |x, (p, sources)| {
        permission(x, cloud, p, &sources);
    });
    let all = Permission {
        protocol: "-1".into(),
        from_port: None,
        to_port: None,
    };
    let any: Source = Source::Cidr("0.0.0.0/0".parse().expect("constant"));
    x.set("ipPermissionsEgress", [()], |x, ()| {
        permission(x, cloud, &all, &[&any]);
    });
    super::render::tags(x, &g.tags);
}

fn permission(x: &mut Xml, cloud: &Cloud, p: &Permission, sources: &[&Source]) {
    x.leaf("ipProtocol", &p.protocol);
    if let Some(f) = p.from_port {
        x.leaf("fromPort", f);
    }
    if let Some(t) = p.to_port {
        x.leaf("toPort", t);
    }
    let groups: Vec<&String> = sources
        .iter()
        .filter_map(|s| match s {
            Source::Group(g) => Some(g),
            Source::Cidr(_) => None,
        })
        .collect();
    let cidrs: Vec<&Ipv4Net> = sources
        .iter()
        .filter_map(|s| match s {
            Source::Cidr(c) => Some(c),
            Source::Group(_) => None,
        })
        .collect();
    x.set("groups", groups, |x, g| {
        x.leaf("userId", &cloud.account_id).leaf("groupId", g);
    });
    x.set("ipRanges", cidrs, |x, c| {
        x.leaf("cidrIp", c);
    });
    x.set("ipv6Ranges", std::iter::empty::<()>(), |_, _| {});
    x.set("prefixListIds", std::iter::empty::<()>(), |_, _| {});
}

/// AuthorizeSecurityGroupIngress. Errors: `InvalidGroup.NotFound`,
/// `InvalidPermission.Duplicate`, parameter errors.
pub fn authorize_ingress(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let group = target_group(p, ctx.cloud)?;
    let rules = rules(p)?;
    ctx.cloud.authorize_ingress(&group, rules)?;
    let (mut x, root) = start("AuthorizeSecurityGroupIngress", ctx);
    x.leaf("return", true);
    Ok(x.finish(&root))
}

/// RevokeSecurityGroupIngress. Errors: `InvalidGroup.NotFound`, `InvalidPermission.NotFound`.
pub fn revoke_ingress(p: &Params, ctx: &mut Ctx) -> Result<String, Ec2Error> {
    let group = target_group(p, ctx.cloud)?;
    let rules = rules(p)?;
    ctx.cloud.revoke_ingress(&group, rules)?;
    let (mut x, root) = start("RevokeSecurityGroupIngress", ctx);
    x.leaf("return", true);
    Ok(x.finish(&root))
}
