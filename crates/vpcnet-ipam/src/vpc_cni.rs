//! The VPC CNI's checkpoint (`/var/run/aws-node/ipam.json`, written by its ipamd's datastore,
//! format `vpc-cni-ipam/1`) and its conversion to and from vpcnet's [`Checkpoint`], for the
//! in-place swap between the two agents on a running node (docs/migration.md).
//!
//! The format, as ipamd v1.23 reads and writes it: `{"version":"vpc-cni-ipam/1",
//! "allocations":[...]}`, one allocation per pod address with the CNI key (`networkName`,
//! `containerID`, `ifName`), `ipv4` (or `ipv6`), `allocationTimestamp` (nanoseconds since the
//! Unix epoch) and `metadata` (`k8sPodNamespace`, `k8sPodName`, `interfacesCount`). It names
//! no ENI: ipamd finds each address's ENI in EC2's view at start, so the import takes that
//! view as a lookup ([`import`]).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, CheckpointAssignment, CheckpointError, CHECKPOINT_VERSION};
use crate::pool::{interface_index, EXTRA_INTERFACE_PREFIX};

/// The VPC CNI's checkpoint format version (`CheckpointFormatVersion` in its datastore).
pub const VPC_CNI_CHECKPOINT_VERSION: &str = "vpc-cni-ipam/1";

/// The network name of the VPC CNI's conflist (`"name": "aws-cni"`), which ipamd's DEL looks
/// allocations up by: what [`export`] writes so the VPC CNI finds the pods after a rollback.
pub const VPC_CNI_NETWORK_NAME: &str = "aws-cni";

/// The VPC CNI's checkpoint file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VpcCniCheckpoint {
    /// [`VPC_CNI_CHECKPOINT_VERSION`].
    pub version: String,
    /// One per assigned pod address. ipamd writes `null` for none.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub allocations: Vec<VpcCniAllocation>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<VpcCniAllocation>, D::Error> {
    Ok(Option::<Vec<VpcCniAllocation>>::deserialize(d)?.unwrap_or_default())
}

/// One allocation ("row" of ipamd's datastore).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VpcCniAllocation {
    /// The CNI network name (the conflist's `name`).
    #[serde(rename = "networkName")]
    pub network_name: String,
    /// `CNI_CONTAINERID`.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// `CNI_IFNAME`.
    #[serde(rename = "ifName")]
    pub if_name: String,
    /// The pod's IPv4 address (absent on IPv6 clusters).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ipv4: String,
    /// The pod's IPv6 address (IPv6 clusters only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ipv6: String,
    /// Nanoseconds since the Unix epoch.
    #[serde(rename = "allocationTimestamp")]
    pub allocation_timestamp: i64,
    /// The pod.
    #[serde(default)]
    pub metadata: VpcCniMetadata,
}

/// An allocation's pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VpcCniMetadata {
    /// Pod namespace.
    #[serde(
        rename = "k8sPodNamespace",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub pod_namespace: String,
    /// Pod name.
    #[serde(
        rename = "k8sPodName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub pod_name: String,
    /// Interfaces of the pod (multi-NIC pods have more than one).
    #[serde(rename = "interfacesCount", default, skip_serializing_if = "is_zero")]
    pub interfaces_count: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A VPC CNI checkpoint that cannot be imported.
#[derive(Debug, thiserror::Error)]
pub enum VpcCniError {
    /// Not JSON of the format above.
    #[error("not a VPC CNI checkpoint (JSON of format {VPC_CNI_CHECKPOINT_VERSION}): {0}")]
    Parse(#[from] serde_json::Error),
    /// Another format version.
    #[error("VPC CNI checkpoint version {found:?} is not supported (vpcnet reads {VPC_CNI_CHECKPOINT_VERSION:?})")]
    Version { found: String },
    /// The converted checkpoint is inconsistent (an address or key twice).
    #[error("the VPC CNI checkpoint is inconsistent: {0}")]
    Inconsistent(#[source] CheckpointError),
}

/// An allocation [`import`] left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The allocation's container.
    pub container_id: String,
    /// Its address as written (may be IPv6 or empty).
    pub address: String,
    /// Why: "IPv6", "not an IPv4 address", "on no ENI of the instance" (ipamd, too, drops
    /// an allocation whose address is on none of the node's ENIs as stale).
    pub reason: &'static str,
}

impl VpcCniCheckpoint {
    /// Parses the file's contents and checks the version.
    pub fn from_json(text: &str) -> Result<Self, VpcCniError> {
        let cp: VpcCniCheckpoint = serde_json::from_str(text)?;
        if cp.version != VPC_CNI_CHECKPOINT_VERSION {
            return Err(VpcCniError::Version { found: cp.version });
        }
        Ok(cp)
    }

    /// The file's contents (compact JSON, as ipamd writes it).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("checkpoint serializes")
    }
}

/// vpcnet's checkpoint from the VPC CNI's: every IPv4 allocation becomes an assignment on the
/// ENI `eni_of` names for its address (EC2's view of the instance, secondary addresses and
/// prefixes); allocations without an IPv4 address or on no ENI are returned as skipped. No
/// cooldowns (the VPC CNI's cooldown state is in memory only). Errors: the result would hand
/// an address or a (container, interface) out twice.
pub fn import(
    cp: &VpcCniCheckpoint,
    eni_of: impl Fn(Ipv4Addr) -> Option<String>,
) -> Result<(Checkpoint, Vec<Skipped>), VpcCniError> {
    import_cards(&[(0, cp)], eni_of)
}

/// [`import`] of a node with ENABLE_MULTI_NIC: ipamd keeps one checkpoint per managed network
/// card (`ipam.json` for card 0, `ipam-nic-<card>.json` for the others, [`card_file_name`]),
/// each keyed by the pod's own interface. `cards` lists them by card, card 0 first; the n-th
/// (from 0) is the pod's n-th interface, so an allocation of a multi-homed pod
/// (`interfacesCount` > 1) on the n-th file becomes the assignment of its further interface
/// `mNicIf<n>` ([`crate::PodKey::extra_interface`]); a plain pod whose one address came from
/// another card keeps its own interface name.
pub fn import_cards(
    cards: &[(u32, &VpcCniCheckpoint)],
    eni_of: impl Fn(Ipv4Addr) -> Option<String>,
) -> Result<(Checkpoint, Vec<Skipped>), VpcCniError> {
    let mut assignments = Vec::new();
    let mut skipped = Vec::new();
    for (n, (card, cp)) in cards.iter().enumerate() {
        for a in &cp.allocations {
            let skip = |reason| Skipped {
                container_id: a.container_id.clone(),
                address: if a.ipv4.is_empty() {
                    a.ipv6.clone()
                } else {
                    a.ipv4.clone()
                },
                reason,
            };
            if a.ipv4.is_empty() {
                skipped.push(skip("IPv6"));
                continue;
            }
            let Ok(ip) = a.ipv4.parse::<Ipv4Addr>() else {
                skipped.push(skip("not an IPv4 address"));
                continue;
            };
            let Some(eni_id) = eni_of(ip) else {
                skipped.push(skip("on no ENI of the instance"));
                continue;
            };
            let if_name = if n > 0 && a.metadata.interfaces_count > 1 {
                format!("{EXTRA_INTERFACE_PREFIX}{n}")
            } else {
                a.if_name.clone()
            };
            assignments.push(CheckpointAssignment {
                container_id: a.container_id.clone(),
                if_name,
                ip,
                eni_id,
                namespace: a.metadata.pod_namespace.clone(),
                name: a.metadata.pod_name.clone(),
                assigned_at_ms: (a.allocation_timestamp.max(0) / 1_000_000) as u64,
                // The VPC CNI built these pods' datapath (random host veth MACs).
                foreign_datapath: true,
                network_card: *card,
            });
        }
    }
    let out = Checkpoint {
        version: CHECKPOINT_VERSION,
        assignments,
        cooldowns: Vec::new(),
    };
    out.check().map_err(VpcCniError::Inconsistent)?;
    Ok((out, skipped))
}

/// The name of ipamd's checkpoint of network card `card` next to `main` (its card-0 file):
/// `main` itself for card 0, `<main without .json>-nic-<card>.json` otherwise.
pub fn card_file_name(main: &str, card: u32) -> String {
    if card == 0 {
        main.to_string()
    } else {
        format!("{}-nic-{card}.json", main.trim_end_matches(".json"))
    }
}

/// The VPC CNI's checkpoint from vpcnet's: one allocation per assignment, under the network
/// name `network_name` (the VPC CNI's conflist name, [`VPC_CNI_NETWORK_NAME`], so its DEL finds
/// the pods), one interface each. Addresses cooling down are not carried over (ipamd keeps no
/// cooldown on disk; it holds every address released less than its cooldown ago in memory).
/// Unknown pods vpcnet holds for routed addresses ([`crate::UNKNOWN_POD_PREFIX`]) are written
/// without pod metadata, which makes ipamd keep them without checking for their veth. Only
/// card 0's assignments: [`export_cards`] writes every card's.
pub fn export(cp: &Checkpoint, network_name: &str) -> VpcCniCheckpoint {
    export_cards(cp, network_name)
        .into_iter()
        .find(|(card, _)| *card == 0)
        .map(|(_, c)| c)
        .unwrap_or_else(|| VpcCniCheckpoint {
            version: VPC_CNI_CHECKPOINT_VERSION.to_string(),
            allocations: Vec::new(),
        })
}

/// [`export`] as ipamd keeps it with ENABLE_MULTI_NIC: one checkpoint per network card that
/// holds assignments (card 0's always), card 0 first. A multi-homed pod's further interfaces
/// go to their cards' checkpoints under the pod's own interface name, with `interfacesCount`
/// the pod's interfaces, as ipamd keys them.
pub fn export_cards(cp: &Checkpoint, network_name: &str) -> Vec<(u32, VpcCniCheckpoint)> {
    /// A container's assignments: how many, whether some is a further interface, and the
    /// name of its own interface.
    #[derive(Default)]
    struct Pod<'a> {
        interfaces: u32,
        multi: bool,
        own_if: Option<&'a str>,
    }
    let mut pods: BTreeMap<&str, Pod> = BTreeMap::new();
    for a in &cp.assignments {
        let p = pods.entry(a.container_id.as_str()).or_default();
        p.interfaces += 1;
        if interface_index(&a.if_name) > 0 {
            p.multi = true;
        } else {
            p.own_if = Some(a.if_name.as_str());
        }
    }
    let mut by_card: BTreeMap<u32, Vec<VpcCniAllocation>> = [(0, Vec::new())].into();
    for a in &cp.assignments {
        let pod = &pods[a.container_id.as_str()];
        // ipamd keys every card's allocation by the pod's own interface.
        let if_name = if interface_index(&a.if_name) > 0 {
            pod.own_if.unwrap_or("eth0").to_string()
        } else {
            a.if_name.clone()
        };
        by_card
            .entry(a.network_card)
            .or_default()
            .push(VpcCniAllocation {
                network_name: network_name.to_string(),
                container_id: a.container_id.clone(),
                if_name,
                ipv4: a.ip.to_string(),
                ipv6: String::new(),
                allocation_timestamp: (a.assigned_at_ms as i64).saturating_mul(1_000_000),
                metadata: VpcCniMetadata {
                    pod_namespace: a.namespace.clone(),
                    pod_name: a.name.clone(),
                    interfaces_count: if pod.multi { pod.interfaces } else { 1 },
                },
            });
    }
    by_card
        .into_iter()
        .map(|(card, allocations)| {
            (
                card,
                VpcCniCheckpoint {
                    version: VPC_CNI_CHECKPOINT_VERSION.to_string(),
                    allocations,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint as ipamd v1.23 writes it (field order and omissions included).
    const IPAMD: &str = r#"{"version":"vpc-cni-ipam/1","allocations":[{"networkName":"aws-cni","containerID":"c1","ifName":"eth0","ipv4":"10.0.1.20","allocationTimestamp":1764586000123456789,"metadata":{"k8sPodNamespace":"default","k8sPodName":"web-1","interfacesCount":1}},{"networkName":"aws-cni","containerID":"c2","ifName":"eth0","ipv4":"10.0.1.77","allocationTimestamp":1764586001000000000,"metadata":{"k8sPodNamespace":"kube-system","k8sPodName":"dns"}},{"networkName":"aws-cni","containerID":"c3","ifName":"eth0","ipv4":"10.0.9.9","allocationTimestamp":1,"metadata":{}},{"networkName":"aws-cni","containerID":"c4","ifName":"eth0","ipv6":"2600::1","allocationTimestamp":1,"metadata":{}}]}"#;

    fn eni_of(ip: Ipv4Addr) -> Option<String> {
        match ip.octets()[2] {
            1 if ip.octets()[3] < 50 => Some("eni-a".into()),
            1 => Some("eni-b".into()),
            _ => None,
        }
    }

    #[test]
    fn imports_ipamds_allocations_onto_the_enis_holding_their_addresses() {
        let cp = VpcCniCheckpoint::from_json(IPAMD).unwrap();
        let (out, skipped) = import(&cp, eni_of).unwrap();
        assert_eq!(out.version, CHECKPOINT_VERSION);
        assert_eq!(
            out.assignments,
            vec![
                CheckpointAssignment {
                    container_id: "c1".into(),
                    if_name: "eth0".into(),
                    ip: "10.0.1.20".parse().unwrap(),
                    eni_id: "eni-a".into(),
                    namespace: "default".into(),
                    name: "web-1".into(),
                    assigned_at_ms: 1_764_586_000_123,
                    foreign_datapath: true,
                    network_card: 0,
                },
                CheckpointAssignment {
                    container_id: "c2".into(),
                    if_name: "eth0".into(),
                    ip: "10.0.1.77".parse().unwrap(),
                    eni_id: "eni-b".into(),
                    namespace: "kube-system".into(),
                    name: "dns".into(),
                    assigned_at_ms: 1_764_586_001_000,
                    foreign_datapath: true,
                    network_card: 0,
                },
            ]
        );
        let reasons: Vec<_> = skipped
            .iter()
            .map(|s| (s.container_id.as_str(), s.reason))
            .collect();
        assert_eq!(
            reasons,
            vec![("c3", "on no ENI of the instance"), ("c4", "IPv6")]
        );
    }

    #[test]
    fn a_multi_homed_pods_further_interfaces_go_to_their_cards_files_and_back() {
        let a = |cid: &str, if_name: &str, ip: &str, eni: &str, card: u32| CheckpointAssignment {
            container_id: cid.into(),
            if_name: if_name.into(),
            ip: ip.parse().unwrap(),
            eni_id: eni.into(),
            namespace: "default".into(),
            name: cid.into(),
            assigned_at_ms: 1_000,
            foreign_datapath: true,
            network_card: card,
        };
        let ours = Checkpoint {
            version: CHECKPOINT_VERSION,
            assignments: vec![
                a("multi", "eth0", "10.0.1.10", "eni-a", 0),
                a("multi", "mNicIf1", "10.0.2.10", "eni-c1", 1),
                // A plain pod whose address came from card 1 (card 0 had none free).
                a("plain", "eth0", "10.0.2.11", "eni-c1", 1),
            ],
            cooldowns: vec![],
        };
        let files = export_cards(&ours, VPC_CNI_NETWORK_NAME);
        assert_eq!(
            files.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
            vec![0, 1]
        );
        let card1 = &files[1].1.allocations;
        // ipamd keys each card's allocation by the pod's own interface.
        assert_eq!(
            card1
                .iter()
                .map(|x| (
                    x.container_id.as_str(),
                    x.if_name.as_str(),
                    x.metadata.interfaces_count
                ))
                .collect::<Vec<_>>(),
            vec![("multi", "eth0", 2), ("plain", "eth0", 1)]
        );
        assert_eq!(files[0].1.allocations[0].metadata.interfaces_count, 2);
        assert_eq!(
            card_file_name("/var/run/aws-node/ipam.json", 1),
            "/var/run/aws-node/ipam-nic-1.json"
        );
        let eni_of = |ip: Ipv4Addr| {
            ours.assignments
                .iter()
                .find(|x| x.ip == ip)
                .map(|x| x.eni_id.clone())
        };
        let cards: Vec<(u32, &VpcCniCheckpoint)> = files.iter().map(|(c, f)| (*c, f)).collect();
        let (back, skipped) = import_cards(&cards, eni_of).unwrap();
        assert!(skipped.is_empty());
        let key = |x: &CheckpointAssignment| (x.container_id.clone(), x.if_name.clone(), x.ip);
        let mut want: Vec<_> = ours.assignments.iter().map(key).collect();
        let mut got: Vec<_> = back.assignments.iter().map(key).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn export_then_import_gives_the_same_assignments_and_the_json_ipamd_reads() {
        let cp = VpcCniCheckpoint::from_json(IPAMD).unwrap();
        let (ours, _) = import(&cp, eni_of).unwrap();
        let theirs = export(&ours, VPC_CNI_NETWORK_NAME);
        let text = theirs.to_json();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["version"], "vpc-cni-ipam/1");
        let a = &v["allocations"][0];
        assert_eq!(a["networkName"], "aws-cni");
        assert_eq!(a["containerID"], "c1");
        assert_eq!(a["ifName"], "eth0");
        assert_eq!(a["ipv4"], "10.0.1.20");
        assert!(a.get("ipv6").is_none(), "omitted like Go's omitempty: {a}");
        assert_eq!(a["allocationTimestamp"], 1_764_586_000_123_000_000i64);
        assert_eq!(a["metadata"]["k8sPodName"], "web-1");
        assert_eq!(a["metadata"]["interfacesCount"], 1);
        let (back, skipped) = import(&VpcCniCheckpoint::from_json(&text).unwrap(), eni_of).unwrap();
        assert!(skipped.is_empty());
        assert_eq!(back.assignments, ours.assignments);
    }

    #[test]
    fn refuses_other_versions_duplicates_and_reads_null_allocations() {
        let e = VpcCniCheckpoint::from_json(r#"{"version":"vpc-cni-ipam/2","allocations":[]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("vpc-cni-ipam/2"), "{e}");
        let empty =
            VpcCniCheckpoint::from_json(r#"{"version":"vpc-cni-ipam/1","allocations":null}"#)
                .unwrap();
        assert!(empty.allocations.is_empty());
        let dup = IPAMD.replace("10.0.1.77", "10.0.1.20");
        let e = import(&VpcCniCheckpoint::from_json(&dup).unwrap(), eni_of).unwrap_err();
        assert!(matches!(e, VpcCniError::Inconsistent(_)), "{e}");
    }
}
