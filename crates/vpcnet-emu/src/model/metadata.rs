//! IMDS's view of an instance's network, which may lag EC2 (eventual consistency).
//!
//! After every change the emulator records a snapshot per running instance with the time it
//! becomes visible (`now + lag`, never earlier than the previous snapshot: IMDS applies changes
//! in order). An ENI appears only once its attachment has completed.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::{Ipv4Net, Ipv6Net};

use super::{Cloud, InstanceState};

/// One ENI as IMDS shows it under `network/interfaces/macs/<mac>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImdsInterface {
    pub mac: String,
    pub eni_id: String,
    pub device_number: u32,
    pub network_card: u32,
    pub subnet_id: String,
    pub subnet_cidr: Ipv4Net,
    pub vpc_id: String,
    pub vpc_cidrs: Vec<Ipv4Net>,
    pub security_group_ids: Vec<String>,
    pub security_group_names: Vec<String>,
    /// Primary first, then secondaries in assignment order.
    pub local_ipv4s: Vec<Ipv4Addr>,
    pub ipv4_prefixes: Vec<Ipv4Net>,
    /// IPv6 addresses (`ipv6s`), in assignment order.
    pub ipv6s: Vec<Ipv6Addr>,
    /// IPv6 /80 prefixes (`ipv6-prefix`).
    pub ipv6_prefixes: Vec<Ipv6Net>,
    /// The subnet's IPv6 /64 (`subnet-ipv6-cidr-blocks`), if it has one.
    pub subnet_ipv6_cidr: Option<Ipv6Net>,
    /// The VPC's IPv6 CIDR blocks (`vpc-ipv6-cidr-blocks`).
    pub vpc_ipv6_cidrs: Vec<Ipv6Net>,
}

/// Every attached ENI of an instance, ordered by (network card, device index).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImdsNetwork {
    pub interfaces: Vec<ImdsInterface>,
}

impl ImdsNetwork {
    pub fn by_mac(&self, mac: &str) -> Option<&ImdsInterface> {
        self.interfaces.iter().find(|i| i.mac == mac)
    }
}

impl Cloud {
    fn imds_network_now(&self, instance_id: &str, now: Instant) -> ImdsNetwork {
        let mut interfaces: Vec<ImdsInterface> = self
            .enis
            .values()
            .filter_map(|e| {
                let a = e.attachment.as_ref()?;
                if a.instance_id != instance_id || now < a.complete_at {
                    return None;
                }
                let subnet = self.subnets.get(&e.subnet_id)?;
                let vpc = self.vpcs.get(&e.vpc_id)?;
                Some(ImdsInterface {
                    mac: e.mac.clone(),
                    eni_id: e.id.clone(),
                    device_number: a.device_index,
                    network_card: a.network_card,
                    subnet_id: e.subnet_id.clone(),
                    subnet_cidr: subnet.cidr,
                    vpc_id: e.vpc_id.clone(),
                    vpc_cidrs: vpc.cidrs.iter().map(|(_, c)| *c).collect(),
                    security_group_ids: e.groups.clone(),
                    security_group_names: e
                        .groups
                        .iter()
                        .map(|g| {
                            self.groups
                                .get(g)
                                .map(|s| s.name.clone())
                                .unwrap_or_default()
                        })
                        .collect(),
                    local_ipv4s: std::iter::once(e.primary_ip)
                        .chain(e.secondary_ips.iter().copied())
                        .collect(),
                    ipv4_prefixes: e.prefixes.clone(),
                    ipv6s: e.ipv6_addresses.clone(),
                    ipv6_prefixes: e.ipv6_prefixes.clone(),
                    subnet_ipv6_cidr: subnet.ipv6.as_ref().map(|v| v.cidr),
                    vpc_ipv6_cidrs: vpc.ipv6.iter().map(|v| v.cidr).collect(),
                })
            })
            .collect();
        interfaces.sort_by_key(|i| (i.network_card, i.device_number));
        ImdsNetwork { interfaces }
    }

    /// Record what IMDS will show for every running instance after a change at `now`;
    /// `lag(instance_id)` is that instance's IMDS delay.
    pub fn refresh_imds(&mut self, now: Instant, lag: &dyn Fn(&str) -> Duration) {
        let ids: Vec<String> = self
            .instances
            .values()
            .filter(|i| i.state == InstanceState::Running)
            .map(|i| i.id.clone())
            .collect();
        for id in ids {
            let net = self.imds_network_now(&id, now);
            let inst = self.instances.get_mut(&id).expect("listed");
            if inst.imds.back().is_some_and(|(_, last)| **last == net) {
                continue;
            }
            let at = if inst.imds.is_empty() {
                now // a new instance boots with its metadata in place
            } else {
                (now + lag(&id)).max(inst.imds.back().map(|(t, _)| *t).unwrap_or(now))
            };
            inst.imds.push_back((at, Arc::new(net)));
        }
    }

    /// What IMDS shows for `instance_id` at `now` (None when not running or unknown).
    pub fn imds_network(&mut self, instance_id: &str, now: Instant) -> Option<Arc<ImdsNetwork>> {
        let inst = self.instances.get_mut(instance_id)?;
        if inst.state != InstanceState::Running {
            return None;
        }
        while inst.imds.len() > 1 && inst.imds[1].0 <= now {
            inst.imds.pop_front();
        }
        inst.imds.front().map(|(_, n)| n.clone())
    }
}
