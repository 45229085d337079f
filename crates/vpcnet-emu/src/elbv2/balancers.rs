//! Load balancers and listeners: CreateLoadBalancer (validation, one ELB ENI per subnet in the
//! EC2 model), DeleteLoadBalancer, CreateListener (ELBv2's protocol, port and target-group
//! rules) and DeleteListener.

use std::net::Ipv4Addr;
use std::time::Instant;

use super::error::{self, ElbError};
use super::model::{
    add_tags, check_name, Elbv2Model, LbAddress, LbState, LbType, Listener, LoadBalancer, Protocol,
};
use crate::model::{Cloud, CreateEniRequest, Tags};

/// What CreateLoadBalancer asks for.
#[derive(Debug, Clone, Default)]
pub struct CreateLoadBalancer {
    pub name: String,
    pub lb_type: Option<LbType>,
    /// `internal` or `internet-facing` (the default, as in ELBv2).
    pub scheme: Option<String>,
    /// (subnet ID, requested private IPv4 address).
    pub subnets: Vec<(String, Option<Ipv4Addr>)>,
    pub security_groups: Vec<String>,
    pub tags: Vec<(String, String)>,
}

/// What CreateListener asks for.
#[derive(Debug, Clone)]
pub struct CreateListener {
    pub lb_arn: String,
    pub protocol: Protocol,
    pub port: u16,
    pub target_group_arn: String,
    pub tags: Vec<(String, String)>,
}

impl Elbv2Model {
    /// ELBv2 CreateLoadBalancer: validates name, type, scheme, subnets (one per zone, one VPC;
    /// an application load balancer needs two zones) and security groups, then makes one ENI
    /// per subnet in `cloud`. The same name with the same settings returns the existing load
    /// balancer (ELBv2 is idempotent there).
    ///
    /// Errors: `ValidationError`, `DuplicateLoadBalancerName`, `SubnetNotFound`,
    /// `InvalidSubnet` (internet-facing: no internet gateway), `InvalidConfigurationRequest`
    /// (subnets of two VPCs, two subnets of one zone), `InvalidSecurityGroup`,
    /// `TooManyLoadBalancers`, `InvalidConfigurationRequest` (no free address in a subnet).
    pub fn create_load_balancer(
        &mut self,
        cloud: &mut Cloud,
        req: CreateLoadBalancer,
        now: Instant,
    ) -> Result<String, ElbError> {
        check_name("Load balancer", &req.name)?;
        let lb_type = req.lb_type.unwrap_or(LbType::Application);
        let scheme = req.scheme.as_deref().unwrap_or("internet-facing");
        if !["internal", "internet-facing"].contains(&scheme) {
            return Err(error::enum_value(
                "scheme",
                scheme,
                &["internet-facing", "internal"],
            ));
        }
        if req.subnets.is_empty() {
            return Err(error::validation(
                "At least one subnet must be specified (Subnets or SubnetMappings)",
            ));
        }
        let mut zones: Vec<(String, String)> = Vec::new();
        let mut vpc_id: Option<String> = None;
        for (id, ip) in &req.subnets {
            let s = cloud.subnet(id).ok_or_else(|| {
                ElbError::new(
                    "SubnetNotFound",
                    format!("The specified subnet does not exist: '{id}'"),
                )
            })?;
            if vpc_id.as_ref().is_some_and(|v| *v != s.vpc_id) {
                return Err(ElbError::new(
                    "InvalidConfigurationRequest",
                    "All subnets of a load balancer must belong to the same VPC",
                ));
            }
            if zones.iter().any(|(_, az)| *az == s.az) {
                return Err(ElbError::new(
                    "InvalidConfigurationRequest",
                    format!(
                        "A load balancer cannot be attached to multiple subnets in the same Availability Zone ({})",
                        s.az
                    ),
                ));
            }
            if let Some(ip) = ip {
                if !s.cidr.contains(ip) {
                    return Err(error::validation(format!(
                        "Private IPv4 address {ip} is not in subnet {id} ({})",
                        s.cidr
                    )));
                }
            }
            vpc_id = Some(s.vpc_id.clone());
            zones.push((id.clone(), s.az.clone()));
        }
        let vpc_id = vpc_id.expect("at least one subnet");
        if lb_type == LbType::Application && zones.len() < 2 {
            return Err(error::validation(
                "At least two subnets in two different Availability Zones must be specified",
            ));
        }
        for g in &req.security_groups {
            if cloud.group(g).is_none_or(|sg| sg.vpc_id != vpc_id) {
                return Err(ElbError::new(
                    "InvalidSecurityGroup",
                    format!("Security group '{g}' does not exist in VPC '{vpc_id}'"),
                ));
            }
        }
        if let Some(lb) = self.load_balancers.values().find(|l| l.name == req.name) {
            let same = lb.lb_type == lb_type
                && lb.scheme == scheme
                && lb
                    .addresses
                    .iter()
                    .map(|a| &a.subnet_id)
                    .eq(zones.iter().map(|z| &z.0));
            return if same {
                Ok(lb.arn.clone())
            } else {
                Err(ElbError::new(
                    "DuplicateLoadBalancerName",
                    format!(
                        "A load balancer with the name '{}' already exists",
                        req.name
                    ),
                ))
            };
        }
        if scheme == "internet-facing" {
            return Err(ElbError::new(
                "InvalidSubnet",
                format!(
                    "VPC {vpc_id} has no internet gateway: an internet-facing load balancer cannot be created; use Scheme=internal"
                ),
            ));
        }
        if self.load_balancers.len() >= self.limits.load_balancers as usize {
            return Err(ElbError::new(
                "TooManyLoadBalancers",
                format!(
                    "The quota of {} load balancers per region has been reached",
                    self.limits.load_balancers
                ),
            ));
        }
        let mut tags = Tags::default();
        add_tags(&mut tags, &req.tags, self.limits.tags_per_resource)?;
        let id = self.new_hex_id();
        let kind = lb_type.arn_kind();
        let mut addresses = Vec::new();
        for ((subnet_id, ip), (_, az)) in req.subnets.iter().zip(&zones) {
            let eni = cloud.create_eni(CreateEniRequest {
                subnet_id: subnet_id.clone(),
                description: format!("ELB {kind}/{}/{id}", req.name),
                groups: req.security_groups.clone(),
                primary_ip: *ip,
                ..Default::default()
            });
            let eni = match eni {
                Ok(e) => e,
                Err(e) => {
                    for a in &addresses {
                        let a: &LbAddress = a;
                        let _ = cloud.delete_eni(&a.eni_id);
                    }
                    return Err(ElbError::new(
                        "InvalidConfigurationRequest",
                        format!("Cannot place the load balancer in {subnet_id}: {e}"),
                    ));
                }
            };
            let ip = cloud.eni(&eni).expect("just created").primary_ip;
            addresses.push(LbAddress {
                subnet_id: subnet_id.clone(),
                availability_zone: az.clone(),
                eni_id: eni,
                ip,
            });
        }
        let arn = self.arn(&format!("loadbalancer/{kind}/{}/{id}", req.name));
        let dns_name = match lb_type {
            LbType::Network => format!("{}-{id}.elb.{}.amazonaws.com", req.name, self.region),
            LbType::Application => format!(
                "internal-{}-{}.{}.elb.amazonaws.com",
                req.name,
                u64::from_str_radix(&id[..8], 16).unwrap_or(0),
                self.region
            ),
        };
        self.load_balancers.insert(
            arn.clone(),
            LoadBalancer {
                arn: arn.clone(),
                id,
                name: req.name,
                lb_type,
                scheme: "internal",
                vpc_id,
                addresses,
                security_groups: req.security_groups,
                created: now,
                dns_name,
                state: LbState::Provisioning,
                tags,
            },
        );
        Ok(arn)
    }

    /// ELBv2 DeleteLoadBalancer: removes its listeners and ENIs. Deleting a load balancer that
    /// does not exist succeeds (as in ELBv2).
    pub fn delete_load_balancer(&mut self, cloud: &mut Cloud, arn: &str) {
        let Some(lb) = self.load_balancers.remove(arn) else {
            return;
        };
        self.listeners.retain(|_, l| l.lb_arn != arn);
        for a in &lb.addresses {
            let _ = cloud.delete_eni(&a.eni_id);
        }
    }

    /// ELBv2 CreateListener with one `forward` default action.
    ///
    /// Errors: `LoadBalancerNotFound`, `TargetGroupNotFound`, `ValidationError` (protocol not of
    /// the load balancer's type, port out of range), `UnsupportedProtocol` (TLS, HTTPS, UDP,
    /// TCP_UDP: the emulator serves TCP and HTTP), `DuplicateListener`, `IncompatibleProtocols`
    /// (target group protocol), `InvalidConfigurationRequest` (target group of another VPC or
    /// target type), `TargetGroupAssociationLimit` (target group used by another load
    /// balancer), `TooManyListeners`.
    pub fn create_listener(&mut self, req: CreateListener) -> Result<String, ElbError> {
        let lb = self.load_balancer(&req.lb_arn)?.clone();
        if !lb.lb_type.listener_protocols().contains(&req.protocol) {
            return Err(error::validation(format!(
                "Listener protocol '{}' must be one of '{}'",
                req.protocol.as_str(),
                lb.lb_type
                    .listener_protocols()
                    .iter()
                    .map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if !matches!(req.protocol, Protocol::Tcp | Protocol::Http) {
            return Err(ElbError::new(
                "UnsupportedProtocol",
                format!(
                    "Listener protocol '{}' is not served by vpcnet-emu (TCP and HTTP are)",
                    req.protocol.as_str()
                ),
            ));
        }
        if req.port == 0 {
            return Err(error::validation(
                "Listener port must be between 1 and 65535",
            ));
        }
        let tg = self.target_group(&req.target_group_arn)?;
        if self
            .listeners
            .values()
            .any(|l| l.lb_arn == req.lb_arn && l.port == req.port)
        {
            return Err(ElbError::new(
                "DuplicateListener",
                format!("A listener already exists on port {}", req.port),
            ));
        }
        let compatible = match lb.lb_type {
            LbType::Network => matches!(tg.protocol, Protocol::Tcp | Protocol::TcpUdp),
            LbType::Application => tg.protocol.is_http(),
        };
        if !compatible {
            return Err(ElbError::new(
                "IncompatibleProtocols",
                format!(
                    "The target group protocol '{}' is not compatible with listener protocol '{}'",
                    tg.protocol.as_str(),
                    req.protocol.as_str()
                ),
            ));
        }
        if tg.vpc_id != lb.vpc_id {
            return Err(ElbError::new(
                "InvalidConfigurationRequest",
                format!(
                    "Target group '{}' is in VPC '{}', the load balancer in '{}'",
                    tg.arn, tg.vpc_id, lb.vpc_id
                ),
            ));
        }
        if self
            .load_balancers_of(&tg.arn)
            .iter()
            .any(|other| *other != req.lb_arn)
        {
            return Err(ElbError::new(
                "TargetGroupAssociationLimit",
                format!(
                    "Target group '{}' is already associated with another load balancer",
                    tg.arn
                ),
            ));
        }
        let count = self
            .listeners
            .values()
            .filter(|l| l.lb_arn == req.lb_arn)
            .count();
        if count >= self.limits.listeners_per_load_balancer as usize {
            return Err(ElbError::new(
                "TooManyListeners",
                format!(
                    "The quota of {} listeners per load balancer has been reached",
                    self.limits.listeners_per_load_balancer
                ),
            ));
        }
        let mut tags = Tags::default();
        add_tags(&mut tags, &req.tags, self.limits.tags_per_resource)?;
        let id = self.new_hex_id();
        let arn = self.arn(&format!(
            "listener/{}/{}/{}/{id}",
            lb.lb_type.arn_kind(),
            lb.name,
            lb.id
        ));
        self.listeners.insert(
            arn.clone(),
            Listener {
                arn: arn.clone(),
                lb_arn: req.lb_arn,
                protocol: req.protocol,
                port: req.port,
                target_group_arn: req.target_group_arn,
                tags,
            },
        );
        Ok(arn)
    }

    /// ELBv2 DeleteListener. Error: `ListenerNotFound`.
    pub fn delete_listener(&mut self, arn: &str) -> Result<(), ElbError> {
        self.listeners
            .remove(arn)
            .map(|_| ())
            .ok_or_else(error::listener_not_found)
    }
}
