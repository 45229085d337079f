//! A tiny in-memory EC2 for driving the pure core in tests: executes plan actions,
//! optionally failing or shortening them, and keeps its own truth to compare against.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use vpcnet_ipam::*;

/// How the fake EC2 answers one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Assign/Create gets only part of the requested addresses (as if the answer was cut
    /// short and the next describe fills the rest in).
    Partial,
    Failure,
    /// EC2 applies the action but its reply is lost (timeout or 5xx after the fact): the
    /// caller learns nothing and reports the outcome as unknown ([`Pool::unsettle`]).
    LostReply,
}

pub struct FakeEc2 {
    pub cfg: WarmConfig,
    pub enis: BTreeMap<String, EniObservation>,
    next_ip: u32,
    next_eni: u32,
    pub mutating_calls: u32,
}

pub fn info(id: &str, device: u32, primary_ip: Ipv4Addr) -> EniInfo {
    EniInfo {
        id: id.to_string(),
        mac: format!("02:00:00:00:00:{device:02x}"),
        device_number: device,
        network_card: 0,
        subnet_id: "subnet-1".into(),
        subnet_cidr: "10.0.0.0/16".parse().unwrap(),
        primary: device == 0,
        primary_ip,
    }
}

impl FakeEc2 {
    /// An instance with its primary ENI (no secondary addresses).
    pub fn new(cfg: WarmConfig) -> Self {
        let mut f = FakeEc2 {
            cfg,
            enis: BTreeMap::new(),
            next_ip: u32::from(Ipv4Addr::new(10, 0, 1, 0)),
            next_eni: 0,
            mutating_calls: 0,
        };
        let ip = f.ip();
        f.enis.insert(
            "eni-0".into(),
            EniObservation {
                info: info("eni-0", 0, ip),
                secondary_ips: vec![],
                prefixes: vec![],
            },
        );
        f.next_eni = 1;
        f
    }

    fn ip(&mut self) -> Ipv4Addr {
        self.next_ip += 1;
        Ipv4Addr::from(self.next_ip)
    }

    fn prefix(&mut self) -> Ipv4Net {
        self.next_ip = (self.next_ip | 15) + 1;
        let p = Ipv4Net::new(Ipv4Addr::from(self.next_ip), 28).unwrap();
        self.next_ip += 15;
        p
    }

    pub fn view(&self) -> Vec<EniObservation> {
        self.enis.values().cloned().collect()
    }

    /// Executes one action against the pool and this EC2. Enforces the instance limits
    /// (panics if the core asked for more than EC2 would allow: that is a core bug).
    pub fn execute(&mut self, pool: &mut Pool, action: &Action, outcome: Outcome, now: u64) {
        self.mutating_calls += 1;
        pool.begin(action);
        if outcome == Outcome::Failure {
            // As the agent does: a failed release may have been applied by an earlier
            // attempt, so it waits for a describe; a failed assign or create is undone.
            if action.is_release() {
                pool.unsettle(action);
            } else {
                pool.abort(action);
            }
            return;
        }
        if outcome == Outcome::LostReply {
            match action {
                Action::UnassignIps { .. }
                | Action::UnassignPrefixes { .. }
                | Action::DeleteEni { .. } => {
                    self.apply(action);
                    pool.unsettle(action);
                }
                // A lost reply of an assign or create leaves EC2 with addresses or an ENI the
                // pool learns of at the next describe; this fake would then exceed its limits
                // on the next plan (real EC2 answers with a limit error), so it is modelled as
                // a plain failure here.
                _ => pool.abort(action),
            }
            return;
        }
        let slots = self.cfg.slots_per_eni() as usize;
        match action {
            Action::AssignIps { eni_id, count } => {
                let n = if outcome == Outcome::Partial {
                    (*count as usize).div_ceil(2)
                } else {
                    *count as usize
                };
                let ips: Vec<Ipv4Addr> = (0..n).map(|_| self.ip()).collect();
                let e = self.enis.get_mut(eni_id).expect("assign on a known ENI");
                e.secondary_ips.extend(&ips);
                assert!(
                    e.secondary_ips.len() + e.prefixes.len() <= slots,
                    "PrivateIpAddressLimitExceeded on {eni_id}"
                );
                pool.add_ips(eni_id, &ips, now);
            }
            Action::AssignPrefixes { eni_id, count } => {
                let ps: Vec<Ipv4Net> = (0..*count).map(|_| self.prefix()).collect();
                let e = self.enis.get_mut(eni_id).expect("assign on a known ENI");
                e.prefixes.extend(&ps);
                assert!(
                    e.secondary_ips.len() + e.prefixes.len() <= slots,
                    "PrivateIpAddressLimitExceeded on {eni_id}"
                );
                pool.add_prefixes(eni_id, &ps, now);
            }
            Action::CreateEni {
                ips,
                prefixes,
                network_card,
            } => {
                let card = *network_card;
                assert!(
                    self.cfg.cards().any(|c| c == card),
                    "CreateEni on unmanaged card {card}"
                );
                let on_card = |e: &&EniObservation| e.info.network_card == card;
                assert!(
                    self.enis.values().filter(on_card).count()
                        < self.cfg.for_card(card).max_enis() as usize,
                    "AttachmentLimitExceeded on card {card}"
                );
                assert!(
                    (*ips + *prefixes) as usize <= slots,
                    "PrivateIpAddressLimitExceeded on create"
                );
                let used: Vec<u32> = self
                    .enis
                    .values()
                    .filter(on_card)
                    .map(|e| e.info.device_number)
                    .collect();
                let device = (u32::from(card == 0)..)
                    .find(|d| !used.contains(d))
                    .unwrap();
                let id = format!("eni-{}", self.next_eni);
                self.next_eni += 1;
                let primary = self.ip();
                let n = if outcome == Outcome::Partial {
                    (*ips as usize).div_ceil(2)
                } else {
                    *ips as usize
                };
                let sec: Vec<Ipv4Addr> = (0..n).map(|_| self.ip()).collect();
                let ps: Vec<Ipv4Net> = (0..*prefixes).map(|_| self.prefix()).collect();
                let mut eni = info(&id, device, primary);
                eni.network_card = card;
                eni.primary = false;
                let obs = EniObservation {
                    info: eni,
                    secondary_ips: sec,
                    prefixes: ps,
                };
                self.enis.insert(id, obs.clone());
                pool.add_eni(obs, now);
            }
            Action::UnassignIps { eni_id, ips } => {
                let e = self.enis.get_mut(eni_id).expect("unassign on a known ENI");
                e.secondary_ips.retain(|ip| !ips.contains(ip));
                pool.remove_ips(eni_id, ips);
            }
            Action::UnassignPrefixes { eni_id, prefixes } => {
                let e = self.enis.get_mut(eni_id).expect("unassign on a known ENI");
                e.prefixes.retain(|p| !prefixes.contains(p));
                pool.remove_prefixes(eni_id, prefixes);
            }
            Action::DeleteEni { eni_id } => {
                let e = self.enis.remove(eni_id).expect("delete of a known ENI");
                assert!(!e.info.primary, "deleted the primary ENI");
                pool.remove_eni(eni_id);
            }
        }
    }

    /// Applies `action` to EC2's truth only (the reply never reaches the pool).
    pub fn apply(&mut self, action: &Action) {
        let mut shadow = Pool::new(self.cfg.clone());
        shadow.reconcile(&self.view(), UnknownIpPolicy::Free, 0);
        let before = self.mutating_calls;
        self.execute(&mut shadow, action, Outcome::Success, 0);
        self.mutating_calls = before;
    }

    /// Runs plans with every call succeeding until the pool is on target.
    pub fn settle(&mut self, pool: &mut Pool, now: u64) {
        for _ in 0..50 {
            let plan = pool.plan(now);
            if plan.is_empty() {
                return;
            }
            for a in plan {
                self.execute(pool, &a, Outcome::Success, now);
            }
        }
        panic!("pool did not settle: {:?}", pool.plan(now));
    }

    /// Secondary addresses per ENI, by device number.
    pub fn ips_per_eni(&self) -> Vec<usize> {
        let mut v: Vec<(u32, usize)> = self
            .enis
            .values()
            .map(|e| {
                (
                    e.info.device_number,
                    e.secondary_ips.len() + 16 * e.prefixes.len(),
                )
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, n)| n).collect()
    }
}

/// A started pool: empty, reconciled against the fake's primary ENI.
pub fn start(cfg: WarmConfig) -> (Pool, FakeEc2) {
    let ec2 = FakeEc2::new(cfg.clone());
    let mut pool = Pool::new(cfg);
    pool.reconcile(&ec2.view(), UnknownIpPolicy::Free, 0);
    (pool, ec2)
}

pub fn key(i: usize) -> PodKey {
    PodKey::new(format!("c{i}"), "eth0")
}

pub fn pod(i: usize) -> PodRef {
    PodRef {
        namespace: "default".into(),
        name: format!("pod-{i}"),
    }
}

pub fn limits(t: &str) -> WarmConfig {
    WarmConfig::for_limits(vpcnet_limits::lookup(t).expect("known type"))
}
