//! The pool: EC2's view of the node's ENIs plus assignments and cooldowns.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{
    Checkpoint, CheckpointAssignment, CheckpointCooldown, CheckpointError, CHECKPOINT_VERSION,
};
use crate::config::WarmConfig;
use crate::model::{Assignment, Eni, EniInfo, EniObservation, IpSet, PodKey, PodRef};
use crate::plan::Action;

mod conntrack;
mod drift;
#[cfg(test)]
mod fixtures;
mod interface_gone;
mod multi_nic;
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

    /// Hands `ip` of a free address to `key`. Idempotent: an existing assignment for the key
    /// is returned again. New pods are packed onto the ENI with the most assignments, so
    /// lightly used ENIs drain and can be freed; with more network cards managed
    /// (ENABLE_MULTI_NIC) card 0 is used first and the others when it has nothing free, as
    /// the VPC CNI does. Never returns an address EC2 did not list (the pool only holds
    /// addresses from EC2 results), a cooling one, or one being released.
    pub fn assign(
        &mut self,
        key: PodKey,
        pod: PodRef,
        now_ms: u64,
    ) -> Result<Granted, AssignError> {
        self.assign_on(key, pod, None, now_ms)
    }

    /// [`Pool::assign`] restricted to the ENIs of network card `card` when given.
    pub(crate) fn assign_on(
        &mut self,
        key: PodKey,
        pod: PodRef,
        card: Option<u32>,
        now_ms: u64,
    ) -> Result<Granted, AssignError> {
        if let Some(a) = self.assignments.get(&key) {
            let eni = self.enis.get(&a.eni_id);
            return Ok(Granted {
                ip: a.ip,
                eni_id: a.eni_id.clone(),
                device_number: eni.map_or(0, |e| e.info.device_number),
                network_card: eni.map_or(0, |e| e.info.network_card),
                primary_eni: eni.is_some_and(|e| e.info.primary),
                subnet_cidr: eni.map_or_else(|| Ipv4Net::from(a.ip), |e| e.info.subnet_cidr),
                existing: true,
            });
        }
        let Some((ip, info)) = self.pick(card, now_ms) else {
            return Err(self.empty_error(now_ms));
        };
        let a = Assignment {
            ip,
            eni_id: info.id.clone(),
            pod,
            assigned_at_ms: now_ms,
            foreign_datapath: false,
        };
        self.by_ip.insert(ip, key.clone());
        self.assignments.insert(key, a);
        self.uncool(ip);
        self.note_low_water(now_ms);
        Ok(Granted {
            ip,
            eni_id: info.id,
            device_number: info.device_number,
            network_card: info.network_card,
            primary_eni: info.primary,
            subnet_cidr: info.subnet_cidr,
            existing: false,
        })
    }

    /// The address [`Pool::assign_on`] hands out next, with its ENI.
    fn pick(&self, card: Option<u32>, now_ms: u64) -> Option<(Ipv4Addr, EniInfo)> {
        let per_eni = self.assigned_per_eni();
        let cards: Vec<u32> = self.cfg.cards().collect();
        let mut order: Vec<&Eni> = self
            .enis
            .values()
            .filter(|e| {
                !e.deleting
                    && !self.interface_gone.contains(&e.info.id)
                    && self.cfg.eni_for_pods(e.info.primary)
                    && cards.contains(&e.info.network_card)
                    && card.is_none_or(|c| c == e.info.network_card)
            })
            .collect();
        order.sort_by_key(|e| {
            (
                e.info.network_card,
                std::cmp::Reverse(per_eni.get(e.info.id.as_str()).copied().unwrap_or(0)),
                e.info.device_number,
            )
        });
        for eni in order {
            // Secondary addresses first, then the fullest prefix, so whole prefixes stay free.
            let mut prefixes: Vec<Ipv4Net> = eni.prefixes.keys().copied().collect();
            prefixes.sort_by_key(|p| {
                std::cmp::Reverse(self.by_ip.range(p.network()..=p.broadcast()).count())
            });
            let mut candidates = eni
                .ips
                .keys()
                .copied()
                .chain(prefixes.into_iter().flat_map(Eni::prefix_addresses));
            if let Some(ip) = candidates.find(|ip| self.assignable(*ip, now_ms)) {
                return Some((ip, eni.info.clone()));
            }
        }
        None
    }

    /// Records how many addresses are assignable right after an assignment at `now_ms`
    /// (counted as the plan counts them), keeping the window of the surplus hold.
    fn note_low_water(&mut self, now_ms: u64) {
        let available: u32 = self
            .eni_stats(now_ms)
            .iter()
            .filter(|s| !s.deleting && self.cfg.eni_for_pods(s.primary))
            .map(|s| s.available.len() as u32)
            .sum();
        let hold = self.cfg.surplus_hold_ms;
        while self
            .low_water
            .front()
            .is_some_and(|(t, _)| t.saturating_add(hold) <= now_ms)
        {
            self.low_water.pop_front();
        }
        while self.low_water.back().is_some_and(|(_, n)| *n >= available) {
            self.low_water.pop_back();
        }
        self.low_water.push_back((now_ms, available));
    }

    /// The fewest assignable addresses left by an assignment within the surplus hold before
    /// `now_ms` (`None` without one). In the IP target modes the plan returns only surplus
    /// above this as well as above the current count: a pod roll, whose replacement takes an
    /// address while its predecessor's cools down, keeps its addresses instead of returning
    /// one as the cooldown ends and assigning one again at the next ADD.
    pub fn recent_low_available(&self, now_ms: u64) -> Option<u32> {
        let hold = self.cfg.surplus_hold_ms;
        self.low_water
            .iter()
            .filter(|(t, _)| t.saturating_add(hold) > now_ms)
            .map(|(_, n)| *n)
            .min()
    }

    fn empty_error(&self, now_ms: u64) -> AssignError {
        let s = self.summary(now_ms);
        if !self.cfg.provisioning {
            return AssignError::ProvisioningDisabled {
                total: s.total_ips,
                assigned: s.assigned_ips,
                cooling: s.cooling_ips,
            };
        }
        let growth = s.max_ips.saturating_sub(s.total_ips);
        // An ENI being deleted (or whose delete waits for a describe to settle) frees its
        // attachment slot for a new ENI: the limit is not reached while one is. Each managed
        // network card has its own limit.
        let room_for_eni = self.cfg.cards().any(|card| {
            let live = self
                .enis
                .values()
                .filter(|e| e.info.network_card == card && !e.deleting)
                .count() as u32;
            live < self.cfg.for_card(card).max_enis()
        });
        let can_grow = growth > 0
            && (room_for_eni
                || self.enis.values().any(|e| {
                    !e.deleting
                        && self.cfg.eni_for_pods(e.info.primary)
                        && e.slots_used() < self.cfg.slots_per_eni()
                }));
        if s.cooling_ips == 0 && s.releasing_ips == 0 && !can_grow {
            AssignError::AtLimit {
                assigned: s.assigned_ips,
                enis: s.enis,
                max_enis: s.max_enis,
                ips_per_eni: self.cfg.ips_per_eni(),
                prefix_fallback: s.prefix_fallback.is_some(),
            }
        } else {
            AssignError::PoolEmpty {
                cooling: s.cooling_ips,
                pending_growth: if can_grow { growth } else { 0 },
            }
        }
    }

    /// Releases the address of `key`; it cools down from `now_ms`. `None` for an unknown key
    /// (CNI DEL is idempotent). An orphaned address (EC2 no longer lists it) is just dropped.
    pub fn release(&mut self, key: &PodKey, now_ms: u64) -> Option<Assignment> {
        let a = self.assignments.remove(key)?;
        self.by_ip.remove(&a.ip);
        self.reclaim_misses.remove(key);
        if self.eni_of(a.ip).is_some() {
            self.cool(a.ip, now_ms);
        }
        Some(a)
    }

    /// Undoes a new assignment whose ADD failed before the address reached the pod (the
    /// checkpoint could not be written): the address becomes assignable again at once, with
    /// no cooldown, since no pod ever used it. `None` for an unknown key.
    pub fn unassign(&mut self, key: &PodKey) -> Option<Assignment> {
        let a = self.assignments.remove(key)?;
        self.by_ip.remove(&a.ip);
        self.reclaim_misses.remove(key);
        Some(a)
    }

    /// Undoes a [`Pool::release`] whose DEL failed before it was recorded (the checkpoint
    /// could not be written): `key` holds `a` again and the address's cooldown is dropped.
    /// Returns false, changing nothing, when the address was handed out again meanwhile (a
    /// zero cooldown) or `key` holds another address: the release then stands.
    pub fn reinstate(&mut self, key: PodKey, a: Assignment) -> bool {
        if self.by_ip.contains_key(&a.ip) || self.assignments.contains_key(&key) {
            return false;
        }
        self.uncool(a.ip);
        self.by_ip.insert(a.ip, key.clone());
        self.assignments.insert(key, a);
        true
    }

    /// Key under which [`Pool::hold_unknown`] holds an address for a pod the agent has no
    /// record of (container ID `unknown:<ip>`).
    pub fn unknown_pod_key(ip: Ipv4Addr) -> PodKey {
        PodKey::new(format!("{UNKNOWN_POD_PREFIX}{ip}"), "eth0")
    }

    /// Holds `ip` for a pod the agent has no record of: the node routes the address to a pod
    /// but the checkpoint (missing, corrupt, or older than the pod) does not list it. The
    /// hold is an assignment under [`Pool::unknown_pod_key`], released by the reclaim once the
    /// pod's route is gone. Returns false (nothing held) when the address is already
    /// assigned or not on any ENI of the pool (it can never be handed out then anyway).
    pub fn hold_unknown(&mut self, ip: Ipv4Addr, now_ms: u64) -> bool {
        self.hold_for(Self::unknown_pod_key(ip), PodRef::default(), ip, now_ms)
    }

    /// Records `ip` as assigned to `key` (`pod`) from evidence outside the checkpoint (the
    /// container runtime's own record of the pod's network, a route): the address is in use
    /// whatever the pool thought, so it leaves the cooldown and is never handed out while
    /// held. Which CNI built its datapath is not known ([`Assignment::foreign_datapath`]). Returns false (nothing recorded) when the address is already assigned, `key`
    /// already holds an address, or no ENI of the pool holds `ip`.
    pub fn hold_for(&mut self, key: PodKey, pod: PodRef, ip: Ipv4Addr, now_ms: u64) -> bool {
        if self.by_ip.contains_key(&ip) || self.assignments.contains_key(&key) {
            return false;
        }
        let Some(eni_id) = self.eni_of(ip).map(|e| e.info.id.clone()) else {
            return false;
        };
        self.by_ip.insert(ip, key.clone());
        self.uncool(ip);
        self.assignments.insert(
            key,
            Assignment {
                ip,
                eni_id,
                pod,
                assigned_at_ms: now_ms,
                foreign_datapath: true,
            },
        );
        true
    }

    /// CNI GC: releases every assignment whose key is not in `valid` (the further interfaces
    /// of a multi-homed pod go with the pod's key, [`Pool::release_pod`]). Holds of unknown pods
    /// ([`Pool::hold_unknown`]) are kept: their real key is not known, so the runtime's list
    /// cannot vouch for or against them (the reclaim frees them once their route is gone).
    pub fn garbage_collect(
        &mut self,
        valid: &BTreeSet<PodKey>,
        now_ms: u64,
    ) -> Vec<(PodKey, Assignment)> {
        let stale: Vec<PodKey> = self
            .assignments
            .keys()
            .filter(|k| !Pool::vouched(valid, k) && !k.container_id.starts_with(UNKNOWN_POD_PREFIX))
            .cloned()
            .collect();
        self.release_all(stale, now_ms)
    }

    /// Releases (into cooldown) every assignment whose pod has no datapath left on the node,
    /// on consistent evidence only. `present` holds the addresses for which the node still
    /// shows any trace of the pod (a /32 route to the address, or the pod's host veth). An
    /// assignment is released when it is older than `grace_ms` and absent from `present` at
    /// `misses_needed` consecutive calls (a call that sees it resets its count). The grace
    /// covers an ADD in flight (address handed out, datapath not built yet); the repeated miss
    /// covers a route dump racing a datapath being rebuilt. GC-style holds of unknown pods
    /// ([`Pool::hold_unknown`]) are released the same way. Returns what was released.
    pub fn reclaim_unrouted(
        &mut self,
        present: &BTreeSet<Ipv4Addr>,
        grace_ms: u64,
        misses_needed: u32,
        now_ms: u64,
    ) -> Vec<(PodKey, Assignment)> {
        let mut stale = Vec::new();
        let mut misses = BTreeMap::new();
        for (k, a) in &self.assignments {
            if present.contains(&a.ip) || a.assigned_at_ms.saturating_add(grace_ms) > now_ms {
                continue;
            }
            let n = self.reclaim_misses.get(k).copied().unwrap_or(0) + 1;
            if n >= misses_needed.max(1) {
                stale.push(k.clone());
            } else {
                misses.insert(k.clone(), n);
            }
        }
        self.reclaim_misses = misses;
        self.release_all(stale, now_ms)
    }

    /// [`Self::release`] for each key; returns what was released.
    fn release_all(&mut self, keys: Vec<PodKey>, now_ms: u64) -> Vec<(PodKey, Assignment)> {
        keys.into_iter()
            .filter_map(|k| self.release(&k, now_ms).map(|a| (k, a)))
            .collect()
    }

    /// Assignments whose address EC2 no longer lists on the node.
    pub fn orphaned(&self) -> Vec<(PodKey, Ipv4Addr)> {
        self.assignments
            .iter()
            .filter(|(_, a)| self.eni_of(a.ip).is_none())
            .map(|(k, a)| (k.clone(), a.ip))
            .collect()
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

    /// Marks what `action` will take away (addresses or prefixes being unassigned, an ENI
    /// being deleted) so nothing is handed out from it while the EC2 call runs.
    pub fn begin(&mut self, action: &Action) {
        match action {
            Action::UnassignIps { ips, .. } => self.releasing.extend(ips.iter().copied()),
            Action::UnassignPrefixes { prefixes, .. } => {
                self.releasing_prefixes.extend(prefixes.iter().copied())
            }
            Action::DeleteEni { eni_id } => {
                if let Some(e) = self.enis.get_mut(eni_id) {
                    e.deleting = true;
                }
            }
            _ => {}
        }
    }

    /// EC2 refused to assign addresses or prefixes to `eni_id` because its subnet has no room
    /// (`InsufficientFreeAddressesInSubnet`, `InsufficientCidrBlocks`): for
    /// [`SUBNET_FULL_MS`] the plan does not grow that ENI and grows others or creates an ENI
    /// instead (which subnet discovery may place in another subnet).
    pub fn mark_subnet_full(&mut self, eni_id: &str, now_ms: u64) {
        if self.enis.contains_key(eni_id) {
            self.subnet_full
                .insert(eni_id.to_string(), now_ms.saturating_add(SUBNET_FULL_MS));
        }
    }

    /// Undoes [`Pool::begin`] after the EC2 call failed.
    pub fn abort(&mut self, action: &Action) {
        match action {
            Action::UnassignIps { ips, .. } => ips.iter().for_each(|ip| {
                self.releasing.remove(ip);
            }),
            Action::UnassignPrefixes { prefixes, .. } => prefixes.iter().for_each(|p| {
                self.releasing_prefixes.remove(p);
            }),
            Action::DeleteEni { eni_id } => {
                if let Some(e) = self.enis.get_mut(eni_id) {
                    e.deleting = false;
                }
            }
            _ => {}
        }
    }

    /// The EC2 call of `action` ended without a definitive answer (timeout, 5xx, transport
    /// error: EC2 may or may not have applied it). What [`Pool::begin`] took away stays out of
    /// service until the next [`Pool::reconcile`] (a describe) shows whether EC2 still lists
    /// it; never put back with [`Pool::abort`], which could hand out an address EC2 already
    /// took away. Assign and create need nothing: addresses or an ENI created behind a lost
    /// reply are adopted by the next reconcile (an ENI that was never attached is left for
    /// the leaked-ENI sweep).
    pub fn unsettle(&mut self, action: &Action) {
        match action {
            Action::UnassignIps { ips, .. } => {
                self.releasing.extend(ips.iter().copied());
                self.unsettled.extend(ips.iter().copied());
            }
            Action::UnassignPrefixes { prefixes, .. } => {
                self.releasing_prefixes.extend(prefixes.iter().copied());
                self.unsettled_prefixes.extend(prefixes.iter().copied());
            }
            Action::DeleteEni { eni_id } => {
                if let Some(e) = self.enis.get_mut(eni_id) {
                    e.deleting = true;
                    self.unsettled_enis.insert(eni_id.clone());
                }
            }
            _ => {}
        }
    }

    /// Whether some EC2 outcome is unknown and waits for a describe ([`Pool::unsettle`]).
    pub fn has_unsettled(&self) -> bool {
        !self.unsettled.is_empty()
            || !self.unsettled_prefixes.is_empty()
            || !self.unsettled_enis.is_empty()
    }

    /// Result of CreateEni + Attach: the new attached ENI with its addresses.
    pub fn add_eni(&mut self, obs: EniObservation, now_ms: u64) {
        let mut eni = Eni::new(obs.info);
        eni.ips = obs
            .secondary_ips
            .into_iter()
            .filter(|ip| *ip != eni.info.primary_ip)
            .map(|ip| (ip, now_ms))
            .collect();
        eni.prefixes = obs.prefixes.into_iter().map(|p| (p, now_ms)).collect();
        if !eni.prefixes.is_empty() {
            self.prefixes_arrived();
        }
        self.enis.insert(eni.info.id.clone(), eni);
    }

    /// Result of AssignPrivateIpAddresses: `ips` now belong to `eni_id`. Unknown ENI:
    /// ignored (the next reconcile adopts them).
    pub fn add_ips(&mut self, eni_id: &str, ips: &[Ipv4Addr], now_ms: u64) {
        if let Some(e) = self.enis.get_mut(eni_id) {
            for ip in ips {
                if *ip != e.info.primary_ip {
                    e.ips.entry(*ip).or_insert(now_ms);
                }
            }
        }
    }

    /// Result of AssignPrivateIpAddresses with Ipv4PrefixCount.
    pub fn add_prefixes(&mut self, eni_id: &str, prefixes: &[Ipv4Net], now_ms: u64) {
        if !prefixes.is_empty() {
            self.prefixes_arrived();
        }
        if let Some(e) = self.enis.get_mut(eni_id) {
            for p in prefixes {
                e.prefixes.entry(*p).or_insert(now_ms);
            }
        }
    }

    /// Result of UnassignPrivateIpAddresses: `ips` left `eni_id`.
    pub fn remove_ips(&mut self, eni_id: &str, ips: &[Ipv4Addr]) {
        for ip in ips {
            self.releasing.remove(ip);
            self.uncool(*ip);
            if let Some(e) = self.enis.get_mut(eni_id) {
                e.ips.remove(ip);
            }
        }
    }

    /// Result of UnassignPrivateIpAddresses with prefixes.
    pub fn remove_prefixes(&mut self, eni_id: &str, prefixes: &[Ipv4Net]) {
        for p in prefixes {
            self.releasing_prefixes.remove(p);
            self.cooldowns.retain(|ip, _| !p.contains(ip));
            self.conntrack.retain(|ip, _| !p.contains(ip));
            if let Some(e) = self.enis.get_mut(eni_id) {
                e.prefixes.remove(p);
            }
        }
    }

    /// Result of Detach + DeleteNetworkInterface.
    pub fn remove_eni(&mut self, eni_id: &str) {
        self.interface_gone.remove(eni_id);
        self.subnet_full.remove(eni_id);
        if let Some(e) = self.enis.remove(eni_id) {
            for (ip, _) in e.addresses() {
                self.releasing.remove(&ip);
                self.uncool(ip);
            }
            for p in e.prefixes.keys() {
                self.releasing_prefixes.remove(p);
            }
        }
    }

    /// Adopts EC2's view of the instance's attached ENIs (DescribeNetworkInterfaces,
    /// `attachment.instance-id`). EC2 is the truth: ENIs and addresses it does not list are
    /// dropped, except assigned addresses, which stay with their pod and are reported as
    /// orphaned; addresses it lists that the pool does not know are adopted per `unknown`.
    /// Never call this with IMDS data.
    pub fn reconcile(
        &mut self,
        view: &[EniObservation],
        unknown: UnknownIpPolicy,
        now_ms: u64,
    ) -> ReconcileReport {
        let mut report = ReconcileReport::default();
        let seen: BTreeSet<&str> = view.iter().map(|o| o.info.id.as_str()).collect();
        let gone: Vec<String> = self
            .enis
            .keys()
            .filter(|id| !seen.contains(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            if let Some(e) = self.enis.remove(&id) {
                report.dropped_ips.extend(e.addresses().map(|(ip, _)| ip));
            }
            report.removed_enis.push(id);
        }
        for obs in view {
            let new_ips: BTreeSet<Ipv4Addr> = obs
                .secondary_ips
                .iter()
                .copied()
                .filter(|ip| *ip != obs.info.primary_ip)
                .collect();
            let new_prefixes: BTreeSet<Ipv4Net> = obs.prefixes.iter().copied().collect();
            let eni = self.enis.entry(obs.info.id.clone()).or_insert_with(|| {
                report.added_enis.push(obs.info.id.clone());
                Eni::new(obs.info.clone())
            });
            eni.info = obs.info.clone();
            let dropped: Vec<Ipv4Addr> = eni
                .ips
                .keys()
                .filter(|ip| !new_ips.contains(ip))
                .copied()
                .collect();
            for ip in &dropped {
                eni.ips.remove(ip);
            }
            report.dropped_ips.extend(dropped);
            let dropped_p: Vec<Ipv4Net> = eni
                .prefixes
                .keys()
                .filter(|p| !new_prefixes.contains(p))
                .copied()
                .collect();
            for p in &dropped_p {
                eni.prefixes.remove(p);
                report.dropped_ips.extend(Eni::prefix_addresses(*p));
            }
            let mut fresh = Vec::new();
            for ip in &new_ips {
                if !eni.ips.contains_key(ip) {
                    eni.ips.insert(*ip, now_ms);
                    fresh.push(*ip);
                }
            }
            for p in &new_prefixes {
                if !eni.prefixes.contains_key(p) {
                    eni.prefixes.insert(*p, now_ms);
                    fresh.extend(Eni::prefix_addresses(*p));
                }
            }
            for ip in &fresh {
                if let UnknownIpPolicy::Cooling { settle_ms } = unknown {
                    if !self.by_ip.contains_key(ip) && !self.cooldowns.contains_key(ip) {
                        self.cool(*ip, now_ms.saturating_add(settle_ms));
                    }
                }
            }
            report.added_ips.extend(fresh);
        }
        // Addresses that left: forget their cooldowns and release marks.
        let held: BTreeSet<Ipv4Addr> = self
            .enis
            .values()
            .flat_map(|e| e.addresses().map(|(ip, _)| ip))
            .collect();
        self.cooldowns.retain(|ip, _| held.contains(ip));
        self.conntrack.retain(|ip, _| held.contains(ip));
        self.releasing.retain(|ip| held.contains(ip));
        let prefixes: BTreeSet<Ipv4Net> = self
            .enis
            .values()
            .flat_map(|e| e.prefixes.keys().copied())
            .collect();
        self.releasing_prefixes.retain(|p| prefixes.contains(p));
        self.settle_unknown_outcomes(&held, &prefixes, now_ms);
        let enis = &self.enis;
        self.interface_gone.retain(|id| enis.contains_key(id));
        // Assignments follow their address to the ENI EC2 says holds it.
        let owners: BTreeMap<Ipv4Addr, String> = self
            .enis
            .values()
            .flat_map(|e| {
                e.addresses()
                    .map(|(ip, _)| (ip, e.info.id.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (k, a) in self.assignments.iter_mut() {
            match owners.get(&a.ip) {
                Some(owner) => a.eni_id = owner.clone(),
                None => report.orphaned.push((k.clone(), a.ip)),
            }
        }
        report
    }

    /// After a describe: releases and deletes whose outcome was unknown are settled. What EC2
    /// no longer lists is gone already (dropped above); what it still lists comes back into
    /// service through a cooldown from `now_ms`, so a describe that lags behind an applied
    /// release gets another pass to show it before the address is used.
    fn settle_unknown_outcomes(
        &mut self,
        held: &BTreeSet<Ipv4Addr>,
        prefixes: &BTreeSet<Ipv4Net>,
        now_ms: u64,
    ) {
        let mut back: Vec<Ipv4Addr> = Vec::new();
        for ip in std::mem::take(&mut self.unsettled) {
            if held.contains(&ip) {
                self.releasing.remove(&ip);
                back.push(ip);
            }
        }
        for p in std::mem::take(&mut self.unsettled_prefixes) {
            if prefixes.contains(&p) {
                self.releasing_prefixes.remove(&p);
                back.extend(Eni::prefix_addresses(p));
            }
        }
        for id in std::mem::take(&mut self.unsettled_enis) {
            if let Some(e) = self.enis.get_mut(&id) {
                e.deleting = false;
                back.extend(e.addresses().map(|(ip, _)| ip));
            }
        }
        for ip in back {
            if !self.by_ip.contains_key(&ip) {
                self.cool(ip, now_ms);
            }
        }
    }

    /// The persisted model: every assignment and every cooldown timestamp.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            version: CHECKPOINT_VERSION,
            assignments: self
                .assignments
                .iter()
                .map(|(k, a)| CheckpointAssignment {
                    container_id: k.container_id.clone(),
                    if_name: k.if_name.clone(),
                    ip: a.ip,
                    eni_id: a.eni_id.clone(),
                    namespace: a.pod.namespace.clone(),
                    name: a.pod.name.clone(),
                    assigned_at_ms: a.assigned_at_ms,
                    foreign_datapath: a.foreign_datapath,
                    network_card: self.enis.get(&a.eni_id).map_or(0, |e| e.info.network_card),
                })
                .collect(),
            cooldowns: self
                .cooldowns
                .iter()
                .map(|(ip, t)| CheckpointCooldown {
                    ip: *ip,
                    released_at_ms: *t,
                })
                .collect(),
        }
    }

    /// Loads assignments and cooldowns from a checkpoint into a pool that has none yet
    /// (call before [`Pool::reconcile`], which then checks them against EC2).
    /// Errors when the checkpoint assigns one address twice.
    pub fn restore(&mut self, cp: &Checkpoint) -> Result<(), CheckpointError> {
        cp.check()?;
        for a in &cp.assignments {
            let key = PodKey::new(a.container_id.clone(), a.if_name.clone());
            self.by_ip.insert(a.ip, key.clone());
            self.assignments.insert(
                key,
                Assignment {
                    ip: a.ip,
                    eni_id: a.eni_id.clone(),
                    pod: PodRef {
                        namespace: a.namespace.clone(),
                        name: a.name.clone(),
                    },
                    assigned_at_ms: a.assigned_at_ms,
                    foreign_datapath: a.foreign_datapath,
                },
            );
        }
        for c in &cp.cooldowns {
            if !self.by_ip.contains_key(&c.ip) {
                self.cooldowns.insert(c.ip, c.released_at_ms);
                // Whether its entries were flushed after the cooldown is not persisted: flush
                // again (due at once when the cooldown is over) before reuse.
                if self.cfg.conntrack_flush {
                    self.conntrack.insert(c.ip, conntrack::Stage::Flushed);
                }
            }
        }
        Ok(())
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
