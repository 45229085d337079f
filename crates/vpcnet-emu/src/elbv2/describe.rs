//! The ELBv2 Describe actions: load balancers, target groups, listeners, target health and tags,
//! paged with `Marker` where ELBv2 pages.

use super::actions::{list, next_marker, paged, req, resource_arns, targets, Ctx};
use super::error::{self, ElbError};
use super::health::{self, TargetHealth, Usage};
use super::model::TargetGroup;
use super::render::{self, HealthRow};
use crate::query::params::Params;

pub(super) fn describe_load_balancers(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
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

pub(super) fn target_groups(
    action: &str,
    ctx: &Ctx,
    arns: &[String],
    marker: Option<String>,
) -> String {
    let m = &*ctx.model;
    let tgs: Vec<&TargetGroup> = arns.iter().filter_map(|a| m.target_groups.get(a)).collect();
    render::respond(action, ctx.request_id, |x| {
        render::members(x, "TargetGroups", tgs, |x, tg| {
            render::target_group(x, tg, &m.load_balancers_of(&tg.arn))
        });
        next_marker(x, marker);
    })
}

pub(super) fn describe_target_groups(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
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

pub(super) fn describe_listeners(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
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

pub(super) fn describe_target_health(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
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

pub(super) fn describe_tags(p: &Params, ctx: &mut Ctx) -> Result<String, ElbError> {
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
