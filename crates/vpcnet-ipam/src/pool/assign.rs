//! Handing addresses to pods and taking them back: assignment (packed onto the busiest ENI),
//! release into cooldown, holds for pods the agent has no record of, garbage collection and
//! reclaim of assignments whose pod is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::{AssignError, Granted, Pool, UNKNOWN_POD_PREFIX};
use crate::model::{Assignment, Eni, EniInfo, PodKey, PodRef};

impl Pool {
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
    pub(super) fn release_all(
        &mut self,
        keys: Vec<PodKey>,
        now_ms: u64,
    ) -> Vec<(PodKey, Assignment)> {
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
}
