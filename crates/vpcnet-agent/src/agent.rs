//! Startup and lifetime of the agent, as steps: discover the instance (IMDS, one batched
//! describe), restore the pool (checkpoint), bring it up (adopt EC2's view, node setup, fill),
//! write the conflist, start the background tasks, serve introspection and metrics. Never
//! waits for Kubernetes.

mod background;
mod discover;
mod tasks;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::time::Instant;
use vpcnet_ec2::NetworkInterface;
use vpcnet_ipam::UnknownIpPolicy;

use crate::clock::now_ms;
use crate::cloud::Ec2Api;
use crate::deps::AgentDeps;
use crate::metrics::Metrics;
use crate::options::AgentOptions;
use crate::state::Shared;
use background::{serve_http, spawn_api_client, spawn_background};
use discover::{discover, instance_limits, warm_config};
use tasks::Tasks;

/// A running agent. Drop or [`AgentHandle::shutdown`] stops it.
pub struct AgentHandle {
    pub shared: Arc<Shared>,
    /// Where introspection listens (the bound address when the option asked for port 0).
    pub introspection_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    pub socket_path: PathBuf,
    /// Time from `start` to the pool being able to serve.
    pub time_to_ready: Duration,
    stop: watch::Sender<bool>,
    tasks: Tasks,
}

impl AgentHandle {
    /// Stops every task and waits for them, then writes the checkpoint once more; the
    /// socket file is removed. EC2 work in flight gets `shutdown_timeout`
    /// (VPCNET_SHUTDOWN_TIMEOUT) to finish; a task still running a second after that is
    /// aborted, so shutdown is bounded.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let bound = self.shared.opts.shutdown_timeout + Duration::from_secs(1);
        let supervisors: Vec<_> = self.tasks.supervisors.drain(..).collect();
        let aborts: Vec<_> = supervisors.iter().map(|t| t.abort_handle()).collect();
        if tokio::time::timeout(bound, futures::future::join_all(supervisors))
            .await
            .is_err()
        {
            tracing::warn!(
                ?bound,
                "tasks still running at the shutdown timeout: aborted"
            );
            for a in aborts {
                a.abort();
            }
            for (_, a) in &self.tasks.essential {
                a.abort();
            }
        }
        // The pool as the stopped tasks left it: every assignment handed out, every cooldown.
        if let Err(e) = self.shared.persist().await {
            tracing::error!(
                "final checkpoint write failed: {}",
                crate::errors::chain(&e)
            );
        }
        let _ = std::fs::remove_file(&self.socket_path);
    }

    /// Resolves with the reason once an essential task (gRPC server, reconciler, pod reclaim,
    /// leaked-ENI sweep, introspection or metrics server) has stopped unexpectedly; pending
    /// forever otherwise.
    pub async fn failed(&self) -> String {
        let mut rx = self.shared.health().failed();
        let _ = rx.wait_for(|f| *f).await;
        self.shared.failure().unwrap_or_default()
    }

    /// Fault injection for tests: aborts the essential task `name` (`grpc`, `reconciler`,
    /// `pod-reclaim`, `leaked-eni-sweep`, `introspection`, `metrics`) as if it had ended on
    /// its own. Returns false when no such task runs.
    pub fn abort_task(&self, name: &str) -> bool {
        let mut found = false;
        for (n, a) in &self.tasks.essential {
            if *n == name {
                a.abort();
                found = true;
            }
        }
        found
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        // The tasks are aborted as `tasks` drops.
        let _ = self.stop.send(true);
    }
}

/// Starts the agent and returns once the pool can serve (or startup failed).
///
/// Errors: IMDS unreachable, EC2 client configuration, unknown instance type, the socket
/// or a listener cannot be bound, the VPC CNI's checkpoint cannot be imported. A lost or
/// corrupt checkpoint is not an error ([`crate::recovery`]).
pub async fn start(opts: AgentOptions, deps: AgentDeps) -> anyhow::Result<AgentHandle> {
    let started = Instant::now();
    let (stop, stop_rx) = watch::channel(false);
    let listener = crate::grpc::bind(&opts.socket_path)?;
    // The AWS node agent's socket, bound before anything is served so a path that cannot be
    // bound fails the start.
    let ipamd_listener = match &opts.node_agent {
        Some(n) => Some(crate::grpc::bind(&n.ipamd_socket).with_context(|| {
            format!(
                "VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent: the node agent's socket {} \
                 (VPCNET_IPAMD_SOCKET); is the VPC CNI's aws-node still running on this node?",
                n.ipamd_socket.display()
            )
        })?),
        None => None,
    };
    let metrics = Arc::new(Metrics::new());
    metrics.set_provisioning_mode([(opts.provisioning.label(), 1)]);
    let found = discover(&opts, &deps, metrics.clone(), started).await?;
    let limits = instance_limits(found.ec2.as_ref(), &found.facts).await?;
    let store = deps.store(&opts);
    let restored = crate::recovery::restore(
        &opts,
        store.as_ref(),
        &found.enis,
        warm_config(&opts, &deps, &limits, found.primary_excluded)?,
        &metrics,
    )?;
    let settle_ms = opts.pod_reclaim_grace.as_millis() as u64;
    let policy = restored.origin.unknown_policy(settle_ms);
    let pool = restored.pool;
    let ec2 = found.ec2;
    let mut shared = Shared::new(
        opts.clone(),
        found.facts,
        pool,
        metrics,
        store,
        deps.node_network.clone(),
    );
    shared.set_stop(stop_rx.clone().into());
    // The API client's connections, from before the first ADD (ANNOTATE_POD_IP waits on it).
    let (kube_clients, kube_clients_rx) = watch::channel(None);
    shared.kube().set_clients(kube_clients_rx);
    let shared = Arc::new(shared);
    let mut tasks = Tasks::default();
    tasks.essential(
        "grpc",
        &shared,
        &stop_rx,
        crate::grpc::serve(shared.clone(), listener, stop_rx.clone()),
    );
    if let Some(l) = ipamd_listener {
        tasks.essential(
            "grpc-ipamd",
            &shared,
            &stop_rx,
            crate::grpc::node_agent::serve(shared.clone(), l, stop_rx.clone()),
        );
    }
    // Every listener is bound before the conflist points kubelet at this agent: a port that
    // cannot be bound fails the start with no conflist written.
    let introspection_addr = serve_http(
        "introspection",
        crate::introspection::router(shared.clone()),
        opts.introspection_addr,
        opts.introspection_socket.as_deref(),
        &shared,
        &stop_rx,
        &mut tasks,
    )
    .await?;
    let metrics_addr = serve_http(
        "metrics",
        crate::introspection::metrics_router(shared.metrics().clone()),
        opts.metrics_addr,
        opts.metrics_socket.as_deref(),
        &shared,
        &stop_rx,
        &mut tasks,
    )
    .await?;
    // Addresses restored cooled down from the checkpoint are flushed before any is handed out
    // (a failure leaves them to the flush task's retries).
    crate::conntrack::flush_due(&shared).await;
    bring_up(&shared, ec2.as_ref(), found.enis, policy).await?;
    let time_to_ready = started.elapsed();
    tracing::info!(summary = ?shared.pool().summary(now_ms()), ?time_to_ready, "pool ready; serving");
    if let Some(path) = &opts.conflist_path {
        write_conflist(path, &opts)
            .with_context(|| format!("writing CNI conflist {}", path.display()))?;
    }
    spawn_background(&shared, &ec2, &found.imds, &stop_rx, &mut tasks);
    spawn_api_client(
        &shared,
        &limits,
        started,
        deps.kube.clone(),
        kube_clients,
        &stop_rx,
        &mut tasks,
    );
    Ok(AgentHandle {
        shared,
        introspection_addr,
        metrics_addr,
        socket_path: opts.socket_path.clone(),
        time_to_ready,
        stop,
        tasks,
    })
}

/// An essential task stopped unexpectedly (its name and why). [`run`] returns it after
/// shutting down; the supervisor has already logged the one error line that says so, so the
/// caller exits non-zero without logging it again.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EssentialTaskFailed(pub String);

/// Test hook, compiled into debug builds only (never a release binary): the environment
/// variable `VPCNET_TEST_END_TASK=<name>` ends the essential task `name` (see
/// [`AgentHandle::abort_task`]) as soon as the agent serves, so a test can watch the process
/// fail as it would if that task had ended on its own.
#[cfg(debug_assertions)]
fn test_hook_end_task(handle: &AgentHandle) {
    if let Ok(name) = std::env::var("VPCNET_TEST_END_TASK") {
        tracing::warn!(task = %name, "test hook VPCNET_TEST_END_TASK: ending the task");
        handle.abort_task(&name);
    }
}

/// Runs the agent until SIGINT/SIGTERM, or until an essential task stops unexpectedly
/// (then the error is [`EssentialTaskFailed`], naming the task, and the caller exits
/// non-zero).
pub async fn run(opts: AgentOptions, deps: AgentDeps) -> anyhow::Result<()> {
    let handle = start(opts, deps).await?;
    #[cfg(debug_assertions)]
    test_hook_end_task(&handle);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let failure = tokio::select! {
        _ = tokio::signal::ctrl_c() => None,
        _ = term.recv() => None,
        why = handle.failed() => Some(why),
    };
    tracing::info!("shutting down");
    handle.shutdown().await;
    match failure {
        None => Ok(()),
        Some(why) => Err(EssentialTaskFailed(why).into()),
    }
}

/// Adopts EC2's view of the instance's ENIs, sets up the node, fills the pool and marks the
/// agent ready. EC2 errors of the fill are retried by the reconciler: the agent serves as
/// soon as one address is available.
async fn bring_up(
    shared: &Shared,
    ec2: &dyn Ec2Api,
    enis: Vec<NetworkInterface>,
    policy: UnknownIpPolicy,
) -> anyhow::Result<()> {
    crate::reconciler::adopt(shared, ec2, enis, policy)
        .await
        .context("adopting the instance's ENIs")?;
    let evidence = crate::recovery::gather(shared).await;
    crate::recovery::hold(shared, &evidence);
    if let Err(e) = shared.persist().await {
        tracing::warn!(error = %e, cause = %e.source, "initial checkpoint write failed; every ADD writes it again (and fails while it cannot)");
    }
    crate::reconciler::setup_node_enis(shared).await;
    crate::reconciler::setup_node_firewall(shared).await;
    if let (None, Some(node)) = (shared.network_policy(), shared.node_network()) {
        // Enforcement off: a previous run's rules must not keep isolating pods.
        if let Err(e) = node.remove_policy().await {
            tracing::warn!("network policy is off but its table could not be removed: {e:#}");
        }
    }
    if let Err(e) = crate::reconciler::fill(shared, ec2).await {
        let e = crate::errors::chain(&e);
        tracing::warn!("initial pool fill failed: {e}; the reconciler retries");
        shared.set_error(Some(e));
        shared.pool_state().wake_reconciler();
    }
    shared.pool_state().set_ready();
    shared.update_gauges();
    Ok(())
}

/// Writes the conflist atomically (temp file in the same directory, then rename), with the
/// agent's socket and MTU, keeping the plugins others chained into the file on disk
/// ([`vpcnet_cni_config::user_plugins`]).
fn write_conflist(path: &Path, opts: &AgentOptions) -> std::io::Result<()> {
    let mut settings = opts.conflist.clone();
    settings.agent_socket = opts.socket_path.display().to_string();
    settings.mtu = opts.pod_mtu.unwrap_or(opts.mtu);
    let kept = match std::fs::read_to_string(path) {
        Ok(text) => match vpcnet_cni_config::user_plugins(&text) {
            Ok(kept) => {
                if !kept.is_empty() {
                    let types: Vec<&str> = kept.iter().filter_map(|p| p["type"].as_str()).collect();
                    tracing::info!(path = %path.display(), kept = ?types, "keeping the plugins chained into the conflist after vpcnet's");
                }
                kept
            }
            Err(why) => {
                tracing::warn!(path = %path.display(), "the conflist on disk is not one vpcnet can keep chained plugins from ({why}): replacing it with vpcnet's alone");
                Vec::new()
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), "reading the conflist on disk: {e}; replacing it with vpcnet's alone");
            Vec::new()
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("conflist")
    ));
    std::fs::write(&tmp, vpcnet_cni_config::render_with(&settings, &kept))?;
    std::fs::rename(&tmp, path)
}
