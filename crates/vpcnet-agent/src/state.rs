//! State shared by the gRPC handlers, the reconciler and introspection: the settings and node
//! facts (read-only), and four private sub-states, each behind its own methods so a function's
//! signature says what it touches: the pool and its persistence ([`PoolState`]), the ENI book
//! ([`EniBook`]), health ([`Health`]) and the Kubernetes view ([`KubeView`]).

mod eni_book;
mod health;
mod kube_view;
mod pool;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, MutexGuard};

use ipnet::Ipv4Net;
use vpcnet_ipam::Pool;

use crate::checkpoint_file::{CheckpointStore, CheckpointWriteError};
use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::node::NodeNetwork;
use crate::options::AgentOptions;

pub use eni_book::EniBook;
pub use health::Health;
pub use kube_view::KubeView;
pub use pool::PoolState;

/// Facts about the node, read once at start (IMDS hints confirmed by EC2 where it matters).
#[derive(Debug, Clone, serde::Serialize)]
pub struct NodeFacts {
    pub instance_id: String,
    pub instance_type: String,
    pub region: String,
    /// `placement/availability-zone`: subnet discovery lists the subnets of this zone.
    pub availability_zone: String,
    pub primary_mac: String,
    pub primary_ip: Ipv4Addr,
    /// The primary ENI's subnet (or the agent's override): new ENIs go here unless custom
    /// networking or subnet discovery places them elsewhere.
    pub subnet_id: String,
    pub subnet_cidr: Ipv4Net,
    /// The primary ENI's VPC.
    pub vpc_id: String,
    pub vpc_cidrs: Vec<Ipv4Net>,
    /// Security groups for new ENIs.
    pub security_groups: Vec<String>,
}

/// Everything the agent's tasks share.
pub struct Shared {
    /// The settings (values only).
    pub opts: AgentOptions,
    pub facts: NodeFacts,
    metrics: Arc<Metrics>,
    /// The node's network ([`crate::AgentDeps::node_network`]); `None` = no node-side setup.
    node_network: Option<Arc<dyn NodeNetwork>>,
    /// The agent's stop signal (SIGTERM): retries and polls of EC2 work end early at it.
    /// Never fires unless [`crate::start`] sets it.
    stop: vpcnet_backoff::Cancel,
    pool: PoolState,
    enis: EniBook,
    health: Health,
    kube: KubeView,
    /// Network policy enforcement (`VPCNET_ENABLE_NETWORK_POLICY`); `None` when off.
    network_policy: Option<Arc<crate::network_policy::Enforcer>>,
}

impl Shared {
    pub fn new(
        opts: AgentOptions,
        facts: NodeFacts,
        pool: Pool,
        metrics: Arc<Metrics>,
        store: Arc<dyn CheckpointStore>,
        node_network: Option<Arc<dyn NodeNetwork>>,
    ) -> Self {
        let kube = KubeView::new(opts.custom_networking.is_some(), now_ms());
        if opts.network_policy.is_some() && node_network.is_none() {
            // The settings refuse this; options built directly (tests) can still ask for it.
            tracing::error!(
                "network policy is on but the node datapath is off: nothing is enforced"
            );
        }
        let network_policy = opts
            .network_policy
            .zip(node_network.clone())
            .map(|(mode, node)| {
                Arc::new(crate::network_policy::Enforcer::new(
                    mode,
                    opts.conflist.veth_prefix.clone(),
                    node,
                    metrics.clone(),
                    opts.policy_event_log
                        .as_ref()
                        .map(|_| vpcnet_datapath::policy_events::EventLog::default()),
                ))
            });
        Shared {
            opts,
            facts,
            pool: PoolState::new(pool, store, metrics.clone()),
            metrics,
            node_network,
            stop: vpcnet_backoff::Cancel::never(),
            enis: EniBook::default(),
            health: Health::default(),
            kube,
            network_policy,
        }
    }

    /// Network policy enforcement, when on.
    pub fn network_policy(&self) -> Option<&Arc<crate::network_policy::Enforcer>> {
        self.network_policy.as_ref()
    }

    /// Sets the stop signal (before the tasks start).
    pub fn set_stop(&mut self, stop: vpcnet_backoff::Cancel) {
        self.stop = stop;
    }

    /// The agent's stop signal: EC2 retries and polls end early at it.
    pub fn stop(&self) -> &vpcnet_backoff::Cancel {
        &self.stop
    }

    /// The agent's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The node's network, when the agent sets up the node ([`crate::AgentDeps`]).
    pub fn node_network(&self) -> Option<&Arc<dyn NodeNetwork>> {
        self.node_network.as_ref()
    }

    /// The pool and its persistence.
    pub fn pool_state(&self) -> &PoolState {
        &self.pool
    }

    /// The ENI book.
    pub fn enis(&self) -> &EniBook {
        &self.enis
    }

    /// Health.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// The Kubernetes view.
    pub fn kube(&self) -> &KubeView {
        &self.kube
    }

    /// The pool, locked (keep the guard short; never across an await): [`PoolState::lock`].
    pub fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock()
    }

    /// [`PoolState::is_ready`].
    pub fn is_ready(&self) -> bool {
        self.pool.is_ready()
    }

    /// [`PoolState::persist`].
    pub async fn persist(&self) -> Result<(), CheckpointWriteError> {
        self.pool.persist().await
    }

    /// [`Health::fail`].
    pub fn fail(&self, reason: String) {
        self.health.fail(reason);
    }

    /// [`Health::failure`].
    pub fn failure(&self) -> Option<String> {
        self.health.failure()
    }

    /// [`Health::datapath_not_ready`].
    pub fn datapath_not_ready(&self) -> Option<String> {
        self.health.datapath_not_ready()
    }

    /// [`Health::set_error`].
    pub fn set_error(&self, e: Option<String>) {
        self.health.set_error(e);
    }

    /// [`PoolState::grew`].
    pub fn pool_grew(&self) {
        self.pool.grew();
    }

    /// Pool gauges (`awscni_total_ip_addresses`, ...) after a change, and the prefix fallback
    /// published to the Kubernetes view.
    pub fn update_gauges(&self) {
        let m = &self.metrics;
        let pool = self.pool();
        let s = pool.summary(now_ms());
        m.set_total_ip_addresses(s.total_ips as u64);
        m.set_assigned_ip_addresses(s.assigned_ips as u64);
        m.set_cooldown_ip_addresses(s.cooling_ips as u64);
        m.set_conntrack_held_ip_addresses(pool.conntrack_overdue(now_ms()) as u64);
        m.set_eni_allocated(s.enis as u64);
        m.set_eni_max(s.max_enis as u64);
        m.set_ip_max(s.max_ips as u64);
        m.set_total_ipv4_prefixes(s.prefixes as u64);
        m.set_prefix_fallback(u64::from(s.prefix_fallback.is_some()));
        self.kube.publish_prefix_fallback(s.prefix_fallback);
        let mut per_eni: BTreeMap<&str, u64> =
            pool.enis().map(|e| (e.info.id.as_str(), 0)).collect();
        for (_, a) in pool.assignments() {
            if let Some(n) = per_eni.get_mut(a.eni_id.as_str()) {
                *n += 1;
            }
        }
        m.set_assigned_ip_per_eni(per_eni);
        // Per secondary /32 or /28 prefix, as the VPC CNI reports it.
        let mut per_cidr: BTreeMap<String, u64> = BTreeMap::new();
        for e in pool.enis() {
            for ip in e.ips.keys() {
                per_cidr.insert(format!("{ip}/32"), 0);
            }
            for p in e.prefixes.keys() {
                per_cidr.insert(p.to_string(), 0);
            }
        }
        for (_, a) in pool.assignments() {
            let key = pool
                .eni_of(a.ip)
                .and_then(|e| {
                    e.prefixes
                        .keys()
                        .find(|p| p.contains(&a.ip))
                        .map(|p| p.to_string())
                })
                .unwrap_or_else(|| format!("{}/32", a.ip));
            if let Some(n) = per_cidr.get_mut(&key) {
                *n += 1;
            }
        }
        m.set_assigned_ip_per_cidr(per_cidr.iter().map(|(k, v)| (k.as_str(), *v)));
    }
}
