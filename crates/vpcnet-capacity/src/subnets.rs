//! Subnets as the planner sees them: free addresses, zone and tags in; the fleet's draw on
//! each, its headroom and the /28 fragmentation risk of prefix mode out.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};
use vpcnet_ipam::IPS_PER_PREFIX;

/// Addresses EC2 reserves in every subnet (network, router, DNS, future use, broadcast).
pub const RESERVED_PER_SUBNET: u32 = 5;

/// One subnet of the input (as `DescribeSubnets` gives it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubnetSpec {
    /// `subnet-...`
    pub id: String,
    /// The subnet's IPv4 CIDR block.
    pub cidr: Ipv4Net,
    /// Availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// Free addresses now (`AvailableIpAddressCount`); unset: the whole subnet is free.
    #[serde(default)]
    pub available: Option<u32>,
    /// The subnet's tags (`kubernetes.io/role/cni`, `kubernetes.io/cluster/<name>` matter).
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

impl SubnetSpec {
    /// Addresses EC2 can hand out in an empty subnet.
    pub fn usable(&self) -> u32 {
        let size = 1u64 << (32 - u32::from(self.cidr.prefix_len()));
        (size.saturating_sub(u64::from(RESERVED_PER_SUBNET))).min(u64::from(u32::MAX)) as u32
    }

    /// Free addresses before the fleet.
    pub fn free(&self) -> u32 {
        self.available.unwrap_or_else(|| self.usable())
    }

    /// Aligned /28 blocks a prefix can be: all but the first and the last, which hold
    /// reserved addresses.
    pub fn prefix_blocks(&self) -> u32 {
        let blocks = (1u64 << (32 - u32::from(self.cidr.prefix_len()))) / u64::from(IPS_PER_PREFIX);
        blocks.saturating_sub(2).min(u64::from(u32::MAX)) as u32
    }
}

/// How likely prefix requests in a subnet fail for want of a whole free /28
/// (`InsufficientCidrBlocks`), from counts alone: where EC2 put single addresses is unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrefixRisk {
    /// /28 prefixes the fleet takes in the subnet.
    pub needed: u32,
    /// Free aligned /28 blocks if the subnet's single addresses (those in use before and the
    /// fleet's ENI primaries and secondary /32s) are packed together.
    pub free_blocks_best: u32,
    /// Free aligned /28 blocks if every single address sits in a /28 of its own.
    pub free_blocks_worst: u32,
    pub verdict: PrefixVerdict,
}

/// The verdict of [`PrefixRisk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefixVerdict {
    /// Fits even at the worst spread of single addresses.
    Safe,
    /// Fits only if single addresses are packed: a fragmented subnet refuses prefixes
    /// (the agent then falls back to secondary /32s). Reserve the subnet's space with a
    /// VPC CIDR reservation (`CreateSubnetCidrReservation`, type prefix) to be sure.
    AtRisk,
    /// Does not fit even packed.
    Short,
}

/// The risk for `needed` prefixes in `s`, with `singles` single addresses taken by the fleet.
pub fn prefix_risk(s: &SubnetSpec, needed: u32, singles: u32) -> PrefixRisk {
    let blocks = s.prefix_blocks();
    let in_use = s.usable().saturating_sub(s.free()).saturating_add(singles);
    let best = blocks.saturating_sub(in_use.div_ceil(IPS_PER_PREFIX));
    let worst = blocks.saturating_sub(in_use);
    let verdict = if needed <= worst {
        PrefixVerdict::Safe
    } else if needed <= best {
        PrefixVerdict::AtRisk
    } else {
        PrefixVerdict::Short
    };
    PrefixRisk {
        needed,
        free_blocks_best: best,
        free_blocks_worst: worst,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(cidr: &str, available: Option<u32>) -> SubnetSpec {
        SubnetSpec {
            id: "subnet-a".into(),
            cidr: cidr.parse().unwrap(),
            zone: "us-east-1a".into(),
            available,
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn sizes() {
        let s = subnet("10.0.0.0/24", None);
        assert_eq!((s.usable(), s.free(), s.prefix_blocks()), (251, 251, 14));
        assert_eq!(subnet("10.0.0.0/24", Some(100)).free(), 100);
    }

    #[test]
    fn scattered_single_addresses_can_starve_prefixes() {
        // A /24: 14 usable /28 blocks. 10 single addresses in use.
        let s = subnet("10.0.0.0/24", Some(241));
        let r = prefix_risk(&s, 4, 0);
        assert_eq!((r.free_blocks_best, r.free_blocks_worst), (13, 4));
        assert_eq!(r.verdict, PrefixVerdict::Safe);
        assert_eq!(prefix_risk(&s, 5, 0).verdict, PrefixVerdict::AtRisk);
        assert_eq!(prefix_risk(&s, 14, 0).verdict, PrefixVerdict::Short);
        // The fleet's own ENI primaries count too.
        assert_eq!(prefix_risk(&s, 4, 1).verdict, PrefixVerdict::AtRisk);
    }
}
