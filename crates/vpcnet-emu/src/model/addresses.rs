//! Secondary IPv4 addresses and /28 prefixes of ENIs: assign and unassign, with EC2's limits
//! (IPv4 slots per ENI; each /28 takes one slot).

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::Cloud;
use crate::error::Ec2Error;
use crate::hooks::{AddressesChanged, FabricEvent};

/// Input of AssignPrivateIpAddresses: exactly one of count, addresses, prefix count, prefixes.
#[derive(Debug, Clone, Default)]
pub struct AssignRequest {
    pub count: u32,
    pub ips: Vec<Ipv4Addr>,
    pub prefix_count: u32,
    pub prefixes: Vec<Ipv4Net>,
    /// Move addresses from another ENI of the subnet (EC2 `AllowReassignment`).
    pub allow_reassignment: bool,
}

impl Cloud {
    /// EC2 AssignPrivateIpAddresses. Returns the addresses and prefixes assigned.
    ///
    /// Errors: `InvalidNetworkInterfaceID.NotFound`; `MissingParameter` (nothing asked);
    /// `InvalidParameterCombination` (addresses and prefixes together);
    /// `PrivateIpAddressLimitExceeded` (slots above the attached instance type's IPv4 per ENI);
    /// `InsufficientFreeAddressesInSubnet`; `InsufficientCidrBlocks` (no aligned free /28);
    /// `PrivateIpAddressInUse` (explicit address taken, without AllowReassignment);
    /// `InvalidParameterValue` (address outside the subnet, prefixes on a non-Nitro type).
    pub fn assign(
        &mut self,
        eni_id: &str,
        req: AssignRequest,
    ) -> Result<(Vec<Ipv4Addr>, Vec<Ipv4Net>), Ec2Error> {
        let eni = self
            .enis
            .get(eni_id)
            .ok_or_else(|| Ec2Error::eni_not_found(eni_id))?;
        let wants_ips = req.count > 0 || !req.ips.is_empty();
        let wants_prefixes = req.prefix_count > 0 || !req.prefixes.is_empty();
        if !wants_ips && !wants_prefixes {
            return Err(Ec2Error::missing(
                "SecondaryPrivateIpAddressCount, PrivateIpAddress, Ipv4PrefixCount or Ipv4Prefix",
            ));
        }
        if wants_ips && wants_prefixes {
            return Err(Ec2Error::combination(
                "You cannot specify both IPv4 prefixes and private IPv4 addresses in one request",
            ));
        }
        if req.count > 0 && !req.ips.is_empty() {
            return Err(Ec2Error::combination(
                "You cannot specify both SecondaryPrivateIpAddressCount and PrivateIpAddress",
            ));
        }
        if req.prefix_count > 0 && !req.prefixes.is_empty() {
            return Err(Ec2Error::combination(
                "You cannot specify both Ipv4PrefixCount and Ipv4Prefix",
            ));
        }
        let (limit, pd) = self.slot_limit(eni);
        if wants_prefixes && !pd {
            return Err(Ec2Error::invalid_value(format!(
                "The instance type of the instance {eni_id} is attached to does not support IPv4 prefixes"
            )));
        }
        let new = req.count + req.ips.len() as u32 + req.prefix_count + req.prefixes.len() as u32;
        if eni.slots() + new > limit {
            return Err(Ec2Error::ip_limit());
        }
        let subnet_id = eni.subnet_id.clone();
        let instance_id = eni.attachment.as_ref().map(|a| a.instance_id.clone());
        // reassignment: free explicit addresses held as secondaries by other ENIs of the subnet
        if req.allow_reassignment {
            for ip in &req.ips {
                let holder = self
                    .enis
                    .values()
                    .find(|e| {
                        e.id != eni_id && e.subnet_id == subnet_id && e.secondary_ips.contains(ip)
                    })
                    .map(|e| e.id.clone());
                if let Some(h) = holder {
                    self.unassign(&h, &[*ip], &[])?;
                }
            }
        }
        let (ips, prefixes) = self.take_addresses(
            &subnet_id,
            &req.ips,
            req.count,
            &req.prefixes,
            req.prefix_count,
        )?;
        let eni = self.eni_mut(eni_id)?;
        eni.secondary_ips.extend(&ips);
        eni.prefixes.extend(&prefixes);
        let cidrs = ips
            .iter()
            .map(|ip| Ipv4Net::new(*ip, 32).expect("32"))
            .chain(prefixes.iter().copied())
            .collect();
        self.push_event(FabricEvent::AddressesAssigned(AddressesChanged {
            eni_id: eni_id.to_string(),
            instance_id,
            cidrs,
            ipv6: Vec::new(),
        }));
        Ok((ips, prefixes))
    }

    /// EC2 UnassignPrivateIpAddresses (all-or-nothing). Errors:
    /// `InvalidNetworkInterfaceID.NotFound`; `MissingParameter` (nothing given);
    /// `InvalidParameterValue` when an address is the primary or not a secondary of this ENI, or
    /// a prefix is not assigned to it.
    pub fn unassign(
        &mut self,
        eni_id: &str,
        ips: &[Ipv4Addr],
        prefixes: &[Ipv4Net],
    ) -> Result<(), Ec2Error> {
        let eni = self
            .enis
            .get(eni_id)
            .ok_or_else(|| Ec2Error::eni_not_found(eni_id))?;
        if ips.is_empty() && prefixes.is_empty() {
            return Err(Ec2Error::missing("PrivateIpAddress or Ipv4Prefix"));
        }
        for ip in ips {
            if *ip == eni.primary_ip {
                return Err(Ec2Error::invalid_value(format!(
                    "The primary private IP address {ip} of {eni_id} cannot be unassigned"
                )));
            }
            if !eni.secondary_ips.contains(ip) {
                return Err(Ec2Error::invalid_value(format!(
                    "Some of the specified addresses are not assigned to interface {eni_id}: {ip}"
                )));
            }
        }
        for p in prefixes {
            if !eni.prefixes.contains(p) {
                return Err(Ec2Error::invalid_value(format!(
                    "Some of the specified prefixes are not assigned to interface {eni_id}: {p}"
                )));
            }
        }
        let subnet_id = eni.subnet_id.clone();
        let instance_id = eni.attachment.as_ref().map(|a| a.instance_id.clone());
        let eni = self.eni_mut(eni_id)?;
        eni.secondary_ips.retain(|ip| !ips.contains(ip));
        eni.prefixes.retain(|p| !prefixes.contains(p));
        let subnet = self
            .subnets
            .get_mut(&subnet_id)
            .expect("ENI's subnet exists");
        let mut cidrs = Vec::new();
        let mut seen_ips = Vec::new();
        for ip in ips {
            if !seen_ips.contains(ip) {
                seen_ips.push(*ip);
                subnet.release_ip(*ip);
                cidrs.push(Ipv4Net::new(*ip, 32).expect("32"));
            }
        }
        for p in prefixes {
            if !cidrs.contains(p) {
                subnet.release_prefix(*p);
                cidrs.push(*p);
            }
        }
        self.push_event(FabricEvent::AddressesUnassigned(AddressesChanged {
            eni_id: eni_id.to_string(),
            instance_id,
            cidrs,
            ipv6: Vec::new(),
        }));
        Ok(())
    }
}
