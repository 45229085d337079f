//! The pool: EC2's view of the node's ENIs plus assignments and cooldowns.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::config::WarmConfig;
use crate::model::{Assignment, Eni, IpSet, PodKey};
use crate::plan::Action;

mod assign;
mod conntrack;
mod drift;
mod ec2_sync;
#[cfg(test)]
mod fixtures;
mod interface_gone;
mod multi_nic;
mod persist;
mod prefix_fallback;

pub use drift::Drift;
pub(crate) use multi_nic::interface_index;
pub use multi_nic::EXTRA_INTERFACE_PREFIX;
pub use prefix_fallback::PrefixFallback;

/// Container-ID prefix of the holds for pods the agent has no record of
/// ([`Pool::hold_unknown`]).
pub const UNKNOWN_POD_PREFIX: &str = "unknown:";

/// The text of [`AssignError::PoolEmpty`]: what the pod waits for.
fn pool_empty_text(cooling: u32, pending_growth: u32) -> String {
    if pending_growth == 0 {
        format!(
            "no free IP right now: no more can be attached and {cooling} released addresses are \
             still in their IP_COOLDOWN_PERIOD; retry, one frees up when its cooldown ends"
        )
    } else {
        format!(
            "no free IP right now ({cooling} cooling down, {pending_growth} more can be attached); \
             the agent is allocating more, retry"
        )
    }
}

/// What [`AssignError::AtLimit`] adds while prefix delegation falls back to secondary IPs.
const FALLBACK_NOTE: &str = "; the limit is lower for now: prefix delegation fell back to \
     secondary IPs (no free /28 in the subnet), one address per slot instead of 16, until \
     prefixes can be assigned again (Node condition vpcnet.io/PrefixBlocksAvailable)";

/// Why no address could be handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignError {
    /// Nothing free right now, but the pool can still grow or addresses are cooling down:
    /// retry shortly (gRPC UNAVAILABLE).
    #[error("{}", pool_empty_text(*cooling, *pending_growth))]
    PoolEmpty { cooling: u32, pending_growth: u32 },
    /// Every ENI the node may attach is attached and full, and every address is assigned:
    /// permanent for this node (gRPC RESOURCE_EXHAUSTED).
    #[error("node is at its ENI/IP limit: {assigned} IPs assigned on {enis} ENIs (limit {max_enis} ENIs × {ips_per_eni} pod IPs each){}", if *prefix_fallback { FALLBACK_NOTE } else { "" })]
    AtLimit {
        assigned: u32,
        enis: u32,
        max_enis: u32,
        ips_per_eni: u32,
        /// Prefix delegation has fallen back to secondary IPs ([`Pool::fall_back_to_ips`]):
        /// the slots hold one address each, not 16, until prefixes return.
        prefix_fallback: bool,
    },
    /// Every address attached to the node is assigned or cooling down, and the agent adds
    /// none itself (`DISABLE_NETWORK_RESOURCE_PROVISIONING` or `ENABLE_IMDS_ONLY_MODE`):
    /// an address frees up only by a pod's deletion (then its cooldown) or by someone
    /// attaching more (gRPC RESOURCE_EXHAUSTED, UNAVAILABLE while some are cooling down).
    #[error("no free IP: the {total} pod addresses attached to this node are all in use ({assigned} assigned, {cooling} cooling down) and network resource provisioning is disabled (DISABLE_NETWORK_RESOURCE_PROVISIONING or ENABLE_IMDS_ONLY_MODE is true), so the agent attaches no ENI, secondary IP or prefix itself: attach more to the node's ENIs (the agent picks them up at its next reconcile), or move the pod to another node")]
    ProvisioningDisabled {
        total: u32,
        assigned: u32,
        cooling: u32,
    },
}

/// The address handed to a pod, with the facts the plugin needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Granted {
    pub ip: Ipv4Addr,
    pub eni_id: String,
    /// Attachment device index of the ENI (0 = primary).
    pub device_number: u32,
    /// Attachment network card of the ENI.
    pub network_card: u32,
    pub primary_eni: bool,
    pub subnet_cidr: Ipv4Net,
    /// Whether this was an earlier assignment returned again (idempotent ADD).
    pub existing: bool,
}

/// What a reconcile changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    pub added_enis: Vec<String>,
    pub removed_enis: Vec<String>,
    pub added_ips: Vec<Ipv4Addr>,
    pub dropped_ips: Vec<Ipv4Addr>,
    /// Assignments whose address EC2 no longer lists on the node (flagged, kept until the
    /// pod is deleted; the address is never handed out again from this pool).
    pub orphaned: Vec<(PodKey, Ipv4Addr)>,
}

/// How to treat addresses EC2 lists that the pool does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownIpPolicy {
    /// Adopt as free (normal operation, fresh node, trusted checkpoint).
    Free,
    /// Adopt as released `settle_ms` from now, so they cool down for `settle_ms` plus the
    /// cooldown before reuse (rebuilding after a lost, corrupt or imported checkpoint: a
    /// running pod may still use them, and the evidence that would say so — its route, its
    /// runtime's records — needs up to `settle_ms` to appear).
    Cooling {
        /// Extra time before the cooldown starts (ms).
        settle_ms: u64,
    },
}

/// Counts for status, introspection (`/v1/enis` `summary`) and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolSummary {
    /// Attached ENIs (the primary included).
    pub enis: u32,
    /// ENIs the node may attach, over every managed network card.
    pub max_enis: u32,
    /// Pod addresses attached (secondary /32s plus prefix /32s).
    pub total_ips: u32,
    pub assigned_ips: u32,
    pub cooling_ips: u32,
    /// Assignable now.
    pub available_ips: u32,
    /// Being returned to EC2.
    pub releasing_ips: u32,
    pub prefixes: u32,
    pub max_ips: u32,
    /// Assignments whose address EC2 no longer lists.
    pub orphaned: u32,
    /// Prefix delegation falling back to secondary /32s (a fragmented subnet), from the
    /// first failed prefix request until a prefix arrives.
    pub prefix_fallback: Option<PrefixFallback>,
}

/// Per-ENI counts used by the plan.
#[derive(Debug, Clone)]
pub(crate) struct EniStats {
    pub id: String,
    pub device_number: u32,
    pub network_card: u32,
    pub primary: bool,
    pub deleting: bool,
    pub slots_used: u32,
    pub total: u32,
    pub assigned: u32,
    pub cooling: u32,
    /// Assignable now.
    pub available: Vec<Ipv4Addr>,
    /// Assignable and free for at least the surplus hold.
    pub held_free: Vec<Ipv4Addr>,
    /// Its subnet recently had no room for another address or prefix
    /// ([`Pool::mark_subnet_full`]): the plan grows other ENIs or creates one instead.
    pub subnet_full: bool,
    /// Prefixes whose every address is assignable and held.
    pub held_free_prefixes: Vec<Ipv4Net>,
    /// Prefixes whose every address is assignable.
    pub free_prefixes: u32,
}

/// The node's address pool. See the crate docs.
#[derive(Debug, Clone)]
pub struct Pool {
    cfg: WarmConfig,
    enis: BTreeMap<String, Eni>,
    assignments: BTreeMap<PodKey, Assignment>,
    by_ip: BTreeMap<Ipv4Addr, PodKey>,
    /// Address → release time (ms since the epoch).
    cooldowns: BTreeMap<Ipv4Addr, u64>,
    /// Released addresses whose node connection-tracking entries are not known to be gone
    /// since their cooldown ended: never handed out while listed ([`Pool::conntrack_due`]).
    conntrack: BTreeMap<Ipv4Addr, conntrack::Stage>,
    releasing: IpSet,
    releasing_prefixes: BTreeSet<Ipv4Net>,
    /// Releases whose EC2 outcome is unknown (timeout, 5xx, lost reply): the addresses stay
    /// out of service (still in `releasing`) until the next [`Pool::reconcile`] settles them.
    unsettled: IpSet,
    unsettled_prefixes: BTreeSet<Ipv4Net>,
    /// ENIs whose DeleteEni outcome is unknown: kept `deleting` until a reconcile.
    unsettled_enis: BTreeSet<String>,
    /// Consecutive reclaim checks that found no datapath for the assignment.
    reclaim_misses: BTreeMap<PodKey, u32>,
    /// ENIs whose network interface vanished from the node ([`Pool::mark_interface_gone`]):
    /// nothing is handed out from them until the interface is back or a describe drops them.
    interface_gone: BTreeSet<String>,
    /// Assignable addresses left right after recent assignments: (time, count), times
    /// increasing, counts strictly increasing (a later, lower count replaces higher ones).
    /// Entries older than the surplus hold are dropped. The plan returns only the surplus
    /// that lasted the whole hold ([`Pool::recent_low_available`]).
    low_water: std::collections::VecDeque<(u64, u32)>,
    /// ENI → until when (ms) its subnet counts as full ([`Pool::mark_subnet_full`]).
    subnet_full: BTreeMap<String, u64>,
    /// Prefix delegation growing with /32s after `InsufficientCidrBlocks`
    /// ([`Pool::fall_back_to_ips`]).
    prefix_fallback: Option<PrefixFallback>,
}

/// How long an ENI whose subnet answered "no free addresses" or "no CIDR blocks" is not
/// grown: 2 minutes, the VPC CNI's back-off after the same errors.
pub const SUBNET_FULL_MS: u64 = 120_000;

impl Pool {
    /// An empty pool (no ENIs known yet: feed [`Pool::reconcile`] with EC2's view).
    pub fn new(cfg: WarmConfig) -> Self {
        Pool {
            cfg,
            enis: BTreeMap::new(),
            assignments: BTreeMap::new(),
            by_ip: BTreeMap::new(),
            cooldowns: BTreeMap::new(),
            conntrack: BTreeMap::new(),
            releasing: IpSet::new(),
            releasing_prefixes: BTreeSet::new(),
            unsettled: IpSet::new(),
            unsettled_prefixes: BTreeSet::new(),
            unsettled_enis: BTreeSet::new(),
            reclaim_misses: BTreeMap::new(),
            interface_gone: BTreeSet::new(),
            low_water: Default::default(),
            subnet_full: BTreeMap::new(),
            prefix_fallback: None,
        }
    }

    pub fn config(&self) -> &WarmConfig {
        &self.cfg
    }

    /// Replaces the settings (limits, targets); takes effect at the next plan.
    pub fn set_config(&mut self, cfg: WarmConfig) {
        self.cfg = cfg;
    }

    pub fn enis(&self) -> impl Iterator<Item = &Eni> {
        self.enis.values()
    }

    pub fn eni(&self, id: &str) -> Option<&Eni> {
        self.enis.get(id)
    }

    pub fn assignments(&self) -> impl Iterator<Item = (&PodKey, &Assignment)> {
        self.assignments.iter()
    }

    pub fn assignment(&self, key: &PodKey) -> Option<&Assignment> {
        self.assignments.get(key)
    }

    /// Release times of addresses still known to the pool (cooling or cooled).
    pub fn cooldowns(&self) -> impl Iterator<Item = (Ipv4Addr, u64)> + '_ {
        self.cooldowns.iter().map(|(ip, t)| (*ip, *t))
    }

    /// Whether `ip` is cooling down at `now_ms`.
    pub fn is_cooling(&self, ip: Ipv4Addr, now_ms: u64) -> bool {
        self.cooldowns
            .get(&ip)
            .is_some_and(|r| now_ms < r.saturating_add(self.cfg.cooldown_ms))
    }

    /// ENI holding `ip`, if any.
    pub fn eni_of(&self, ip: Ipv4Addr) -> Option<&Eni> {
        self.enis.values().find(|e| e.holds(ip))
    }

    fn assignable(&self, ip: Ipv4Addr, now_ms: u64) -> bool {
        !self.by_ip.contains_key(&ip)
            && !self.releasing.contains(&ip)
            && !self.is_cooling(ip, now_ms)
            && !self.conntrack.contains_key(&ip)
            && !self.releasing_prefixes.iter().any(|p| p.contains(&ip))
    }

    fn free_since(&self, ip: Ipv4Addr, added_ms: u64) -> u64 {
        let cooled = self
            .cooldowns
            .get(&ip)
            .map_or(0, |r| r.saturating_add(self.cfg.cooldown_ms));
        added_ms.max(cooled)
    }

    fn assigned_per_eni(&self) -> BTreeMap<&str, u32> {
        let mut m = BTreeMap::new();
        for a in self.assignments.values() {
            *m.entry(a.eni_id.as_str()).or_insert(0) += 1;
        }
        m
    }

    pub(crate) fn eni_stats(&self, now_ms: u64) -> Vec<EniStats> {
        let per_eni = self.assigned_per_eni();
        let hold = self.cfg.surplus_hold_ms;
        self.enis
            .values()
            .map(|e| {
                let mut s = EniStats {
                    id: e.info.id.clone(),
                    device_number: e.info.device_number,
                    network_card: e.info.network_card,
                    primary: e.info.primary,
                    // An ENI without its interface serves nothing: counted like one being deleted.
                    deleting: e.deleting || self.interface_gone.contains(&e.info.id),
                    slots_used: e.slots_used(),
                    total: 0,
                    assigned: per_eni.get(e.info.id.as_str()).copied().unwrap_or(0),
                    cooling: 0,
                    available: Vec::new(),
                    held_free: Vec::new(),
                    held_free_prefixes: Vec::new(),
                    free_prefixes: 0,
                    subnet_full: self
                        .subnet_full
                        .get(&e.info.id)
                        .is_some_and(|until| now_ms < *until),
                };
                for (ip, added) in e.ips.iter().map(|(i, t)| (*i, *t)) {
                    if self.releasing.contains(&ip) {
                        continue;
                    }
                    s.total += 1;
                    if self.held_back(ip, now_ms) && !self.by_ip.contains_key(&ip) {
                        s.cooling += 1;
                    }
                    if self.assignable(ip, now_ms) {
                        s.available.push(ip);
                        if self.free_since(ip, added).saturating_add(hold) <= now_ms {
                            s.held_free.push(ip);
                        }
                    }
                }
                for (p, added) in e.prefixes.iter().map(|(p, t)| (*p, *t)) {
                    if self.releasing_prefixes.contains(&p) {
                        continue;
                    }
                    let (mut all_free, mut all_held) = (true, true);
                    for ip in Eni::prefix_addresses(p) {
                        s.total += 1;
                        if self.held_back(ip, now_ms) && !self.by_ip.contains_key(&ip) {
                            s.cooling += 1;
                        }
                        if self.assignable(ip, now_ms) {
                            s.available.push(ip);
                            if self.free_since(ip, added).saturating_add(hold) > now_ms {
                                all_held = false;
                            }
                        } else {
                            all_free = false;
                        }
                    }
                    if all_free {
                        s.free_prefixes += 1;
                        if all_held {
                            s.held_free_prefixes.push(p);
                        }
                    }
                }
                s
            })
            .collect()
    }

    /// Counts at `now_ms`.
    pub fn summary(&self, now_ms: u64) -> PoolSummary {
        let stats = self.eni_stats(now_ms);
        PoolSummary {
            enis: self.enis.len() as u32,
            max_enis: self
                .cfg
                .cards()
                .map(|c| self.cfg.for_card(c).max_enis())
                .sum(),
            total_ips: stats.iter().map(|s| s.total).sum(),
            assigned_ips: self.assignments.len() as u32,
            cooling_ips: stats.iter().map(|s| s.cooling).sum(),
            available_ips: stats
                .iter()
                .filter(|s| !s.deleting && self.cfg.eni_for_pods(s.primary))
                .map(|s| s.available.len() as u32)
                .sum(),
            releasing_ips: self.releasing.len() as u32
                + self.releasing_prefixes.len() as u32 * crate::IPS_PER_PREFIX,
            prefixes: self.enis.values().map(|e| e.prefixes.len() as u32).sum(),
            max_ips: self.cfg.max_ips(),
            orphaned: self.orphaned().len() as u32,
            prefix_fallback: self.prefix_fallback,
        }
    }

    /// The warm-pool decision at `now_ms`: the EC2 actions to take (empty when the pool is
    /// on target). Pure; call [`Pool::begin`] before executing an action.
    pub fn plan(&self, now_ms: u64) -> Vec<Action> {
        if !self.cfg.provisioning {
            return Vec::new();
        }
        let mut stats = self.eni_stats(now_ms);
        let recent_low = self.recent_low_available(now_ms);
        let with_ips = self.growing_with_ips(now_ms);
        if self.cfg.extra_cards.is_empty() {
            stats.retain(|s| s.network_card == 0);
            let enis = self.enis_on(0);
            return crate::plan::plan(&self.cfg, &stats, enis, recent_low, with_ips);
        }
        // ENABLE_MULTI_NIC: each card is its own pool with the same targets (the VPC CNI's
        // datastore per card). The low-water mark is the node's: it only holds back surplus.
        let mut actions = Vec::new();
        for card in self.cfg.cards() {
            let on_card: Vec<EniStats> = stats
                .iter()
                .filter(|s| s.network_card == card)
                .cloned()
                .collect();
            let planned = crate::plan::plan(
                &self.cfg.for_card(card),
                &on_card,
                self.enis_on(card),
                recent_low,
                with_ips,
            );
            actions.extend(planned.into_iter().map(|mut a| {
                if let Action::CreateEni { network_card, .. } = &mut a {
                    *network_card = card;
                }
                a
            }));
        }
        actions
    }

    /// ENIs attached on network card `card`.
    fn enis_on(&self, card: u32) -> u32 {
        self.enis
            .values()
            .filter(|e| e.info.network_card == card)
            .count() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::AssignError;

    #[test]
    fn an_empty_pool_says_what_the_pod_waits_for() {
        let at_limit = AssignError::PoolEmpty {
            cooling: 27,
            pending_growth: 0,
        }
        .to_string();
        assert!(
            at_limit.contains("no more can be attached")
                && at_limit.contains("27 released addresses")
                && at_limit.contains("IP_COOLDOWN_PERIOD")
                && !at_limit.contains("allocating"),
            "{at_limit}"
        );
        let growing = AssignError::PoolEmpty {
            cooling: 0,
            pending_growth: 9,
        }
        .to_string();
        assert!(
            growing.contains("9 more can be attached") && growing.contains("allocating more"),
            "{growing}"
        );
    }
}
