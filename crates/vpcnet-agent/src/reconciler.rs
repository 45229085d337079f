//! Executes the core's plans against EC2 and feeds the results back. One task; woken at
//! once by ADD/DEL, plus a periodic full pass (describe + reconcile + plan incl. freeing
//! surplus). Backs off with jitter after EC2 errors.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use vpcnet_ec2::{
    AddressRelease, AddressRequest, CreateEni, Ec2, Ec2Error, NetworkInterface, Tags,
};
use vpcnet_ipam::{Action, EniInfo, EniObservation, UnknownIpPolicy};

use crate::node::{NodeEni, NodeFirewall};
use crate::options::{
    ENI_DESCRIPTION_PREFIX, TAG_CLUSTER_NAME, TAG_CREATED_AT, TAG_INSTANCE_ID, TAG_NO_MANAGE,
};
use crate::state::{now_ms, Shared};

/// Longest backoff after consecutive failures.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How long a detaching ENI is polled before giving up until the next pass.
const DETACH_WAIT: Duration = Duration::from_secs(30);
/// Age an assignment must reach before a missing pod route gets it reclaimed.
pub const POD_RECLAIM_GRACE: Duration = Duration::from_secs(5);
/// Period of the pod-route check (a netlink route dump; cheap).
pub const POD_RECLAIM_INTERVAL: Duration = Duration::from_secs(5);
/// How long a new attachment is polled until it is `attached`.
const ATTACH_WAIT: Duration = Duration::from_secs(60);

/// Whether EC2's ENI is one the agent may manage (card 0, a plain interface, not owned by
/// an AWS service, not tagged no_manage).
pub fn manageable(ni: &NetworkInterface) -> bool {
    let card0 = ni
        .attachment
        .as_ref()
        .is_some_and(|a| a.network_card_index == 0);
    let no_manage = ni.tags.get(TAG_NO_MANAGE).is_some_and(|v| v != "false");
    card0
        && !ni.requester_managed
        && !no_manage
        && (ni.interface_type.is_empty() || ni.interface_type == "interface")
}

/// Converts EC2's ENI into the core's observation.
pub fn observation(
    shared: &Shared,
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
            primary: a.is_some_and(|a| a.device_index == 0)
                || ni.mac.eq_ignore_ascii_case(&shared.facts.primary_mac),
            primary_ip: ni.primary_ip,
        },
        secondary_ips: ni.secondary_ips.clone(),
        prefixes: ni.prefixes.clone(),
    }
}

/// Describes the instance's ENIs (one batched call) and adopts EC2's view.
pub async fn sync_from_ec2(
    shared: &Shared,
    ec2: &Ec2,
    unknown: UnknownIpPolicy,
) -> Result<vpcnet_ipam::ReconcileReport, Ec2Error> {
    let enis = ec2
        .describe_instance_network_interfaces(&shared.facts.instance_id)
        .await?;
    adopt(shared, ec2, enis, unknown).await
}

/// Adopts the instance's ENIs as `DescribeNetworkInterfaces` returned them.
pub async fn adopt(
    shared: &Shared,
    ec2: &Ec2,
    enis: Vec<NetworkInterface>,
    unknown: UnknownIpPolicy,
) -> Result<vpcnet_ipam::ReconcileReport, Ec2Error> {
    let mut subnets: std::collections::BTreeMap<String, ipnet::Ipv4Net> =
        [(shared.facts.subnet_id.clone(), shared.facts.subnet_cidr)].into();
    let unknown_subnets: Vec<String> = enis
        .iter()
        .filter(|e| manageable(e) && !subnets.contains_key(&e.subnet_id))
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
    {
        let mut att = shared.attachments.lock().unwrap_or_else(|p| p.into_inner());
        att.clear();
        for ni in &enis {
            if let Some(a) = &ni.attachment {
                att.insert(ni.eni_id.clone(), a.attachment_id.clone());
                if !manageable(ni) {
                    foreign.push(a.device_index);
                    continue;
                }
            }
            let cidr = subnets
                .get(&ni.subnet_id)
                .copied()
                .unwrap_or(shared.facts.subnet_cidr);
            view.push(observation(shared, ni, cidr));
        }
    }
    *shared
        .foreign_devices
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = foreign;
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
        shared.metrics.inc_force_removed_ips(new_orphans as u64);
        let lost_enis = report
            .removed_enis
            .iter()
            .filter(|e| enis_with_pods.contains(*e))
            .count();
        shared.metrics.inc_force_removed_enis(lost_enis as u64);
        report
    };
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

/// Plans and executes until the pool is on target or an EC2 call fails. Returns whether
/// anything changed.
pub async fn fill(shared: &Shared, ec2: &Ec2) -> Result<bool, Ec2Error> {
    let mut changed = false;
    for _ in 0..16 {
        // Plan and mark under one lock, so no ADD can take an address being released.
        let actions = {
            let mut pool = shared.pool();
            let actions = pool.plan(now_ms());
            for a in &actions {
                pool.begin(a);
            }
            actions
        };
        if actions.is_empty() {
            return Ok(changed);
        }
        for (i, a) in actions.iter().enumerate() {
            tracing::debug!(action = ?a, "executing");
            if let Err(e) = execute(shared, ec2, a).await {
                {
                    let mut pool = shared.pool();
                    for rest in &actions[i..] {
                        pool.abort(rest);
                    }
                }
                if changed {
                    shared.persist().await;
                }
                return Err(e);
            }
            changed = true;
        }
        shared.persist().await;
        shared.update_gauges();
    }
    Ok(changed)
}

async fn execute(shared: &Shared, ec2: &Ec2, action: &Action) -> Result<(), Ec2Error> {
    match action {
        Action::AssignIps { eni_id, count } => {
            let got = ec2
                .assign_private_ips(eni_id, AddressRequest::SecondaryIps(*count))
                .await?;
            shared.pool().add_ips(eni_id, &got.ips, now_ms());
        }
        Action::AssignPrefixes { eni_id, count } => {
            let got = ec2
                .assign_private_ips(eni_id, AddressRequest::Prefixes(*count))
                .await?;
            shared.pool().add_prefixes(eni_id, &got.prefixes, now_ms());
        }
        Action::CreateEni { ips, prefixes } => create_eni(shared, ec2, *ips, *prefixes).await?,
        Action::UnassignIps { eni_id, ips } => {
            ec2.unassign_private_ips(eni_id, &AddressRelease::SecondaryIps(ips.clone()))
                .await?;
            shared.pool().remove_ips(eni_id, ips);
        }
        Action::UnassignPrefixes { eni_id, prefixes } => {
            ec2.unassign_private_ips(eni_id, &AddressRelease::Prefixes(prefixes.clone()))
                .await?;
            shared.pool().remove_prefixes(eni_id, prefixes);
        }
        Action::DeleteEni { eni_id } => delete_eni(shared, ec2, eni_id).await?,
    }
    Ok(())
}

fn next_device_index(shared: &Shared) -> u32 {
    let mut used: BTreeSet<u32> = shared.pool().enis().map(|e| e.info.device_number).collect();
    used.extend(
        shared
            .foreign_devices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied(),
    );
    (1..).find(|d| !used.contains(d)).unwrap_or(1)
}

/// CreateNetworkInterface → AttachNetworkInterface → DeleteOnTermination=true → node setup.
/// An ENI that cannot be attached (or marked DeleteOnTermination) is detached/deleted again,
/// so no ENI leaks.
async fn create_eni(shared: &Shared, ec2: &Ec2, ips: u32, prefixes: u32) -> Result<(), Ec2Error> {
    let f = &shared.facts;
    let mut tags = Tags::new();
    tags.insert(TAG_INSTANCE_ID.into(), f.instance_id.clone());
    if !shared.opts.cluster_name.is_empty() {
        tags.insert(TAG_CLUSTER_NAME.into(), shared.opts.cluster_name.clone());
    }
    for (k, v) in &shared.opts.additional_eni_tags {
        tags.insert(k.clone(), v.clone());
    }
    tags.insert(
        TAG_CREATED_AT.into(),
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    let req = CreateEni {
        subnet_id: f.subnet_id.clone(),
        security_group_ids: f.security_groups.clone(),
        description: format!("{ENI_DESCRIPTION_PREFIX}{}", f.instance_id),
        tags,
        addresses: if prefixes > 0 {
            Some(AddressRequest::Prefixes(prefixes))
        } else if ips > 0 {
            Some(AddressRequest::SecondaryIps(ips))
        } else {
            None
        },
        client_token: None,
    };
    let ni = ec2.create_network_interface(&req).await?;
    let device = next_device_index(shared);
    let attachment = match ec2
        .attach_network_interface(&ni.eni_id, &f.instance_id, device, 0)
        .await
    {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(eni = %ni.eni_id, "attach failed ({e}); deleting the new ENI so it does not leak");
            delete_with_retry(ec2, &ni.eni_id).await;
            return Err(e);
        }
    };
    if !wait_attached(ec2, &ni.eni_id).await {
        tracing::warn!(eni = %ni.eni_id, "attachment did not complete; detaching and deleting the ENI");
        let _ = ec2.detach_network_interface(&attachment, true).await;
        wait_detached(ec2, &ni.eni_id).await;
        delete_with_retry(ec2, &ni.eni_id).await;
        return Err(Ec2Error::Timeout {
            action: vpcnet_ec2::Action::AttachNetworkInterface,
            after: ATTACH_WAIT,
            attempts: 1,
        });
    }
    if let Err(e) = ec2
        .set_delete_on_termination(&ni.eni_id, &attachment, true)
        .await
    {
        tracing::warn!(eni = %ni.eni_id, "DeleteOnTermination failed ({e}); detaching and deleting the ENI");
        let _ = ec2.detach_network_interface(&attachment, true).await;
        wait_detached(ec2, &ni.eni_id).await;
        delete_with_retry(ec2, &ni.eni_id).await;
        return Err(e);
    }
    shared
        .attachments
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(ni.eni_id.clone(), attachment.clone());
    let mut ni = ni;
    ni.attachment = Some(vpcnet_ec2::EniAttachment {
        attachment_id: attachment,
        instance_id: Some(f.instance_id.clone()),
        device_index: device,
        network_card_index: 0,
        status: "attached".into(),
        delete_on_termination: true,
    });
    let obs = observation(shared, &ni, f.subnet_cidr);
    if let Some(node) = &shared.opts.node_network {
        let spec = NodeEni {
            mac: obs.info.mac.clone(),
            device_number: device,
            subnet: obs.info.subnet_cidr,
            primary_ip: obs.info.primary_ip,
            mtu: shared.opts.mtu,
        };
        if let Err(e) = node.setup_eni(&spec).await {
            // The ENI is attached and ours; EC2 state is consistent. Every periodic pass
            // sets up all secondary ENIs again (idempotent), which repairs this.
            tracing::error!(eni = %ni.eni_id, "node setup of the new ENI failed: {e:#}");
        }
    }
    tracing::info!(eni = %ni.eni_id, device, ips = obs.secondary_ips.len(), prefixes = obs.prefixes.len(), "created and attached ENI");
    shared.pool().add_eni(obs, now_ms());
    Ok(())
}

async fn delete_with_retry(ec2: &Ec2, eni_id: &str) {
    for attempt in 0..5u32 {
        match ec2.delete_network_interface(eni_id).await {
            Ok(()) => return,
            Err(e) if e.is_not_found() => return,
            Err(e) => {
                tracing::warn!(eni = eni_id, attempt, "delete failed: {e}");
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
        }
    }
    tracing::error!(
        eni = eni_id,
        "could not delete ENI; the leak sweep at the next start removes it"
    );
}

/// Polls until EC2 reports the attachment `attached` (an attach answers `attaching`).
async fn wait_attached(ec2: &Ec2, eni_id: &str) -> bool {
    let start = Instant::now();
    let mut delay = Duration::from_millis(20);
    while start.elapsed() < ATTACH_WAIT {
        if let Ok(v) = ec2
            .describe_network_interfaces_by_id(&[eni_id.to_string()])
            .await
        {
            if v.first()
                .and_then(|n| n.attachment.as_ref())
                .is_some_and(|a| a.status == "attached")
            {
                return true;
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(500));
    }
    false
}

async fn wait_detached(ec2: &Ec2, eni_id: &str) -> bool {
    let start = Instant::now();
    let mut delay = Duration::from_millis(50);
    while start.elapsed() < DETACH_WAIT {
        match ec2
            .describe_network_interfaces_by_id(&[eni_id.to_string()])
            .await
        {
            Ok(v)
                if v.first()
                    .is_none_or(|n| n.attachment.is_none() || n.status == "available") =>
            {
                return true
            }
            Err(e) if e.is_not_found() => return true,
            _ => {}
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
    false
}

/// Detach + delete a surplus ENI (never the primary: the core never plans that).
async fn delete_eni(shared: &Shared, ec2: &Ec2, eni_id: &str) -> Result<(), Ec2Error> {
    let attachment = shared
        .attachments
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(eni_id)
        .cloned();
    if let Some(att) = attachment {
        match ec2.detach_network_interface(&att, false).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        wait_detached(ec2, eni_id).await;
    }
    match ec2.delete_network_interface(eni_id).await {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    shared
        .attachments
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(eni_id);
    shared.pool().remove_eni(eni_id);
    tracing::info!(eni = eni_id, "freed surplus ENI");
    Ok(())
}

/// Node setup (interface, MTU, route table N) of every secondary ENI, when enabled.
/// Idempotent; failures are logged and retried at the next periodic pass.
pub async fn setup_node_enis(shared: &Shared) {
    let Some(node) = &shared.opts.node_network else {
        return;
    };
    let enis: Vec<EniInfo> = shared
        .pool()
        .enis()
        .filter(|e| !e.info.primary && !e.deleting)
        .map(|e| e.info.clone())
        .collect();
    for e in enis {
        let spec = NodeEni {
            mac: e.mac,
            device_number: e.device_number,
            subnet: e.subnet_cidr,
            primary_ip: e.primary_ip,
            mtu: shared.opts.mtu,
        };
        if let Err(err) = node.setup_eni(&spec).await {
            tracing::error!(eni = %e.id, "node setup failed: {err:#}");
        }
    }
}

/// The node firewall (SNAT to the primary IP, connmark for the primary ENI) from the static
/// facts and the options, when the node datapath is enabled. Idempotent (re-applied on each
/// periodic pass to repair drift); failures are logged and retried at the next pass.
pub async fn setup_node_firewall(shared: &Shared) {
    let Some(node) = &shared.opts.node_network else {
        return;
    };
    let o = &shared.opts;
    let fw = NodeFirewall {
        primary_mac: shared.facts.primary_mac.clone(),
        primary_ip: shared.facts.primary_ip,
        vpc_cidrs: shared.facts.vpc_cidrs.clone(),
        exclude_snat_cidrs: o.exclude_snat_cidrs.clone(),
        randomize_snat: o.randomize_snat,
        external_snat: o.external_snat,
        node_port_support: o.node_port_support,
        veth_prefix: o.conflist.veth_prefix.clone(),
    };
    if let Err(err) = node.setup_node_firewall(&fw).await {
        tracing::error!("node firewall (SNAT, connmark) setup failed: {err:#}");
    }
}

/// Releases assignments whose pod has no datapath on the node any more (no /32 route to its
/// address): the plugin's DEL ran while the agent was unreachable, so the address would leak.
/// Only when the agent manages the node datapath; assignments younger than
/// [`POD_RECLAIM_GRACE`] are kept (an ADD may be building the datapath right now).
pub async fn reclaim_unrouted(shared: &Shared) {
    let Some(node) = &shared.opts.node_network else {
        return;
    };
    let routed = match node.pod_route_ips().await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("listing pod routes failed: {e:#}; no reclaim this time");
            return;
        }
    };
    let released =
        shared
            .pool()
            .reclaim_unrouted(&routed, POD_RECLAIM_GRACE.as_millis() as u64, now_ms());
    if released.is_empty() {
        return;
    }
    for (key, a) in &released {
        tracing::warn!(
            ip = %a.ip,
            container = %key.container_id,
            pod = %format!("{}/{}", a.pod.namespace, a.pod.name),
            "pod datapath is gone (DEL ran while the agent was down): address reclaimed into cooldown"
        );
        shared.metrics.inc_del_ip_req("PodDatapathGone");
    }
    shared.persist().await;
    shared.update_gauges();
    shared.wake.notify_one();
}

/// Deletes ENIs this instance created that are no longer attached (a crash between
/// create and attach, or a failed cleanup).
pub async fn sweep_leaked(shared: &Shared, ec2: &Ec2) {
    match ec2
        .describe_network_interfaces_by_tag(
            TAG_INSTANCE_ID,
            &shared.facts.instance_id,
            Some("available"),
        )
        .await
    {
        Ok(leaked) => {
            for ni in leaked
                .iter()
                .filter(|n| n.description.starts_with(ENI_DESCRIPTION_PREFIX))
            {
                tracing::warn!(eni = %ni.eni_id, "deleting leaked ENI of this instance");
                delete_with_retry(ec2, &ni.eni_id).await;
            }
        }
        Err(e) => tracing::warn!("leaked-ENI sweep failed: {e}"),
    }
}

/// The reconciler task.
pub async fn run(shared: Arc<Shared>, ec2: Ec2, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = shared.opts.reconcile_interval;
    let mut next_full = tokio::time::Instant::now() + interval;
    let mut failures: u32 = 0;
    loop {
        let full = tokio::select! {
            _ = shared.wake.notified() => false,
            _ = tokio::time::sleep_until(next_full) => true,
            _ = stop.changed() => return,
        };
        let timer = shared.metrics.action(if full {
            "reconcilePool"
        } else {
            "increaseIPPool"
        });
        shared
            .metrics
            .inc_reconcile(if full { "periodic" } else { "add" });
        let mut result = Ok(false);
        if full {
            next_full = tokio::time::Instant::now() + interval;
            match sync_from_ec2(&shared, &ec2, UnknownIpPolicy::Free).await {
                Ok(_) => setup_node_enis(&shared).await,
                Err(e) => result = Err(e),
            }
            // The firewall depends on static facts only: repair it even when EC2 fails.
            setup_node_firewall(&shared).await;
        }
        if result.is_ok() {
            result = fill(&shared, &ec2).await;
        }
        drop(timer);
        if result.is_err() {
            shared.metrics.inc_ipamd_error(if full {
                "reconcilePool"
            } else {
                "increaseIPPool"
            });
        }
        shared.update_gauges();
        match result {
            Ok(_) => {
                failures = 0;
                shared.set_error(None);
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(failures, "reconcile pass failed: {e}");
                shared.set_error(Some(e.to_string()));
                let base = Duration::from_millis(50u64.saturating_mul(1 << failures.min(8)))
                    .min(MAX_BACKOFF);
                let jitter = rand::rng().random_range(0.5..1.0);
                tokio::select! {
                    _ = tokio::time::sleep(base.mul_f64(jitter)) => {}
                    _ = stop.changed() => return,
                }
                // Try again right away after the backoff.
                shared.wake.notify_one();
            }
        }
    }
}
