//! EC2's view of the instance's ENIs into the pool: which ENIs are ours to manage, and the
//! reconcile of the pool against one `DescribeNetworkInterfaces`.

use std::collections::{BTreeMap, BTreeSet};

use vpcnet_ec2::{Ec2Error, NetworkInterface};
use vpcnet_ipam::{EniInfo, EniObservation, ReconcileReport, UnknownIpPolicy};

use crate::clock::now_ms;
use crate::cloud::Ec2Api;
use crate::options::TAG_NO_MANAGE;
use crate::state::{NodeFacts, Shared};

/// Whether EC2's ENI is one the agent may manage (on a managed network card of `cards`:
/// card 0, and the others with ENABLE_MULTI_NIC; a plain interface, not owned by an AWS
/// service, not tagged no_manage).
pub fn manageable(ni: &NetworkInterface, cards: &[u32]) -> bool {
    let managed_card = ni
        .attachment
        .as_ref()
        .is_some_and(|a| cards.contains(&a.network_card_index));
    let no_manage = ni.tags.get(TAG_NO_MANAGE).is_some_and(|v| v != "false");
    managed_card
        && !ni.requester_managed
        && !no_manage
        && (ni.interface_type.is_empty() || ni.interface_type == "interface")
}

/// Converts EC2's ENI into the core's observation.
pub fn observation(
    facts: &NodeFacts,
    ni: &NetworkInterface,
    subnet_cidr: ipnet::Ipv4Net,
) -> EniObservation {
    let a = ni.attachment.as_ref();
    EniObservation {
        info: EniInfo {
            id: ni.eni_id.clone(),
            mac: ni.mac.to_ascii_lowercase(),
            device_number: a.map_or(0, |a| a.device_index),
            network_card: a.map_or(0, |a| a.network_card_index),
            subnet_id: ni.subnet_id.clone(),
            subnet_cidr,
            primary: a.is_some_and(|a| a.device_index == 0 && a.network_card_index == 0)
                || ni.mac.eq_ignore_ascii_case(&facts.primary_mac),
            primary_ip: ni.primary_ip,
        },
        secondary_ips: ni.secondary_ips.clone(),
        prefixes: ni.prefixes.clone(),
    }
}

/// Describes the instance's ENIs (one batched call) and adopts EC2's view.
pub async fn sync_from_ec2(
    shared: &Shared,
    ec2: &dyn Ec2Api,
    unknown: UnknownIpPolicy,
) -> Result<ReconcileReport, Ec2Error> {
    let enis = ec2
        .describe_instance_network_interfaces(&shared.facts.instance_id)
        .await?;
    adopt(shared, ec2, enis, unknown).await
}

/// Adopts the instance's ENIs as `DescribeNetworkInterfaces` returned them.
pub async fn adopt(
    shared: &Shared,
    ec2: &dyn Ec2Api,
    enis: Vec<NetworkInterface>,
    unknown: UnknownIpPolicy,
) -> Result<ReconcileReport, Ec2Error> {
    let cards: Vec<u32> = shared.pool().config().cards().collect();
    let mut subnets: BTreeMap<String, ipnet::Ipv4Net> =
        [(shared.facts.subnet_id.clone(), shared.facts.subnet_cidr)].into();
    let unknown_subnets: Vec<String> = enis
        .iter()
        .filter(|e| manageable(e, &cards) && !subnets.contains_key(&e.subnet_id))
        .map(|e| e.subnet_id.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !unknown_subnets.is_empty() {
        for s in ec2.describe_subnets(&unknown_subnets).await? {
            subnets.insert(s.subnet_id, s.cidr_block);
        }
    }
    let mut view = Vec::new();
    let mut foreign = Vec::new();
    let mut foreign_ids = BTreeSet::new();
    let mut att = BTreeMap::new();
    for ni in &enis {
        if let Some(a) = &ni.attachment {
            att.insert(ni.eni_id.clone(), a.attachment_id.clone());
            if !manageable(ni, &cards) {
                foreign.push((a.network_card_index, a.device_index));
                foreign_ids.insert(ni.eni_id.clone());
                continue;
            }
        }
        let cidr = subnets
            .get(&ni.subnet_id)
            .copied()
            .unwrap_or(shared.facts.subnet_cidr);
        view.push(observation(&shared.facts, ni, cidr));
    }
    shared.enis().record_described(att, foreign, foreign_ids);
    let report = {
        let mut pool = shared.pool();
        let before: BTreeSet<_> = pool.orphaned().into_iter().collect();
        let enis_with_pods: BTreeSet<String> =
            pool.assignments().map(|(_, a)| a.eni_id.clone()).collect();
        let report = pool.reconcile(&view, unknown, now_ms());
        let new_orphans = report
            .orphaned
            .iter()
            .filter(|o| !before.contains(o))
            .count();
        shared.metrics().inc_force_removed_ips(new_orphans as u64);
        let lost_enis = report
            .removed_enis
            .iter()
            .filter(|e| enis_with_pods.contains(*e))
            .count();
        shared.metrics().inc_force_removed_enis(lost_enis as u64);
        report
    };
    if !report.added_ips.is_empty() || !report.added_enis.is_empty() {
        shared.pool_grew();
    }
    if !report.orphaned.is_empty() {
        tracing::warn!(orphaned = ?report.orphaned, "EC2 no longer lists these assigned addresses on the node; the pods keep them until deleted, they are never handed out again");
    }
    if !report.added_ips.is_empty()
        || !report.dropped_ips.is_empty()
        || !report.added_enis.is_empty()
        || !report.removed_enis.is_empty()
    {
        tracing::info!(added_enis = ?report.added_enis, removed_enis = ?report.removed_enis, added_ips = report.added_ips.len(), dropped_ips = ?report.dropped_ips, "adopted EC2's view");
    }
    Ok(report)
}
