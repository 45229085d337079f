//! Startup and lifetime of the agent, as steps: discover the instance (IMDS, one batched
//! describe), restore the pool (checkpoint), bring it up (adopt EC2's view, node setup, fill),
//! write the conflist, start the background tasks, serve introspection and metrics. Never
//! waits for Kubernetes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use vpcnet_ec2::{Ec2, Ec2Options, NetworkInterface};
use vpcnet_imds::Imds;

use crate::cloud::{CloudApis, Ec2Api, MetadataApi};
use vpcnet_ipam::{UnknownIpPolicy, WarmConfig};
use vpcnet_limits::InstanceLimits;

use crate::clock::now_ms;
use crate::deps::AgentDeps;
use crate::metrics::Metrics;
use crate::options::AgentOptions;
use crate::provisioning::{ImdsOnlyEc2, Provisioning};
use crate::state::{NodeFacts, Shared};

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

/// The agent's spawned tasks: each essential task runs under a supervisor that turns its
/// unexpected end (return, panic, abort) into [`Shared::fail`]. Dropping it aborts them all
/// (a start that fails half-way leaves nothing running).
#[derive(Default)]
struct Tasks {
    /// Awaited at shutdown.
    supervisors: Vec<JoinHandle<()>>,
    /// Name and abort handle of each essential task.
    essential: Vec<(&'static str, tokio::task::AbortHandle)>,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.supervisors {
            t.abort();
        }
        for (_, a) in &self.essential {
            a.abort();
        }
    }
}

impl Tasks {
    /// Spawns `fut` as the essential task `name`. If it ends before `stop` flips, the agent
    /// fails: one error line naming the task and why, `/healthz` 503 at once, and [`run`]
    /// returns the error (the process exits non-zero, so kubelet restarts it).
    fn essential<F>(
        &mut self,
        name: &'static str,
        shared: &Arc<Shared>,
        stop: &watch::Receiver<bool>,
        fut: F,
    ) where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let inner = tokio::spawn(fut);
        self.essential.push((name, inner.abort_handle()));
        let (shared, stop) = (shared.clone(), stop.clone());
        self.supervisors.push(tokio::spawn(async move {
            let res = inner.await;
            if *stop.borrow() {
                return;
            }
            let why = match res {
                Ok(()) => "ended".to_string(),
                Err(e) if e.is_panic() => {
                    let p = e.into_panic();
                    let msg = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    format!("panicked: {msg}")
                }
                Err(_) => "was cancelled".to_string(),
            };
            tracing::error!(
                task = name,
                "essential task {name} {why} unexpectedly: the agent is unhealthy and exits so that it is restarted"
            );
            shared.fail(format!("essential task {name} {why}"));
        }));
    }

    /// Spawns a task that is not essential (its end is logged only).
    fn other<F>(&mut self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.supervisors.push(tokio::spawn(fut));
    }

    /// [`Tasks::other`] for `fut`, which ends at the latest when `stop` flips.
    fn other_until<F>(&mut self, stop: &watch::Receiver<bool>, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut stop = stop.clone();
        self.other(async move {
            tokio::select! {
                _ = fut => {}
                _ = stop.changed() => {}
            }
        });
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

/// What start-up learns about the instance before the pool exists.
struct Discovered {
    ec2: Arc<dyn Ec2Api>,
    /// IMDS, for the reconciler's drift check.
    imds: Arc<dyn MetadataApi>,
    /// The instance's ENIs from the one batched describe.
    enis: Vec<NetworkInterface>,
    facts: NodeFacts,
    /// Pods get no addresses of the primary ENI: its subnet is excluded from subnet discovery
    /// ([`crate::reconciler::subnet_discovery::primary_eni_excluded`]).
    primary_excluded: bool,
}

/// IMDS identity, then the EC2 client and the one batched describe while IMDS answers the
/// second round (the primary ENI's facts).
async fn discover(
    opts: &AgentOptions,
    deps: &AgentDeps,
    metrics: Arc<Metrics>,
    started: Instant,
) -> anyhow::Result<Discovered> {
    let imds: Arc<dyn MetadataApi> = match &deps.cloud {
        Some(c) => c.metadata.clone(),
        None => Arc::new(match &opts.imds_endpoint {
            Some(e) => Imds::with_endpoint(e, Some(Duration::from_secs(2)))
                .context("IMDS endpoint (AWS_EC2_METADATA_SERVICE_ENDPOINT)")?,
            None => Imds::new(),
        }),
    };
    let id = read_identity(imds.as_ref(), opts).await?;
    tracing::debug!(elapsed = ?started.elapsed(), "IMDS identity");
    // The EC2 client, once built, for the subnet check that follows the IMDS facts.
    let (ec2_tx, ec2_rx) = tokio::sync::oneshot::channel::<Arc<dyn Ec2Api>>();
    let ec2_and_enis = async {
        let ec2: Arc<dyn Ec2Api> = match (&deps.cloud, opts.provisioning) {
            // No EC2 client at all: the ENIs come from IMDS.
            (_, Provisioning::ImdsOnly) => Arc::new(ImdsOnlyEc2::new(imds.clone())),
            (Some(CloudApis { ec2, .. }), p) => p.wrap(ec2.clone()),
            (None, p) => p.wrap(Arc::new(
                Ec2::connect(
                    Ec2Options {
                        region: Some(id.region.clone()),
                        endpoint_url: opts.ec2_endpoint.clone(),
                        imds_endpoint: opts.imds_endpoint.clone(),
                        credentials: opts.credentials.clone(),
                        calls: opts.ec2_calls.clone(),
                    },
                    metrics,
                )
                .await
                .context("building the EC2 client")?,
            )),
        };
        tracing::debug!(elapsed = ?started.elapsed(), "EC2 client");
        let _ = ec2_tx.send(ec2.clone());
        let enis = ec2
            .describe_instance_network_interfaces(&id.instance_id)
            .await
            .context("describing the instance's ENIs")?;
        tracing::debug!(elapsed = ?started.elapsed(), "described ENIs");
        anyhow::Ok((ec2, enis))
    };
    // Whether the node's subnet is excluded from subnet discovery: its DescribeSubnets runs
    // beside the ENI describe, not after it (no added start-up latency).
    let facts_and_exclusion = async {
        let facts = read_facts(imds.as_ref(), &id, opts).await?;
        let excluded = match ec2_rx.await {
            Ok(ec2) => {
                crate::reconciler::subnet_discovery::primary_eni_excluded(
                    ec2.as_ref(),
                    opts,
                    &facts.subnet_id,
                )
                .await
            }
            // The client failed to build: the other branch returns that error.
            Err(_) => false,
        };
        anyhow::Ok((facts, excluded))
    };
    let ((ec2, enis), (facts, primary_excluded)) =
        tokio::try_join!(ec2_and_enis, facts_and_exclusion)?;
    tracing::info!(instance = %facts.instance_id, r#type = %facts.instance_type, subnet = %facts.subnet_id, "instance facts from IMDS");
    log_provisioning(opts);
    Ok(Discovered {
        ec2,
        imds,
        enis,
        facts,
        primary_excluded,
    })
}

/// Says at start how the pool gets its addresses when the agent does not provision them, and
/// which settings therefore have no effect.
fn log_provisioning(opts: &AgentOptions) {
    let p = opts.provisioning;
    if p.provisions() {
        return;
    }
    tracing::info!(
        provisioning = p.label(),
        "{}: the agent creates, attaches, assigns, tags and frees no ENI, secondary IP or prefix; pods get the addresses already attached to the node's ENIs, re-read every VPCNET_RECONCILE_INTERVAL; the warm targets and MAX_ENI have no effect and the leaked-ENI sweep does not run",
        p.setting()
    );
    if p == Provisioning::ImdsOnly {
        tracing::info!(
            "ENABLE_IMDS_ONLY_MODE=true: no EC2 call at all; IMDS shows no tags, so ENIs tagged node.k8s.amazonaws.com/no_manage are used like any other and subnet tags (ENABLE_SUBNET_DISCOVERY's kubernetes.io/role/cni=0 on the node's subnet) are not read"
        );
    }
}

/// IMDS identity (first round): instance ID, type, primary MAC, region.
struct Identity {
    instance_id: String,
    instance_type: String,
    mac: String,
    region: String,
}

async fn read_identity(imds: &dyn MetadataApi, opts: &AgentOptions) -> anyhow::Result<Identity> {
    let (instance_id, instance_type, mac, region) = tokio::try_join!(
        imds.instance_id(),
        imds.instance_type(),
        imds.mac(),
        async {
            match &opts.region {
                Some(r) => Ok(r.clone()),
                None => imds.region().await,
            }
        }
    )
    .context("reading instance identity from IMDS")?;
    Ok(Identity {
        instance_id,
        instance_type,
        mac: mac.to_ascii_lowercase(),
        region,
    })
}

/// IMDS second round: the primary ENI's subnet, VPC and VPC CIDRs, its security groups and
/// the instance's availability zone (static facts; hints only, never used to hand out or
/// release an address).
async fn read_facts(
    imds: &dyn MetadataApi,
    id: &Identity,
    opts: &AgentOptions,
) -> anyhow::Result<NodeFacts> {
    let (iface, primary_ip, availability_zone) = tokio::try_join!(
        imds.interface(&id.mac),
        imds.local_ipv4(),
        imds.availability_zone()
    )
    .context("reading the primary ENI from IMDS")?;
    Ok(NodeFacts {
        instance_id: id.instance_id.clone(),
        instance_type: id.instance_type.clone(),
        region: id.region.clone(),
        availability_zone,
        primary_mac: id.mac.clone(),
        primary_ip,
        subnet_id: opts.subnet_id.clone().unwrap_or(iface.subnet_id),
        subnet_cidr: iface.subnet_cidr,
        vpc_id: iface.vpc_id,
        vpc_cidrs: iface.vpc_cidrs,
        security_groups: if opts.security_groups.is_empty() {
            iface.security_group_ids
        } else {
            opts.security_groups.clone()
        },
    })
}

/// The instance type's ENI and IP limits: the built-in table, else EC2
/// `DescribeInstanceTypes`.
async fn instance_limits(ec2: &dyn Ec2Api, facts: &NodeFacts) -> anyhow::Result<InstanceLimits> {
    if let Some(l) = vpcnet_limits::lookup(&facts.instance_type) {
        return Ok(l.clone());
    }
    ec2.describe_instance_types(std::slice::from_ref(&facts.instance_type))
        .await
        .with_context(|| {
            format!(
                "instance type {} is not in the built-in table and DescribeInstanceTypes failed",
                facts.instance_type
            )
        })?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("EC2 does not know instance type {}", facts.instance_type))
}

/// ENABLE_MULTI_NIC: the network cards besides card 0 (the primary ENI's) that can hold ENIs.
fn multi_nic_cards(limits: &InstanceLimits) -> Vec<vpcnet_ipam::NetworkCardLimit> {
    limits
        .network_cards
        .iter()
        .filter(|c| c.index != 0 && c.max_enis > 0)
        .map(|c| vpcnet_ipam::NetworkCardLimit {
            index: c.index,
            max_enis: c.max_enis,
        })
        .collect()
}

/// `primary_excluded`: the node's subnet is tagged `kubernetes.io/role/cni=0` with subnet
/// discovery on ([`crate::reconciler::subnet_discovery::primary_eni_excluded`]).
fn warm_config(
    opts: &AgentOptions,
    deps: &AgentDeps,
    limits: &InstanceLimits,
    primary_excluded: bool,
) -> anyhow::Result<WarmConfig> {
    let t = &opts.targets;
    let mut c = WarmConfig::for_limits(limits);
    c.warm_eni_target = t.warm_eni_target;
    c.warm_ip_target = t.warm_ip_target;
    c.minimum_ip_target = t.minimum_ip_target;
    c.warm_prefix_target = t.warm_prefix_target;
    c.prefix_delegation = t.prefix_delegation;
    c.max_eni = t.max_eni;
    c.cooldown_ms = opts.cooldown.as_millis() as u64;
    c.surplus_hold_ms = opts.surplus_hold.as_millis() as u64;
    c.prefix_retry_ms = opts.prefix_retry.as_millis() as u64;
    if t.multi_nic {
        c.extra_cards = multi_nic_cards(limits);
    }
    // Custom networking, or the node's subnet excluded from subnet discovery: pods use
    // secondary ENIs (the ENIConfig's or discovered subnets) only.
    c.primary_eni_for_pods = opts.custom_networking.is_none() && !primary_excluded;
    // DISABLE_NETWORK_RESOURCE_PROVISIONING / ENABLE_IMDS_ONLY_MODE: no plan, ever.
    c.provisioning = opts.provisioning.provisions();
    // Released addresses wait for the node's conntrack entries of them to be deleted.
    c.conntrack_flush = deps
        .node_network
        .as_ref()
        .is_some_and(|n| n.tracks_connections());
    c.validate().context("warm-pool settings")?;
    if c.prefix_delegation && !limits.supports_prefix_delegation() {
        anyhow::bail!("ENABLE_PREFIX_DELEGATION=true needs a Nitro instance type; {} is not (unset ENABLE_PREFIX_DELEGATION)", limits.instance_type);
    }
    Ok(c)
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

/// The reconciler, the pod-route reclaim loop (with the node datapath) and the leaked-ENI
/// sweep.
fn spawn_background(
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
/// IPAM never waits for it; stopped with the agent.
fn spawn_api_client(
    shared: &Arc<Shared>,
    limits: &InstanceLimits,
    started: Instant,
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
    let client = crate::kubernetes::client::run(
        opts.api.clone(),
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
async fn serve_http(
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
