//! The ELBv2 actions: parse the awsQuery parameters (`Name.member.N`, `Name.member.N.Field`),
//! apply them to the [`Elbv2Model`], render the response.

use std::collections::BTreeMap;

use super::balancers::{CreateListener, CreateLoadBalancer};
use super::error::{self, revalidate, ElbError};
use super::health::{self, TargetHealth, Usage};
use super::health_check::HealthCheckInput;
use super::model::{Elbv2Model, LbType, Protocol, TargetGroup, TargetType};
use super::plane::LoadBalancerPlane;
use super::render::{self, HealthRow};
use super::targets::{CreateTargetGroup, TargetInput};
use crate::model::Cloud;
use crate::query::filter::page;
use crate::query::params::Params;
use crate::query::render::Clock;
use crate::query::xml::Xml;

/// Every action served, and whether it changes state.
pub const ACTIONS: &[(&str, bool)] = &[
    ("CreateLoadBalancer", true),
    ("DescribeLoadBalancers", false),
    ("DeleteLoadBalancer", true),
    ("CreateTargetGroup", true),
    ("DescribeTargetGroups", false),
    ("ModifyTargetGroup", true),
    ("DeleteTargetGroup", true),
    ("DescribeTargetGroupAttributes", false),
    ("ModifyTargetGroupAttributes", true),
    ("CreateListener", true),
    ("DescribeListeners", false),
    ("DeleteListener", true),
    ("RegisterTargets", true),
    ("DeregisterTargets", true),
    ("DescribeTargetHealth", false),
    ("AddTags", true),
    ("RemoveTags", true),
    ("DescribeTags", false),
];

/// Whether `action` changes state; None for an action not served.
pub fn is_mutating(action: &str) -> Option<bool> {
    ACTIONS.iter().find(|(a, _)| *a == action).map(|(_, m)| *m)
}

/// What one call works on.
pub struct Ctx<'a> {
    pub cloud: &'a mut Cloud,
    pub model: &'a mut Elbv2Model,
    pub plane: &'a dyn LoadBalancerPlane,
    pub clock: Clock,
    pub request_id: &'a str,
}

/// Run `action`; the answer is the XML body.
pub fn handle(action: &str, p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    match action {
        "CreateLoadBalancer" => create_load_balancer(p, ctx),
        "DescribeLoadBalancers" => describe_load_balancers(p, ctx),
        "DeleteLoadBalancer" => {
            ctx.model
                .delete_load_balancer(ctx.cloud, req(p, "LoadBalancerArn")?);
            Ok(empty(action, ctx))
        }
        "CreateTargetGroup" => create_target_group(p, ctx),
        "DescribeTargetGroups" => describe_target_groups(p, ctx),
        "ModifyTargetGroup" => {
            let arn = req(p, "TargetGroupArn")?;
            ctx.model.modify_target_group(arn, &health_input(p)?)?;
            Ok(target_groups(action, ctx, &[arn.to_string()], None))
        }
        "DeleteTargetGroup" => {
            ctx.model.delete_target_group(req(p, "TargetGroupArn")?)?;
            Ok(empty(action, ctx))
        }
        "DescribeTargetGroupAttributes" | "ModifyTargetGroupAttributes" => {
            let arn = req(p, "TargetGroupArn")?;
            if action == "ModifyTargetGroupAttributes" {
                let attrs = key_values(p, "Attributes")?;
                ctx.model.modify_target_group_attributes(arn, &attrs)?;
            }
            let tg = ctx.model.target_group(arn)?;
            Ok(render::respond(action, ctx.request_id, |x| {
                render::attributes(x, &tg.attributes)
            }))
        }
        "CreateListener" => create_listener(p, ctx),
        "DescribeListeners" => describe_listeners(p, ctx),
        "DeleteListener" => {
            ctx.model.delete_listener(req(p, "ListenerArn")?)?;
            Ok(empty(action, ctx))
        }
        "RegisterTargets" => {
            let arn = req(p, "TargetGroupArn")?;
            let now = ctx.clock.now;
            ctx.model
                .register_targets(ctx.cloud, arn, &targets(p)?, now)?;
            Ok(empty(action, ctx))
        }
        "DeregisterTargets" => {
            let arn = req(p, "TargetGroupArn")?;
            ctx.model
                .deregister_targets(arn, &targets(p)?, ctx.clock.now)?;
            Ok(empty(action, ctx))
        }
        "DescribeTargetHealth" => describe_target_health(p, ctx),
        "AddTags" | "RemoveTags" => change_tags(action, p, ctx),
        "DescribeTags" => describe_tags(p, ctx),
        other => Err(error::invalid_action(other)),
    }
}

fn empty(action: &str, ctx: &Ctx) -> String {
    render::respond(action, ctx.request_id, |_| {})
}

fn req<'a>(p: &'a Params, name: &str) -> Result<&'a str, ElbError> {
    p.required(name).map_err(revalidate)
}

fn opt_u32(p: &Params, name: &str) -> Result<Option<u32>, ElbError> {
    p.u32(name).map_err(revalidate)
}

fn opt_port(p: &Params, name: &str) -> Result<Option<u16>, ElbError> {
    match opt_u32(p, name)? {
        None => Ok(None),
        Some(n) => u16::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or_else(|| error::validation(format!("{name} '{n}' must be between 1 and 65535"))),
    }
}

/// `name.member.N` strings.
fn list(p: &Params, name: &str) -> Result<Vec<String>, ElbError> {
    p.strings(&format!("{name}.member")).map_err(revalidate)
}

/// `name.member.N.Key` / `.Value` pairs (tags, attributes).
fn key_values(p: &Params, name: &str) -> Result<Vec<(String, String)>, ElbError> {
    p.structs(&format!("{name}.member"))
        .into_iter()
        .map(|(k, m)| {
            let key = m
                .required("Key")
                .map_err(|_| error::validation(format!("{k}.Key must be specified")))?;
            Ok((key.to_string(), m.get("Value").unwrap_or("").to_string()))
        })
        .collect()
}

fn targets(p: &Params) -> Result<Vec<TargetInput>, ElbError> {
    p.structs("Targets.member")
        .into_iter()
        .map(|(k, m)| {
            Ok(TargetInput {
                id: m
                    .required("Id")
                    .map_err(|_| error::validation(format!("{k}.Id must be specified")))?
                    .to_string(),
                port: opt_port(&m, "Port")?,
                availability_zone: m.get("AvailabilityZone").map(str::to_string),
            })
        })
        .collect()
}

fn protocol(p: &Params, name: &str) -> Result<Option<Protocol>, ElbError> {
    p.get(name).map(|v| Protocol::parse(name, v)).transpose()
}

/// The `Marker` / `PageSize` (1..=400) page of `items` (keyed in a stable order).
fn paged<T>(p: &Params, items: Vec<(String, T)>) -> Result<(Vec<T>, Option<String>), ElbError> {
    let size = opt_u32(p, "PageSize")?;
    if size.is_some_and(|s| !(1..=400).contains(&s)) {
        return Err(error::validation("PageSize must be between 1 and 400"));
    }
    page(items, size, (1, 400), p.get("Marker")).map_err(|_| {
        error::validation(format!(
            "The marker '{}' is not valid",
            p.get("Marker").unwrap_or("")
        ))
    })
}

fn next_marker(x: &mut Xml, m: Option<String>) {
    if let Some(m) = m {
        x.leaf("NextMarker", m);
    }
}

fn create_load_balancer(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    let lb_type =
        match p.get("Type") {
            None => None,
            Some("application") => Some(LbType::Application),
            Some("network") => Some(LbType::Network),
            Some("gateway") => return Err(ElbError::new(
                "UnsupportedProtocol",
                "Gateway load balancers are not served by vpcnet-emu (network and application are)",
            )),
            Some(v) => {
                return Err(error::enum_value(
                    "type",
                    v,
                    &["application", "network", "gateway"],
                ))
            }
        };
    if p.get("IpAddressType").is_some_and(|t| t != "ipv4") {
        return Err(error::validation(
            "IpAddressType must be ipv4 (the emulated VPCs are IPv4 only)",
        ));
    }
    let plain = list(p, "Subnets")?;
    let mappings = p.structs("SubnetMappings.member");
    if !plain.is_empty() && !mappings.is_empty() {
        return Err(error::validation(
            "Specify either Subnets or SubnetMappings, not both",
        ));
    }
    let mut subnets: Vec<(String, Option<std::net::Ipv4Addr>)> =
        plain.into_iter().map(|s| (s, None)).collect();
    for (k, m) in mappings {
        let id = m
            .required("SubnetId")
            .map_err(|_| error::validation(format!("{k}.SubnetId must be specified")))?;
        let ip = m
            .get("PrivateIPv4Address")
            .map(|v| {
                v.parse().map_err(|_| {
                    error::validation(format!(
                        "{k}.PrivateIPv4Address '{v}' is not an IPv4 address"
                    ))
                })
            })
            .transpose()?;
        subnets.push((id.to_string(), ip));
    }
    let now = ctx.clock.now;
    let arn = ctx.model.create_load_balancer(
        ctx.cloud,
        CreateLoadBalancer {
            name: req(p, "Name")?.to_string(),
            lb_type,
            scheme: p.get("Scheme").map(str::to_string),
            subnets,
            security_groups: list(p, "SecurityGroups")?,
            tags: key_values(p, "Tags")?,
        },
        now,
    )?;
    let lb = ctx.model.load_balancer(&arn)?;
    Ok(render::respond("CreateLoadBalancer", ctx.request_id, |x| {
        render::members(x, "LoadBalancers", [lb], |x, lb| {
            render::load_balancer(x, &ctx.clock, lb)
        })
    }))
}

fn describe_load_balancers(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    let arns = list(p, "LoadBalancerArns")?;
    let names = list(p, "Names")?;
    if !arns.is_empty() && !names.is_empty() {
        return Err(error::validation(
            "Specify either LoadBalancerArns or Names, not both",
        ));
    }
    let m = &*ctx.model;
    for a in &arns {
        m.load_balancer(a)?;
    }
    for n in &names {
        if !m.load_balancers.values().any(|l| l.name == *n) {
            return Err(ElbError::new(
                "LoadBalancerNotFound",
                format!("Load balancers '[{n}]' not found"),
            ));
        }
    }
    let items = m
        .load_balancers
        .values()
        .filter(|l| arns.is_empty() || arns.contains(&l.arn))
        .filter(|l| names.is_empty() || names.contains(&l.name))
        .map(|l| (l.arn.clone(), l))
        .collect();
    let (lbs, marker) = paged(p, items)?;
    Ok(render::respond(
        "DescribeLoadBalancers",
        ctx.request_id,
        |x| {
            render::members(x, "LoadBalancers", lbs, |x, lb| {
                render::load_balancer(x, &ctx.clock, lb)
            });
            next_marker(x, marker);
        },
    ))
}

fn health_input(p: &Params) -> Result<HealthCheckInput, ElbError> {
    Ok(HealthCheckInput {
        enabled: p.bool("HealthCheckEnabled").map_err(revalidate)?,
        protocol: protocol(p, "HealthCheckProtocol")?,
        port: p.get("HealthCheckPort").map(str::to_string),
        path: p.get("HealthCheckPath").map(str::to_string),
        interval_seconds: opt_u32(p, "HealthCheckIntervalSeconds")?,
        timeout_seconds: opt_u32(p, "HealthCheckTimeoutSeconds")?,
        healthy_threshold: opt_u32(p, "HealthyThresholdCount")?,
        unhealthy_threshold: opt_u32(p, "UnhealthyThresholdCount")?,
        matcher: p.get("Matcher.HttpCode").map(str::to_string),
    })
}

fn create_target_group(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    let target_type = match p.get("TargetType") {
        None => None,
        Some("instance") => Some(TargetType::Instance),
        Some("ip") => Some(TargetType::Ip),
        Some(v @ ("lambda" | "alb")) => {
            return Err(ElbError::new(
                "UnsupportedProtocol",
                format!("Target type '{v}' is not served by vpcnet-emu (instance and ip are)"),
            ))
        }
        Some(v) => {
            return Err(error::enum_value(
                "targetType",
                v,
                &["instance", "ip", "lambda", "alb"],
            ))
        }
    };
    let arn = ctx.model.create_target_group(
        ctx.cloud,
        CreateTargetGroup {
            name: req(p, "Name")?.to_string(),
            protocol: protocol(p, "Protocol")?,
            port: opt_port(p, "Port")?,
            vpc_id: p.get("VpcId").map(str::to_string),
            target_type,
            health: health_input(p)?,
            tags: key_values(p, "Tags")?,
        },
    )?;
    Ok(target_groups("CreateTargetGroup", ctx, &[arn], None))
}

fn target_groups(action: &str, ctx: &Ctx, arns: &[String], marker: Option<String>) -> String {
    let m = &*ctx.model;
    let tgs: Vec<&TargetGroup> = arns.iter().filter_map(|a| m.target_groups.get(a)).collect();
    render::respond(action, ctx.request_id, |x| {
        render::members(x, "TargetGroups", tgs, |x, tg| {
            render::target_group(x, tg, &m.load_balancers_of(&tg.arn))
        });
        next_marker(x, marker);
    })
}

fn describe_target_groups(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    let lb = p.get("LoadBalancerArn");
    let arns = list(p, "TargetGroupArns")?;
    let names = list(p, "Names")?;
    let given =
        usize::from(lb.is_some()) + usize::from(!arns.is_empty()) + usize::from(!names.is_empty());
    if given > 1 {
        return Err(error::validation(
            "Specify only one of LoadBalancerArn, TargetGroupArns and Names",
        ));
    }
    let m = &*ctx.model;
    if let Some(lb) = lb {
        m.load_balancer(lb)?;
    }
    for a in &arns {
        m.target_group(a)?;
    }
    for n in &names {
        if !m.target_groups.values().any(|t| t.name == *n) {
            return Err(ElbError::new(
                "TargetGroupNotFound",
                format!("Target groups '[{n}]' not found"),
            ));
        }
    }
    let items = m
        .target_groups
        .values()
        .filter(|t| arns.is_empty() || arns.contains(&t.arn))
        .filter(|t| names.is_empty() || names.contains(&t.name))
        .filter(|t| lb.is_none_or(|lb| m.load_balancers_of(&t.arn).iter().any(|a| a == lb)))
        .map(|t| (t.arn.clone(), t.arn.clone()))
        .collect();
    let (arns, marker) = paged(p, items)?;
    Ok(target_groups("DescribeTargetGroups", ctx, &arns, marker))
}

fn create_listener(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    let actions = p.structs("DefaultActions.member");
    let [(k, action)] = actions.as_slice() else {
        return Err(error::validation(
            "Exactly one default action must be specified (type forward)",
        ));
    };
    match action.get("Type") {
        Some("forward") => {}
        Some(t) => {
            return Err(error::validation(format!(
                "{k}.Type '{t}' is not served by vpcnet-emu: use forward"
            )))
        }
        None => return Err(error::validation(format!("{k}.Type must be specified"))),
    }
    let mut tgs: Vec<String> = action
        .get("TargetGroupArn")
        .map(str::to_string)
        .into_iter()
        .collect();
    for (_, t) in action.structs("ForwardConfig.TargetGroups.member") {
        if let Some(a) = t.get("TargetGroupArn") {
            if !tgs.iter().any(|x| x == a) {
                tgs.push(a.to_string());
            }
        }
    }
    let [tg] = tgs.as_slice() else {
        return Err(error::validation(format!(
            "{k} must forward to exactly one target group (weighted forwarding is not served)"
        )));
    };
    let protocol = protocol(p, "Protocol")?
        .ok_or_else(|| error::validation("A listener protocol must be specified"))?;
    let port = opt_port(p, "Port")?
        .ok_or_else(|| error::validation("A listener port must be specified"))?;
    let arn = ctx.model.create_listener(CreateListener {
        lb_arn: req(p, "LoadBalancerArn")?.to_string(),
        protocol,
        port,
        target_group_arn: tg.clone(),
        tags: key_values(p, "Tags")?,
    })?;
    let l = &ctx.model.listeners[&arn];
    Ok(render::respond("CreateListener", ctx.request_id, |x| {
        render::members(x, "Listeners", [l], render::listener)
    }))
}

fn describe_listeners(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    let lb = p.get("LoadBalancerArn");
    let arns = list(p, "ListenerArns")?;
    let m = &*ctx.model;
    match (lb, arns.is_empty()) {
        (None, true) => {
            return Err(error::validation(
                "You must specify either listener ARNs or a load balancer ARN",
            ))
        }
        (Some(_), false) => {
            return Err(error::validation(
                "Specify either listener ARNs or a load balancer ARN, not both",
            ))
        }
        (Some(lb), true) => {
            m.load_balancer(lb)?;
        }
        (None, false) => {
            if arns.iter().any(|a| !m.listeners.contains_key(a)) {
                return Err(error::listener_not_found());
            }
        }
    }
    let items = m
        .listeners
        .values()
        .filter(|l| lb.is_none_or(|lb| l.lb_arn == lb))
        .filter(|l| arns.is_empty() || arns.contains(&l.arn))
        .map(|l| (l.arn.clone(), l))
        .collect();
    let (ls, marker) = paged(p, items)?;
    Ok(render::respond("DescribeListeners", ctx.request_id, |x| {
        render::members(x, "Listeners", ls, render::listener);
        next_marker(x, marker);
    }))
}

fn describe_target_health(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    let arn = req(p, "TargetGroupArn")?;
    let asked = targets(p)?;
    let m = &*ctx.model;
    let tg = m.target_group(arn)?;
    let lbs = m.load_balancers_of(arn);
    let zones: Vec<&str> = lbs
        .iter()
        .filter_map(|a| m.load_balancers.get(a))
        .flat_map(|l| l.addresses.iter().map(|a| a.availability_zone.as_str()))
        .collect();
    let now = ctx.clock.now;
    let reported_az = |r: &super::model::Registration| -> Option<String> {
        r.availability_zone
            .clone()
            .or_else(|| ctx.cloud.instance(&r.id).map(|i| i.az.clone()))
    };
    let hc_port = |port: u16| match tg.health.port {
        super::model::HealthCheckPort::TrafficPort => port.to_string(),
        super::model::HealthCheckPort::Port(n) => n.to_string(),
    };
    let row = |r: &super::model::Registration| {
        let az = reported_az(r);
        let usage = Usage {
            in_use: !lbs.is_empty(),
            zone_enabled: az
                .as_deref()
                .is_none_or(|z| z == "all" || zones.contains(&z)),
        };
        let obs = ctx.plane.observe(arn, r.ip, r.port);
        HealthRow {
            id: r.id.clone(),
            port: r.port,
            availability_zone: az,
            health_check_port: hc_port(r.port),
            health: health::evaluate(r, &tg.health, usage, obs.as_ref(), now),
        }
    };
    let rows: Vec<HealthRow> = if asked.is_empty() {
        tg.targets.iter().map(row).collect()
    } else {
        asked
            .iter()
            .map(|t| {
                let port = t.port.unwrap_or(tg.port);
                match tg.targets.iter().find(|r| r.id == t.id && r.port == port) {
                    Some(r) => row(r),
                    None => HealthRow {
                        id: t.id.clone(),
                        port,
                        availability_zone: t.availability_zone.clone(),
                        health_check_port: hc_port(port),
                        health: TargetHealth::not_registered(),
                    },
                }
            })
            .collect()
    };
    Ok(render::respond(
        "DescribeTargetHealth",
        ctx.request_id,
        |x| render::members(x, "TargetHealthDescriptions", &rows, render::target_health),
    ))
}

/// ResourceArns of AddTags / RemoveTags / DescribeTags: 1..=20.
fn resource_arns(p: &Params) -> Result<Vec<String>, ElbError> {
    let arns = list(p, "ResourceArns")?;
    if arns.is_empty() || arns.len() > 20 {
        return Err(error::validation(
            "ResourceArns must name 1 to 20 resources",
        ));
    }
    Ok(arns)
}

fn change_tags(action: &str, p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    let arns = resource_arns(p)?;
    // Check every resource (and the tags against each) before changing any.
    let mut staged: BTreeMap<String, crate::model::Tags> = BTreeMap::new();
    let limit = ctx.model.limits.tags_per_resource;
    for a in &arns {
        let mut t = ctx.model.tags_mut(a)?.clone();
        if action == "AddTags" {
            let tags = key_values(p, "Tags")?;
            if tags.is_empty() {
                return Err(error::validation("At least one tag must be specified"));
            }
            super::model::add_tags(&mut t, &tags, limit)?;
        } else {
            let keys = list(p, "TagKeys")?;
            if keys.is_empty() {
                return Err(error::validation("At least one tag key must be specified"));
            }
            for k in keys {
                t.remove(&k, None);
            }
        }
        staged.insert(a.clone(), t);
    }
    for (a, t) in staged {
        *ctx.model.tags_mut(&a)? = t;
    }
    Ok(empty(action, ctx))
}

fn describe_tags(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
    let arns = resource_arns(p)?;
    let mut out = Vec::new();
    for a in arns {
        let t = ctx.model.tags_mut(&a)?.clone();
        out.push((a, t));
    }
    Ok(render::respond("DescribeTags", ctx.request_id, |x| {
        render::members(x, "TagDescriptions", &out, |x, (a, t)| {
            x.leaf("ResourceArn", a);
            render::tags(x, t);
        })
    }))
}
