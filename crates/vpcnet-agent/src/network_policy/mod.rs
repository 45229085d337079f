//! Kubernetes NetworkPolicy enforcement on the node (`VPCNET_ENABLE_NETWORK_POLICY=true`, the
//! chart's `enableNetworkPolicy`). See docs/network-policy.md.
//!
//! - [`watch`] follows NetworkPolicies, Pods and Namespaces through the API server into a
//!   [`vpcnet_policy::World`] (compact: labels, addresses, named ports; never whole objects).
//! - The node's local pods are the pool's assignments (each pod's first interface), so the
//!   rules follow ADD and DEL exactly and survive restarts with the checkpoint.
//! - [`Enforcer::program`] compiles world + local pods ([`vpcnet_policy::compile()`]) and
//!   applies the difference to what it applied last (`vpcnet_datapath::policy`): sets and
//!   chains change in place, one nftables transaction at a time; the first program after a
//!   start replaces the table in one transaction, so the rules of the previous run stay in
//!   force until then.
//! - ADD programs the new pod's rules before it is answered ([`Enforcer::admit`]): the runtime
//!   starts no container before that, so a pod's first packet meets its policies. An ADD waits
//!   (bounded) for the first complete read of the API objects, and reads its pod from the
//!   API server when the watch has not delivered it yet; if either fails the ADD fails, the
//!   address is taken back and kubelet retries: a pod never starts with rules computed from
//!   objects the agent has not read.

pub mod events;
pub mod watch;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::sync::{watch as channel, Mutex};
use vpcnet_policy::{LocalPod, Mode, Ruleset, World};

use crate::metrics::Metrics;
use crate::node::NodeNetwork;
use crate::state::Shared;

/// Longest an ADD waits for the first complete read of policies, pods and namespaces and for
/// its pod's read, together. With `VPCNET_ADD_IP_WAIT` (5 s by default) it stays within the
/// plugin's 10 s `agentTimeout`.
pub const ADMIT_TIMEOUT: Duration = Duration::from_secs(4);

/// Why an ADD's policy could not be put in place. Each message names the fix.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error(
        "network policy: NetworkPolicies, Pods and Namespaces have not been read from the \
         Kubernetes API within {0:?} (see /v1/apiserver and the agent's log), so the pod's \
         rules cannot be computed; the runtime retries"
    )]
    NotSynced(Duration),
    #[error(
        "network policy: reading pod {pod} from the Kubernetes API: {reason}; the runtime retries"
    )]
    PodRead { pod: String, reason: String },
    #[error("network policy: programming the node's nftables: {0:#}; the runtime retries")]
    Program(anyhow::Error),
}

/// The node's enforcement state (see the module doc).
pub struct Enforcer {
    mode: Mode,
    veth_prefix: String,
    node: Arc<dyn NodeNetwork>,
    metrics: Arc<Metrics>,
    inner: Mutex<Inner>,
    synced: channel::Sender<bool>,
    /// Policy event logs: the rules log to NFLOG ([`events`]).
    events: Option<vpcnet_datapath::policy_events::EventLog>,
    /// The pods of the table as last applied, by host interface (`namespace/name`), for the
    /// event log's lines.
    pods: events::PodNames,
}

struct Inner {
    world: World,
    /// What the node's table holds, as far as this process applied it; `None` before the
    /// first program and after a failed one (the next program replaces the whole table).
    applied: Option<Ruleset>,
    /// Local pods' addresses, kept in the world's pods whose status has none yet.
    local_ips: BTreeMap<(String, String), Ipv4Addr>,
}

impl Enforcer {
    /// The node network the rules are applied to.
    pub fn node(&self) -> &Arc<dyn NodeNetwork> {
        &self.node
    }

    /// The pods of the applied table by host interface (shared with the event log reader).
    pub fn pod_names(&self) -> events::PodNames {
        self.pods.clone()
    }

    pub fn new(
        mode: Mode,
        veth_prefix: String,
        node: Arc<dyn NodeNetwork>,
        metrics: Arc<Metrics>,
        events: Option<vpcnet_datapath::policy_events::EventLog>,
    ) -> Self {
        Enforcer {
            mode,
            veth_prefix,
            node,
            metrics,
            events,
            pods: events::PodNames::default(),
            inner: Mutex::new(Inner {
                world: World::default(),
                applied: None,
                local_ips: BTreeMap::new(),
            }),
            synced: channel::channel(false).0,
        }
    }

    /// The node's local pods: each assignment's pod on its first interface (`eth0`), with
    /// its host-side interface; the newest assignment wins when a pod has two sandboxes.
    fn local_pods(&self, shared: &Shared) -> Vec<LocalPod> {
        let pool = shared.pool();
        let mut newest: BTreeMap<String, (u64, LocalPod)> = BTreeMap::new();
        for (key, a) in pool.assignments() {
            if key.if_name != "eth0" || a.pod.namespace.is_empty() || a.pod.name.is_empty() {
                continue;
            }
            let interface = vpcnet_datapath::names::host_veth_name(
                &self.veth_prefix,
                &a.pod.namespace,
                &a.pod.name,
            );
            let pod = LocalPod {
                namespace: a.pod.namespace.clone(),
                name: a.pod.name.clone(),
                interface: interface.clone(),
                ip: a.ip,
            };
            match newest.get(&interface) {
                Some((at, _)) if *at > a.assigned_at_ms => {}
                _ => {
                    newest.insert(interface, (a.assigned_at_ms, pod));
                }
            }
        }
        newest.into_values().map(|(_, p)| p).collect()
    }

    /// Whether the first complete read of the API objects is done.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Marks the first complete read done (the watch calls it once all three kinds are read).
    pub(crate) fn set_synced(&self) {
        self.synced.send_replace(true);
    }

    /// Changes the world (the watch's events) and tells whether anything changed.
    pub(crate) async fn update(
        &self,
        f: impl FnOnce(&mut World, &BTreeMap<(String, String), Ipv4Addr>) -> bool,
    ) -> bool {
        let mut inner = self.inner.lock().await;
        let Inner {
            world, local_ips, ..
        } = &mut *inner;
        f(world, local_ips)
    }

    /// Compiles and applies the node's rules now. `why` is logged.
    pub async fn program(&self, shared: &Shared, why: &str) -> anyhow::Result<()> {
        let mut inner = self.inner.lock().await;
        self.program_locked(shared, &mut inner, why).await
    }

    async fn program_locked(
        &self,
        shared: &Shared,
        inner: &mut Inner,
        why: &str,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let (namespaces, pods, policies) = inner.world.counts();
        self.metrics.set_policy_cluster_objects([
            ("namespaces", namespaces as u64),
            ("pods", pods as u64),
            ("policies", policies as u64),
        ]);
        let local = self.local_pods(shared);
        let rules = vpcnet_policy::compile(&inner.world, &local, self.mode);
        let script = match &inner.applied {
            Some(old) => match vpcnet_datapath::policy::render_update(old, &rules, self.events)? {
                Some(s) => s,
                None => return Ok(()),
            },
            None => vpcnet_datapath::policy::render_full(&rules, self.events)?,
        };
        let full = inner.applied.is_none();
        inner.applied = None;
        if let Err(e) = self.node.apply_policy(&script).await {
            self.metrics.inc_policy_program_error();
            tracing::error!(error = %format!("{e:#}"), why, "network policy: programming nftables failed (the next change replaces the whole table)");
            return Err(e);
        }
        let took = started.elapsed();
        self.metrics.observe_policy_program(why, took);
        let isolated = rules
            .pods
            .values()
            .filter(|p| {
                !matches!(p.ingress, vpcnet_policy::Direction::Open)
                    || !matches!(p.egress, vpcnet_policy::Direction::Open)
            })
            .count();
        let allows: usize = rules
            .pods
            .values()
            .map(|p| count_allows(&p.ingress) + count_allows(&p.egress))
            .sum();
        self.metrics
            .set_policy_state(local.len() as u64, isolated as u64, allows as u64);
        tracing::debug!(
            why,
            full,
            local = local.len(),
            isolated,
            allows,
            ?took,
            "network policy programmed"
        );
        self.pods.replace(&rules);
        inner.applied = Some(rules);
        Ok(())
    }

    /// An ADD's policy: waits for the first complete read, makes sure the world knows the
    /// pod (its labels from the API server if the watch has not delivered it) with its new
    /// address, and programs the node's rules, all before the ADD is answered.
    pub async fn admit(
        &self,
        shared: &Shared,
        namespace: &str,
        name: &str,
        ip: Ipv4Addr,
    ) -> Result<(), AdmitError> {
        // One deadline for both waits, so the ADD stays within the plugin's timeout.
        let deadline = Instant::now() + ADMIT_TIMEOUT;
        let mut synced = self.synced.subscribe();
        if tokio::time::timeout_at(deadline, synced.wait_for(|s| *s))
            .await
            .map_or(true, |r| r.is_err())
        {
            return Err(AdmitError::NotSynced(ADMIT_TIMEOUT));
        }
        let known = {
            let mut inner = self.inner.lock().await;
            inner
                .local_ips
                .insert((namespace.to_string(), name.to_string()), ip);
            with_local_ip(&mut inner.world, namespace, name, ip)
        };
        if !known && !namespace.is_empty() && !name.is_empty() {
            let pod = self.read_pod(shared, namespace, name, deadline).await?;
            let mut inner = self.inner.lock().await;
            if let Some(pod) = pod.as_ref().and_then(vpcnet_policy::k8s::pod) {
                if inner.world.pod(namespace, name).is_none() {
                    inner.world.upsert_pod(pod);
                }
                with_local_ip(&mut inner.world, namespace, name, ip);
            }
        }
        let mut inner = self.inner.lock().await;
        self.program_locked(shared, &mut inner, "ADD")
            .await
            .map_err(AdmitError::Program)
    }

    /// A DEL (or an undone ADD): forgets the pod's local address and programs the rules
    /// without it (the pool no longer holds its assignment).
    pub async fn release(&self, shared: &Shared, namespace: &str, name: &str) {
        let mut inner = self.inner.lock().await;
        inner
            .local_ips
            .remove(&(namespace.to_string(), name.to_string()));
        if inner.applied.is_none() && !self.is_synced() {
            return;
        }
        let _ = self.program_locked(shared, &mut inner, "DEL").await;
    }

    async fn read_pod(
        &self,
        shared: &Shared,
        namespace: &str,
        name: &str,
        deadline: Instant,
    ) -> Result<Option<Pod>, AdmitError> {
        let pod = format!("{namespace}/{name}");
        let err = |reason: String| AdmitError::PodRead {
            pod: pod.clone(),
            reason,
        };
        let client = shared
            .kube()
            .clients()
            .and_then(|c| c.borrow().clone())
            .ok_or_else(|| err("the API client is not connected (see /v1/apiserver)".into()))?;
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        match tokio::time::timeout_at(deadline, pods.get_opt(name)).await {
            Err(_) => Err(err(format!(
                "no answer within the ADD's {ADMIT_TIMEOUT:?} for network policy"
            ))),
            Ok(Err(e)) => Err(err(e.to_string())),
            Ok(Ok(p)) => Ok(p),
        }
    }
}

/// How often [`export_verdicts`] reads the rules' counters.
pub const VERDICTS_INTERVAL: Duration = Duration::from_secs(15);

/// Sums the rules' counters into (packets allowed by policy, packets dropped by direction).
pub fn verdicts(
    counters: &[vpcnet_datapath::policy::RuleCounter],
) -> (BTreeMap<String, u64>, BTreeMap<&'static str, u64>) {
    let mut allowed: BTreeMap<String, u64> = BTreeMap::new();
    let mut denied: BTreeMap<&'static str, u64> = BTreeMap::from([("ingress", 0), ("egress", 0)]);
    for c in counters {
        if c.drop {
            let dir = if c.chain.starts_with("in_") {
                "ingress"
            } else {
                "egress"
            };
            *denied.entry(dir).or_default() += c.packets;
        } else if let Some(p) = &c.policy {
            *allowed.entry(p.clone()).or_default() += c.packets;
        }
    }
    (allowed, denied)
}

/// The chains of isolated pods in `applied` that the node's table (`counters`: every chain
/// with a counting rule; each isolated pod's chains end with a counted drop) does not hold.
pub fn missing_chains(
    applied: &Ruleset,
    counters: &[vpcnet_datapath::policy::RuleCounter],
) -> Vec<String> {
    let present: std::collections::BTreeSet<&str> =
        counters.iter().map(|c| c.chain.as_str()).collect();
    let mut missing = Vec::new();
    for (interface, pod) in &applied.pods {
        for (isolated, chain) in [
            (
                !matches!(pod.ingress, vpcnet_policy::Direction::Open),
                vpcnet_datapath::policy::ingress_chain(interface),
            ),
            (
                !matches!(pod.egress, vpcnet_policy::Direction::Open),
                vpcnet_datapath::policy::egress_chain(interface),
            ),
        ] {
            if isolated && !present.contains(chain.as_str()) {
                missing.push(chain);
            }
        }
    }
    missing
}

impl Enforcer {
    /// Reads the node's rule counters and checks them against what this agent applied: a
    /// table deleted or flushed by someone else (`nft flush ruleset`, another tool) is
    /// replaced whole at once (trigger `repair`), so pods do not stay open until the next
    /// change. Holds the enforcer's lock while reading, so a program cannot come between.
    /// `None` when the counters cannot be read (logged at debug: the next read tries again).
    pub async fn audit(
        &self,
        shared: &Shared,
    ) -> Option<Vec<vpcnet_datapath::policy::RuleCounter>> {
        let mut inner = self.inner.lock().await;
        let counters = match self.node.policy_counters().await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("network policy counters: {e:#}");
                return None;
            }
        };
        let missing = match &inner.applied {
            Some(applied) => missing_chains(applied, &counters),
            None => Vec::new(),
        };
        if !missing.is_empty() {
            tracing::warn!(
                missing = %missing.join(" "),
                "network policy: the node's table lost chains this agent programmed (changed outside the agent); replacing the whole table"
            );
            inner.applied = None;
            if let Err(e) = self.program_locked(shared, &mut inner, "repair").await {
                tracing::warn!("network policy: repairing the node's table: {e:#}");
            }
        }
        Some(counters)
    }
}

/// Every [`VERDICTS_INTERVAL`] until the agent stops: [`Enforcer::audit`] (the table repaired
/// when it lost chains), then the verdict counters as metrics
/// (`vpcnet_network_policy_allowed_packets`, `_denied_packets`).
pub async fn export_verdicts(shared: Arc<Shared>, enforcer: Arc<Enforcer>) {
    let metrics = shared.metrics().clone();
    let mut tick = tokio::time::interval(VERDICTS_INTERVAL);
    loop {
        tick.tick().await;
        if let Some(counters) = enforcer.audit(&shared).await {
            let (allowed, denied) = verdicts(&counters);
            metrics.set_policy_allowed_packets(allowed.iter().map(|(p, n)| (p.as_str(), *n)));
            metrics.set_policy_denied_packets(denied);
        }
    }
}

fn count_allows(d: &vpcnet_policy::Direction) -> usize {
    match d {
        vpcnet_policy::Direction::Open => 0,
        vpcnet_policy::Direction::Isolated(a) => a.len(),
    }
}

/// Makes `ip` the world's address of the local pod `namespace/name` (its status is written by
/// kubelet only after the ADD, and may still show an older sandbox's address). Whether the
/// world knows the pod.
pub(crate) fn with_local_ip(world: &mut World, namespace: &str, name: &str, ip: Ipv4Addr) -> bool {
    match world.pod(namespace, name) {
        None => false,
        Some(p) if p.ips.contains(&ip) => true,
        Some(p) => {
            let mut p = p.clone();
            p.ips = vec![ip];
            world.upsert_pod(p);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vpcnet_datapath::policy::RuleCounter;

    #[test]
    fn verdicts_sum_allows_by_policy_and_drops_by_direction() {
        let c = |chain: &str, policy: Option<&str>, drop: bool, packets: u64| RuleCounter {
            chain: chain.into(),
            policy: policy.map(String::from),
            drop,
            packets,
            bytes: packets * 100,
        };
        let (allowed, denied) = verdicts(&[
            c("in_eni1", Some("shop/web"), false, 5),
            c("out_eni2", Some("shop/web"), false, 2),
            c("in_eni2", Some("shop/db"), false, 1),
            c("in_eni1", None, true, 7),
            c("out_eni2", None, true, 3),
            c("in_eni2", None, true, 1),
        ]);
        assert_eq!(
            allowed,
            BTreeMap::from([("shop/db".to_string(), 1), ("shop/web".to_string(), 7)])
        );
        assert_eq!(denied, BTreeMap::from([("egress", 3), ("ingress", 8)]));
    }

    #[test]
    fn chains_of_isolated_pods_missing_from_the_table_are_found() {
        use vpcnet_policy::{Direction, PodRules};
        let pod = |ingress: Direction, egress: Direction| PodRules {
            pod: "ns/p".into(),
            ingress,
            egress,
        };
        let applied = Ruleset {
            sets: BTreeMap::new(),
            pods: BTreeMap::from([
                (
                    "eni1".to_string(),
                    pod(Direction::Isolated(vec![]), Direction::Open),
                ),
                (
                    "eni2".to_string(),
                    pod(Direction::Isolated(vec![]), Direction::Isolated(vec![])),
                ),
                ("eni3".to_string(), pod(Direction::Open, Direction::Open)),
            ]),
        };
        let drop = |chain: &str| RuleCounter {
            chain: chain.into(),
            policy: None,
            drop: true,
            packets: 0,
            bytes: 0,
        };
        let all = [drop("in_eni1"), drop("in_eni2"), drop("out_eni2")];
        assert!(missing_chains(&applied, &all).is_empty());
        // The table gone (nft lists nothing): every isolated pod's chains.
        assert_eq!(
            missing_chains(&applied, &[]),
            ["in_eni1", "in_eni2", "out_eni2"]
        );
        assert_eq!(missing_chains(&applied, &all[..2]), ["out_eni2"]);
    }
}
