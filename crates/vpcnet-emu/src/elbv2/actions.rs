//! The ELBv2 actions: parse the awsQuery parameters (`Name.member.N`, `Name.member.N.Field`),
//! apply them to the [`Elbv2Model`], render the response.

use std::collections::BTreeMap;

use super::balancers::{CreateListener, CreateLoadBalancer};
use super::describe::{
    describe_listeners, describe_load_balancers, describe_tags, describe_target_groups,
    describe_target_health, target_groups,
};
use super::error::{self, revalidate, ElbError};
use super::health_check::HealthCheckInput;
use super::model::{Elbv2Model, LbType, Protocol, TargetType};
use super::plane::LoadBalancerPlane;
use super::render;
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

pub(super) fn req<'a>(p: &'a Params, name: &str) -> Result<&'a str, ElbError> {
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
pub(super) fn list(p: &Params, name: &str) -> Result<Vec<String>, ElbError> {
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

pub(super) fn targets(p: &Params) -> Result<Vec<TargetInput>, ElbError> {
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
pub(super) fn paged<T>(
    p: &Params,
    items: Vec<(String, T)>,
) -> Result<(Vec<T>, Option<String>), ElbError> {
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

pub(super) fn next_marker(x: &mut Xml, m: Option<String>) {
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

/// ResourceArns of AddTags / RemoveTags / DescribeTags: 1..=20.
pub(super) fn resource_arns(p: &Params) -> Result<Vec<String>, ElbError> {
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
