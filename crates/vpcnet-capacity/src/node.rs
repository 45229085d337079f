//! One node's footprint: the IPAM core ([`vpcnet_ipam::Pool`]) driven from a fresh node to
//! its steady state with `pods` pods, against a cloud that grants every request at once.
//! What it yields is what the agent would hold and call for: the ENIs with the subnet
//! addresses each takes, and the EC2 calls by action.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;
use vpcnet_ipam::{
    Action, AssignError, EniInfo, EniObservation, PodKey, PodRef, Pool, WarmConfig, IPS_PER_PREFIX,
};

use crate::calls::{self, CallCount};
use crate::PlanError;

/// One attached ENI of a settled node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EniFootprint {
    /// The instance's primary ENI (in the node's subnet, created with the instance).
    pub primary: bool,
    /// Subnet addresses the ENI takes: its primary address, its secondary addresses and 16
    /// per /28 prefix.
    pub addresses: u32,
    /// /28 prefixes on it.
    pub prefixes: u32,
}

/// A node settled with its pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeFootprint {
    /// Pods with a VPC address.
    pub pods: u32,
    /// The ENIs, primary first.
    pub enis: Vec<EniFootprint>,
    /// EC2 calls from start-up until settled, by action.
    pub calls: CallCount,
    /// Calls until the node could hand out its first address (start-up included).
    pub calls_to_first_address: CallCount,
}

impl NodeFootprint {
    /// Subnet addresses of every ENI.
    pub fn addresses(&self) -> u32 {
        self.enis.iter().map(|e| e.addresses).sum()
    }
    /// /28 prefixes of every ENI.
    pub fn prefixes(&self) -> u32 {
        self.enis.iter().map(|e| e.prefixes).sum()
    }
}

/// At most this many plan rounds per pod wave; a core that never settles is a bug, reported
/// as such rather than looping.
const MAX_ROUNDS: usize = 1_000;

/// A fixed instant: the planner models the state right after a scale-out, before any
/// cooldown or surplus hold ends.
pub(crate) const NOW_MS: u64 = 1_700_000_000_000;

/// Settles a fresh node with `pods` pods: the plan runs until the warm targets are met,
/// then pods arrive one at a time and the plan runs after each (as the agent's pool filler
/// does after every ADD), growing the pool when an ADD finds nothing free. Pods that arrive
/// closer together than the filler runs can take fewer, larger assigns in the IP target
/// modes: the count here is the upper bound.
///
/// `subnet_discovery`: `ENABLE_SUBNET_DISCOVERY` without custom networking (one more describe
/// at start).
pub fn settle(
    cfg: &WarmConfig,
    pods: u32,
    subnet_discovery: bool,
) -> Result<NodeFootprint, PlanError> {
    let mut sim = NodePool::new(cfg.clone());
    sim.calls.add_all(&calls::start_up(subnet_discovery), 1);
    sim.run_plan()?;
    let mut first: Option<CallCount> = None;
    for i in 0..pods {
        let key = PodKey::new(format!("pod-{i}"), "eth0");
        loop {
            match sim.pool.assign(key.clone(), PodRef::default(), NOW_MS) {
                Ok(_) => break,
                Err(AssignError::PoolEmpty { .. }) => {
                    if !sim.run_plan()? {
                        return Err(sim.full(pods, i));
                    }
                }
                Err(_) => return Err(sim.full(pods, i)),
            }
        }
        first.get_or_insert_with(|| sim.calls.clone());
        sim.run_plan()?;
    }
    let enis = sim
        .pool
        .enis()
        .map(|e| EniFootprint {
            primary: e.info.primary,
            addresses: 1 + e.ips.len() as u32 + e.prefixes.len() as u32 * IPS_PER_PREFIX,
            prefixes: e.prefixes.len() as u32,
        })
        .collect::<Vec<_>>();
    let mut enis = enis;
    enis.sort_by_key(|e| !e.primary);
    let calls_to_first_address = first.unwrap_or_else(|| sim.calls.clone());
    Ok(NodeFootprint {
        pods,
        enis,
        calls: sim.calls,
        calls_to_first_address,
    })
}

/// The pool and a cloud that grants every request with fresh addresses (also the
/// simulator's node, [`crate::sim`]).
pub(crate) struct NodePool {
    pub(crate) pool: Pool,
    calls: CallCount,
    next_eni: u32,
    next_ip: u32,
    next_prefix: u32,
    /// The pool's clock (ms since the epoch).
    pub(crate) now_ms: u64,
}

impl NodePool {
    pub(crate) fn new(cfg: WarmConfig) -> Self {
        let mut sim = NodePool {
            pool: Pool::new(cfg),
            calls: CallCount::default(),
            next_eni: 0,
            next_ip: u32::from(Ipv4Addr::new(10, 0, 0, 10)),
            next_prefix: u32::from(Ipv4Addr::new(10, 128, 0, 0)),
            now_ms: NOW_MS,
        };
        let obs = sim.observation(0, Vec::new(), Vec::new());
        sim.pool.add_eni(obs, NOW_MS);
        sim
    }

    fn ip(&mut self) -> Ipv4Addr {
        self.next_ip += 1;
        Ipv4Addr::from(self.next_ip)
    }

    fn prefix(&mut self) -> Ipv4Net {
        let p = Ipv4Net::new(Ipv4Addr::from(self.next_prefix), 28).expect("a /28");
        self.next_prefix += IPS_PER_PREFIX;
        p
    }

    fn observation(
        &mut self,
        device: u32,
        ips: Vec<Ipv4Addr>,
        prefixes: Vec<Ipv4Net>,
    ) -> EniObservation {
        let n = self.next_eni;
        self.next_eni += 1;
        EniObservation {
            info: EniInfo {
                id: format!("eni-{n:017x}"),
                mac: format!("02:00:00:00:{:02x}:{:02x}", n >> 8 & 0xff, n & 0xff),
                device_number: device,
                network_card: 0,
                subnet_id: "subnet-planned".into(),
                subnet_cidr: "10.0.0.0/8".parse().expect("a CIDR"),
                primary: device == 0,
                primary_ip: self.ip(),
            },
            secondary_ips: ips,
            prefixes,
        }
    }

    /// Plans and applies until the plan is empty; whether anything was done.
    fn run_plan(&mut self) -> Result<bool, PlanError> {
        let mut changed = false;
        for _ in 0..MAX_ROUNDS {
            let actions = self.pool.plan(NOW_MS);
            if actions.is_empty() {
                return Ok(changed);
            }
            for a in &actions {
                self.pool.begin(a);
                self.apply(a);
                self.calls.add_all(&calls::for_action(a), 1);
            }
            changed = true;
        }
        Err(PlanError::NoSteadyState)
    }

    /// Feeds EC2's (granted) result of `a` into the pool.
    pub(crate) fn apply(&mut self, a: &Action) {
        match a {
            Action::AssignIps { eni_id, count } => {
                let ips: Vec<_> = (0..*count).map(|_| self.ip()).collect();
                self.pool.add_ips(eni_id, &ips, self.now_ms);
            }
            Action::AssignPrefixes { eni_id, count } => {
                let ps: Vec<_> = (0..*count).map(|_| self.prefix()).collect();
                self.pool.add_prefixes(eni_id, &ps, self.now_ms);
            }
            Action::CreateEni { ips, prefixes, .. } => {
                let device = self.pool.enis().count() as u32;
                let ips: Vec<_> = (0..*ips).map(|_| self.ip()).collect();
                let ps: Vec<_> = (0..*prefixes).map(|_| self.prefix()).collect();
                let obs = self.observation(device, ips, ps);
                self.pool.add_eni(obs, self.now_ms);
            }
            Action::UnassignIps { eni_id, ips } => self.pool.remove_ips(eni_id, ips),
            Action::UnassignPrefixes { eni_id, prefixes } => {
                self.pool.remove_prefixes(eni_id, prefixes)
            }
            Action::DeleteEni { eni_id } => self.pool.remove_eni(eni_id),
        }
    }

    fn full(&self, pods: u32, placed: u32) -> PlanError {
        let cfg = self.pool.config();
        PlanError::PodsDoNotFit {
            pods,
            placed,
            max_ips: cfg.max_ips(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(t: &str) -> WarmConfig {
        WarmConfig::for_limits(vpcnet_limits::lookup(t).unwrap())
    }

    #[test]
    fn defaults_keep_one_spare_eni() {
        // m5.large: 3 ENIs × 10 addresses. 5 pods fill part of the primary ENI; the warm ENI
        // target keeps 9 more free, which needs a second ENI.
        let f = settle(&cfg("m5.large"), 5, true).unwrap();
        assert_eq!(f.enis.len(), 2, "{f:?}");
        assert_eq!(f.addresses(), 20);
        assert_eq!(f.calls.get("CreateNetworkInterface"), 1);
    }

    #[test]
    fn an_idle_node_still_fills_its_warm_pool() {
        let f = settle(&cfg("m5.large"), 0, true).unwrap();
        assert_eq!(f.addresses(), 10, "primary ENI filled: {f:?}");
        assert_eq!(f.calls.get("AssignPrivateIpAddresses"), 1);
    }

    #[test]
    fn warm_ip_target_takes_only_what_it_needs() {
        let mut c = cfg("m5.large");
        c.warm_ip_target = Some(2);
        let f = settle(&c, 5, true).unwrap();
        assert_eq!(f.addresses(), 1 + 5 + 2, "{f:?}");
    }

    #[test]
    fn prefix_mode_counts_sixteen_per_prefix() {
        let mut c = cfg("m5.large");
        c.prefix_delegation = true;
        let f = settle(&c, 20, true).unwrap();
        // 20 pods need 2 prefixes, the warm prefix target one more.
        assert_eq!(f.prefixes(), 3, "{f:?}");
        assert_eq!(f.addresses(), 1 + 3 * 16);
    }

    #[test]
    fn more_pods_than_the_node_holds_is_an_error() {
        let e = settle(&cfg("t3.nano"), 100, true).unwrap_err();
        assert!(e.to_string().contains("100 pods"), "{e}");
    }
}
