//! IPv6 in the VPC: a VPC's /56, a subnet's /64 inside it, and the IPv6 addresses and /80
//! prefixes ENIs take from their subnet's /64 (AssignIpv6Addresses, UnassignIpv6Addresses and
//! the `Ipv6*` parameters of CreateNetworkInterface).
//!
//! Limits: EC2's `Ipv6AddressesPerInterface` equals the IPv4 addresses per interface for the
//! instance types the limits table holds, so an ENI takes at most `ipv4_per_eni` IPv6 slots
//! (a separate count from its IPv4 slots); each /80 prefix takes one slot, as a /28 does for
//! IPv4, and prefixes need a Nitro instance type. AWS reserves the first four addresses and the
//! last one of a subnet's /64, so the first and last /80 of it are never handed out as prefixes.
//!
//! Error codes: `InvalidInterface.IpAddressLimitExceeded` (more IPv6 slots than the type
//! allows; EC2's code for an interface's address count above its limit),
//! `InvalidIPAddress.InUse` (an explicit address or prefix already taken),
//! `InvalidParameterValue` (the subnet has no IPv6 CIDR block, an address or prefix outside it
//! or not assigned to the ENI, prefixes on a non-Nitro type), `InvalidParameterCombination`,
//! `MissingParameter`, `InsufficientCidrBlocks` (no free /80).

use std::collections::BTreeSet;
use std::net::Ipv6Addr;

use ipnet::Ipv6Net;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::Cloud;
use crate::error::Ec2Error;
use crate::hooks::{AddressesChanged, FabricEvent};

/// The prefix length of a VPC's IPv6 CIDR block (Amazon-provided blocks are /56).
pub const VPC_IPV6_PREFIX_LEN: u8 = 56;
/// The prefix length of a subnet's IPv6 CIDR block.
pub const SUBNET_IPV6_PREFIX_LEN: u8 = 64;
/// The prefix length of an IPv6 prefix assigned to an ENI (IPv6 prefix delegation).
pub const ENI_IPV6_PREFIX_LEN: u8 = 80;

/// Bits of a /64 offset below a /80 block's index.
const BLOCK_SHIFT: u32 = 128 - ENI_IPV6_PREFIX_LEN as u32;

/// The code EC2 answers when an ENI would hold more IPv6 addresses (and prefixes) than its
/// instance type allows.
pub const IPV6_LIMIT_CODE: &str = "InvalidInterface.IpAddressLimitExceeded";
/// The code EC2 answers when an explicit IPv6 address or prefix is already assigned.
pub const IPV6_IN_USE_CODE: &str = "InvalidIPAddress.InUse";

/// A VPC's IPv6 CIDR block association.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VpcIpv6 {
    /// `vpc-cidr-assoc-...`
    pub association_id: String,
    /// A /56.
    pub cidr: Ipv6Net,
}

/// A subnet's IPv6 CIDR block association and the addresses and /80 prefixes taken from it.
#[derive(Debug, Clone)]
pub struct SubnetIpv6 {
    /// `subnet-cidr-assoc-...`
    pub association_id: String,
    /// A /64 inside the VPC's /56.
    pub cidr: Ipv6Net,
    /// EC2 `AssignIpv6AddressOnCreation`: an ENI created in the subnet (the primary ENI of an
    /// instance included) gets one IPv6 address unless the request names its own.
    pub assign_on_creation: bool,
    /// Single addresses in use, as offsets from the network address (the low 64 bits).
    addrs: BTreeSet<u64>,
    /// /80 prefixes in use, by block index inside the /64.
    prefixes: BTreeSet<u16>,
}

impl SubnetIpv6 {
    /// A /64 with nothing taken.
    pub fn new(association_id: String, cidr: Ipv6Net, assign_on_creation: bool) -> Self {
        Self {
            association_id,
            cidr: cidr.trunc(),
            assign_on_creation,
            addrs: BTreeSet::new(),
            prefixes: BTreeSet::new(),
        }
    }

    fn addr(&self, off: u64) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(self.cidr.network()) | u128::from(off))
    }

    fn offset_of(&self, ip: Ipv6Addr) -> Option<u64> {
        // the low 64 bits of an address inside the /64 are its offset
        self.cidr.contains(&ip).then(|| u128::from(ip) as u64)
    }

    fn reserved(off: u64) -> bool {
        off <= 3 || off == u64::MAX
    }

    fn block_of(off: u64) -> u16 {
        (off >> BLOCK_SHIFT) as u16
    }

    fn block_range(block: u16) -> std::ops::RangeInclusive<u64> {
        let first = u64::from(block) << BLOCK_SHIFT;
        first..=first | ((1u64 << BLOCK_SHIFT) - 1)
    }

    fn block_free(&self, block: u16) -> bool {
        block != 0
            && block != u16::MAX
            && !self.prefixes.contains(&block)
            && self.addrs.range(Self::block_range(block)).next().is_none()
    }

    fn prefix(&self, block: u16) -> Ipv6Net {
        let net = self.addr(u64::from(block) << BLOCK_SHIFT);
        Ipv6Net::new(net, ENI_IPV6_PREFIX_LEN).expect("80 <= 128")
    }

    /// Addresses and /80 prefixes in use.
    pub fn used(&self) -> (usize, usize) {
        (self.addrs.len(), self.prefixes.len())
    }

    /// Take one free address chosen by `rng`. Errors: `InsufficientFreeAddressesInSubnet`
    /// when the draws keep hitting taken space (only in a /64 almost all given out as /80s).
    pub fn alloc_addr(&mut self, rng: &mut ChaCha8Rng) -> Result<Ipv6Addr, Ec2Error> {
        for _ in 0..256 {
            let off: u64 = rng.random();
            if !Self::reserved(off)
                && !self.addrs.contains(&off)
                && !self.prefixes.contains(&Self::block_of(off))
            {
                self.addrs.insert(off);
                return Ok(self.addr(off));
            }
        }
        Err(Ec2Error::no_free_addresses())
    }

    /// Take `ip`. Errors: `InvalidParameterValue` when it is outside the /64 or reserved,
    /// `InvalidIPAddress.InUse` when it is assigned (alone or inside an assigned /80).
    pub fn claim_addr(&mut self, ip: Ipv6Addr) -> Result<(), Ec2Error> {
        let off = self.offset_of(ip).ok_or_else(|| {
            Ec2Error::invalid_value(format!(
                "Address {ip} does not fall within the subnet's IPv6 CIDR block {}",
                self.cidr
            ))
        })?;
        if Self::reserved(off) {
            return Err(Ec2Error::invalid_value(format!(
                "Address {ip} is reserved by AWS in the subnet's IPv6 CIDR block {}",
                self.cidr
            )));
        }
        if self.prefixes.contains(&Self::block_of(off)) || !self.addrs.insert(off) {
            return Err(in_use(&ip.to_string()));
        }
        Ok(())
    }

    /// Give `ip` back (no-op when not taken).
    pub fn release_addr(&mut self, ip: Ipv6Addr) {
        if let Some(off) = self.offset_of(ip) {
            self.addrs.remove(&off);
        }
    }

    /// Take one free aligned /80 chosen by `rng`. Errors: `InsufficientCidrBlocks` when no /80
    /// of the /64 is entirely free.
    pub fn alloc_prefix(&mut self, rng: &mut ChaCha8Rng) -> Result<Ipv6Net, Ec2Error> {
        let start: u16 = rng.random();
        for i in 0..=u16::MAX {
            let block = start.wrapping_add(i);
            if self.block_free(block) {
                self.prefixes.insert(block);
                return Ok(self.prefix(block));
            }
        }
        Err(Ec2Error::no_free_cidr_blocks())
    }

    /// Take `prefix`. Errors: `InvalidParameterValue` when it is not an aligned /80 inside the
    /// /64 or holds a reserved address, `InvalidIPAddress.InUse` when any of it is assigned.
    pub fn claim_prefix(&mut self, prefix: Ipv6Net) -> Result<(), Ec2Error> {
        if prefix.prefix_len() != ENI_IPV6_PREFIX_LEN || prefix.trunc() != prefix {
            return Err(Ec2Error::invalid_value(format!(
                "Prefix {prefix} is not an aligned /80 (e.g. 2600:1f18:0:100:1234::/80)"
            )));
        }
        let off = self.offset_of(prefix.network()).ok_or_else(|| {
            Ec2Error::invalid_value(format!(
                "Prefix {prefix} is not within the subnet's IPv6 CIDR block {}",
                self.cidr
            ))
        })?;
        let block = Self::block_of(off);
        if block == 0 || block == u16::MAX {
            return Err(Ec2Error::invalid_value(format!(
                "Prefix {prefix} holds addresses AWS reserves in {}",
                self.cidr
            )));
        }
        if !self.block_free(block) {
            return Err(in_use(&prefix.to_string()));
        }
        self.prefixes.insert(block);
        Ok(())
    }

    /// Give `prefix` back (no-op when not taken).
    pub fn release_prefix(&mut self, prefix: Ipv6Net) {
        if let Some(off) = self.offset_of(prefix.network()) {
            if prefix.prefix_len() == ENI_IPV6_PREFIX_LEN {
                self.prefixes.remove(&Self::block_of(off));
            }
        }
    }
}

fn in_use(what: &str) -> Ec2Error {
    Ec2Error::new(
        IPV6_IN_USE_CODE,
        format!("The IPv6 address or prefix {what} is already assigned; unassign it first or choose another"),
    )
}

/// The error for an ENI that would hold more IPv6 addresses and prefixes than `limit`.
pub fn ipv6_limit(eni_id: &str, want: u32, limit: u32) -> Ec2Error {
    Ec2Error::new(
        IPV6_LIMIT_CODE,
        format!(
            "Interface {eni_id} would hold {want} IPv6 addresses and prefixes; the limit for its instance type is {limit}"
        ),
    )
}

/// The fabric event of an IPv6 change: /128s then /80s, no IPv4.
fn ipv6_event(
    eni_id: &str,
    instance_id: Option<String>,
    addrs: &[Ipv6Addr],
    prefixes: &[Ipv6Net],
) -> AddressesChanged {
    AddressesChanged {
        eni_id: eni_id.to_string(),
        instance_id,
        cidrs: Vec::new(),
        ipv6: addrs
            .iter()
            .map(|a| Ipv6Net::from(*a))
            .chain(prefixes.iter().copied())
            .collect(),
    }
}

/// What an ENI asks of its subnet's /64: explicit addresses, a count of addresses, explicit
/// /80 prefixes, a count of prefixes (AssignIpv6Addresses, CreateNetworkInterface).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ipv6Request {
    /// `Ipv6AddressCount`
    pub count: u32,
    /// `Ipv6Addresses.N`
    pub addresses: Vec<Ipv6Addr>,
    /// `Ipv6PrefixCount`
    pub prefix_count: u32,
    /// `Ipv6Prefix.N`
    pub prefixes: Vec<Ipv6Net>,
}

impl Ipv6Request {
    /// Whether nothing is asked.
    pub fn is_empty(&self) -> bool {
        self.slots() == 0
    }

    /// Slots the request takes: one per address and one per prefix.
    pub fn slots(&self) -> u32 {
        let n = self.addresses.len() + self.prefixes.len();
        self.count
            .saturating_add(self.prefix_count)
            .saturating_add(u32::try_from(n).unwrap_or(u32::MAX))
    }

    fn wants_prefixes(&self) -> bool {
        self.prefix_count > 0 || !self.prefixes.is_empty()
    }

    /// EC2's parameter rules: addresses or prefixes, not both; a count or a list, not both.
    /// Error: `InvalidParameterCombination`.
    pub fn check_combination(&self) -> Result<(), Ec2Error> {
        let wants_addrs = self.count > 0 || !self.addresses.is_empty();
        if wants_addrs && self.wants_prefixes() {
            return Err(Ec2Error::combination(
                "You cannot specify both IPv6 addresses and IPv6 prefixes in one request",
            ));
        }
        if self.count > 0 && !self.addresses.is_empty() {
            return Err(Ec2Error::combination(
                "You cannot specify both Ipv6AddressCount and Ipv6Addresses",
            ));
        }
        if self.prefix_count > 0 && !self.prefixes.is_empty() {
            return Err(Ec2Error::combination(
                "You cannot specify both Ipv6PrefixCount and Ipv6Prefix",
            ));
        }
        Ok(())
    }
}

/// What [`Cloud::take_ipv6`] took: the subnet's new IPv6 state (to store once the rest of the
/// request succeeded), the addresses and the prefixes.
pub(super) type TakenIpv6 = (SubnetIpv6, Vec<Ipv6Addr>, Vec<Ipv6Net>);

impl Cloud {
    /// Associate the /56 `cidr` with `vpc_id` as its IPv6 CIDR block. Returns the association
    /// ID. Errors: `InvalidVpcID.NotFound`; `InvalidParameterValue` when `cidr` is not a /56,
    /// the VPC has one already (the emulator keeps one per VPC) or another VPC uses it.
    pub fn associate_vpc_ipv6(&mut self, vpc_id: &str, cidr: Ipv6Net) -> Result<String, Ec2Error> {
        let vpc = self
            .vpcs
            .get(vpc_id)
            .ok_or_else(|| Ec2Error::vpc_not_found(vpc_id))?;
        if let Some(have) = &vpc.ipv6 {
            return Err(Ec2Error::invalid_value(format!(
                "VPC {vpc_id} already has the IPv6 CIDR block {}; the emulator keeps one per VPC",
                have.cidr
            )));
        }
        let cidr = self.check_vpc_ipv6(cidr)?;
        let association_id = self.new_id("vpc-cidr-assoc");
        let vpc = self.vpcs.get_mut(vpc_id).expect("checked");
        vpc.ipv6 = Some(VpcIpv6 {
            association_id: association_id.clone(),
            cidr,
        });
        Ok(association_id)
    }

    /// Whether `cidr` can be a VPC's IPv6 block: a /56 no other VPC uses. Returns it
    /// truncated. Errors: `InvalidParameterValue`.
    pub fn check_vpc_ipv6(&self, cidr: Ipv6Net) -> Result<Ipv6Net, Ec2Error> {
        if cidr.prefix_len() != VPC_IPV6_PREFIX_LEN {
            return Err(Ec2Error::invalid(
                "Ipv6CidrBlock",
                &cidr.to_string(),
                "A VPC's IPv6 CIDR block must be a /56, e.g. 2600:1f18:1234:ab00::/56.",
            ));
        }
        let cidr = cidr.trunc();
        if let Some(other) = self.vpcs.values().find(|v| {
            v.ipv6
                .as_ref()
                .is_some_and(|a| a.cidr.contains(&cidr) || cidr.contains(&a.cidr))
        }) {
            return Err(Ec2Error::invalid_value(format!(
                "The IPv6 CIDR block {cidr} is already associated with {}; choose another /56",
                other.id
            )));
        }
        Ok(cidr)
    }

    /// Associate the /64 `cidr` with `subnet_id` as its IPv6 CIDR block; `assign_on_creation`
    /// is EC2's `AssignIpv6AddressOnCreation`. Returns the association ID.
    /// Errors: `InvalidSubnetID.NotFound`; `InvalidSubnet.Range` when `cidr` is not a /64 inside
    /// the VPC's IPv6 /56 (or the VPC has none); `InvalidSubnet.Conflict` when another subnet
    /// of the VPC has it; `InvalidParameterValue` when the subnet has an IPv6 block already.
    pub fn associate_subnet_ipv6(
        &mut self,
        subnet_id: &str,
        cidr: Ipv6Net,
        assign_on_creation: bool,
    ) -> Result<String, Ec2Error> {
        let subnet = self
            .subnets
            .get(subnet_id)
            .ok_or_else(|| Ec2Error::subnet_not_found(subnet_id))?;
        let vpc_id = subnet.vpc_id.clone();
        if let Some(have) = &subnet.ipv6 {
            return Err(Ec2Error::invalid_value(format!(
                "Subnet {subnet_id} already has the IPv6 CIDR block {}",
                have.cidr
            )));
        }
        let cidr = self.check_subnet_ipv6(&vpc_id, cidr)?;
        let association_id = self.new_id("subnet-cidr-assoc");
        let subnet = self.subnets.get_mut(subnet_id).expect("checked");
        subnet.ipv6 = Some(SubnetIpv6::new(
            association_id.clone(),
            cidr,
            assign_on_creation,
        ));
        Ok(association_id)
    }

    /// Whether `cidr` can be the IPv6 block of a subnet of `vpc_id`: a /64 inside the VPC's
    /// /56 that no other subnet of the VPC has. Returns it truncated.
    /// Errors: `InvalidSubnet.Range`, `InvalidSubnet.Conflict`.
    pub fn check_subnet_ipv6(&self, vpc_id: &str, cidr: Ipv6Net) -> Result<Ipv6Net, Ec2Error> {
        let cidr = cidr.trunc();
        let vpc_cidr = self.vpcs.get(vpc_id).and_then(|v| v.ipv6.as_ref());
        let Some(vpc_cidr) = vpc_cidr.map(|a| a.cidr) else {
            return Err(Ec2Error::new(
                "InvalidSubnet.Range",
                format!("The IPv6 CIDR '{cidr}' is invalid: VPC {vpc_id} has no IPv6 CIDR block; give the VPC a /56 first"),
            ));
        };
        if cidr.prefix_len() != SUBNET_IPV6_PREFIX_LEN || !vpc_cidr.contains(&cidr) {
            return Err(Ec2Error::new(
                "InvalidSubnet.Range",
                format!("The IPv6 CIDR '{cidr}' is invalid: it must be a /64 inside the VPC's IPv6 CIDR block {vpc_cidr}"),
            ));
        }
        if let Some(other) = self
            .subnets
            .values()
            .find(|s| s.vpc_id == vpc_id && s.ipv6.as_ref().is_some_and(|a| a.cidr == cidr))
        {
            return Err(Ec2Error::new(
                "InvalidSubnet.Conflict",
                format!(
                    "The IPv6 CIDR '{cidr}' conflicts with subnet {}; choose another /64",
                    other.id
                ),
            ));
        }
        Ok(cidr)
    }

    /// Take what `req` asks from the IPv6 block of `subnet_id`, all or nothing, without storing
    /// it: the caller stores the returned state with [`Cloud::store_ipv6`].
    /// Errors: `InvalidParameterValue` (the subnet has no IPv6 CIDR block, an address outside
    /// it), `InvalidIPAddress.InUse`, `InsufficientCidrBlocks`.
    pub(super) fn take_ipv6(
        &mut self,
        subnet_id: &str,
        req: &Ipv6Request,
    ) -> Result<TakenIpv6, Ec2Error> {
        let subnet = self
            .subnets
            .get(subnet_id)
            .ok_or_else(|| Ec2Error::subnet_not_found(subnet_id))?;
        let mut space = subnet.ipv6.clone().ok_or_else(|| {
            Ec2Error::invalid_value(format!(
                "Subnet {subnet_id} has no IPv6 CIDR block; associate a /64 with it to assign IPv6 addresses or prefixes"
            ))
        })?;
        let mut addrs = Vec::new();
        let mut prefixes = Vec::new();
        for ip in &req.addresses {
            space.claim_addr(*ip)?;
            addrs.push(*ip);
        }
        for p in &req.prefixes {
            space.claim_prefix(*p)?;
            prefixes.push(*p);
        }
        for _ in 0..req.prefix_count {
            prefixes.push(space.alloc_prefix(self.rng())?);
        }
        for _ in 0..req.count {
            addrs.push(space.alloc_addr(self.rng())?);
        }
        Ok((space, addrs, prefixes))
    }

    /// Store a subnet's IPv6 state taken with [`Cloud::take_ipv6`].
    pub(super) fn store_ipv6(&mut self, subnet_id: &str, space: SubnetIpv6) {
        if let Some(s) = self.subnets.get_mut(subnet_id) {
            s.ipv6 = Some(space);
        }
    }

    /// Check `req` against the ENI's IPv6 limit and its type's prefix support.
    /// Errors: `InvalidParameterValue` (prefixes on a non-Nitro type),
    /// `InvalidInterface.IpAddressLimitExceeded`.
    pub(super) fn check_ipv6_limit(
        &self,
        eni: &super::Eni,
        req: &Ipv6Request,
    ) -> Result<(), Ec2Error> {
        let (limit, prefixes_ok) = self.slot_limit(eni);
        if req.wants_prefixes() && !prefixes_ok {
            return Err(Ec2Error::invalid_value(format!(
                "The instance type of the instance {} is attached to is not built on Nitro and does not support IPv6 prefixes; assign IPv6 addresses instead",
                eni.id
            )));
        }
        let want = eni.ipv6_slots().saturating_add(req.slots());
        if want > limit {
            return Err(ipv6_limit(&eni.id, want, limit));
        }
        Ok(())
    }

    /// EC2 AssignIpv6Addresses: `req` from the ENI's subnet's /64. Returns the addresses and
    /// prefixes assigned by this call.
    ///
    /// Errors: `InvalidNetworkInterfaceID.NotFound`; `MissingParameter` (nothing asked);
    /// `InvalidParameterCombination`; `InvalidParameterValue` (no IPv6 CIDR block on the
    /// subnet, an address outside it, prefixes on a non-Nitro type);
    /// `InvalidInterface.IpAddressLimitExceeded`; `InvalidIPAddress.InUse`;
    /// `InsufficientCidrBlocks`.
    pub fn assign_ipv6(
        &mut self,
        eni_id: &str,
        req: Ipv6Request,
    ) -> Result<(Vec<Ipv6Addr>, Vec<Ipv6Net>), Ec2Error> {
        let eni = self
            .enis
            .get(eni_id)
            .ok_or_else(|| Ec2Error::eni_not_found(eni_id))?;
        if req.is_empty() {
            return Err(Ec2Error::missing(
                "Ipv6AddressCount, Ipv6Addresses, Ipv6PrefixCount or Ipv6Prefix",
            ));
        }
        req.check_combination()?;
        self.check_ipv6_limit(eni, &req)?;
        let subnet_id = eni.subnet_id.clone();
        let (space, addrs, prefixes) = self.take_ipv6(&subnet_id, &req)?;
        self.store_ipv6(&subnet_id, space);
        let eni = self.eni_mut(eni_id)?;
        eni.ipv6_addresses.extend(&addrs);
        eni.ipv6_prefixes.extend(&prefixes);
        let instance_id = eni.attachment.as_ref().map(|a| a.instance_id.clone());
        self.push_event(FabricEvent::AddressesAssigned(ipv6_event(
            eni_id,
            instance_id,
            &addrs,
            &prefixes,
        )));
        Ok((addrs, prefixes))
    }

    /// EC2 UnassignIpv6Addresses (all or nothing; a repeated entry counts once). Returns the
    /// addresses and prefixes unassigned. Errors: `InvalidNetworkInterfaceID.NotFound`;
    /// `MissingParameter` (nothing given); `InvalidParameterValue` when an address or prefix
    /// is not assigned to this ENI.
    pub fn unassign_ipv6(
        &mut self,
        eni_id: &str,
        addrs: &[Ipv6Addr],
        prefixes: &[Ipv6Net],
    ) -> Result<(Vec<Ipv6Addr>, Vec<Ipv6Net>), Ec2Error> {
        let eni = self
            .enis
            .get(eni_id)
            .ok_or_else(|| Ec2Error::eni_not_found(eni_id))?;
        if addrs.is_empty() && prefixes.is_empty() {
            return Err(Ec2Error::missing("Ipv6Addresses or Ipv6Prefix"));
        }
        if let Some(ip) = addrs.iter().find(|ip| !eni.ipv6_addresses.contains(ip)) {
            return Err(Ec2Error::invalid_value(format!(
                "The IPv6 address {ip} is not assigned to interface {eni_id}"
            )));
        }
        if let Some(p) = prefixes.iter().find(|p| !eni.ipv6_prefixes.contains(p)) {
            return Err(Ec2Error::invalid_value(format!(
                "The IPv6 prefix {p} is not assigned to interface {eni_id}"
            )));
        }
        let subnet_id = eni.subnet_id.clone();
        let mut gone_addrs: Vec<Ipv6Addr> = Vec::new();
        for ip in addrs {
            if !gone_addrs.contains(ip) {
                gone_addrs.push(*ip);
            }
        }
        let mut gone_prefixes: Vec<Ipv6Net> = Vec::new();
        for p in prefixes {
            if !gone_prefixes.contains(p) {
                gone_prefixes.push(*p);
            }
        }
        let eni = self.eni_mut(eni_id)?;
        eni.ipv6_addresses.retain(|ip| !gone_addrs.contains(ip));
        eni.ipv6_prefixes.retain(|p| !gone_prefixes.contains(p));
        let instance_id = eni.attachment.as_ref().map(|a| a.instance_id.clone());
        self.release_ipv6(&subnet_id, &gone_addrs, &gone_prefixes);
        self.push_event(FabricEvent::AddressesUnassigned(ipv6_event(
            eni_id,
            instance_id,
            &gone_addrs,
            &gone_prefixes,
        )));
        Ok((gone_addrs, gone_prefixes))
    }

    /// Give addresses and prefixes back to the IPv6 block of `subnet_id`.
    pub(super) fn release_ipv6(
        &mut self,
        subnet_id: &str,
        addrs: &[Ipv6Addr],
        prefixes: &[Ipv6Net],
    ) {
        let Some(space) = self
            .subnets
            .get_mut(subnet_id)
            .and_then(|s| s.ipv6.as_mut())
        else {
            return;
        };
        for ip in addrs {
            space.release_addr(*ip);
        }
        for p in prefixes {
            space.release_prefix(*p);
        }
    }
}

impl Cloud {
    /// The IPv6 books balance: every subnet's /64 has as many addresses and /80 prefixes taken
    /// as its ENIs hold, every ENI's IPv6 lies in its subnet's /64, no address or prefix is
    /// held twice, and every attached ENI is within its type's IPv6 slots.
    pub fn check_ipv6_books(&self) -> Result<(), String> {
        let mut seen_addrs = BTreeSet::new();
        let mut seen_prefixes = BTreeSet::new();
        for s in self.subnets() {
            let enis: Vec<&super::Eni> = self.enis().filter(|e| e.subnet_id == s.id).collect();
            let held = (
                enis.iter().map(|e| e.ipv6_addresses.len()).sum::<usize>(),
                enis.iter().map(|e| e.ipv6_prefixes.len()).sum::<usize>(),
            );
            let used = s.ipv6.as_ref().map(|v| v.used()).unwrap_or((0, 0));
            if used != held {
                return Err(format!(
                    "subnet {} counts {used:?} IPv6 (addresses, prefixes) used, ENIs hold {held:?}",
                    s.id
                ));
            }
            for e in enis {
                let inside = |ip: &Ipv6Addr| s.ipv6.as_ref().is_some_and(|v| v.cidr.contains(ip));
                for ip in &e.ipv6_addresses {
                    if !inside(ip) || !seen_addrs.insert(*ip) {
                        return Err(format!("{} holds {ip} outside its /64 or twice", e.id));
                    }
                }
                for p in &e.ipv6_prefixes {
                    if !inside(&p.network()) || !seen_prefixes.insert(*p) {
                        return Err(format!("{} holds {p} outside its /64 or twice", e.id));
                    }
                }
            }
        }
        for e in self.enis() {
            let Some(i) = e
                .attachment
                .as_ref()
                .and_then(|a| self.instance(&a.instance_id))
            else {
                continue;
            };
            if e.ipv6_slots() > i.limits.ipv4_per_eni {
                return Err(format!("{} holds {} IPv6 slots", e.id, e.ipv6_slots()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn space() -> SubnetIpv6 {
        SubnetIpv6::new(
            "subnet-cidr-assoc-1".into(),
            "2600:1f18:0:100::/64".parse().unwrap(),
            false,
        )
    }

    #[test]
    fn addresses_and_prefixes_never_overlap() {
        let mut s = space();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let p = s.alloc_prefix(&mut rng).unwrap();
        assert_eq!(p.prefix_len(), 80);
        assert!(s.cidr.contains(&p));
        let inside = Ipv6Addr::from(u128::from(p.network()) + 7);
        assert_eq!(s.claim_addr(inside).unwrap_err().code, IPV6_IN_USE_CODE);
        assert_eq!(s.claim_prefix(p).unwrap_err().code, IPV6_IN_USE_CODE);
        let a = s.alloc_addr(&mut rng).unwrap();
        assert!(!p.contains(&a) && s.cidr.contains(&a));
        assert_eq!(s.claim_addr(a).unwrap_err().code, IPV6_IN_USE_CODE);
        s.release_prefix(p);
        s.claim_addr(inside).unwrap();
        assert_eq!(s.claim_prefix(p).unwrap_err().code, IPV6_IN_USE_CODE);
        assert_eq!(s.used(), (2, 0));
    }

    #[test]
    fn reserved_and_foreign_space_is_refused() {
        let mut s = space();
        for bad in [
            "2600:1f18:0:100::1",
            "2600:1f18:0:100:ffff:ffff:ffff:ffff",
            "2600:1f18:0:101::9",
        ] {
            let err = s.claim_addr(bad.parse().unwrap()).unwrap_err();
            assert_eq!(err.code, "InvalidParameterValue", "{bad}");
        }
        for bad in [
            "2600:1f18:0:100::/80",
            "2600:1f18:0:100:1::1/80",
            "2600:1f18:0:100:1::/96",
        ] {
            let err = s.claim_prefix(bad.parse().unwrap()).unwrap_err();
            assert_eq!(err.code, "InvalidParameterValue", "{bad}");
        }
        s.claim_prefix("2600:1f18:0:100:1::/80".parse().unwrap())
            .unwrap();
    }

    #[test]
    fn combination_rules() {
        let both = Ipv6Request {
            count: 1,
            prefix_count: 1,
            ..Default::default()
        };
        assert_eq!(
            both.check_combination().unwrap_err().code,
            "InvalidParameterCombination"
        );
        let count_and_list = Ipv6Request {
            count: 1,
            addresses: vec!["2600::5".parse().unwrap()],
            ..Default::default()
        };
        assert!(count_and_list.check_combination().is_err());
        assert_eq!(count_and_list.slots(), 2);
        assert!(Ipv6Request::default().is_empty());
    }
}
