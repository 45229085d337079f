//! The tasks started once the pool can serve: the reconciler, the pod reclaim, the conntrack
//! flush, the link watcher, the leaked-ENI sweep, the Kubernetes API client and its watches,
//! and the HTTP servers (introspection, metrics).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;
use tokio::time::Instant;
use vpcnet_limits::InstanceLimits;

use super::tasks::Tasks;
use crate::cloud::{Ec2Api, MetadataApi};
use crate::state::Shared;

/// The reconciler, the pod-route reclaim loop (with the node datapath) and the leaked-ENI
/// sweep.
pub(super) fn spawn_background(
    shared: &Arc<Shared>,
    ec2: &Arc<dyn Ec2Api>,
    imds: &Arc<dyn MetadataApi>,
    stop: &watch::Receiver<bool>,
    tasks: &mut Tasks,
) {
    tasks.essential(
        "reconciler",
        shared,
        stop,
        crate::reconciler::run(shared.clone(), ec2.clone(), imds.clone(), stop.clone()),
    );
    if shared.node_network().is_some() {
        let (s, mut st) = (shared.clone(), stop.clone());
        tasks.essential("pod-reclaim", shared, stop, async move {
            loop {
                crate::reconciler::reclaim_unrouted(&s).await;
                tokio::select! {
                    _ = tokio::time::sleep(s.opts.pod_reclaim_interval) => {}
                    _ = st.changed() => return,
                }
            }
        });
    }
    if shared.pool().config().conntrack_flush {
        tasks.essential(
            "conntrack-flush",
            shared,
            stop,
            crate::conntrack::run(shared.clone(), stop.clone()),
        );
    }
    // Not essential: without link events the periodic audit still notices a vanished ENI.
    if let Some(watcher) = crate::datapath_audit::link_watcher(shared, stop.clone()) {
        tasks.other(watcher);
    }
    if shared.opts.sweep_leaked_enis {
        tasks.essential(
            "leaked-eni-sweep",
            shared,
            stop,
            crate::reconciler::sweep_leaked_periodically(shared.clone(), ec2.clone(), stop.clone()),
        );
    }
}

/// The Kubernetes API client (see [`crate::kubernetes`]): started after the pool can serve, so
/// IPAM never waits for it; stopped with the agent. `given` is [`crate::AgentDeps::kube`].
pub(super) fn spawn_api_client(
    shared: &Arc<Shared>,
    limits: &InstanceLimits,
    started: Instant,
    given: Option<kube::Client>,
    clients: watch::Sender<Option<kube::Client>>,
    stop: &watch::Receiver<bool>,
    tasks: &mut Tasks,
) {
    let opts = &shared.opts;
    let mode = vpcnet_limits::MaxPodsOptions {
        prefix_delegation: opts.targets.prefix_delegation,
        max_eni: opts.targets.max_eni,
        ..Default::default()
    };
    let limits = limits.clone();
    let capacity = crate::kubernetes::client::CapacityInput {
        instance_type: shared.facts.instance_type.clone(),
        check: Box::new(move |pods| {
            Some(crate::kubernetes::capacity::CapacityCheck::new(
                pods, &limits, mode,
            ))
        }),
    };
    let clients_rx = clients.subscribe();
    let source = match given {
        Some(client) => Ok(Some(crate::kubernetes::client::Source::Given(client))),
        None => crate::kubernetes::client::Source::from_settings(&opts.api),
    };
    let client = crate::kubernetes::client::run(
        source,
        opts.api.node_name.clone(),
        shared.kube().api_status().clone(),
        shared.metrics().clone(),
        started,
        capacity,
        clients,
    );
    // AWS_MANAGE_ENIS_NON_SCHEDULABLE=false: follow the Node's cordon taint. Without a node
    // name there is no Node to watch: ENIs are managed as before.
    match (&opts.api.node_name, opts.manage_enis_non_schedulable) {
        (Some(node), false) => {
            let watch = crate::kubernetes::node_watch::run(
                shared.clone(),
                node.clone(),
                clients_rx.clone(),
            );
            tasks.other_until(stop, watch);
        }
        (None, false) => tracing::info!(
            "AWS_MANAGE_ENIS_NON_SCHEDULABLE=false but MY_NODE_NAME is not set: ENIs are managed whether the Node is schedulable or not"
        ),
        (_, true) => {}
    }
    // Network policy: the watches that feed the enforcer (ADDs wait for their first read).
    if let Some(np) = shared.network_policy() {
        let watch =
            crate::network_policy::watch::run(shared.clone(), np.clone(), clients_rx.clone());
        tasks.other_until(stop, watch);
        let verdicts = crate::network_policy::export_verdicts(shared.clone(), np.clone());
        tasks.other_until(stop, verdicts);
        if let Some(target) = &opts.policy_event_log {
            let events = crate::network_policy::events::run(
                np.node().clone(),
                np.pod_names(),
                target.clone(),
                shared.metrics().clone(),
            );
            tasks.other_until(stop, events);
        }
    }
    // Prefix delegation: its fallback to secondary IPs on a fragmented subnet is reported on
    // the Node.
    if let (Some(node), true) = (&opts.api.node_name, opts.targets.prefix_delegation) {
        let report = crate::kubernetes::prefix_fallback_report::run(
            shared.clone(),
            node.clone(),
            clients_rx.clone(),
        );
        tasks.other_until(stop, report);
    }
    if let (Some(keys), Some(tx)) = (&opts.custom_networking, shared.kube().eniconfig()) {
        let watch = crate::kubernetes::eniconfig_watch::run(
            opts.api.node_name.clone(),
            keys.clone(),
            clients_rx,
            tx.clone(),
            shared.metrics().clone(),
        );
        // Each published change wakes the reconciler, so the pool fills within one watch
        // event of the ENIConfig appearing.
        let (s, mut changes) = (shared.clone(), tx.subscribe());
        let mut stop1 = stop.clone();
        tasks.other(async move {
            tokio::select! {
                _ = watch => tracing::warn!("the ENIConfig watch ended; custom networking keeps the last known ENIConfig"),
                _ = stop1.changed() => {}
            }
        });
        let mut stop2 = stop.clone();
        tasks.other(async move {
            loop {
                tokio::select! {
                    r = changes.changed() => if r.is_err() { return },
                    _ = stop2.changed() => return,
                }
                s.pool_state().wake_reconciler();
            }
        });
    }
    // Not essential: IPAM never depends on the Kubernetes API (docs/architecture.md, principle 3).
    let mut stop = stop.clone();
    let status = shared.kube().api_status().clone();
    tasks.other(async move {
        tokio::select! {
            _ = client => {
                // Without an API server configured (or with an unusable configuration) the
                // client ends at once, having said why: not an error to report again.
                let state = status.read().unwrap_or_else(|e| e.into_inner()).state;
                if !matches!(state, vpcnet_introspection::ApiState::Disabled | vpcnet_introspection::ApiState::Misconfigured) {
                    tracing::error!("the Kubernetes API client stopped; IPAM goes on without it");
                }
            }
            _ = stop.changed() => {}
        }
    });
}

/// Serves `router` on a TCP address and/or a Unix socket; returns the bound TCP address.
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve_http(
    what: &'static str,
    router: axum::Router,
    tcp: Option<SocketAddr>,
    unix: Option<&Path>,
    shared: &Arc<Shared>,
    stop: &watch::Receiver<bool>,
    tasks: &mut Tasks,
) -> anyhow::Result<Option<SocketAddr>> {
    let mut bound = None;
    if let Some(addr) = tcp {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot bind {what} on {addr}"))?;
        bound = Some(l.local_addr()?);
        tasks.essential(
            what,
            shared,
            stop,
            crate::introspection::serve(router.clone(), l, stop.clone()),
        );
    }
    if let Some(path) = unix {
        let l = crate::introspection::bind_unix(path, what)?;
        tasks.essential(
            what,
            shared,
            stop,
            crate::introspection::serve(router, l, stop.clone()),
        );
    }
    Ok(bound)
}
