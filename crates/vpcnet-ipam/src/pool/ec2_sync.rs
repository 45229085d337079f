//! The pool's side of the EC2 calls: what an action takes out of service while it runs
//! ([`Pool::begin`], [`Pool::abort`], [`Pool::unsettle`]), ENIs, addresses and prefixes that
//! EC2 added or removed, a subnet found full, and [`Pool::reconcile`] with a describe.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::{Pool, ReconcileReport, UnknownIpPolicy, SUBNET_FULL_MS};
use crate::model::{Eni, EniObservation};
use crate::plan::Action;

impl Pool {
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
}
