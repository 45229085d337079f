//! Plain structs for ELBv2 resources, free of SDK types, and their conversion from the SDK's
//! shapes (a missing required field is [`Elbv2Error::InvalidResponse`] naming it).

use std::net::Ipv4Addr;

use aws_sdk_elasticloadbalancingv2::types as sdk;

use crate::Elbv2Error;

/// `network` or `application`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadBalancerType {
    Network,
    Application,
}

/// `ip` (pod addresses) or `instance` (instance IDs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetType {
    Ip,
    Instance,
}

/// One zone of a load balancer: its subnet and, where ELBv2 reports it, its private address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerZone {
    pub zone: String,
    pub subnet_id: String,
    pub private_ip: Option<Ipv4Addr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancer {
    pub arn: String,
    pub name: String,
    pub dns_name: String,
    /// `network` / `application` as ELBv2 spells it.
    pub lb_type: String,
    pub scheme: String,
    pub vpc_id: String,
    /// `provisioning`, `active`, `active_impaired` or `failed`.
    pub state: String,
    /// Why the state is `failed`, when ELBv2 says.
    pub state_reason: Option<String>,
    pub zones: Vec<LoadBalancerZone>,
    pub security_groups: Vec<String>,
}

/// Health-check settings of a target group: in a request None keeps ELBv2's default (or the
/// current value); in an answer every field ELBv2 reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthCheck {
    /// `HTTP`, `HTTPS` or `TCP`.
    pub protocol: Option<String>,
    /// `traffic-port` or a port number.
    pub port: Option<String>,
    pub path: Option<String>,
    pub interval_seconds: Option<u32>,
    pub timeout_seconds: Option<u32>,
    pub healthy_threshold: Option<u32>,
    pub unhealthy_threshold: Option<u32>,
    /// HTTP codes that pass: `200`, `200,202`, `200-399`.
    pub matcher: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetGroup {
    pub arn: String,
    pub name: String,
    pub protocol: String,
    pub port: u16,
    pub vpc_id: String,
    pub target_type: String,
    pub health: HealthCheck,
    pub load_balancer_arns: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub arn: String,
    pub load_balancer_arn: String,
    pub port: u16,
    pub protocol: String,
    /// The target group of the `forward` default action.
    pub target_group_arn: Option<String>,
}

/// A target: an IPv4 address (type `ip`) or an instance ID, on `port` (None: the group's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub id: String,
    pub port: Option<u16>,
    /// A zone or `all` (ip targets outside the VPC need `all`).
    pub availability_zone: Option<String>,
}

impl Target {
    /// An `ip` target on `port`.
    pub fn ip(ip: Ipv4Addr, port: u16) -> Self {
        Target {
            id: ip.to_string(),
            port: Some(port),
            availability_zone: None,
        }
    }
}

/// ELBv2 `TargetHealthStateEnum`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthState {
    Initial,
    Healthy,
    Unhealthy,
    UnhealthyDraining,
    Unused,
    Draining,
    Unavailable,
    Other(String),
}

impl HealthState {
    fn parse(s: &str) -> Self {
        match s {
            "initial" => HealthState::Initial,
            "healthy" => HealthState::Healthy,
            "unhealthy" => HealthState::Unhealthy,
            "unhealthy.draining" => HealthState::UnhealthyDraining,
            "unused" => HealthState::Unused,
            "draining" => HealthState::Draining,
            "unavailable" => HealthState::Unavailable,
            other => HealthState::Other(other.to_string()),
        }
    }

    /// ELBv2's spelling.
    pub fn as_str(&self) -> &str {
        match self {
            HealthState::Initial => "initial",
            HealthState::Healthy => "healthy",
            HealthState::Unhealthy => "unhealthy",
            HealthState::UnhealthyDraining => "unhealthy.draining",
            HealthState::Unused => "unused",
            HealthState::Draining => "draining",
            HealthState::Unavailable => "unavailable",
            HealthState::Other(s) => s,
        }
    }
}

/// One `TargetHealthDescription`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetHealth {
    pub target: Target,
    pub health_check_port: Option<String>,
    pub state: HealthState,
    /// e.g. `Target.Timeout`, `Elb.InitialHealthChecking`.
    pub reason: Option<String>,
    pub description: Option<String>,
}

/// What [`crate::Elbv2::create_load_balancer`] makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLoadBalancer {
    pub name: String,
    pub lb_type: LoadBalancerType,
    /// Scheme `internal` (else `internet-facing`).
    pub internal: bool,
    pub subnets: Vec<String>,
    pub security_groups: Vec<String>,
    pub tags: Vec<(String, String)>,
}

/// What [`crate::Elbv2::create_target_group`] makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTargetGroup {
    pub name: String,
    /// `TCP` (network) or `HTTP` (application), ...
    pub protocol: String,
    pub port: u16,
    pub vpc_id: String,
    pub target_type: TargetType,
    pub health: HealthCheck,
    pub tags: Vec<(String, String)>,
}

fn missing(action: &'static str, what: &str) -> Elbv2Error {
    Elbv2Error::InvalidResponse {
        action,
        message: format!("missing {what}"),
    }
}

fn req(action: &'static str, v: Option<&str>, what: &str) -> Result<String, Elbv2Error> {
    v.filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| missing(action, what))
}

fn port(action: &'static str, v: Option<i32>, what: &str) -> Result<u16, Elbv2Error> {
    v.and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| missing(action, what))
}

fn count(v: Option<i32>) -> Option<u32> {
    v.and_then(|n| u32::try_from(n).ok())
}

pub(crate) fn load_balancer(
    action: &'static str,
    l: &sdk::LoadBalancer,
) -> Result<LoadBalancer, Elbv2Error> {
    Ok(LoadBalancer {
        arn: req(action, l.load_balancer_arn(), "LoadBalancerArn")?,
        name: req(action, l.load_balancer_name(), "LoadBalancerName")?,
        dns_name: l.dns_name().unwrap_or_default().to_string(),
        lb_type: l
            .r#type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        scheme: l
            .scheme()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        vpc_id: l.vpc_id().unwrap_or_default().to_string(),
        state: l
            .state()
            .and_then(|s| s.code())
            .map(|c| c.as_str().to_string())
            .unwrap_or_default(),
        state_reason: l.state().and_then(|s| s.reason()).map(str::to_string),
        zones: l
            .availability_zones()
            .iter()
            .map(|z| LoadBalancerZone {
                zone: z.zone_name().unwrap_or_default().to_string(),
                subnet_id: z.subnet_id().unwrap_or_default().to_string(),
                private_ip: z
                    .load_balancer_addresses()
                    .iter()
                    .find_map(|a| a.private_ipv4_address()?.parse().ok()),
            })
            .collect(),
        security_groups: l.security_groups().to_vec(),
    })
}

pub(crate) fn target_group(
    action: &'static str,
    t: &sdk::TargetGroup,
) -> Result<TargetGroup, Elbv2Error> {
    Ok(TargetGroup {
        arn: req(action, t.target_group_arn(), "TargetGroupArn")?,
        name: req(action, t.target_group_name(), "TargetGroupName")?,
        protocol: t
            .protocol()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default(),
        port: port(action, t.port(), "Port")?,
        vpc_id: t.vpc_id().unwrap_or_default().to_string(),
        target_type: t
            .target_type()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default(),
        health: HealthCheck {
            protocol: t.health_check_protocol().map(|p| p.as_str().to_string()),
            port: t.health_check_port().map(str::to_string),
            path: t.health_check_path().map(str::to_string),
            interval_seconds: count(t.health_check_interval_seconds()),
            timeout_seconds: count(t.health_check_timeout_seconds()),
            healthy_threshold: count(t.healthy_threshold_count()),
            unhealthy_threshold: count(t.unhealthy_threshold_count()),
            matcher: t.matcher().and_then(|m| m.http_code()).map(str::to_string),
        },
        load_balancer_arns: t.load_balancer_arns().to_vec(),
    })
}

pub(crate) fn listener(action: &'static str, l: &sdk::Listener) -> Result<Listener, Elbv2Error> {
    Ok(Listener {
        arn: req(action, l.listener_arn(), "ListenerArn")?,
        load_balancer_arn: req(action, l.load_balancer_arn(), "LoadBalancerArn")?,
        port: port(action, l.port(), "Port")?,
        protocol: l
            .protocol()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default(),
        target_group_arn: l
            .default_actions()
            .iter()
            .find_map(|a| a.target_group_arn())
            .map(str::to_string),
    })
}

pub(crate) fn target_health(
    action: &'static str,
    d: &sdk::TargetHealthDescription,
) -> Result<TargetHealth, Elbv2Error> {
    let t = d.target().ok_or_else(|| missing(action, "Target"))?;
    let h = d.target_health();
    Ok(TargetHealth {
        target: Target {
            id: req(action, t.id(), "Target.Id")?,
            port: t.port().and_then(|p| u16::try_from(p).ok()),
            availability_zone: t.availability_zone().map(str::to_string),
        },
        health_check_port: d.health_check_port().map(str::to_string),
        state: HealthState::parse(
            h.and_then(|h| h.state())
                .map(|s| s.as_str())
                .ok_or_else(|| missing(action, "TargetHealth.State"))?,
        ),
        reason: h.and_then(|h| h.reason()).map(|r| r.as_str().to_string()),
        description: h.and_then(|h| h.description()).map(str::to_string),
    })
}

pub(crate) fn sdk_target(t: &Target) -> sdk::TargetDescription {
    sdk::TargetDescription::builder()
        .id(&t.id)
        .set_port(t.port.map(i32::from))
        .set_availability_zone(t.availability_zone.clone())
        .build()
}

pub(crate) fn sdk_tags(tags: &[(String, String)]) -> Vec<sdk::Tag> {
    tags.iter()
        .map(|(k, v)| sdk::Tag::builder().key(k).value(v).build())
        .collect()
}
