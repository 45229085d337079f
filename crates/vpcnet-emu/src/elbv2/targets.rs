//! Target groups and their targets: CreateTargetGroup and ModifyTargetGroup with ELBv2's
//! health-check defaults and ranges, ModifyTargetGroupAttributes, RegisterTargets (ELBv2's
//! target rules and the per-group quota, all or nothing) and DeregisterTargets (draining for
//! the deregistration delay while the group is in use).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;

use super::attributes;
use super::error::{self, ElbError};
use super::model::{
    add_tags, check_name, Elbv2Model, HealthCheck, HealthCheckPort, Protocol, Registration,
    TargetGroup, TargetType,
};
use crate::model::{Cloud, InstanceState, Tags};

/// Health-check fields of CreateTargetGroup / ModifyTargetGroup; None keeps the default (or
/// the current value).
#[derive(Debug, Clone, Default)]
pub struct HealthCheckInput {
    pub enabled: Option<bool>,
    pub protocol: Option<Protocol>,
    /// `traffic-port` or a port number.
    pub port: Option<String>,
    pub path: Option<String>,
    pub interval_seconds: Option<u32>,
    pub timeout_seconds: Option<u32>,
    pub healthy_threshold: Option<u32>,
    pub unhealthy_threshold: Option<u32>,
    pub matcher: Option<String>,
}

/// What CreateTargetGroup asks for.
#[derive(Debug, Clone, Default)]
pub struct CreateTargetGroup {
    pub name: String,
    pub protocol: Option<Protocol>,
    pub port: Option<u16>,
    pub vpc_id: Option<String>,
    pub target_type: Option<TargetType>,
    pub health: HealthCheckInput,
    pub tags: Vec<(String, String)>,
}

/// One target of RegisterTargets / DeregisterTargets / DescribeTargetHealth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetInput {
    pub id: String,
    pub port: Option<u16>,
    pub availability_zone: Option<String>,
}

fn in_range(name: &str, v: u32, lo: u32, hi: u32) -> Result<u32, ElbError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(error::validation(format!(
            "{name} '{v}' must be between {lo} and {hi}"
        )))
    }
}

/// Parse and check a `Matcher.HttpCode`: codes 200..=599, single (`200`), lists (`200,202`) or
/// ranges (`200-299`). Returns the codes it accepts.
pub fn matcher_codes(m: &str) -> Result<Vec<u16>, ElbError> {
    let bad = || {
        error::validation(format!(
            "Matcher HttpCode '{m}' is invalid: use codes from 200 to 599 like 200, 200,202 or 200-299"
        ))
    };
    let code = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|c| (200..=599).contains(c))
            .ok_or_else(bad)
    };
    let mut out = Vec::new();
    for part in m.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (code(a)?, code(b)?);
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(code(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The health check of a target group of `protocol` after applying `input` over `base` (the
/// current check, or None at creation for ELBv2's defaults). Errors: `ValidationError` naming
/// the field and its range.
pub fn health_check(
    protocol: Protocol,
    base: Option<&HealthCheck>,
    input: &HealthCheckInput,
) -> Result<HealthCheck, ElbError> {
    if input.enabled == Some(false) {
        return Err(error::validation(
            "Health checks cannot be disabled for target types instance and ip",
        ));
    }
    let hc_protocol = input
        .protocol
        .or(base.map(|b| b.protocol))
        .unwrap_or(match protocol {
            Protocol::Http => Protocol::Http,
            Protocol::Https => Protocol::Https,
            _ => Protocol::Tcp,
        });
    if !matches!(
        hc_protocol,
        Protocol::Http | Protocol::Https | Protocol::Tcp
    ) {
        return Err(error::enum_value(
            "healthCheckProtocol",
            hc_protocol.as_str(),
            &["HTTP", "HTTPS", "TCP"],
        ));
    }
    if protocol.is_http() && hc_protocol == Protocol::Tcp {
        return Err(error::validation(format!(
            "Health check protocol TCP is not supported for target group protocol {}",
            protocol.as_str()
        )));
    }
    let http = hc_protocol != Protocol::Tcp;
    let port = match input.port.as_deref() {
        None => base.map(|b| b.port).unwrap_or(HealthCheckPort::TrafficPort),
        Some("traffic-port") => HealthCheckPort::TrafficPort,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => HealthCheckPort::Port(n),
            _ => {
                return Err(error::validation(format!(
                    "Health check port '{p}' must be 'traffic-port' or a port from 1 to 65535"
                )))
            }
        },
    };
    let path = if http {
        let p = input
            .path
            .clone()
            .or(base.and_then(|b| b.path.clone()))
            .unwrap_or_else(|| "/".into());
        // URI characters only (RFC 3986 unreserved, reserved and '%'), as ELBv2 checks
        let uri_char = |c: char| c.is_ascii_alphanumeric() || "-._~:/?#[]@!$&'()*+,;=%".contains(c);
        if !p.starts_with('/') || p.len() > 1024 || !p.chars().all(uri_char) {
            return Err(error::validation(format!(
                "Health check path '{p}' must start with '/', be at most 1024 characters and hold only URI characters"
            )));
        }
        Some(p)
    } else {
        if input.path.is_some() {
            return Err(error::validation(
                "A health check path cannot be set for TCP health checks",
            ));
        }
        None
    };
    let matcher = if http {
        let m = input
            .matcher
            .clone()
            .or(base.and_then(|b| b.matcher.clone()))
            .unwrap_or_else(|| if protocol.is_http() { "200" } else { "200-399" }.into());
        matcher_codes(&m)?;
        Some(m)
    } else {
        if input.matcher.is_some() {
            return Err(error::validation(
                "A matcher cannot be set for TCP health checks",
            ));
        }
        None
    };
    let default_timeout = match (protocol.is_http(), hc_protocol) {
        (true, _) => 5,
        (false, Protocol::Http) => 6,
        (false, _) => 10,
    };
    // A protocol change resets the timeout to the new protocol's default unless one is given.
    let keep = |f: fn(&HealthCheck) -> u32| base.map(f);
    let timeout = input
        .timeout_seconds
        .or(if base.map(|b| b.protocol) == Some(hc_protocol) {
            keep(|b| b.timeout_seconds)
        } else {
            None
        })
        .unwrap_or(default_timeout);
    let interval = input
        .interval_seconds
        .or(keep(|b| b.interval_seconds))
        .unwrap_or(30);
    let hc = HealthCheck {
        enabled: true,
        protocol: hc_protocol,
        port,
        path,
        interval_seconds: in_range("Health check interval", interval, 5, 300)?,
        timeout_seconds: in_range("Health check timeout", timeout, 2, 120)?,
        healthy_threshold: in_range(
            "Healthy threshold count",
            input
                .healthy_threshold
                .or(keep(|b| b.healthy_threshold))
                .unwrap_or(5),
            2,
            10,
        )?,
        unhealthy_threshold: in_range(
            "Unhealthy threshold count",
            input
                .unhealthy_threshold
                .or(keep(|b| b.unhealthy_threshold))
                .unwrap_or(2),
            2,
            10,
        )?,
        matcher,
    };
    let too_long = if http {
        hc.timeout_seconds >= hc.interval_seconds
    } else {
        hc.timeout_seconds > hc.interval_seconds
    };
    if too_long {
        return Err(error::validation(format!(
            "Health check timeout '{}' must be smaller than the interval '{}'",
            hc.timeout_seconds, hc.interval_seconds
        )));
    }
    Ok(hc)
}

/// RFC 1918 and RFC 6598: the only addresses outside the VPC an `ip` target may have.
fn private_range(ip: Ipv4Addr) -> bool {
    [
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
    ]
    .iter()
    .any(|c| c.parse::<Ipv4Net>().expect("constant").contains(&ip))
}

impl Elbv2Model {
    /// ELBv2 CreateTargetGroup (target types `ip` and `instance`). The same name with the same
    /// settings returns the existing group (ELBv2 is idempotent there).
    ///
    /// Errors: `ValidationError` (name, missing protocol/port/VPC, unknown VPC, health-check
    /// ranges), `DuplicateTargetGroupName`, `TooManyTargetGroups`, `DuplicateTagKeys`,
    /// `TooManyTags`.
    pub fn create_target_group(
        &mut self,
        cloud: &Cloud,
        req: CreateTargetGroup,
    ) -> Result<String, ElbError> {
        check_name("Target group", &req.name)?;
        let target_type = req.target_type.unwrap_or(TargetType::Instance);
        let protocol = req
            .protocol
            .ok_or_else(|| error::validation("A protocol must be specified"))?;
        if !matches!(protocol, Protocol::Http | Protocol::Tcp) {
            return Err(ElbError::new(
                "UnsupportedProtocol",
                format!(
                    "Target group protocol '{}' is not served by vpcnet-emu (TCP and HTTP are)",
                    protocol.as_str()
                ),
            ));
        }
        let port = match req.port {
            Some(p) if p > 0 => p,
            Some(_) => return Err(error::validation("Port must be between 1 and 65535")),
            None => return Err(error::validation("A port must be specified")),
        };
        let vpc_id = req
            .vpc_id
            .ok_or_else(|| error::validation("A VPC ID must be specified"))?;
        if cloud.vpc(&vpc_id).is_none() {
            return Err(error::validation(format!(
                "The VPC ID '{vpc_id}' is not found"
            )));
        }
        let health = health_check(protocol, None, &req.health)?;
        if let Some(tg) = self.target_groups.values().find(|t| t.name == req.name) {
            let same = tg.protocol == protocol
                && tg.port == port
                && tg.vpc_id == vpc_id
                && tg.target_type == target_type
                && tg.health == health;
            return if same {
                Ok(tg.arn.clone())
            } else {
                Err(ElbError::new(
                    "DuplicateTargetGroupName",
                    format!("A target group with the name '{}' already exists", req.name),
                ))
            };
        }
        if self.target_groups.len() >= self.limits.target_groups as usize {
            return Err(ElbError::new(
                "TooManyTargetGroups",
                format!(
                    "The quota of {} target groups per region has been reached",
                    self.limits.target_groups
                ),
            ));
        }
        let mut tags = Tags::default();
        add_tags(&mut tags, &req.tags, self.limits.tags_per_resource)?;
        let id = self.new_hex_id();
        let arn = self.arn(&format!("targetgroup/{}/{id}", req.name));
        self.target_groups.insert(
            arn.clone(),
            TargetGroup {
                arn: arn.clone(),
                name: req.name,
                protocol,
                port,
                vpc_id,
                target_type,
                health,
                attributes: attributes::defaults(protocol),
                targets: Vec::new(),
                tags,
            },
        );
        Ok(arn)
    }

    /// ELBv2 ModifyTargetGroup (health-check settings). Errors: `TargetGroupNotFound`,
    /// `ValidationError`.
    pub fn modify_target_group(
        &mut self,
        arn: &str,
        input: &HealthCheckInput,
    ) -> Result<(), ElbError> {
        let tg = self.target_group_mut(arn)?;
        tg.health = health_check(tg.protocol, Some(&tg.health), input)?;
        Ok(())
    }

    /// ELBv2 ModifyTargetGroupAttributes: every pair is checked before any is applied.
    /// Errors: `TargetGroupNotFound`, `ValidationError`.
    pub fn modify_target_group_attributes(
        &mut self,
        arn: &str,
        attrs: &[(String, String)],
    ) -> Result<(), ElbError> {
        let tg = self.target_group_mut(arn)?;
        if attrs.is_empty() {
            return Err(error::validation(
                "At least one attribute must be specified",
            ));
        }
        for (k, v) in attrs {
            attributes::validate(tg.protocol, k, v)?;
        }
        for (k, v) in attrs {
            tg.attributes.insert(k.clone(), v.clone());
        }
        Ok(())
    }

    /// Resolve one target of a RegisterTargets call into a registration at `now`.
    fn resolve_target(
        &self,
        cloud: &Cloud,
        tg: &TargetGroup,
        t: &TargetInput,
        now: Instant,
    ) -> Result<Registration, ElbError> {
        let port = t.port.unwrap_or(tg.port);
        if port == 0 {
            return Err(error::validation(format!(
                "Target '{}': port must be between 1 and 65535",
                t.id
            )));
        }
        if let Some(az) = t.availability_zone.as_deref() {
            if az != "all" && !(az.starts_with(&self.region) && az.len() == self.region.len() + 1) {
                return Err(error::validation(format!(
                    "Availability Zone '{az}' is not a zone of region {} (use a zone such as {}a, or 'all')",
                    self.region, self.region
                )));
            }
        }
        let invalid = |why: String| ElbError::new("InvalidTarget", why);
        match tg.target_type {
            TargetType::Instance => {
                if t.availability_zone.is_some() {
                    return Err(error::validation(
                        "AvailabilityZone is not supported for target type instance",
                    ));
                }
                let i = cloud
                    .instance(&t.id)
                    .filter(|i| i.vpc_id == tg.vpc_id)
                    .ok_or_else(|| {
                        invalid(format!(
                            "The target '{}' does not exist or is not in the VPC of the target group ({})",
                            t.id, tg.vpc_id
                        ))
                    })?;
                if i.state != InstanceState::Running {
                    return Err(invalid(format!(
                        "The following targets are not in a running state and cannot be registered: '{}'",
                        t.id
                    )));
                }
                Ok(Registration {
                    id: t.id.clone(),
                    port,
                    availability_zone: None,
                    ip: i.private_ip,
                    registered_at: now,
                    draining_until: None,
                })
            }
            TargetType::Ip => {
                let ip: Ipv4Addr = t.id.parse().map_err(|_| {
                    invalid(format!(
                        "The IP address '{}' is not a valid IPv4 address",
                        t.id
                    ))
                })?;
                let subnet = cloud
                    .subnets()
                    .find(|s| s.vpc_id == tg.vpc_id && s.cidr.contains(&ip));
                let az = match (subnet, t.availability_zone.as_deref()) {
                    (Some(_), Some("all")) => "all".to_string(),
                    (Some(s), Some(az)) if az != s.az => {
                        return Err(invalid(format!(
                            "The IP address '{ip}' is in Availability Zone '{}' (subnet {}), not '{az}'",
                            s.az, s.id
                        )))
                    }
                    (Some(s), _) => s.az.clone(),
                    (None, Some("all")) if private_range(ip) => "all".to_string(),
                    (None, Some("all")) => {
                        return Err(invalid(format!(
                            "The IP address '{ip}' is publicly routable: targets outside the VPC must be in 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10"
                        )))
                    }
                    (None, _) => {
                        return Err(invalid(format!(
                            "The IP address '{ip}' is outside the subnets of VPC {}: register it with AvailabilityZone 'all'",
                            tg.vpc_id
                        )))
                    }
                };
                Ok(Registration {
                    id: t.id.clone(),
                    port,
                    availability_zone: Some(az),
                    ip,
                    registered_at: now,
                    draining_until: None,
                })
            }
        }
    }

    /// ELBv2 RegisterTargets at `now`: all targets are checked before any is registered.
    /// Registering a registered target again is a no-op; a draining one starts over (initial).
    ///
    /// Errors: `TargetGroupNotFound`, `ValidationError` (no targets, bad port or zone),
    /// `InvalidTarget` (see [`TargetInput`] rules: IPv4 in a subnet of the group's VPC, or
    /// outside it in a private range with `AvailabilityZone` `all`; instances running in the
    /// VPC), `TooManyTargets` (the group would hold more than the quota; none registered).
    pub fn register_targets(
        &mut self,
        cloud: &Cloud,
        arn: &str,
        targets: &[TargetInput],
        now: Instant,
    ) -> Result<(), ElbError> {
        let tg = self.target_group(arn)?;
        if targets.is_empty() {
            return Err(error::validation("At least one target must be specified"));
        }
        let mut regs: Vec<Registration> = Vec::new();
        for t in targets {
            let r = self.resolve_target(cloud, tg, t, now)?;
            if !regs.iter().any(|o| o.id == r.id && o.port == r.port) {
                regs.push(r);
            }
        }
        let new = regs
            .iter()
            .filter(|r| !tg.targets.iter().any(|o| o.id == r.id && o.port == r.port))
            .count();
        let limit = self.limits.targets_per_target_group as usize;
        if tg.targets.len() + new > limit {
            return Err(ElbError::new(
                "TooManyTargets",
                format!(
                    "You've reached the limit on the number of targets per target group ({limit}): {} registered, {new} more requested",
                    tg.targets.len()
                ),
            ));
        }
        let tg = self.target_group_mut(arn)?;
        for r in regs {
            match tg
                .targets
                .iter_mut()
                .find(|o| o.id == r.id && o.port == r.port)
            {
                Some(o) if o.draining_until.is_some() => *o = r,
                Some(_) => {}
                None => tg.targets.push(r),
            }
        }
        Ok(())
    }

    /// ELBv2 DeregisterTargets at `now`: while a load balancer uses the group, each target
    /// drains for `deregistration_delay.timeout_seconds`, then goes; otherwise it goes at once.
    /// Errors: `TargetGroupNotFound`, `ValidationError`, `InvalidTarget` (not registered; none
    /// deregistered).
    pub fn deregister_targets(
        &mut self,
        arn: &str,
        targets: &[TargetInput],
        now: Instant,
    ) -> Result<(), ElbError> {
        let in_use = !self.load_balancers_of(arn).is_empty();
        let tg = self.target_group_mut(arn)?;
        if targets.is_empty() {
            return Err(error::validation("At least one target must be specified"));
        }
        let keys: Vec<(String, u16)> = targets
            .iter()
            .map(|t| (t.id.clone(), t.port.unwrap_or(tg.port)))
            .collect();
        for (id, port) in &keys {
            if !tg.targets.iter().any(|r| r.id == *id && r.port == *port) {
                return Err(ElbError::new(
                    "InvalidTarget",
                    format!(
                        "The target '{id}' on port {port} is not registered with the target group"
                    ),
                ));
            }
        }
        let delay = Duration::from_secs(tg.deregistration_delay());
        if in_use && !delay.is_zero() {
            for r in tg.targets.iter_mut() {
                if keys.iter().any(|(id, p)| r.id == *id && r.port == *p) {
                    r.draining_until.get_or_insert(now + delay);
                }
            }
        } else {
            tg.targets
                .retain(|r| !keys.iter().any(|(id, p)| r.id == *id && r.port == *p));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matcher_forms() {
        assert_eq!(matcher_codes("200").unwrap(), vec![200]);
        assert_eq!(matcher_codes("200,202").unwrap(), vec![200, 202]);
        assert_eq!(
            matcher_codes("200-203,202").unwrap(),
            vec![200, 201, 202, 203]
        );
        for bad in ["", "abc", "199", "600", "300-200", "200-"] {
            assert_eq!(
                matcher_codes(bad).unwrap_err().code,
                "ValidationError",
                "{bad}"
            );
        }
    }

    #[test]
    fn health_defaults_per_protocol() {
        let none = HealthCheckInput::default();
        let http = health_check(Protocol::Http, None, &none).unwrap();
        assert_eq!(
            (http.protocol, http.interval_seconds, http.timeout_seconds),
            (Protocol::Http, 30, 5)
        );
        assert_eq!((http.healthy_threshold, http.unhealthy_threshold), (5, 2));
        assert_eq!(http.path.as_deref(), Some("/"));
        assert_eq!(http.matcher.as_deref(), Some("200"));
        let tcp = health_check(Protocol::Tcp, None, &none).unwrap();
        assert_eq!((tcp.protocol, tcp.timeout_seconds), (Protocol::Tcp, 10));
        assert_eq!((tcp.path.clone(), tcp.matcher.clone()), (None, None));
        let tcp_http = health_check(
            Protocol::Tcp,
            None,
            &HealthCheckInput {
                protocol: Some(Protocol::Http),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(tcp_http.timeout_seconds, 6);
        assert_eq!(tcp_http.matcher.as_deref(), Some("200-399"));
        // a modification keeps what it does not name
        let faster = health_check(
            Protocol::Tcp,
            Some(&tcp),
            &HealthCheckInput {
                interval_seconds: Some(10),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!((faster.interval_seconds, faster.timeout_seconds), (10, 10));
    }

    #[test]
    fn health_ranges() {
        let with = |f: fn(&mut HealthCheckInput)| {
            let mut i = HealthCheckInput::default();
            f(&mut i);
            health_check(Protocol::Http, None, &i)
        };
        assert!(with(|i| i.interval_seconds = Some(4)).is_err());
        assert!(with(|i| i.interval_seconds = Some(301)).is_err());
        assert!(with(|i| i.healthy_threshold = Some(1)).is_err());
        assert!(with(|i| i.unhealthy_threshold = Some(11)).is_err());
        assert!(with(|i| i.timeout_seconds = Some(30)).is_err());
        assert!(with(|i| i.protocol = Some(Protocol::Tcp)).is_err());
        assert!(with(|i| i.enabled = Some(false)).is_err());
        assert!(with(|i| i.path = Some("nope".into())).is_err());
        assert!(with(|i| i.path = Some("/a b".into())).is_err());
        assert!(with(|i| i.path = Some("/x\nbind :1".into())).is_err());
        assert!(with(|i| i.path = Some("/healthz?full=1&x=%20".into())).is_ok());
        assert!(with(|i| i.port = Some("0".into())).is_err());
        assert!(with(|i| i.port = Some("8080".into())).is_ok());
    }

    #[test]
    fn private_ranges() {
        for ok in ["10.1.2.3", "172.31.0.1", "192.168.1.1", "100.64.0.1"] {
            assert!(private_range(ok.parse().unwrap()), "{ok}");
        }
        for bad in ["8.8.8.8", "172.32.0.1", "100.128.0.1"] {
            assert!(!private_range(bad.parse().unwrap()), "{bad}");
        }
    }
}
