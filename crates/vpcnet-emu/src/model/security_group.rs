//! Security groups and their ingress rules, as EC2 keeps them: a rule is one permission
//! (protocol and port range) from one source (an IPv4 CIDR or another group of the VPC);
//! authorizing a rule that exists is `InvalidPermission.Duplicate`, revoking one that does not is
//! `InvalidPermission.NotFound`, and both calls are all-or-nothing. Egress is not modelled (every
//! group allows all egress, EC2's default).
//!
//! [`Cloud::ingress_view`] is what the fabric enforces ([`crate::hooks::IngressRulesChanged`]).

use std::collections::BTreeSet;

use ipnet::Ipv4Net;
use serde::Serialize;

use super::{Cloud, SecurityGroup};
use crate::error::Ec2Error;
use crate::hooks::{EniIngress, GroupIngress, IngressRulesChanged};

/// Protocol and port range of a rule, as EC2 normalises them: `tcp`, `udp` and `icmp` by name,
/// `-1` for all traffic (no ports), any other IP protocol by number (no ports). For `icmp`,
/// `from_port` is the ICMP type and `to_port` the code, `-1` meaning any.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Permission {
    /// `tcp`, `udp`, `icmp`, `-1` or a protocol number such as `47`.
    pub protocol: String,
    /// First port (tcp/udp) or ICMP type; `None` for `-1` and numbered protocols.
    pub from_port: Option<i32>,
    /// Last port (tcp/udp) or ICMP code; `None` for `-1` and numbered protocols.
    pub to_port: Option<i32>,
}

impl Permission {
    /// Validates and normalises EC2's `IpProtocol`, `FromPort` and `ToPort`.
    /// Errors: `InvalidParameterValue` (unknown protocol, ports out of range, from > to),
    /// `MissingParameter` (tcp/udp without ports).
    pub fn new(protocol: &str, from: Option<i32>, to: Option<i32>) -> Result<Self, Ec2Error> {
        let proto = match protocol.to_ascii_lowercase().as_str() {
            "tcp" | "6" => "tcp".to_string(),
            "udp" | "17" => "udp".to_string(),
            "icmp" | "1" => "icmp".to_string(),
            "-1" | "all" => "-1".to_string(),
            n => match n.parse::<u8>() {
                Ok(num) => num.to_string(),
                Err(_) => {
                    return Err(Ec2Error::invalid(
                        "IpProtocol",
                        protocol,
                        "Expected tcp, udp, icmp, -1 or a protocol number 0-255.",
                    ))
                }
            },
        };
        match proto.as_str() {
            "tcp" | "udp" => {
                let (Some(f), Some(t)) = (from, to) else {
                    return Err(Ec2Error::missing(if from.is_none() {
                        "FromPort"
                    } else {
                        "ToPort"
                    }));
                };
                if !(0..=65535).contains(&f) || !(0..=65535).contains(&t) || f > t {
                    return Err(Ec2Error::invalid_value(format!(
                        "Invalid {proto} port range {f}-{t}: ports are 0-65535 and FromPort must not exceed ToPort."
                    )));
                }
                Ok(Permission {
                    protocol: proto,
                    from_port: Some(f),
                    to_port: Some(t),
                })
            }
            "icmp" => {
                let f = from.unwrap_or(-1);
                let t = to.unwrap_or(-1);
                if !(-1..=255).contains(&f) || !(-1..=255).contains(&t) {
                    return Err(Ec2Error::invalid_value(format!(
                        "Invalid ICMP type {f} or code {t}: each is -1 (any) or 0-255."
                    )));
                }
                Ok(Permission {
                    protocol: proto,
                    from_port: Some(f),
                    to_port: Some(t),
                })
            }
            _ => Ok(Permission {
                protocol: proto,
                from_port: None,
                to_port: None,
            }),
        }
    }
}

/// Where a rule admits traffic from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// An IPv4 range (`IpRanges.N.CidrIp`).
    Cidr(Ipv4Net),
    /// Every ENI carrying this group (`Groups.N.GroupId`), by its private addresses.
    Group(String),
}

/// One ingress rule of a group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct IngressRule {
    pub permission: Permission,
    pub source: Source,
}

impl std::fmt::Display for IngressRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let peer = match &self.source {
            Source::Cidr(c) => c.to_string(),
            Source::Group(g) => g.clone(),
        };
        let p = &self.permission;
        let proto = match p.protocol.as_str() {
            "-1" => "ALL".to_string(),
            other => other.to_uppercase(),
        };
        write!(f, "peer: {peer}, {proto}")?;
        if let (Some(a), Some(b)) = (p.from_port, p.to_port) {
            write!(f, ", from port: {a}, to port: {b}")?;
        }
        write!(f, ", ALLOW")
    }
}

fn group_missing(id: &str) -> Ec2Error {
    Ec2Error::new(
        "InvalidGroup.NotFound",
        format!("The security group '{id}' does not exist"),
    )
}

impl Cloud {
    /// Checks `rules` for group `group_id`: the group exists, each source group exists in its
    /// VPC. Returns the group's VPC.
    fn check_rules(&self, group_id: &str, rules: &[IngressRule]) -> Result<String, Ec2Error> {
        let g = self
            .groups
            .get(group_id)
            .ok_or_else(|| group_missing(group_id))?;
        for r in rules {
            if let Source::Group(src) = &r.source {
                match self.groups.get(src) {
                    Some(s) if s.vpc_id == g.vpc_id => {}
                    _ => return Err(Ec2Error::group_not_found(src, &g.vpc_id)),
                }
            }
        }
        Ok(g.vpc_id.clone())
    }

    /// EC2 AuthorizeSecurityGroupIngress: add `rules` to group `group_id`, all or nothing.
    /// Errors: `InvalidGroup.NotFound` (the group or a source group),
    /// `InvalidPermission.Duplicate` (a rule the group has, or one given twice).
    pub fn authorize_ingress(
        &mut self,
        group_id: &str,
        rules: Vec<IngressRule>,
    ) -> Result<(), Ec2Error> {
        self.check_rules(group_id, &rules)?;
        let g = &self.groups[group_id];
        let mut seen: BTreeSet<&IngressRule> = BTreeSet::new();
        for r in &rules {
            if g.ingress.contains(r) || !seen.insert(r) {
                return Err(Ec2Error::new(
                    "InvalidPermission.Duplicate",
                    format!("the specified rule \"{r}\" already exists"),
                ));
            }
        }
        let g = self.groups.get_mut(group_id).expect("checked");
        g.ingress.extend(rules);
        Ok(())
    }

    /// EC2 RevokeSecurityGroupIngress: remove `rules` from group `group_id`, all or nothing.
    /// Errors: `InvalidGroup.NotFound`, `InvalidPermission.NotFound` (a rule the group lacks).
    pub fn revoke_ingress(
        &mut self,
        group_id: &str,
        rules: Vec<IngressRule>,
    ) -> Result<(), Ec2Error> {
        let g = self
            .groups
            .get(group_id)
            .ok_or_else(|| group_missing(group_id))?;
        for r in &rules {
            if !g.ingress.contains(r) {
                return Err(Ec2Error::new(
                    "InvalidPermission.NotFound",
                    format!("The specified rule \"{r}\" does not exist in this security group."),
                ));
            }
        }
        let g = self.groups.get_mut(group_id).expect("checked");
        g.ingress.retain(|r| !rules.contains(r));
        Ok(())
    }

    /// Every security group, by ID.
    pub fn groups(&self) -> impl Iterator<Item = &SecurityGroup> {
        self.groups.values()
    }

    /// The security-group view the fabric enforces: every group's ingress rules and every
    /// ENI's addresses (primary and secondary as /32, prefixes as /28) and groups. Sorted by
    /// ID; linear in the cloud's size.
    pub fn ingress_view(&self) -> IngressRulesChanged {
        IngressRulesChanged {
            groups: self
                .groups
                .values()
                .map(|g| GroupIngress {
                    group_id: g.id.clone(),
                    rules: g.ingress.clone(),
                })
                .collect(),
            enis: self
                .enis
                .values()
                .map(|e| EniIngress {
                    eni_id: e.id.clone(),
                    addresses: std::iter::once(e.primary_ip)
                        .chain(e.secondary_ips.iter().copied())
                        .map(|ip| Ipv4Net::new(ip, 32).expect("/32"))
                        .chain(e.prefixes.iter().copied())
                        .collect(),
                    groups: e.groups.clone(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_are_normalised_and_checked() {
        let p = Permission::new("6", Some(80), Some(80)).unwrap();
        assert_eq!(p.protocol, "tcp");
        assert_eq!(Permission::new("ALL", None, None).unwrap().protocol, "-1");
        assert_eq!(
            Permission::new("-1", Some(1), Some(2)).unwrap().from_port,
            None
        );
        assert_eq!(
            Permission::new("icmp", None, None).unwrap().from_port,
            Some(-1)
        );
        assert_eq!(
            Permission::new("tcp", None, Some(80)).unwrap_err().code,
            "MissingParameter"
        );
        assert_eq!(
            Permission::new("tcp", Some(90), Some(80)).unwrap_err().code,
            "InvalidParameterValue"
        );
        assert_eq!(
            Permission::new("bogus", None, None).unwrap_err().code,
            "InvalidParameterValue"
        );
    }
}
