//! The compiled-in instance-type table.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Serialize;

const TABLE: &str = include_str!("../data/instance-limits.tsv");

/// Hypervisor of an instance type (EC2 `InstanceTypeInfo.Hypervisor`).
/// Prefix delegation (/28 prefixes on ENIs) is available on Nitro only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hypervisor {
    Nitro,
    Xen,
    /// Not reported by EC2 (bare-metal types report none).
    Unknown,
}

/// One network card of an instance type (EC2 `NetworkInfo.NetworkCards[]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NetworkCard {
    /// `NetworkCardIndex`.
    pub index: u32,
    /// `MaximumNetworkInterfaces` on this card: a count of ENIs.
    pub max_enis: u32,
}

/// Networking limits of one EC2 instance type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceLimits {
    /// Instance type name, e.g. `m5.large`.
    pub instance_type: String,
    /// ENIs that can be attached on the default network card (a count of ENIs).
    pub eni_limit: u32,
    /// IPv4 addresses per ENI, the primary address included (EC2 `Ipv4AddressesPerInterface`).
    /// Each /28 prefix assigned to an ENI takes one of these slots.
    pub ipv4_per_eni: u32,
    /// `NetworkInfo.DefaultNetworkCardIndex`.
    pub default_network_card: u32,
    /// Every network card with its ENI maximum.
    pub network_cards: Vec<NetworkCard>,
    pub hypervisor: Hypervisor,
    pub bare_metal: bool,
    /// Default vCPUs, when the source data knows them.
    pub vcpus: Option<u32>,
}

impl InstanceLimits {
    /// Whether /28 prefix delegation is supported (Nitro-based, as the VPC CNI requires).
    pub fn supports_prefix_delegation(&self) -> bool {
        self.hypervisor == Hypervisor::Nitro
    }

    /// Maximum ENIs on network card `index`, or `None` if the type has no such card.
    pub fn card_max_enis(&self, index: u32) -> Option<u32> {
        self.network_cards
            .iter()
            .find(|c| c.index == index)
            .map(|c| c.max_enis)
    }

    /// Total ENIs over every network card.
    pub fn total_enis(&self) -> u32 {
        self.network_cards.iter().map(|c| c.max_enis).sum()
    }
}

fn parse_line(line: &str) -> InstanceLimits {
    let f: Vec<&str> = line.split('\t').collect();
    assert_eq!(f.len(), 8, "bad instance-limits.tsv line: {line}");
    let num = |s: &str| -> u32 {
        s.parse()
            .unwrap_or_else(|_| panic!("bad number {s:?} in {line}"))
    };
    InstanceLimits {
        instance_type: f[0].to_string(),
        eni_limit: num(f[1]),
        ipv4_per_eni: num(f[2]),
        default_network_card: num(f[3]),
        network_cards: f[4]
            .split(',')
            .map(|p| {
                let (i, m) = p.split_once(':').expect("card index:max");
                NetworkCard {
                    index: num(i),
                    max_enis: num(m),
                }
            })
            .collect(),
        hypervisor: match f[5] {
            "nitro" => Hypervisor::Nitro,
            "xen" => Hypervisor::Xen,
            _ => Hypervisor::Unknown,
        },
        bare_metal: f[6] == "1",
        vcpus: if f[7] == "-" { None } else { Some(num(f[7])) },
    }
}

fn index() -> &'static HashMap<String, InstanceLimits> {
    static INDEX: OnceLock<HashMap<String, InstanceLimits>> = OnceLock::new();
    INDEX.get_or_init(|| {
        TABLE
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(parse_line)
            .map(|l| (l.instance_type.clone(), l))
            .collect()
    })
}

/// Limits of `instance_type`, or `None` when the compiled-in table does not know it
/// (a type newer than the table: ask EC2 `DescribeInstanceTypes`).
pub fn lookup(instance_type: &str) -> Option<&'static InstanceLimits> {
    index().get(instance_type)
}

/// Every known instance type, sorted by name.
pub fn all() -> Vec<&'static InstanceLimits> {
    let mut v: Vec<_> = index().values().collect();
    v.sort_by(|a, b| a.instance_type.cmp(&b.instance_type));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn m5_large() {
        let l = lookup("m5.large").unwrap();
        assert_eq!((l.eni_limit, l.ipv4_per_eni), (3, 10));
        assert_eq!(l.hypervisor, Hypervisor::Nitro);
        assert_eq!(l.vcpus, Some(2));
    }

    #[test]
    fn multi_card() {
        let l = lookup("c6in.32xlarge").unwrap();
        assert_eq!(l.network_cards.len(), 2);
        assert_eq!(l.total_enis(), 16);
        assert_eq!(l.card_max_enis(1), Some(8));
    }

    #[test]
    fn table_is_complete() {
        assert_eq!(all().len(), 1391);
        assert!(lookup("no.such").is_none());
    }
}
