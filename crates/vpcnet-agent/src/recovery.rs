//! Start-up recovery: the pool the agent starts with, and the rule that keeps an address a
//! running pod holds from going to another pod.
//!
//! **The rule.** At start an address on the node's ENIs is handed out only when the agent
//! can prove it free: its own checkpoint, read intact, lists it as free, and no evidence on
//! the node says a pod holds it. Evidence always wins over the checkpoint: an address named
//! by the runtime's CNI result cache (the pod is held under its own container ID, so its DEL
//! releases it), by a host /32 route or by a pod rule (held for an unknown pod) is held as in
//! use. When the checkpoint is lost (no file while the ENIs hold addresses), corrupt or
//! inconsistent, or was imported from the VPC CNI (whose cooldowns lived in its memory), every
//! other address cools down for `VPCNET_POD_RECLAIM_GRACE` (the time an ADD in flight needs
//! to leave evidence) plus `IP_COOLDOWN_PERIOD` before reuse. Nothing is free at once. The
//! exception is a node whose agent provisions nothing (`DISABLE_NETWORK_RESOURCE_PROVISIONING`,
//! `ENABLE_IMDS_ONLY_MODE`): addresses on its ENIs without a checkpoint are how it first
//! starts ([`Origin::PreAttached`]), free unless evidence holds them.
//!
//! The checkpoint is read exactly once ([`restore`]); a lost, corrupt or inconsistent one is
//! logged as an error naming what was moved aside and counted in
//! `vpcnet_checkpoint_recoveries`.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use vpcnet_ec2::NetworkInterface;
use vpcnet_ipam::{Checkpoint, PodKey, PodRef, Pool, UnknownIpPolicy, WarmConfig};

use crate::checkpoint_file::{CheckpointStore, Loaded};
use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::options::AgentOptions;
use crate::state::Shared;

/// Where the starting pool came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// No checkpoint and no address on the ENIs: a fresh node.
    Fresh,
    /// The agent's own checkpoint.
    Own,
    /// The VPC CNI's checkpoint, converted (the in-place swap).
    Imported,
    /// No checkpoint although the ENIs hold addresses.
    Lost,
    /// No checkpoint, and provisioning is disabled (`DISABLE_NETWORK_RESOURCE_PROVISIONING`,
    /// `ENABLE_IMDS_ONLY_MODE`): the ENIs' addresses were attached beforehand by whoever
    /// provisions the node, which is how such a node first starts. They are free unless the
    /// node's evidence (CNI cache, routes, rules) says a pod holds one; no extra cooldown,
    /// which would keep a new node from serving pods for `VPCNET_POD_RECLAIM_GRACE` +
    /// `IP_COOLDOWN_PERIOD`.
    PreAttached,
    /// The checkpoint could not be read or parsed; moved aside to `moved_to`.
    Corrupt {
        reason: String,
        moved_to: Option<PathBuf>,
    },
    /// The checkpoint parsed but contradicts itself or the pool's limits.
    Inconsistent { reason: String },
}

impl Origin {
    /// The `reason` label of `vpcnet_checkpoint_recoveries`, for an unusable checkpoint.
    pub fn recovery_reason(&self) -> Option<&'static str> {
        match self {
            Origin::Lost => Some("lost"),
            Origin::Corrupt { .. } => Some("corrupt"),
            Origin::Inconsistent { .. } => Some("inconsistent"),
            Origin::Fresh | Origin::Own | Origin::Imported | Origin::PreAttached => None,
        }
    }

    /// How addresses the pool does not know are adopted: free only when the pool's record is
    /// the agent's own intact checkpoint (or there is nothing to know).
    pub fn unknown_policy(&self, settle_ms: u64) -> UnknownIpPolicy {
        match self {
            Origin::Fresh | Origin::Own | Origin::PreAttached => UnknownIpPolicy::Free,
            _ => UnknownIpPolicy::Cooling { settle_ms },
        }
    }
}

/// The starting pool and where it came from.
pub struct Restored {
    pub pool: Pool,
    pub origin: Origin,
}

/// Reads the checkpoint once; without one, imports the VPC CNI's (`opts.vpc_cni_checkpoint`)
/// onto `enis` (EC2's view at start). Logs and counts an unusable checkpoint. Errors: the VPC
/// CNI's checkpoint exists but cannot be imported (the agent stops rather than start without
/// the running pods' addresses).
pub fn restore(
    opts: &AgentOptions,
    store: &dyn CheckpointStore,
    enis: &[NetworkInterface],
    config: WarmConfig,
    metrics: &Metrics,
) -> anyhow::Result<Restored> {
    let (checkpoint, origin) = match store.load(now_ms()) {
        Loaded::Valid(cp) => (Some(cp), Origin::Own),
        Loaded::Corrupt { reason, moved_to } => (None, Origin::Corrupt { reason, moved_to }),
        Loaded::Missing => {
            let imported = match &opts.vpc_cni_checkpoint {
                Some(path) => crate::vpc_cni_checkpoint::import_at_start(store, path, enis)?,
                None => None,
            };
            match imported {
                Some(cp) => (Some(cp), Origin::Imported),
                None if enis_hold_addresses(enis) && !opts.provisioning.provisions() => {
                    (None, Origin::PreAttached)
                }
                None if enis_hold_addresses(enis) => (None, Origin::Lost),
                None => (None, Origin::Fresh),
            }
        }
    };
    let mut pool = Pool::new(config);
    let origin = match checkpoint {
        Some(cp) => restore_into(&mut pool, &cp, origin),
        None => origin,
    };
    report(&origin, store.location(), metrics);
    Ok(Restored { pool, origin })
}

/// Loads `cp` into `pool`; an inconsistent checkpoint leaves the pool empty.
fn restore_into(pool: &mut Pool, cp: &Checkpoint, origin: Origin) -> Origin {
    match pool.restore(cp) {
        Ok(()) => {
            tracing::info!(
                assignments = cp.assignments.len(),
                cooldowns = cp.cooldowns.len(),
                ?origin,
                "restored checkpoint"
            );
            origin
        }
        Err(e) => {
            *pool = Pool::new(pool.config().clone());
            Origin::Inconsistent {
                reason: e.to_string(),
            }
        }
    }
}

/// Whether any ENI holds a secondary address or prefix (a node that ran pods before).
fn enis_hold_addresses(enis: &[NetworkInterface]) -> bool {
    enis.iter()
        .any(|e| !e.prefixes.is_empty() || e.secondary_ips.iter().any(|ip| *ip != e.primary_ip))
}

/// One error line for an unusable checkpoint, naming what was moved aside, and the metric.
fn report(origin: &Origin, location: String, metrics: &Metrics) {
    let Some(reason) = origin.recovery_reason() else {
        return;
    };
    metrics.inc_checkpoint_recovery(reason);
    const AFTER: &str = "rebuilding from EC2: addresses running pods hold are kept on evidence (CNI cache, routes, rules), every other address cools down before reuse";
    match origin {
        Origin::Corrupt { reason, moved_to } => tracing::error!(
            path = %location,
            moved_to = %moved_to.as_ref().map_or("(could not be moved)".into(), |p| p.display().to_string()),
            "checkpoint is corrupt ({reason}); {AFTER}"
        ),
        Origin::Inconsistent { reason } => {
            tracing::error!(path = %location, "checkpoint is inconsistent ({reason}); {AFTER}")
        }
        _ => tracing::error!(
            path = %location,
            "checkpoint is missing although the node's ENIs hold addresses (the node rebooted, which empties /run, or the agent's state directory was lost); {AFTER}"
        ),
    }
}

/// What the node shows of running pods at start.
#[derive(Debug, Default)]
pub struct Evidence {
    /// The runtime's CNI result cache for the pod network.
    pub cached: Vec<crate::cni_cache::CachedPod>,
    /// Host /32 routes to pods.
    pub routes: BTreeSet<Ipv4Addr>,
    /// Pod rules (512) to addresses.
    pub rules: BTreeSet<Ipv4Addr>,
}

/// Reads the evidence (what cannot be read is logged and left out: the cooldown still
/// protects those addresses).
pub async fn gather(shared: &Shared) -> Evidence {
    let mut ev = Evidence::default();
    if let Some(dir) = &shared.opts.cni_cache_dir {
        match crate::cni_cache::read(dir, &shared.opts.conflist.name) {
            Ok((cached, skipped)) => {
                if skipped > 0 {
                    tracing::warn!(dir = %dir.display(), skipped, "CNI cache entries of the pod network that could not be read were skipped");
                }
                ev.cached = cached;
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "reading the CNI cache failed: {e}; running pods are known from routes and rules only")
            }
        }
    }
    if let Some(node) = shared.node_network() {
        match tokio::try_join!(node.pod_route_ips(), node.pod_rule_ips()) {
            Ok((routes, rules)) => {
                ev.routes = routes;
                ev.rules = rules;
            }
            Err(e) => tracing::warn!(
                "listing pod routes and rules at start failed: {e:#}; addresses of running pods the checkpoint lacks are protected by the cooldown only"
            ),
        }
    }
    ev
}

/// Holds every address the evidence names that the pool does not list as assigned (see the
/// module docs). Runs before the agent serves, so no ADD races it. Returns how many were held.
pub fn hold(shared: &Shared, ev: &Evidence) -> usize {
    let now = now_ms();
    let mut pool = shared.pool();
    let mut held = Vec::new();
    for p in &ev.cached {
        for ip in &p.ips {
            let key = PodKey::new(p.container_id.clone(), p.if_name.clone());
            let pod = PodRef {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            };
            if pool.hold_for(key, pod, *ip, now) {
                held.push((*ip, "cni_cache"));
            }
        }
    }
    for (ips, evidence) in [(&ev.routes, "route"), (&ev.rules, "rule")] {
        for ip in ips {
            if pool.hold_unknown(*ip, now) {
                held.push((*ip, evidence));
            }
        }
    }
    drop(pool);
    for (ip, evidence) in &held {
        shared.metrics().inc_evidence_hold(evidence);
        tracing::warn!(address = %ip, evidence, "address in use by a running pod the checkpoint does not list: held (the reclaim frees it once the pod's route and host veth are gone)");
    }
    held.len()
}
