//! ENIs: create, attach, detach, delete, modify, with EC2's limits (ENIs per network card, IPv4
//! slots per ENI; each /28 takes one slot). Their secondary addresses and prefixes are in
//! [`super::addresses`].

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;
use std::time::Instant;

use ipnet::{Ipv4Net, Ipv6Net};

use super::{Cloud, InstanceState, Ipv6Request, Tags};
use crate::error::Ec2Error;
use crate::hooks::{AddressesChanged, EniAttached, EniDetached, FabricEvent};

/// The most IPv4 slots any instance type allows per ENI: the cap for an unattached ENI.
fn max_slots_any_type() -> u32 {
    static MAX: OnceLock<u32> = OnceLock::new();
    *MAX.get_or_init(|| {
        vpcnet_limits::all()
            .iter()
            .map(|l| l.ipv4_per_eni)
            .max()
            .unwrap_or(50)
    })
}

#[derive(Debug, Clone)]
pub struct Attachment {
    /// `eni-attach-...`
    pub id: String,
    pub instance_id: String,
    pub device_index: u32,
    pub network_card: u32,
    pub delete_on_termination: bool,
    /// When AttachNetworkInterface was called.
    pub attach_time: Instant,
    /// When the attachment completes (status `attaching` → `attached`; visible to IMDS).
    pub complete_at: Instant,
    /// Whether `EniAttached` has been reported to the hooks.
    pub reported: bool,
}

impl Attachment {
    /// EC2 attachment status at `now`: `attaching` until `complete_at`, then `attached`.
    pub fn status(&self, now: Instant) -> &'static str {
        if now < self.complete_at {
            "attaching"
        } else {
            "attached"
        }
    }
}

#[derive(Debug, Clone)]
pub struct Eni {
    pub id: String,
    pub subnet_id: String,
    pub vpc_id: String,
    pub az: String,
    pub mac: String,
    pub description: String,
    pub primary_ip: Ipv4Addr,
    /// Secondary private IPv4 addresses, in assignment order.
    pub secondary_ips: Vec<Ipv4Addr>,
    /// Assigned /28 prefixes, in assignment order.
    pub prefixes: Vec<Ipv4Net>,
    /// IPv6 addresses from the subnet's /64, in assignment order.
    pub ipv6_addresses: Vec<Ipv6Addr>,
    /// IPv6 /80 prefixes from the subnet's /64, in assignment order.
    pub ipv6_prefixes: Vec<Ipv6Net>,
    pub groups: Vec<String>,
    pub tags: Tags,
    pub source_dest_check: bool,
    pub attachment: Option<Attachment>,
}

impl Eni {
    /// IPv4 slots in use: the primary, each secondary, each /28 prefix.
    pub fn slots(&self) -> u32 {
        1 + self.secondary_ips.len() as u32 + self.prefixes.len() as u32
    }

    /// IPv6 slots in use: each address, each /80 prefix (a separate count from IPv4's).
    pub fn ipv6_slots(&self) -> u32 {
        (self.ipv6_addresses.len() + self.ipv6_prefixes.len()) as u32
    }

    /// EC2 ENI status: `in-use` when attached (or attaching), else `available`.
    pub fn status(&self) -> &'static str {
        if self.attachment.is_some() {
            "in-use"
        } else {
            "available"
        }
    }

    /// IPv6 addresses and prefixes as /128s and /80s.
    pub fn ipv6_cidrs(&self) -> Vec<Ipv6Net> {
        self.ipv6_addresses
            .iter()
            .map(|a| Ipv6Net::from(*a))
            .chain(self.ipv6_prefixes.iter().copied())
            .collect()
    }

    /// Secondary addresses and prefixes as /32s and /28s.
    pub fn secondary_cidrs(&self) -> Vec<Ipv4Net> {
        self.secondary_ips
            .iter()
            .map(|ip| Ipv4Net::new(*ip, 32).expect("32"))
            .chain(self.prefixes.iter().copied())
            .collect()
    }
}

/// Input of CreateNetworkInterface.
#[derive(Debug, Clone, Default)]
pub struct CreateEniRequest {
    pub subnet_id: String,
    pub description: String,
    pub groups: Vec<String>,
    pub tags: Vec<(String, String)>,
    pub primary_ip: Option<Ipv4Addr>,
    /// Explicit secondary addresses (`PrivateIpAddresses` with Primary=false).
    pub secondary_ips: Vec<Ipv4Addr>,
    pub secondary_count: u32,
    pub prefix_count: u32,
    pub prefixes: Vec<Ipv4Net>,
    /// IPv6 addresses and /80 prefixes (`Ipv6AddressCount`, `Ipv6Addresses.N`,
    /// `Ipv6PrefixCount`, `Ipv6Prefix.N`); `None` → one address when the subnet has
    /// `AssignIpv6AddressOnCreation`, else none.
    pub ipv6: Option<Ipv6Request>,
}

/// Input of ModifyNetworkInterfaceAttribute (one attribute per call, as in EC2).
#[derive(Debug, Clone, Default)]
pub struct ModifyEniRequest {
    pub description: Option<String>,
    pub groups: Option<Vec<String>>,
    pub source_dest_check: Option<bool>,
    /// (attachment ID, DeleteOnTermination)
    pub delete_on_termination: Option<(String, bool)>,
}

impl Cloud {
    pub(super) fn eni_mut(&mut self, id: &str) -> Result<&mut super::Eni, Ec2Error> {
        self.enis
            .get_mut(id)
            .ok_or_else(|| Ec2Error::eni_not_found(id))
    }

    /// Allocate addresses from `subnet_id` all-or-nothing: explicit IPs, `count` random IPs,
    /// explicit prefixes, `prefix_count` random aligned /28s.
    pub(super) fn take_addresses(
        &mut self,
        subnet_id: &str,
        ips: &[Ipv4Addr],
        count: u32,
        prefixes: &[Ipv4Net],
        prefix_count: u32,
    ) -> Result<(Vec<Ipv4Addr>, Vec<Ipv4Net>), Ec2Error> {
        let mut subnet = self
            .subnets
            .get(subnet_id)
            .cloned()
            .ok_or_else(|| Ec2Error::subnet_not_found(subnet_id))?;
        let mut got_ips = Vec::new();
        let mut got_prefixes = Vec::new();
        for ip in ips {
            subnet.claim_ip(*ip)?;
            got_ips.push(*ip);
        }
        for p in prefixes {
            subnet.claim_prefix(*p)?;
            got_prefixes.push(*p);
        }
        // prefixes before single addresses, so single addresses do not fragment the space first
        for _ in 0..prefix_count {
            got_prefixes.push(subnet.alloc_prefix(self.rng())?);
        }
        for _ in 0..count {
            got_ips.push(subnet.alloc_ip(self.rng())?);
        }
        self.subnets.insert(subnet_id.to_string(), subnet);
        Ok((got_ips, got_prefixes))
    }

    pub(super) fn slot_limit(&self, eni: &super::Eni) -> (u32, bool) {
        match eni
            .attachment
            .as_ref()
            .and_then(|a| self.instances.get(&a.instance_id))
        {
            Some(i) => (i.limits.ipv4_per_eni, i.limits.supports_prefix_delegation()),
            None => (max_slots_any_type(), true),
        }
    }

    /// EC2 CreateNetworkInterface. Errors: `InvalidSubnetID.NotFound`, `InvalidGroup.NotFound`,
    /// `PrivateIpAddressLimitExceeded` (more than the largest type's IPv4 slots),
    /// `InsufficientFreeAddressesInSubnet`, `InsufficientCidrBlocks`, `PrivateIpAddressInUse`,
    /// `InvalidParameterValue`.
    pub fn create_eni(&mut self, req: CreateEniRequest) -> Result<String, Ec2Error> {
        let subnet = self
            .subnets
            .get(&req.subnet_id)
            .ok_or_else(|| Ec2Error::subnet_not_found(&req.subnet_id))?;
        let (vpc_id, az) = (subnet.vpc_id.clone(), subnet.az.clone());
        let groups = self.resolve_groups(&vpc_id, &req.groups)?;
        let slots = 1
            + req.secondary_ips.len() as u32
            + req.secondary_count
            + req.prefix_count
            + req.prefixes.len() as u32;
        if slots > max_slots_any_type() {
            return Err(Ec2Error::ip_limit());
        }
        if (req.prefix_count > 0 || !req.prefixes.is_empty())
            && (req.secondary_count > 0 || !req.secondary_ips.is_empty())
        {
            return Err(Ec2Error::combination(
                "You cannot specify both IPv4 prefixes and secondary private IPv4 addresses",
            ));
        }
        let ipv6 = req.ipv6.clone().unwrap_or_else(|| Ipv6Request {
            count: u32::from(subnet.ipv6.as_ref().is_some_and(|v| v.assign_on_creation)),
            ..Default::default()
        });
        ipv6.check_combination()?;
        if ipv6.slots() > max_slots_any_type() {
            return Err(super::ipv6::ipv6_limit(
                "(new)",
                ipv6.slots(),
                max_slots_any_type(),
            ));
        }
        // IPv6 is taken first and stored only once the IPv4 addresses are taken too
        let taken_ipv6 = if ipv6.is_empty() {
            None
        } else {
            Some(self.take_ipv6(&req.subnet_id, &ipv6)?)
        };
        let primary: Vec<Ipv4Addr> = req.primary_ip.into_iter().collect();
        let mut explicit = primary.clone();
        explicit.extend(&req.secondary_ips);
        let (mut ips, prefixes) = self.take_addresses(
            &req.subnet_id,
            &explicit,
            req.secondary_count + u32::from(primary.is_empty()),
            &req.prefixes,
            req.prefix_count,
        )?;
        // the primary is the explicit one if given, else the first random one
        let primary_ip = if primary.is_empty() {
            ips.remove(explicit.len())
        } else {
            ips.remove(0)
        };
        let (ipv6_addresses, ipv6_prefixes) = match taken_ipv6 {
            Some((space, addrs, prefixes)) => {
                self.store_ipv6(&req.subnet_id, space);
                (addrs, prefixes)
            }
            None => (Vec::new(), Vec::new()),
        };
        let id = self.new_id("eni");
        let mac = self.new_mac();
        let mut tags = Tags::default();
        for (k, v) in &req.tags {
            tags.set(k, v);
        }
        let eni = super::Eni {
            id: id.clone(),
            subnet_id: req.subnet_id.clone(),
            vpc_id,
            az,
            mac,
            description: req.description,
            primary_ip,
            secondary_ips: ips,
            prefixes,
            ipv6_addresses,
            ipv6_prefixes,
            groups,
            tags,
            source_dest_check: true,
            attachment: None,
        };
        let secondary = eni.secondary_cidrs();
        let ipv6 = eni.ipv6_cidrs();
        self.enis.insert(id.clone(), eni);
        if !secondary.is_empty() || !ipv6.is_empty() {
            self.push_event(FabricEvent::AddressesAssigned(AddressesChanged {
                eni_id: id.clone(),
                instance_id: None,
                cidrs: secondary,
                ipv6,
            }));
        }
        Ok(id)
    }

    /// EC2 AttachNetworkInterface at `now`; the attachment completes at `complete_at`
    /// (call [`Cloud::complete_attachment`] then). Returns the attachment ID.
    ///
    /// Errors: `InvalidNetworkInterfaceID.NotFound`, `InvalidInstanceID.NotFound`,
    /// `IncorrectInstanceState` (not running), `InvalidNetworkInterface.InUse` (already attached),
    /// `InvalidParameterValue` (other AZ or VPC, device index in use, no such network card),
    /// `AttachmentLimitExceeded` (the card's ENI maximum), `PrivateIpAddressLimitExceeded`
    /// (the ENI holds more addresses than the instance type allows per ENI).
    pub fn attach_eni(
        &mut self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
        network_card: Option<u32>,
        now: Instant,
        complete_at: Instant,
    ) -> Result<String, Ec2Error> {
        let eni = self
            .enis
            .get(eni_id)
            .ok_or_else(|| Ec2Error::eni_not_found(eni_id))?;
        let inst = self
            .instances
            .get(instance_id)
            .ok_or_else(|| Ec2Error::instance_not_found(instance_id))?;
        if inst.state != InstanceState::Running {
            return Err(Ec2Error::new(
                "IncorrectInstanceState",
                format!("The instance '{instance_id}' is not in the 'running' state"),
            ));
        }
        if eni.attachment.is_some() {
            return Err(Ec2Error::eni_in_use(eni_id));
        }
        if eni.az != inst.az {
            return Err(Ec2Error::invalid_value(format!(
                "The network interface {eni_id} (in {}) and the instance {instance_id} (in {}) must be in the same availability zone",
                eni.az, inst.az
            )));
        }
        if eni.vpc_id != inst.vpc_id {
            return Err(Ec2Error::invalid_value(format!(
                "The network interface {eni_id} and the instance {instance_id} must be in the same VPC"
            )));
        }
        let card = network_card.unwrap_or(inst.limits.default_network_card);
        let card_max = inst.limits.card_max_enis(card).ok_or_else(|| {
            Ec2Error::invalid_value(format!(
                "Value ({card}) for parameter networkCardIndex is invalid. Instance type {} has {} network card(s)",
                inst.limits.instance_type,
                inst.limits.network_cards.len()
            ))
        })?;
        let attached: Vec<&Attachment> = self
            .enis
            .values()
            .filter_map(|e| e.attachment.as_ref())
            .filter(|a| a.instance_id == instance_id)
            .collect();
        if attached
            .iter()
            .any(|a| a.network_card == card && a.device_index == device_index)
        {
            return Err(Ec2Error::invalid_value(format!(
                "Instance '{instance_id}' already has an interface attached at device index '{device_index}'."
            )));
        }
        if attached.iter().filter(|a| a.network_card == card).count() as u32 >= card_max {
            return Err(Ec2Error::new(
                "AttachmentLimitExceeded",
                format!(
                    "Interface count {} exceeds the limit for {}",
                    attached.iter().filter(|a| a.network_card == card).count() + 1,
                    inst.limits.instance_type
                ),
            ));
        }
        if eni.slots() > inst.limits.ipv4_per_eni {
            return Err(Ec2Error::ip_limit());
        }
        if eni.ipv6_slots() > inst.limits.ipv4_per_eni {
            return Err(super::ipv6::ipv6_limit(
                eni_id,
                eni.ipv6_slots(),
                inst.limits.ipv4_per_eni,
            ));
        }
        if !eni.ipv6_prefixes.is_empty() && !inst.limits.supports_prefix_delegation() {
            return Err(Ec2Error::invalid_value(format!(
                "Instance type {} is not built on Nitro and does not support the IPv6 prefixes of {eni_id}",
                inst.limits.instance_type
            )));
        }
        if !eni.prefixes.is_empty() && !inst.limits.supports_prefix_delegation() {
            return Err(Ec2Error::invalid_value(format!(
                "Instance type {} does not support IPv4 prefixes on network interfaces",
                inst.limits.instance_type
            )));
        }
        let att_id = self.new_id("eni-attach");
        let eni = self.enis.get_mut(eni_id).expect("checked");
        eni.attachment = Some(Attachment {
            id: att_id.clone(),
            instance_id: instance_id.to_string(),
            device_index,
            network_card: card,
            delete_on_termination: false,
            attach_time: now,
            complete_at,
            reported: false,
        });
        Ok(att_id)
    }

    /// Mark attachment `attachment_id` of `eni_id` complete and queue `EniAttached` (once).
    /// Returns false when the attachment no longer exists (detached meanwhile).
    pub fn complete_attachment(&mut self, eni_id: &str, attachment_id: &str) -> bool {
        let Some(eni) = self.enis.get_mut(eni_id) else {
            return false;
        };
        let Some(att) = eni.attachment.as_mut().filter(|a| a.id == attachment_id) else {
            return false;
        };
        if att.reported {
            return true;
        }
        att.reported = true;
        let ev = EniAttached {
            eni_id: eni.id.clone(),
            mac: eni.mac.clone(),
            instance_id: att.instance_id.clone(),
            device_index: att.device_index,
            network_card: att.network_card,
            subnet_id: eni.subnet_id.clone(),
            subnet_cidr: self.subnets[&eni.subnet_id].cidr,
            gateway: self.subnets[&eni.subnet_id].gateway(),
            primary_ip: eni.primary_ip,
            secondary: eni.secondary_cidrs(),
            ipv6: eni.ipv6_cidrs(),
        };
        self.push_event(FabricEvent::EniAttached(ev));
        true
    }

    /// Remove the attachment of `eni_id` (any device index) and queue `EniDetached`.
    pub(crate) fn force_detach(&mut self, eni_id: &str) -> Result<(), Ec2Error> {
        let eni = self.eni_mut(eni_id)?;
        let Some(att) = eni.attachment.take() else {
            return Err(Ec2Error::new(
                "InvalidAttachmentID.NotFound",
                format!("The network interface '{eni_id}' is not attached"),
            ));
        };
        let mac = eni.mac.clone();
        if att.reported {
            self.push_event(FabricEvent::EniDetached(EniDetached {
                eni_id: eni_id.to_string(),
                mac,
                instance_id: att.instance_id,
                device_index: att.device_index,
                network_card: att.network_card,
            }));
        }
        Ok(())
    }

    /// EC2 DetachNetworkInterface by attachment ID. Errors: `InvalidAttachmentID.NotFound`,
    /// `OperationNotPermitted` for the primary ENI (device index 0 on card 0).
    pub fn detach_eni(&mut self, attachment_id: &str, _force: bool) -> Result<(), Ec2Error> {
        let eni_id = self
            .enis
            .values()
            .find(|e| e.attachment.as_ref().is_some_and(|a| a.id == attachment_id))
            .map(|e| e.id.clone())
            .ok_or_else(|| {
                Ec2Error::new(
                    "InvalidAttachmentID.NotFound",
                    format!("The attachment ID '{attachment_id}' does not exist"),
                )
            })?;
        let att = self.enis[&eni_id].attachment.as_ref().expect("found");
        if att.device_index == 0 && att.network_card == 0 {
            return Err(Ec2Error::new(
                "OperationNotPermitted",
                format!("The network interface at device index 0 cannot be detached (attachment {attachment_id})"),
            ));
        }
        self.force_detach(&eni_id)
    }

    /// EC2 DeleteNetworkInterface. Errors: `InvalidNetworkInterfaceID.NotFound`,
    /// `InvalidNetworkInterface.InUse` while attached.
    pub fn delete_eni(&mut self, eni_id: &str) -> Result<(), Ec2Error> {
        let eni = self
            .enis
            .get(eni_id)
            .ok_or_else(|| Ec2Error::eni_not_found(eni_id))?;
        if eni.attachment.is_some() {
            return Err(Ec2Error::eni_in_use(eni_id));
        }
        self.remove_eni(eni_id);
        Ok(())
    }

    /// Drop an ENI and release its addresses (no checks).
    pub(crate) fn remove_eni(&mut self, eni_id: &str) {
        let Some(eni) = self.enis.remove(eni_id) else {
            return;
        };
        if let Some(s) = self.subnets.get_mut(&eni.subnet_id) {
            s.release_ip(eni.primary_ip);
            for ip in &eni.secondary_ips {
                s.release_ip(*ip);
            }
            for p in &eni.prefixes {
                s.release_prefix(*p);
            }
        }
        self.release_ipv6(&eni.subnet_id, &eni.ipv6_addresses, &eni.ipv6_prefixes);
        let secondary = eni.secondary_cidrs();
        let ipv6 = eni.ipv6_cidrs();
        if !secondary.is_empty() || !ipv6.is_empty() {
            self.push_event(FabricEvent::AddressesUnassigned(AddressesChanged {
                eni_id: eni.id.clone(),
                instance_id: eni.attachment.map(|a| a.instance_id),
                cidrs: secondary,
                ipv6,
            }));
        }
    }

    /// EC2 ModifyNetworkInterfaceAttribute. Errors: `InvalidNetworkInterfaceID.NotFound`,
    /// `InvalidGroup.NotFound`, `InvalidAttachmentID.NotFound`, `MissingParameter` (no attribute).
    pub fn modify_eni(&mut self, eni_id: &str, req: ModifyEniRequest) -> Result<(), Ec2Error> {
        let eni = self
            .enis
            .get(eni_id)
            .ok_or_else(|| Ec2Error::eni_not_found(eni_id))?;
        let vpc_id = eni.vpc_id.clone();
        let groups = match &req.groups {
            Some(g) if g.is_empty() => return Err(Ec2Error::missing("SecurityGroupId.1")),
            Some(g) => Some(self.resolve_groups(&vpc_id, g)?),
            None => None,
        };
        if req.description.is_none()
            && groups.is_none()
            && req.source_dest_check.is_none()
            && req.delete_on_termination.is_none()
        {
            return Err(Ec2Error::missing(
                "Attachment, Description, SecurityGroupId or SourceDestCheck",
            ));
        }
        let eni = self.eni_mut(eni_id)?;
        if let Some((att_id, dot)) = &req.delete_on_termination {
            match eni.attachment.as_mut() {
                Some(a) if &a.id == att_id => a.delete_on_termination = *dot,
                _ => {
                    return Err(Ec2Error::new(
                        "InvalidAttachmentID.NotFound",
                        format!("The attachment ID '{att_id}' does not exist on {eni_id}"),
                    ))
                }
            }
        }
        if let Some(d) = req.description {
            eni.description = d;
        }
        if let Some(g) = groups {
            eni.groups = g;
        }
        if let Some(s) = req.source_dest_check {
            eni.source_dest_check = s;
        }
        Ok(())
    }
}
