//! State shared by the gRPC handlers, the reconciler and introspection.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ipnet::Ipv4Net;
use tokio::sync::{watch, Notify};
use vpcnet_ipam::Pool;

use crate::checkpoint_file::{CheckpointStore, CheckpointWriteError};
use crate::clock::now_ms;
use crate::options::AgentOptions;

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
    pub opts: AgentOptions,
    pub facts: NodeFacts,
    pool: Mutex<Pool>,
    /// Wakes the reconciler (an ADD took the pool below target, or a DEL freed something).
    pub wake: Notify,
    /// Wakes the conntrack flush ([`crate::conntrack`]): an address was released.
    pub conntrack_wake: Notify,
    /// Wakes the ADDs waiting for the pool to grow ([`Shared::pool_grew`]).
    pub grew: Notify,
    /// The pool has been filled once: ADD may be served.
    pub ready: AtomicBool,
    /// ENI id → attachment id, from EC2 (needed to detach).
    pub attachments: Mutex<BTreeMap<String, String>>,
    /// (Network card, device index) pairs taken by ENIs the agent does not manage.
    pub foreign_devices: Mutex<Vec<(u32, u32)>>,
    /// IDs of the attached ENIs the agent does not manage (from the last describe): the IMDS
    /// drift check skips them.
    pub foreign_enis: Mutex<std::collections::BTreeSet<String>>,
    /// Last EC2 error of the reconciler (shown by Status and introspection).
    pub last_error: Mutex<Option<String>>,
    /// Serialises checkpoint writes so an older snapshot never overwrites a newer one.
    persist_lock: tokio::sync::Mutex<()>,
    /// Where the checkpoint lives ([`crate::AgentDeps::store`]: the injected store, else the file at
    /// `checkpoint_path`).
    pub store: Arc<dyn CheckpointStore>,
    /// Why an essential task stopped (the agent is unhealthy and the process exits).
    failure: Mutex<Option<String>>,
    /// Flips to true when an essential task stops unexpectedly.
    pub failed: watch::Sender<bool>,
    /// The last periodic pass or an unknown EC2 outcome asks the reconciler for a describe.
    pub need_describe: AtomicBool,
    /// Held across create → attach of an ENI and by the leaked-ENI sweep, so the sweep never
    /// sees (and deletes) an ENI the reconciler is about to attach.
    pub eni_lifecycle: tokio::sync::Mutex<()>,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// The node's network ([`crate::AgentDeps::node_network`]); `None` = no node-side setup.
    node_network: Option<Arc<dyn crate::node::NodeNetwork>>,
    /// The Kubernetes API client's state (`/v1/apiserver`), written by its task.
    pub api: crate::kubernetes::client::SharedStatus,
    /// The agent's stop signal (SIGTERM): retries and polls of EC2 work end early at it.
    /// Never fires unless [`crate::start`] sets it.
    pub stop: vpcnet_backoff::Cancel,
    /// The node's ENIConfig under custom networking (written by the ENIConfig watch, read by
    /// the reconciler and `/v1/eniconfig`); `None` without custom networking.
    pub eniconfig: Option<watch::Sender<crate::kubernetes::eniconfig_watch::EniConfigTracked>>,
    /// The datapath audit's last pass (`/v1/datapath`), written by [`crate::datapath_audit`].
    pub datapath: Mutex<vpcnet_introspection::DatapathDoc>,
    /// The connected Kubernetes client, once [`crate::start`] has spawned the API client
    /// (the pod annotation of `ANNOTATE_POD_IP` waits for it); its sender is dropped when no
    /// API server is configured.
    pub kube_clients: std::sync::OnceLock<watch::Receiver<Option<kube::Client>>>,
    /// The Node is cordoned and `AWS_MANAGE_ENIS_NON_SCHEDULABLE` is false: the reconciler
    /// neither grows the pool nor deletes ENIs ([`crate::kubernetes::node_watch`]).
    pub eni_management_paused: AtomicBool,
    /// The pool's prefix fallback as of the last [`Shared::update_gauges`] (the Node report
    /// follows it: [`crate::kubernetes::prefix_fallback_report`]).
    pub prefix_fallback: watch::Sender<Option<vpcnet_ipam::PrefixFallback>>,
}

impl Shared {
    pub fn new(
        opts: AgentOptions,
        facts: NodeFacts,
        pool: Pool,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
        store: Arc<dyn CheckpointStore>,
        node_network: Option<Arc<dyn crate::node::NodeNetwork>>,
    ) -> Self {
        let eniconfig = opts.custom_networking.as_ref().map(|_| {
            watch::channel(crate::kubernetes::eniconfig_watch::EniConfigTracked::initial(now_ms()))
                .0
        });
        Shared {
            opts,
            facts,
            pool: Mutex::new(pool),
            wake: Notify::new(),
            conntrack_wake: Notify::new(),
            grew: Notify::new(),
            ready: AtomicBool::new(false),
            attachments: Mutex::new(BTreeMap::new()),
            foreign_devices: Mutex::new(Vec::new()),
            foreign_enis: Mutex::new(Default::default()),
            last_error: Mutex::new(None),
            persist_lock: tokio::sync::Mutex::new(()),
            store,
            failure: Mutex::new(None),
            failed: watch::channel(false).0,
            need_describe: AtomicBool::new(false),
            eni_lifecycle: tokio::sync::Mutex::new(()),
            metrics,
            node_network,
            api: Default::default(),
            stop: vpcnet_backoff::Cancel::never(),
            eniconfig,
            datapath: Default::default(),
            kube_clients: std::sync::OnceLock::new(),
            eni_management_paused: AtomicBool::new(false),
            prefix_fallback: watch::channel(None).0,
        }
    }

    /// The pool, locked (keep the guard short; never across an await).
    pub fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node's network, when the agent sets up the node ([`crate::AgentDeps`]).
    pub fn node_network(&self) -> Option<&Arc<dyn crate::node::NodeNetwork>> {
        self.node_network.as_ref()
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Writes the checkpoint (atomic, 0600) from the pool as it is now.
    ///
    /// Errors: the write failed ([`CheckpointWriteError`], logged here too with its cause);
    /// the previous checkpoint is still in place. ADD undoes its assignment and fails; other
    /// callers go on, since the next write records their change (a release missing from the
    /// file only keeps an address held until the reclaim frees it, never hands it out twice).
    pub async fn persist(&self) -> Result<(), CheckpointWriteError> {
        let _g = self.persist_lock.lock().await;
        let cp = self.pool().checkpoint();
        let store = self.store.clone();
        let res = tokio::task::spawn_blocking(move || store.write(&cp))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        res.map_err(|source| {
            let e = CheckpointWriteError {
                location: self.store.location(),
                source,
            };
            tracing::error!(error = %e, cause = %e.source, "checkpoint write failed");
            self.metrics.inc_ipamd_error("checkpointWrite");
            e
        })
    }

    /// Records that an essential task stopped: health turns unhealthy and [`crate::run`]
    /// ends the process. The first reason is kept.
    pub fn fail(&self, reason: String) {
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(reason);
        }
        drop(f);
        self.failed.send_replace(true);
    }

    /// Why the agent failed, if an essential task stopped.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Why the datapath audit takes the node out of service (an unrepaired problem that cuts
    /// every pod off), if it does.
    pub fn datapath_not_ready(&self) -> Option<String> {
        self.datapath
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .not_ready
            .clone()
    }

    pub fn set_error(&self, e: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }

    /// Addresses or an ENI were added to the pool: every waiting ADD looks again.
    pub fn pool_grew(&self) {
        self.grew.notify_waiters();
    }

    /// Pool gauges (`awscni_total_ip_addresses`, ...) after a change.
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
        self.prefix_fallback.send_if_modified(|f| {
            let changed = f.is_some() != s.prefix_fallback.is_some();
            *f = s.prefix_fallback;
            changed
        });
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
