//! ENIs, addresses and assignments.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

/// Identity of a pod network attachment: CNI container ID + interface name (CNI_IFNAME).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodKey {
    pub container_id: String,
    pub if_name: String,
}

impl PodKey {
    pub fn new(container_id: impl Into<String>, if_name: impl Into<String>) -> Self {
        PodKey {
            container_id: container_id.into(),
            if_name: if_name.into(),
        }
    }
}

/// Kubernetes identity of the pod (informational; the key is [`PodKey`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

/// One address handed to a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The pod's IPv4 address (a /32).
    pub ip: Ipv4Addr,
    /// ENI holding the address when it was assigned (`eni-...`).
    pub eni_id: String,
    pub pod: PodRef,
    /// When it was assigned, ms since the Unix epoch.
    pub assigned_at_ms: u64,
    /// The pod's datapath was not built by vpcnet's plugin: imported from the VPC CNI, or
    /// held on evidence after a lost checkpoint (built by whichever CNI ran then). Its host
    /// veth MAC is then not vpcnet's derived one, so the datapath audit does not check it.
    #[serde(default)]
    pub foreign_datapath: bool,
}

/// Static facts of an attached ENI (EC2 `NetworkInterface` + its attachment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EniInfo {
    /// `eni-...`.
    pub id: String,
    /// MAC address, lower-case `aa:bb:...`.
    pub mac: String,
    /// Attachment `DeviceIndex` (0 = primary ENI, eth0).
    pub device_number: u32,
    /// Attachment `NetworkCardIndex`.
    pub network_card: u32,
    pub subnet_id: String,
    /// The subnet's IPv4 CIDR.
    pub subnet_cidr: Ipv4Net,
    /// The instance's primary ENI (never freed, never detached).
    pub primary: bool,
    /// The ENI's primary private IPv4 address (never handed to a pod).
    pub primary_ip: Ipv4Addr,
}

/// EC2's current view of one attached ENI (from DescribeNetworkInterfaces).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EniObservation {
    pub info: EniInfo,
    /// Secondary private IPv4 addresses (the primary excluded).
    pub secondary_ips: Vec<Ipv4Addr>,
    /// Delegated /28 prefixes.
    pub prefixes: Vec<Ipv4Net>,
}

/// An attached ENI as the pool knows it: EC2's facts plus when each address appeared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Eni {
    pub info: EniInfo,
    /// Secondary addresses → when they were added to the pool (ms since the epoch).
    pub ips: BTreeMap<Ipv4Addr, u64>,
    /// /28 prefixes → when they were added to the pool.
    pub prefixes: BTreeMap<Ipv4Net, u64>,
    /// A DeleteEni for it is in flight: nothing new is placed on it.
    pub deleting: bool,
}

impl Eni {
    pub fn new(info: EniInfo) -> Self {
        Eni {
            info,
            ips: BTreeMap::new(),
            prefixes: BTreeMap::new(),
            deleting: false,
        }
    }

    /// Every pod-usable address on the ENI with the time it was added: secondary addresses
    /// and each /32 of each /28 prefix.
    pub fn addresses(&self) -> impl Iterator<Item = (Ipv4Addr, u64)> + '_ {
        self.ips.iter().map(|(ip, t)| (*ip, *t)).chain(
            self.prefixes
                .iter()
                .flat_map(|(p, t)| Eni::prefix_addresses(*p).map(move |ip| (ip, *t))),
        )
    }

    /// Every /32 of a prefix, network and broadcast included (a /28 delegated to an ENI is
    /// usable whole: 16 addresses).
    pub fn prefix_addresses(p: Ipv4Net) -> impl Iterator<Item = Ipv4Addr> {
        (u32::from(p.network())..=u32::from(p.broadcast())).map(Ipv4Addr::from)
    }

    /// Whether `ip` belongs to the ENI (as a secondary address or inside a prefix).
    pub fn holds(&self, ip: Ipv4Addr) -> bool {
        self.ips.contains_key(&ip) || self.prefixes.keys().any(|p| p.contains(&ip))
    }

    /// Slots used: secondary addresses plus prefixes (the primary address excluded).
    pub fn slots_used(&self) -> u32 {
        (self.ips.len() + self.prefixes.len()) as u32
    }
}

/// Helper for sets of addresses.
pub(crate) type IpSet = BTreeSet<Ipv4Addr>;
