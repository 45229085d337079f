//! The plugin's gRPC API (`vpcnet.cni.v1.CniBackend`) on a Unix socket.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use tonic::{Request, Response, Status};
use vpcnet_datapath::node::card_route_table;
use vpcnet_ipam::{AssignError, Assignment, Granted, PodKey, PodRef};
use vpcnet_proto::cni_backend_server::{CniBackend, CniBackendServer};
use vpcnet_proto::*;

use crate::clock::now_ms;
use crate::state::Shared;
use version::{check_plugin_version, log_unknown_call, with_agent_version};

mod annotate;
pub mod node_agent;
mod version;

/// The service.
pub struct Backend {
    pub shared: Arc<Shared>,
}

fn key_of(container_id: &str, if_name: &str) -> Result<PodKey, Status> {
    if container_id.trim().is_empty() {
        return Err(Status::invalid_argument(
            "container_id is empty: the CNI runtime must pass CNI_CONTAINERID",
        ));
    }
    let if_name = if if_name.is_empty() { "eth0" } else { if_name };
    Ok(PodKey::new(container_id, if_name))
}

/// How long a waiting ADD sleeps at most before it looks at the pool again (see
/// `VPCNET_ADD_IP_WAIT`): it wakes at once when the pool grows ([`Shared::pool_grew`]); this
/// catches what no event announces, an address whose cooldown ends.
const ADD_WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// How long a DEL or GC that arrives while the agent starts waits for start-up to finish.
const RELEASE_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Backend {
    /// Waits (at most [`RELEASE_READY_WAIT`]) for start-up to finish before a release (DEL,
    /// GC). While the agent starts, its pool is the checkpoint's and start-up still adds what
    /// the node's evidence (the runtime's CNI cache, pod routes) names; a release served now
    /// would be undone by that evidence, which names the pod until the runtime has seen the
    /// release succeed. Not ready in time: UNAVAILABLE, saying `then` (what happens instead).
    async fn after_start_up(&self, then: &str) -> Result<(), Status> {
        if self
            .shared
            .pool_state()
            .wait_ready(RELEASE_READY_WAIT)
            .await
        {
            return Ok(());
        }
        Err(Status::unavailable(format!(
            "the agent is starting: its pool is not restored yet, so {then}"
        )))
    }

    /// The status of an ADD that got no address: UNAVAILABLE while the pool can still grow or
    /// addresses are cooling down (the runtime retries), RESOURCE_EXHAUSTED at the node's
    /// ENI/IP limit. Counts the failure in `awscni_no_available_ip_addresses`.
    fn no_address(&self, e: AssignError, waited: bool) -> Status {
        self.shared.metrics().inc_no_available_ip();
        match e {
            e @ AssignError::PoolEmpty { .. } => {
                let waited = if waited {
                    format!(
                        " (waited {} s for the pool to grow: VPCNET_ADD_IP_WAIT)",
                        self.shared.opts.add_ip_wait.as_secs()
                    )
                } else {
                    String::new()
                };
                let paused = if self.paused() {
                    "; the pool does not grow while the Node is unschedulable \
                     (AWS_MANAGE_ENIS_NON_SCHEDULABLE=false): uncordon it, or set \
                     AWS_MANAGE_ENIS_NON_SCHEDULABLE=true"
                } else {
                    ""
                };
                Status::unavailable(format!("{e}{waited}{paused}"))
            }
            // Nothing can grow the pool but a pod's deletion or someone attaching more: the
            // runtime's retry helps only while an address is cooling down.
            e @ AssignError::ProvisioningDisabled { cooling, .. } => {
                let mut s = if cooling > 0 {
                    Status::unavailable(e.to_string())
                } else {
                    Status::resource_exhausted(e.to_string())
                };
                s.metadata_mut().insert(
                    vpcnet_proto::REASON_HEADER,
                    tonic::metadata::MetadataValue::from_static(
                        vpcnet_proto::REASON_PROVISIONING_DISABLED,
                    ),
                );
                s
            }
            e @ AssignError::AtLimit { .. } => {
                let cfg = self.shared.pool().config().clone();
                Status::resource_exhausted(format!(
                    "{e}: instance type {} allows {} ENIs with {} IPv4 addresses each{}",
                    self.shared.facts.instance_type,
                    cfg.eni_limit,
                    cfg.ipv4_per_eni,
                    cfg.max_eni
                        .map(|m| format!(" (MAX_ENI={m})"))
                        .unwrap_or_default()
                ))
            }
        }
    }

    /// ENI management is paused: the Node is cordoned ([`crate::kubernetes::node_watch`]).
    fn paused(&self) -> bool {
        self.shared.enis().management_paused()
    }

    /// The `route_table` of a reply: 0 on the primary ENI (no `from` rule), else the ENI's
    /// table as the VPC CNI numbers it ([`card_route_table`]: device number + 1 on card 0).
    fn route_table(primary: bool, network_card: u32, device_number: u32) -> u32 {
        if primary {
            0
        } else {
            card_route_table(network_card, device_number)
        }
    }

    /// The address of a multi-homed pod's further interface `key` as the plugin needs it.
    fn pod_interface(&self, key: &PodKey, g: &Granted) -> PodInterface {
        PodInterface {
            if_name: key.if_name.clone(),
            ipv4_addr: g.ip.to_string(),
            device_number: g.device_number,
            network_card: g.network_card,
            route_table: Self::route_table(g.primary_eni, g.network_card, g.device_number),
            eni_id: g.eni_id.clone(),
        }
    }

    /// One address for the pod, or one per managed network card for a multi-homed pod.
    fn assign(
        &self,
        key: &PodKey,
        pod: &PodRef,
        multi_nic: bool,
    ) -> Result<Vec<Granted>, AssignError> {
        let mut pool = self.shared.pool();
        if multi_nic {
            pool.assign_multi_nic(key.clone(), pod.clone(), now_ms())
        } else {
            pool.assign(key.clone(), pod.clone(), now_ms())
                .map(|g| vec![g])
        }
    }

    /// [`Self::undo_add`], then the checkpoint written without it (a failure is logged: the pod
    /// reclaim frees the address).
    async fn take_back(&self, key: &PodKey, grants: &[Granted]) {
        self.undo_add(key, grants);
        if let Err(pe) = self.shared.persist().await {
            tracing::warn!(container = %key.container_id, ip = %grants[0].ip, error = %pe, "the undone assignment could not be checkpointed; the pod reclaim frees it");
        }
    }

    /// Takes back what this ADD newly handed out (`grants`, in the order of [`Self::assign`])
    /// before it failed: no cooldown, no pod used them. Earlier assignments returned again stay.
    fn undo_add(&self, key: &PodKey, grants: &[Granted]) {
        {
            let mut pool = self.shared.pool();
            for (i, g) in grants.iter().enumerate() {
                if !g.existing {
                    let k = if i == 0 {
                        key.clone()
                    } else {
                        key.extra_interface(i)
                    };
                    pool.unassign(&k);
                }
            }
        }
        self.shared.update_gauges();
    }
}

#[tonic::async_trait]
impl CniBackend for Backend {
    async fn add_network(
        &self,
        req: Request<AddNetworkRequest>,
    ) -> Result<Response<AddNetworkReply>, Status> {
        let _timer = self.shared.metrics().action("AddNetwork");
        self.shared.metrics().inc_add_ip_req();
        let r = req.into_inner();
        let key = key_of(&r.container_id, &r.if_name)?;
        if !self.shared.is_ready() {
            return Err(Status::failed_precondition(
                "the agent is starting: its address pool is not filled yet, retry",
            ));
        }
        let pod = PodRef {
            namespace: r.k8s_pod_namespace.clone(),
            name: r.k8s_pod_name.clone(),
        };
        let multi_nic = r.requires_multi_nic_attachment;
        if multi_nic && !self.shared.opts.targets.multi_nic {
            // As the VPC CNI: such a pod is not started with one interface.
            return Err(Status::failed_precondition(format!(
                "pod {}/{} is annotated k8s.amazonaws.com/nicConfig: multi-nic-attachment, but \
                 this node manages network card 0 only: set ENABLE_MULTI_NIC=true on the agent \
                 (an instance type with more than one network card) or remove the annotation",
                r.k8s_pod_namespace, r.k8s_pod_name
            )));
        }
        let deadline = tokio::time::Instant::now() + self.shared.opts.add_ip_wait;
        let mut waited = false;
        let grants = loop {
            // Listen before looking, so growth between the look and the wait is not missed.
            let grew = self.shared.pool_state().growth();
            tokio::pin!(grew);
            grew.as_mut().enable();
            let result = self.assign(&key, &pod, multi_nic);
            // The reconciler looks at the pool now (no sleep on this path); once per ADD.
            if !waited {
                self.shared.pool_state().wake_reconciler();
            }
            match result {
                Ok(g) => break g,
                // Nothing free, but an ENI or addresses can still be added: wait (bounded by
                // VPCNET_ADD_IP_WAIT) for the reconciler rather than fail the ADD into
                // kubelet's sandbox back-off.
                Err(AssignError::PoolEmpty { pending_growth, .. })
                    if pending_growth > 0
                        && !self.paused()
                        && tokio::time::Instant::now() < deadline =>
                {
                    waited = true;
                    let wait = ADD_WAIT_POLL.min(deadline - tokio::time::Instant::now());
                    let _ = tokio::time::timeout(wait, grew).await;
                }
                Err(e) => return Err(self.no_address(e, waited)),
            }
        };
        let g = grants[0].clone();
        // A multi-homed pod's ADD may find its own address already there and get a further one.
        let new = grants.iter().any(|x| !x.existing);
        if new {
            if let Err(e) = self.shared.persist().await {
                // Never hand out an address the checkpoint does not record: after a restart
                // it would be adopted as free while this pod holds it. Undo and fail the ADD
                // (the runtime retries it), as the VPC CNI does.
                self.undo_add(&key, &grants);
                tracing::error!(container = %key.container_id, ip = %g.ip, error = %e, cause = %e.source, "ADD failed: the assignment could not be checkpointed and was undone");
                return Err(checkpoint_unavailable(format!(
                    "{e}: {}; the address was not handed out, retry",
                    e.source
                )));
            }
            self.shared.update_gauges();
        }
        if let Some(np) = self.shared.network_policy() {
            // The pod's rules are in force before the runtime starts a container.
            if let Err(e) = np
                .admit(&self.shared, &r.k8s_pod_namespace, &r.k8s_pod_name, g.ip)
                .await
            {
                if new {
                    self.take_back(&key, &grants).await;
                    np.release(&self.shared, &r.k8s_pod_namespace, &r.k8s_pod_name)
                        .await;
                }
                tracing::error!(container = %key.container_id, ip = %g.ip, "ADD failed: {e}");
                return Err(unavailable_because(
                    vpcnet_proto::REASON_NETWORK_POLICY,
                    format!("{e}; the address was not handed out"),
                ));
            }
        }
        if self.shared.opts.annotate_pod_ip {
            let ip = g.ip.to_string();
            if let Err(e) = self
                .annotate_added(&r.k8s_pod_namespace, &r.k8s_pod_name, &ip)
                .await
            {
                // As the VPC CNI: the ADD fails. The address was never handed out: take it
                // back now (a retried ADD gets one again).
                if new {
                    self.take_back(&key, &grants).await;
                }
                tracing::error!(container = %key.container_id, ip = %g.ip, "ADD failed: {e}");
                return Err(unavailable_because(
                    vpcnet_proto::REASON_POD_ANNOTATION,
                    format!("ANNOTATE_POD_IP: {e}; the address was not handed out, retry"),
                ));
            }
        }
        let extra_interfaces: Vec<PodInterface> = grants[1..]
            .iter()
            .enumerate()
            .map(|(i, x)| self.pod_interface(&key.extra_interface(i + 1), x))
            .collect();
        tracing::info!(container = %key.container_id, ifname = %key.if_name, pod = %format!("{}/{}", r.k8s_pod_namespace, r.k8s_pod_name), ip = %g.ip, eni = %g.eni_id, further = ?extra_interfaces.iter().map(|x| format!("{} {} card {}", x.if_name, x.ipv4_addr, x.network_card)).collect::<Vec<_>>(), "assigned");
        Ok(Response::new(AddNetworkReply {
            ipv4_addr: g.ip.to_string(),
            device_number: g.device_number,
            route_table: Self::route_table(g.primary_eni, g.network_card, g.device_number),
            vpc_cidrs: self
                .shared
                .facts
                .vpc_cidrs
                .iter()
                .map(|c| c.to_string())
                .collect(),
            use_external_snat: self.shared.opts.external_snat,
            eni_id: g.eni_id,
            mtu: self.shared.opts.mtu,
            extra_interfaces,
            network_policy_mode: node_agent::mode(&self.shared.opts),
        }))
    }

    async fn del_network(
        &self,
        req: Request<DelNetworkRequest>,
    ) -> Result<Response<DelNetworkReply>, Status> {
        let _timer = self.shared.metrics().action("DelNetwork");
        self.shared.metrics().inc_del_ip_req("PodDeleted");
        let r = req.into_inner();
        let key = key_of(&r.container_id, &r.if_name)?;
        // Not ready in time: the DEL fails (the plugin goes on with the datapath, and the
        // pod reclaim frees the address once the evidence is gone; a runtime that retries the
        // DEL releases it).
        self.after_start_up(
            "the address is not released now; retry the DEL (the pod reclaim frees it otherwise)",
        )
        .await?;
        // The pod's address and, for a multi-homed pod, those of its further interfaces.
        let released: Vec<(PodKey, Assignment, Granted)> = {
            let mut pool = self.shared.pool();
            let gone = pool.release_pod(&key, now_ms());
            gone.into_iter()
                .map(|(k, a)| {
                    let eni = pool.eni(&a.eni_id);
                    let g = Granted {
                        ip: a.ip,
                        eni_id: a.eni_id.clone(),
                        device_number: eni.map_or(0, |e| e.info.device_number),
                        network_card: eni.map_or(0, |e| e.info.network_card),
                        primary_eni: eni.is_none_or(|e| e.info.primary),
                        subnet_cidr: eni.map_or_else(|| a.ip.into(), |e| e.info.subnet_cidr),
                        existing: true,
                    };
                    (k, a, g)
                })
                .collect()
        };
        let network_policy_mode = node_agent::mode(&self.shared.opts);
        if released.is_empty() {
            return Ok(Response::new(DelNetworkReply {
                network_policy_mode,
                ..Default::default()
            }));
        }
        if let Err(e) = self.shared.persist().await {
            // Keep memory and file in agreement: the pod holds the addresses again and the
            // DEL fails (the runtime retries it; the plugin removes the datapath anyway, and
            // the reclaim frees the addresses once they are gone).
            let mut back = false;
            {
                let mut pool = self.shared.pool();
                for (k, a, _) in &released {
                    back |= pool.reinstate(k.clone(), a.clone());
                }
            }
            if back {
                self.shared.update_gauges();
                tracing::error!(container = %key.container_id, ips = ?released.iter().map(|(_, a, _)| a.ip).collect::<Vec<_>>(), error = %e, cause = %e.source, "DEL failed: the release could not be checkpointed and was undone");
                return Err(checkpoint_unavailable(format!(
                    "{e}: {}; the address was not released, retry",
                    e.source
                )));
            }
        }
        self.shared.update_gauges();
        self.shared.pool_state().wake_reconciler();
        self.shared.pool_state().wake_conntrack();
        if let Some(np) = self.shared.network_policy() {
            np.release(&self.shared, &r.k8s_pod_namespace, &r.k8s_pod_name)
                .await;
        }
        let main = released.iter().find(|(k, _, _)| *k == key);
        let extra_interfaces: Vec<PodInterface> = released
            .iter()
            .filter(|(k, _, _)| *k != key)
            .map(|(k, _, g)| self.pod_interface(k, g))
            .collect();
        for (k, a, _) in &released {
            tracing::info!(container = %k.container_id, ifname = %k.if_name, ip = %a.ip, "released");
        }
        if let Some((_, a, _)) = main {
            if self.shared.opts.annotate_pod_ip {
                // As the VPC CNI: a failure fails the DEL (the address stays released; the
                // runtime's retry finds nothing to release and succeeds).
                if let Err(e) = self
                    .clear_released(&r.k8s_pod_namespace, &r.k8s_pod_name, &a.ip.to_string())
                    .await
                {
                    tracing::error!(container = %key.container_id, ip = %a.ip, "DEL: {e}");
                    return Err(Status::unavailable(format!(
                        "ANNOTATE_POD_IP: {e}; the address {} was released",
                        a.ip
                    )));
                }
            }
        }
        Ok(Response::new(match main {
            Some((_, a, g)) => DelNetworkReply {
                released: true,
                ipv4_addr: a.ip.to_string(),
                device_number: g.device_number,
                route_table: Self::route_table(g.primary_eni, g.network_card, g.device_number),
                extra_interfaces,
                network_policy_mode,
            },
            None => DelNetworkReply {
                released: true,
                extra_interfaces,
                network_policy_mode,
                ..Default::default()
            },
        }))
    }

    async fn status(&self, _req: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        let s = self.shared.pool().summary(now_ms());
        let ready = self.shared.is_ready();
        let err = self.shared.health().last_error();
        let message = if !ready {
            "starting: filling the address pool".to_string()
        } else if s.available_ips == 0 {
            format!(
                "no free IP right now ({} assigned, {} cooling down){}",
                s.assigned_ips,
                s.cooling_ips,
                err.map(|e| format!("; last EC2 error: {e}"))
                    .unwrap_or_default()
            )
        } else {
            format!("{} free IPs", s.available_ips)
        };
        Ok(Response::new(StatusReply {
            ready: ready && s.available_ips > 0,
            available_ips: s.available_ips,
            message,
        }))
    }

    async fn garbage_collect(
        &self,
        req: Request<GarbageCollectRequest>,
    ) -> Result<Response<GarbageCollectReply>, Status> {
        let _timer = self.shared.metrics().action("GarbageCollect");
        let r = req.into_inner();
        let mut valid = BTreeSet::new();
        for a in &r.valid_attachments {
            valid.insert(key_of(&a.container_id, &a.if_name)?);
        }
        self.after_start_up(
            "nothing is garbage collected now; the runtime's next GC does it (the pod reclaim \
             frees stale addresses otherwise)",
        )
        .await?;
        let gone = self.shared.pool().garbage_collect(&valid, now_ms());
        if !gone.is_empty() {
            let _ = self.shared.persist().await;
            self.shared.update_gauges();
            self.shared.pool_state().wake_reconciler();
            self.shared.pool_state().wake_conntrack();
            tracing::info!(released = gone.len(), "garbage collected stale assignments");
        }
        Ok(Response::new(GarbageCollectReply {
            released: gone.into_iter().map(|(_, a)| a.ip.to_string()).collect(),
        }))
    }
}

/// Binds the Unix socket (removing a stale one), mode 0660.
pub fn bind(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create socket directory {}", dir.display()))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("cannot remove stale socket {}", path.display()))
        }
    }
    let l = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot bind gRPC socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(l)
}

/// UNAVAILABLE for a call undone because the checkpoint could not be written, marked
/// ([`vpcnet_proto::REASON_HEADER`]) so the plugin does not report it as an empty pool.
fn checkpoint_unavailable(msg: String) -> Status {
    unavailable_because(vpcnet_proto::REASON_CHECKPOINT_WRITE, msg)
}

/// UNAVAILABLE with `reason` in [`vpcnet_proto::REASON_HEADER`], so the plugin does not take
/// it for an empty pool.
fn unavailable_because(reason: &'static str, msg: String) -> Status {
    let mut s = Status::unavailable(msg);
    s.metadata_mut().insert(
        vpcnet_proto::REASON_HEADER,
        tonic::metadata::MetadataValue::from_static(reason),
    );
    s
}

/// The calls this agent serves (the `rpc`s of `proto/vpcnet/cni/v1/backend.proto`; a test
/// keeps the two equal).
pub const KNOWN_CALLS: &[&str] = &["AddNetwork", "DelNetwork", "Status", "GarbageCollect"];

/// gRPC service name of the CNI backend.
pub const SERVICE_NAME: &str = "vpcnet.cni.v1.CniBackend";

/// Serves until `stop` flips.
pub async fn serve(
    shared: Arc<Shared>,
    listener: tokio::net::UnixListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let svc = CniBackendServer::with_interceptor(Backend { shared }, check_plugin_version);
    let res = tonic::transport::Server::builder()
        .layer(tower::util::MapResponseLayer::new(
            with_agent_version::<tonic::body::Body>,
        ))
        .layer(tower::util::MapRequestLayer::new(
            log_unknown_call::<tonic::body::Body>,
        ))
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.changed().await;
        })
        .await;
    if let Err(e) = res {
        tracing::error!("gRPC server failed: {}", crate::errors::chain(&e));
    }
}

#[cfg(test)]
mod known_calls_tests {
    #[test]
    fn known_calls_are_the_protos_rpcs() {
        let proto = include_str!("../../../proto/vpcnet/cni/v1/backend.proto");
        let rpcs: Vec<&str> = proto
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rpc "))
            .filter_map(|l| l.split('(').next())
            .map(str::trim)
            .collect();
        assert_eq!(rpcs, super::KNOWN_CALLS);
        assert!(proto.contains("service CniBackend") && proto.contains("package vpcnet.cni.v1;"));
    }
}
