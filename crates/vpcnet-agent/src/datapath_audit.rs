//! Datapath self-healing: on every periodic pass (before the node setup re-applies ENI tables
//! and the firewall, so their drift is seen first) each assigned pod's node side and the
//! node's prerequisites are checked, repaired where that is safe, and reported in
//! `/v1/datapath`, the `vpcnet_datapath_*` metrics and, for a problem that cuts every pod off,
//! `/healthz`.
//!
//! Checked per pod, whatever its age (holds of unknown pods are skipped: their veth is not
//! known): the host /32 route via its
//! host veth, rule 512 and (secondary ENI) rule 1536, the host veth (present, up) and its MAC
//! (the one the pod's gateway neighbour points to). Per node: `net.ipv4.ip_forward` (set back
//! to 1, in the agent's namespace only), each secondary ENI's interface and table (device number + 1), the
//! nftables table `ip vpcnet` and `rp_filter` of the primary interface (the firewall is
//! re-applied). An ENI whose interface is gone stops serving addresses and EC2 is described
//! again at once.
//!
//! Readiness: only IPv4 forwarding left disabled makes `/healthz` answer 503 (`datapath: ...`):
//! every pod of the node is cut off then. Problems of single pods, of one ENI's table or of
//! the firewall are reported (introspection, metrics, logs) without taking the node out of
//! service, since its other pods still work.
//!
//! A pod assigned less than `VPCNET_POD_RECLAIM_GRACE` ago may have its ADD still building the
//! datapath: until its host veth exists it is not a finding; once the veth is there, a
//! missing route or rule is repaired at once (what the plugin adds next tolerates what the
//! audit added first). The grace guards only the reclaim.

use std::collections::BTreeMap;
use std::sync::Arc;

use vpcnet_datapath::audit::{Finding, Kind, PodExpect};
use vpcnet_introspection as doc;
use vpcnet_ipam::{PodKey, PodRef, UNKNOWN_POD_PREFIX};

use crate::clock::now_ms;
use crate::node::{AuditReport, AuditRequest};
use crate::state::Shared;

/// One audited pod, as the pool knows it.
struct PodRow {
    container_id: String,
    namespace: String,
    name: String,
    want: PodExpect,
}

/// The host veth the plugin named for a pod's attachment `key` (`vpcnet-cni`'s rule:
/// namespace and name when the runtime gave both, else the container ID; a multi-homed pod's
/// further interface hashes its index in too).
pub fn host_veth_of(prefix: &str, key: &PodKey, pod: &PodRef) -> String {
    vpcnet_datapath::names::pod_host_veth_name(
        prefix,
        &pod.namespace,
        &pod.name,
        &key.container_id,
        key.interface_index(),
    )
}

/// The pods to audit now: every known pod with its address on an ENI the pool holds; those
/// assigned less than `pod_reclaim_grace` ago are marked `building`.
fn pods_to_audit(shared: &Shared, now: u64) -> Vec<PodRow> {
    let grace = shared.opts.pod_reclaim_grace.as_millis() as u64;
    let prefix = &shared.opts.conflist.veth_prefix;
    let pool = shared.pool();
    pool.assignments()
        .filter(|(k, _)| !k.container_id.starts_with(UNKNOWN_POD_PREFIX))
        .filter_map(|(k, a)| {
            let eni = pool.eni_of(a.ip)?;
            Some(PodRow {
                container_id: k.container_id.clone(),
                namespace: a.pod.namespace.clone(),
                name: a.pod.name.clone(),
                want: PodExpect {
                    ip: a.ip,
                    host_veth: host_veth_of(prefix, k, &a.pod),
                    route_table: if eni.info.primary {
                        0
                    } else {
                        vpcnet_datapath::node::card_route_table(
                            eni.info.network_card,
                            eni.info.device_number,
                        )
                    },
                    building: now.saturating_sub(a.assigned_at_ms) < grace,
                    check_mac: !a.foreign_datapath,
                },
            })
        })
        .collect()
}

/// One audit pass (see the module docs). Does nothing without a node datapath or when the
/// node network does not audit.
pub async fn run_pass(shared: &Arc<Shared>) {
    let Some(node) = shared.node_network() else {
        return;
    };
    let rows = pods_to_audit(shared, now_ms());
    let enis: Vec<_> = shared
        .pool()
        .enis()
        .filter(|e| !e.info.primary && !e.deleting)
        .map(|e| crate::reconciler::node_setup::node_eni(&e.info, shared.opts.mtu))
        .collect();
    // Only marks that exist before the checks may be lifted by them: a removal event during
    // the pass is newer than what the pass saw.
    let marked_before: Vec<String> = {
        let pool = shared.pool();
        pool.enis()
            .filter(|e| pool.interface_gone(&e.info.id))
            .map(|e| e.info.id.clone())
            .collect()
    };
    let s = shared.clone();
    let req = AuditRequest {
        pods: rows.iter().map(|r| r.want.clone()).collect(),
        enis,
        firewall: crate::reconciler::node_setup::node_firewall(&shared.opts, &shared.facts),
        repair: true,
        still_assigned: Box::new(move |ip| s.pool().assignments().any(|(_, a)| a.ip == ip)),
    };
    shared.metrics().inc_datapath_audit();
    match node.audit(&req).await {
        Ok(None) => {}
        Ok(Some(report)) => record(shared, &req, &rows, &marked_before, report),
        Err(e) => {
            tracing::warn!("datapath audit failed: {e:#}; retried at the next pass");
            shared.health().update_datapath(|d| {
                d.passes += 1;
                d.last_error = Some(format!("{e:#}"));
            });
        }
    }
}

fn doc_finding(f: &Finding) -> doc::Finding {
    doc::Finding {
        kind: f.kind.as_str().to_string(),
        object: f.object.clone(),
        problem: f.problem.clone(),
        repaired: f.repaired(),
        error: f.unrepaired.clone(),
    }
}

/// Applies a pass's report: ENIs without interface, logs, metrics, `/v1/datapath`.
fn record(
    shared: &Shared,
    req: &AuditRequest,
    rows: &[PodRow],
    marked_before: &[String],
    report: AuditReport,
) {
    let now = now_ms();
    mark_eni_interfaces(shared, req, marked_before, &report.node);
    let mut unrepaired: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut repairs = Vec::new();
    let all = report.node.iter().chain(report.pods.iter().flatten());
    for f in all {
        if f.repaired() {
            tracing::warn!(kind = f.kind.as_str(), object = %f.object, "datapath repaired: {}", f.problem);
            shared.metrics().inc_datapath_repair(f.kind.as_str());
            repairs.push(f.clone());
        } else {
            tracing::error!(kind = f.kind.as_str(), object = %f.object, reason = ?f.unrepaired, "datapath problem not repaired: {}", f.problem);
            *unrepaired.entry(f.kind.as_str()).or_default() += 1;
        }
    }
    shared
        .metrics()
        .set_datapath_unrepaired(unrepaired.iter().map(|(k, n)| (*k, *n)));
    let not_ready = report
        .node
        .iter()
        .find(|f| f.kind == Kind::IpForward && !f.repaired())
        .map(|f| format!("{} ({})", f.problem, f.unrepaired.as_deref().unwrap_or("")));
    let none = Vec::new();
    let pods = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r, report.pods.get(i).unwrap_or(&none)))
        .map(|(r, f)| doc::PodCheck {
            container_id: r.container_id.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            ip: r.want.ip.to_string(),
            host_veth: r.want.host_veth.clone(),
            route_table: r.want.route_table,
            findings: f.iter().map(doc_finding).collect(),
        })
        .collect();
    shared.health().update_datapath(|d| {
        d.passes += 1;
        d.checked_at_ms = Some(now);
        d.last_error = None;
        d.node = report.node.iter().map(doc_finding).collect();
        d.pods = pods;
        d.unrepaired = unrepaired.values().sum::<u64>() as u32;
        d.not_ready = not_ready;
        for f in repairs {
            *d.repairs.entry(f.kind.as_str().to_string()).or_default() += 1;
            d.last_repair = Some(doc::Repair {
                at_ms: now,
                kind: f.kind.as_str().to_string(),
                object: f.object,
                problem: f.problem,
            });
        }
    });
}

/// ENIs whose interface the audit did not find stop serving addresses (and EC2 is described
/// again); those marked before the pass (`marked_before`) whose interface is back serve again.
fn mark_eni_interfaces(
    shared: &Shared,
    req: &AuditRequest,
    marked_before: &[String],
    node: &[Finding],
) {
    let gone: Vec<&str> = node
        .iter()
        .filter(|f| f.kind == Kind::EniInterface)
        .map(|f| f.object.as_str())
        .collect();
    let mut pool = shared.pool();
    let mut describe = false;
    for e in &req.enis {
        let Some(id) = pool
            .enis()
            .find(|x| x.info.mac.eq_ignore_ascii_case(&e.mac))
            .map(|x| x.info.id.clone())
        else {
            continue;
        };
        if gone.iter().any(|m| m.eq_ignore_ascii_case(&e.mac)) {
            describe |= pool.mark_interface_gone(&id);
        } else if marked_before.contains(&id) && pool.mark_interface_back(&id) {
            tracing::info!(eni = %id, "the ENI's interface is back: its addresses serve again");
        }
    }
    drop(pool);
    if describe {
        shared.enis().request_describe();
        shared.pool_state().wake_reconciler();
    }
}

/// Called for each link the kernel removed: if it was a secondary ENI's interface, the ENI
/// stops serving addresses at once and the reconciler describes EC2 right away (the ENI was
/// detached behind the agent's back; the describe drops it and its addresses).
pub fn on_link_removed(shared: &Shared, mac: &str, name: &str) -> bool {
    let id = {
        let mut pool = shared.pool();
        let Some(id) = pool
            .enis()
            .find(|e| !e.info.primary && !e.deleting && e.info.mac.eq_ignore_ascii_case(mac))
            .map(|e| e.info.id.clone())
        else {
            return false;
        };
        if !pool.mark_interface_gone(&id) {
            return false;
        }
        id
    };
    tracing::warn!(eni = %id, interface = name, mac, "the ENI's interface disappeared: its addresses are no longer handed out; describing EC2 now");
    shared.metrics().inc_eni_interface_gone();
    shared.enis().request_describe();
    shared.pool_state().wake_reconciler();
    true
}

/// Subscribes to link removals now (so no event after start-up is missed) and returns the
/// watcher task: it reacts to each removed link ([`on_link_removed`]) until `stop`. `None`
/// without events (a fake node network, the node datapath off) or when the subscription fails
/// (logged): the periodic audit still notices a vanished interface.
pub fn link_watcher(
    shared: &Arc<Shared>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
    let node = shared.node_network()?;
    let mut rx = match node.removed_links() {
        Ok(rx) => rx?,
        Err(e) => {
            tracing::warn!("subscribing to link removals failed: {e:#}; a detached ENI is noticed at the next periodic pass");
            return None;
        }
    };
    let shared = shared.clone();
    Some(async move {
        loop {
            tokio::select! {
                l = rx.recv() => match l {
                    Some(l) => {
                        on_link_removed(&shared, &l.mac, &l.name);
                    }
                    None => {
                        tracing::warn!("link-removal events ended; a detached ENI is noticed at the next periodic pass");
                        return;
                    }
                },
                _ = stop.changed() => return,
            }
        }
    })
}
