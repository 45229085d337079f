//! The emulator's [`FabricHooks`] for the lab: every ENI attachment, detachment and address
//! change EC2 makes is mirrored in the VPC fabric ([`crate::fabric`]) before the EC2 call
//! answers, so when the agent sees success the interface exists and the addresses route.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use ipnet::Ipv4Net;
use vpcnet_emu::{
    AddressesChanged, EniAttached, EniDetached, FabricHooks, HookFuture, IngressRulesChanged,
};

use crate::fabric::{self, EniPort};

/// An attached ENI as the fabric programmed it.
#[derive(Debug, Clone)]
struct Plugged {
    mac: String,
    port: String,
    bridge: String,
    primary: Ipv4Addr,
    cidrs: Vec<Ipv4Net>,
}

#[derive(Default)]
struct Inner {
    /// Node namespaces waiting for their instance's primary ENI (instances launch one by one).
    pending_nodes: VecDeque<String>,
    /// instance id → node namespace.
    nodes: HashMap<String, String>,
    /// ENI id → what the fabric holds for it.
    enis: HashMap<String, Plugged>,
    /// Hook failures, for the daemon log and `lab status`.
    errors: Vec<String>,
}

/// The lab's hooks: the VPC namespace, its subnets (bridge `br<i>` for subnet `i`) and the
/// mapping of instances to node namespaces.
#[derive(Clone)]
pub struct LabHooks {
    vpc: String,
    subnets: Vec<Ipv4Net>,
    /// Whether [`FabricHooks::ingress_rules_changed`] is enforced (see [`Self::enforcing_security_groups`]).
    security_groups: bool,
    inner: Arc<Mutex<Inner>>,
}

impl LabHooks {
    /// Hooks for the fabric in namespace `vpc` with `subnets`.
    pub fn new(vpc: &str, subnets: Vec<Ipv4Net>) -> Self {
        LabHooks {
            vpc: vpc.to_string(),
            subnets,
            security_groups: false,
            inner: Arc::default(),
        }
    }

    /// Whether the fabric enforces each ENI's security groups ([`crate::security_groups`]);
    /// off by default (only the two-zone layout turns it on).
    pub fn enforcing_security_groups(mut self, on: bool) -> Self {
        self.security_groups = on;
        self
    }

    /// The next instance launched belongs to the node in namespace `netns`: its primary ENI
    /// becomes `eth0` there. Call right before `run_instance` (launches are sequential).
    pub fn expect_node(&self, netns: &str) {
        self.lock().pending_nodes.push_back(netns.to_string());
    }

    /// Hook failures so far (empty when the fabric mirrors EC2 exactly).
    pub fn errors(&self) -> Vec<String> {
        self.lock().errors.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self, what: String) {
        tracing::error!("{what}");
        eprintln!("fabric hook error: {what}");
        self.lock().errors.push(what);
    }

    fn attached(&self, ev: EniAttached) {
        let netns = {
            let mut g = self.lock();
            match g.nodes.get(&ev.instance_id) {
                Some(n) => Some(n.clone()),
                None if ev.device_index == 0 && ev.network_card == 0 => {
                    g.pending_nodes.pop_front().inspect(|n| {
                        g.nodes.insert(ev.instance_id.clone(), n.clone());
                    })
                }
                None => None,
            }
        };
        let Some(netns) = netns else {
            // An instance that is not a lab node (e.g. launched through the control API).
            return;
        };
        let Some(i) = fabric::subnet_index(&self.subnets, ev.subnet_cidr) else {
            self.fail(format!(
                "{}: subnet {} has no bridge",
                ev.eni_id, ev.subnet_cidr
            ));
            return;
        };
        let port = EniPort {
            eni_id: ev.eni_id.clone(),
            mac: ev.mac.clone(),
            bridge: fabric::bridge_name(i),
            node_netns: netns.clone(),
            device_index: ev.device_index,
            network_card: ev.network_card,
        };
        let port_name = fabric::port_name(&ev.eni_id);
        let r = fabric::plug(&self.vpc, &port).and_then(|()| {
            if ev.device_index == 0 && ev.network_card == 0 {
                fabric::configure_primary(&netns, ev.primary_ip, ev.subnet_cidr)?;
            }
            let mut cidrs = vec![Ipv4Net::new(ev.primary_ip, 32).expect("/32")];
            cidrs.extend(&ev.secondary);
            fabric::route(&self.vpc, &port.bridge, &port_name, &cidrs, &ev.mac)
        });
        if let Err(e) = r {
            self.fail(format!("attaching {}: {e:#}", ev.eni_id));
        }
        self.lock().enis.insert(
            ev.eni_id,
            Plugged {
                mac: ev.mac,
                port: port_name,
                bridge: port.bridge,
                primary: ev.primary_ip,
                cidrs: ev.secondary,
            },
        );
    }

    fn detached(&self, ev: EniDetached) {
        let Some(p) = self.lock().enis.remove(&ev.eni_id) else {
            return;
        };
        let mut cidrs = vec![Ipv4Net::new(p.primary, 32).expect("/32")];
        cidrs.extend(&p.cidrs);
        fabric::unroute(&self.vpc, &p.bridge, &p.port, &cidrs);
        fabric::unplug(&self.vpc, &ev.eni_id);
    }

    fn assigned(&self, ev: AddressesChanged) {
        let p = {
            let mut g = self.lock();
            let Some(p) = g.enis.get_mut(&ev.eni_id) else {
                // Not attached: EniAttached carries the addresses when it attaches.
                return;
            };
            p.cidrs.extend(ev.cidrs.iter().copied());
            p.clone()
        };
        if let Err(e) = fabric::route(&self.vpc, &p.bridge, &p.port, &ev.cidrs, &p.mac) {
            self.fail(format!("{}: {e:#}", ev.eni_id));
        }
    }

    fn unassigned(&self, ev: AddressesChanged) {
        let p = {
            let mut g = self.lock();
            let Some(p) = g.enis.get_mut(&ev.eni_id) else {
                return;
            };
            p.cidrs.retain(|c| !ev.cidrs.contains(c));
            p.clone()
        };
        fabric::unroute(&self.vpc, &p.bridge, &p.port, &ev.cidrs);
    }
}

impl LabHooks {
    /// Enforces the new security-group view: replaces the fabric's `vpcnet_sg` table
    /// ([`crate::security_groups`]) in one nft transaction.
    fn ingress(&self, ev: IngressRulesChanged) {
        if !self.security_groups {
            return;
        }
        let text = crate::security_groups::render(&ev);
        if let Err(e) = crate::cmd::nft_in(&self.vpc, &text) {
            self.fail(format!("enforcing security groups: {e:#}"));
        }
    }
}

/// Runs blocking fabric work (it spawns `ip`) off the async workers.
fn blocking(f: impl FnOnce() + Send + 'static) -> HookFuture<'static> {
    Box::pin(async move {
        let _ = tokio::task::spawn_blocking(f).await;
    })
}

impl FabricHooks for LabHooks {
    fn eni_attached(&self, ev: EniAttached) -> HookFuture<'_> {
        let h = self.clone();
        blocking(move || h.attached(ev))
    }
    fn eni_detached(&self, ev: EniDetached) -> HookFuture<'_> {
        let h = self.clone();
        blocking(move || h.detached(ev))
    }
    fn addresses_assigned(&self, ev: AddressesChanged) -> HookFuture<'_> {
        let h = self.clone();
        blocking(move || h.assigned(ev))
    }
    fn addresses_unassigned(&self, ev: AddressesChanged) -> HookFuture<'_> {
        let h = self.clone();
        blocking(move || h.unassigned(ev))
    }
    fn ingress_rules_changed(&self, ev: IngressRulesChanged) -> HookFuture<'_> {
        let h = self.clone();
        blocking(move || h.ingress(ev))
    }
}
