//! A subnet and its address allocator: AWS reserves 5 addresses per subnet (network, +1 router,
//! +2 DNS, +3 future use, broadcast); /28 prefixes are aligned and carved from free space, so
//! a fragmented subnet can have free addresses but no free /28.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::Tags;
use crate::error::Ec2Error;

/// Addresses a subnet holds back (AWS: network, router, DNS, reserved, broadcast).
pub const RESERVED_PER_SUBNET: u32 = 5;

#[derive(Debug, Clone)]
pub struct Subnet {
    pub id: String,
    pub vpc_id: String,
    pub cidr: Ipv4Net,
    pub az: String,
    pub az_id: String,
    pub tags: Tags,
    /// The IPv6 CIDR block (a /64) and what is taken from it, if one is associated.
    pub ipv6: Option<super::SubnetIpv6>,
    /// Offsets from the network address that are in use (primary/secondary IPs, prefixes).
    used: BTreeSet<u32>,
    /// Offsets taken by [`Subnet::fragment`] (a subset of `used`).
    fragments: BTreeSet<u32>,
}

impl Subnet {
    pub fn new(id: String, vpc_id: String, cidr: Ipv4Net, az: String, az_id: String) -> Self {
        Self {
            id,
            vpc_id,
            cidr: cidr.trunc(),
            az,
            az_id,
            tags: Tags::default(),
            ipv6: None,
            used: BTreeSet::new(),
            fragments: BTreeSet::new(),
        }
    }

    fn size(&self) -> u32 {
        1u32 << (32 - u32::from(self.cidr.prefix_len()))
    }

    fn base(&self) -> u32 {
        u32::from(self.cidr.network())
    }

    fn reserved(&self, off: u32) -> bool {
        off <= 3 || off == self.size() - 1
    }

    /// EC2 `AvailableIpAddressCount`: addresses neither reserved nor in use (a /28 prefix uses 16).
    pub fn available(&self) -> u32 {
        self.size()
            .saturating_sub(RESERVED_PER_SUBNET + self.used.len() as u32)
    }

    /// The VPC router for this subnet: network address + 1.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base() + 1)
    }

    fn offset_of(&self, ip: Ipv4Addr) -> Option<u32> {
        self.cidr.contains(&ip).then(|| u32::from(ip) - self.base())
    }

    /// Take one free address chosen by `rng` (reproducible for a seed).
    /// Errors: `InsufficientFreeAddressesInSubnet` when none is free.
    pub fn alloc_ip(&mut self, rng: &mut ChaCha8Rng) -> Result<Ipv4Addr, Ec2Error> {
        if self.available() == 0 {
            return Err(Ec2Error::no_free_addresses());
        }
        let size = self.size();
        let start = rng.random_range(0..size);
        for i in 0..size {
            let off = (start + i) % size;
            if !self.reserved(off) && !self.used.contains(&off) {
                self.used.insert(off);
                return Ok(Ipv4Addr::from(self.base() + off));
            }
        }
        Err(Ec2Error::no_free_addresses())
    }

    /// Take the given address. Errors: `InvalidParameterValue` when it is outside the subnet or
    /// reserved, `PrivateIpAddressInUse` when taken.
    pub fn claim_ip(&mut self, ip: Ipv4Addr) -> Result<(), Ec2Error> {
        let off = self.offset_of(ip).ok_or_else(|| {
            Ec2Error::invalid_value(format!(
                "Address {ip} does not fall within the subnet's address range {}",
                self.cidr
            ))
        })?;
        if self.reserved(off) {
            return Err(Ec2Error::invalid_value(format!(
                "Address {ip} is reserved by AWS in subnet {}",
                self.cidr
            )));
        }
        if !self.used.insert(off) {
            return Err(Ec2Error::new(
                "PrivateIpAddressInUse",
                format!("The specified private IP address {ip} is already assigned"),
            ));
        }
        Ok(())
    }

    pub fn release_ip(&mut self, ip: Ipv4Addr) {
        if let Some(off) = self.offset_of(ip) {
            self.used.remove(&off);
        }
    }

    fn block_free(&self, first: u32) -> bool {
        (first..first + 16).all(|o| !self.reserved(o))
            && self.used.range(first..first + 16).next().is_none()
    }

    /// Take one aligned free /28 chosen by `rng`. Errors: `InsufficientCidrBlocks` when no
    /// aligned /28 is entirely free (even if single addresses are).
    pub fn alloc_prefix(&mut self, rng: &mut ChaCha8Rng) -> Result<Ipv4Net, Ec2Error> {
        let blocks = self.size() / 16;
        if blocks == 0 {
            return Err(Ec2Error::no_free_cidr_blocks());
        }
        let start = rng.random_range(0..blocks);
        for i in 0..blocks {
            let first = ((start + i) % blocks) * 16;
            if self.block_free(first) {
                self.used.extend(first..first + 16);
                return Ok(Ipv4Net::new(Ipv4Addr::from(self.base() + first), 28).expect("28 <= 32"));
            }
        }
        Err(Ec2Error::no_free_cidr_blocks())
    }

    /// Take the given /28. Errors: `InvalidParameterValue` when it is not an aligned /28 inside
    /// the subnet, or overlaps reserved or used addresses.
    pub fn claim_prefix(&mut self, prefix: Ipv4Net) -> Result<(), Ec2Error> {
        if prefix.prefix_len() != 28 || prefix.trunc() != prefix {
            return Err(Ec2Error::invalid_value(format!(
                "Prefix {prefix} is not an aligned /28 (e.g. 10.0.0.16/28)"
            )));
        }
        let off = self
            .offset_of(prefix.network())
            .filter(|o| o + 16 <= self.size())
            .ok_or_else(|| {
                Ec2Error::invalid_value(format!(
                    "Prefix {prefix} is not within subnet {}",
                    self.cidr
                ))
            })?;
        if !self.block_free(off) {
            return Err(Ec2Error::invalid_value(format!(
                "Prefix {prefix} overlaps addresses that are reserved or in use in subnet {}",
                self.cidr
            )));
        }
        self.used.extend(off..off + 16);
        Ok(())
    }

    pub fn release_prefix(&mut self, prefix: Ipv4Net) {
        if let Some(off) = self.offset_of(prefix.network()) {
            for o in off..off + 16 {
                self.used.remove(&o);
            }
        }
    }
}

impl Subnet {
    /// Fragments the subnet as years of single-address churn do: takes one address (the
    /// block's middle one) in every aligned /28 that is entirely free, so no prefix can be
    /// carved while most addresses stay free. Returns the addresses taken.
    pub fn fragment(&mut self) -> Vec<Ipv4Addr> {
        let mut taken = Vec::new();
        for first in (0..self.size() / 16).map(|b| b * 16) {
            if self.block_free(first) {
                let off = first + 8;
                self.used.insert(off);
                self.fragments.insert(off);
                taken.push(Ipv4Addr::from(self.base() + off));
            }
        }
        taken
    }

    /// Gives back the addresses [`Subnet::fragment`] took. Returns them.
    pub fn defragment(&mut self) -> Vec<Ipv4Addr> {
        let offs = std::mem::take(&mut self.fragments);
        offs.into_iter()
            .map(|off| {
                self.used.remove(&off);
                Ipv4Addr::from(self.base() + off)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn subnet(cidr: &str) -> Subnet {
        Subnet::new(
            "subnet-1".into(),
            "vpc-1".into(),
            cidr.parse().unwrap(),
            "az".into(),
            "azid".into(),
        )
    }

    #[test]
    fn slash28_serves_eleven() {
        let mut s = subnet("10.0.0.0/28");
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut got = BTreeSet::new();
        for _ in 0..11 {
            let ip = s.alloc_ip(&mut rng).unwrap();
            let last = ip.octets()[3];
            assert!((4..15).contains(&last), "{ip} is reserved");
            assert!(got.insert(ip));
        }
        assert_eq!(s.available(), 0);
        assert_eq!(
            s.alloc_ip(&mut rng).unwrap_err().code,
            "InsufficientFreeAddressesInSubnet"
        );
        assert_eq!(
            s.alloc_prefix(&mut rng).unwrap_err().code,
            "InsufficientCidrBlocks"
        );
    }

    #[test]
    fn fragmented_has_ips_but_no_prefix() {
        let mut s = subnet("10.0.0.0/26");
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        // blocks 0 and 3 hold reserved addresses; occupy one address in blocks 1 and 2
        s.claim_ip("10.0.0.20".parse().unwrap()).unwrap();
        s.claim_ip("10.0.0.40".parse().unwrap()).unwrap();
        assert_eq!(
            s.alloc_prefix(&mut rng).unwrap_err().code,
            "InsufficientCidrBlocks"
        );
        assert!(s.alloc_ip(&mut rng).is_ok());
        s.release_ip("10.0.0.40".parse().unwrap());
        assert_eq!(
            s.alloc_prefix(&mut rng).unwrap(),
            "10.0.0.32/28".parse().unwrap()
        );
        assert_eq!(s.available(), 64 - 5 - 2 - 16);
    }

    #[test]
    fn a_fragmented_subnet_keeps_its_addresses_but_no_prefix() {
        let mut s = subnet("10.0.0.0/24");
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        s.claim_prefix("10.0.0.32/28".parse().unwrap()).unwrap();
        let taken = s.fragment();
        // 16 blocks: the first and last hold reserved addresses, one is a prefix.
        assert_eq!(taken.len(), 13);
        assert!(taken.contains(&"10.0.0.24".parse().unwrap()));
        assert_eq!(s.available(), 256 - 5 - 16 - 13);
        assert_eq!(
            s.alloc_prefix(&mut rng).unwrap_err().code,
            "InsufficientCidrBlocks"
        );
        assert!(s.alloc_ip(&mut rng).is_ok());
        assert_eq!(s.defragment(), taken);
        assert!(s.alloc_prefix(&mut rng).is_ok());
        assert!(s.defragment().is_empty());
    }

    #[test]
    fn claims_are_checked() {
        let mut s = subnet("10.0.0.0/24");
        assert_eq!(
            s.claim_ip("10.0.0.1".parse().unwrap()).unwrap_err().code,
            "InvalidParameterValue"
        );
        assert_eq!(
            s.claim_ip("10.0.1.1".parse().unwrap()).unwrap_err().code,
            "InvalidParameterValue"
        );
        s.claim_ip("10.0.0.9".parse().unwrap()).unwrap();
        assert_eq!(
            s.claim_ip("10.0.0.9".parse().unwrap()).unwrap_err().code,
            "PrivateIpAddressInUse"
        );
        assert!(s.claim_prefix("10.0.0.8/28".parse().unwrap()).is_err());
        assert!(s.claim_prefix("10.0.0.24/28".parse().unwrap()).is_err());
        s.claim_prefix("10.0.0.32/28".parse().unwrap()).unwrap();
        assert!(s.claim_prefix("10.0.0.32/28".parse().unwrap()).is_err());
    }
}
