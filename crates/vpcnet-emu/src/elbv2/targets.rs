//! Target groups and their targets: CreateTargetGroup and ModifyTargetGroup (their health
//! checks in [`super::health_check`]), ModifyTargetGroupAttributes, RegisterTargets (ELBv2's
//! target rules and the per-group quota, all or nothing) and DeregisterTargets (draining for
//! the deregistration delay while the group is in use).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;

use super::attributes;
use super::error::{self, ElbError};
use super::health_check::{health_check, HealthCheckInput};
use super::model::{
    add_tags, check_name, Elbv2Model, Protocol, Registration, TargetGroup, TargetType,
};
use crate::model::{Cloud, InstanceState, Tags};

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
    fn private_ranges() {
        for ok in ["10.1.2.3", "172.31.0.1", "192.168.1.1", "100.64.0.1"] {
            assert!(private_range(ok.parse().unwrap()), "{ok}");
        }
        for bad in ["8.8.8.8", "172.32.0.1", "100.128.0.1"] {
            assert!(!private_range(bad.parse().unwrap()), "{bad}");
        }
    }
}
