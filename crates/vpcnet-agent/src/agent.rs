//! Startup and lifetime of the agent: IMDS facts, one batched describe, checkpoint restore,
//! reconcile against EC2, fill the pool, serve. Never waits for Kubernetes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use vpcnet_ec2::{Ec2, Ec2Options, Imds};
use vpcnet_ipam::{Pool, UnknownIpPolicy, WarmConfig};

use crate::checkpoint_file::{self, Loaded};
use crate::config::BindAddress;
use crate::metrics::Metrics;
use crate::options::AgentOptions;
use crate::state::{now_ms, NodeFacts, Shared};

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
    tasks: Vec<JoinHandle<()>>,
}

impl AgentHandle {
    /// Stops every task and waits for them; the socket file is removed.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// IMDS identity (first round): instance ID, type, primary MAC, region.
struct Identity {
    instance_id: String,
    instance_type: String,
    mac: String,
    region: String,
}

async fn read_identity(imds: &Imds, opts: &AgentOptions) -> anyhow::Result<Identity> {
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

/// IMDS second round: the primary ENI's subnet, VPC CIDRs and security groups (static facts;
/// hints only, never used to hand out or release an address).
async fn read_facts(imds: &Imds, id: &Identity, opts: &AgentOptions) -> anyhow::Result<NodeFacts> {
    let (iface, primary_ip) = tokio::try_join!(imds.interface(&id.mac), imds.local_ipv4())
        .context("reading the primary ENI from IMDS")?;
    Ok(NodeFacts {
        instance_id: id.instance_id.clone(),
        instance_type: id.instance_type.clone(),
        region: id.region.clone(),
        primary_mac: id.mac.clone(),
        primary_ip,
        subnet_id: opts.subnet_id.clone().unwrap_or(iface.subnet_id),
        subnet_cidr: iface.subnet_cidr,
        vpc_cidrs: iface.vpc_cidrs,
        security_groups: if opts.security_groups.is_empty() {
            iface.security_group_ids
        } else {
            opts.security_groups.clone()
        },
    })
}

fn warm_config(
    opts: &AgentOptions,
    limits: &vpcnet_limits::InstanceLimits,
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
    c.validate().map_err(|e| anyhow!("{e}"))?;
    if c.prefix_delegation && !limits.supports_prefix_delegation() {
        anyhow::bail!("ENABLE_PREFIX_DELEGATION=true needs a Nitro instance type; {} is not (unset ENABLE_PREFIX_DELEGATION)", limits.instance_type);
    }
    Ok(c)
}

async fn bind_tcp(addr: SocketAddr, what: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot bind {what} on {addr}"))
}

/// Starts the agent and returns once the pool can serve (or startup failed).
///
/// Errors: IMDS unreachable, EC2 client configuration, unknown instance type, the socket
/// or a listener cannot be bound. A corrupt checkpoint is not an error (see README).
pub async fn start(opts: AgentOptions) -> anyhow::Result<AgentHandle> {
    let started = Instant::now();
    let (stop, stop_rx) = watch::channel(false);
    let listener = crate::grpc::bind(&opts.socket_path)?;
    let imds = match &opts.imds_endpoint {
        Some(e) => Imds::with_endpoint(e, Some(Duration::from_secs(2)))
            .map_err(|e| anyhow!("IMDS endpoint: {e}"))?,
        None => Imds::new(),
    };
    let id = read_identity(&imds, &opts).await?;
    tracing::debug!(elapsed = ?started.elapsed(), "IMDS identity");
    let metrics = Arc::new(Metrics::new());
    // The one batched describe runs while IMDS answers the second round.
    let ec2_and_enis = async {
        let ec2 = Ec2::connect(
            Ec2Options {
                region: Some(id.region.clone()),
                endpoint_url: opts.ec2_endpoint.clone(),
                imds_endpoint: opts.imds_endpoint.clone(),
                credentials: opts.credentials.clone(),
                calls: opts.ec2_calls.clone(),
            },
            metrics.clone(),
        )
        .await
        .map_err(|e| anyhow!("{e}"))?;
        tracing::debug!(elapsed = ?started.elapsed(), "EC2 client");
        let enis = ec2
            .describe_instance_network_interfaces(&id.instance_id)
            .await
            .map_err(|e| anyhow!("describing the instance's ENIs: {e}"))?;
        tracing::debug!(elapsed = ?started.elapsed(), "described ENIs");
        anyhow::Ok((ec2, enis))
    };
    let ((ec2, enis), facts) = tokio::try_join!(ec2_and_enis, read_facts(&imds, &id, &opts))?;
    tracing::info!(instance = %facts.instance_id, r#type = %facts.instance_type, subnet = %facts.subnet_id, "instance facts from IMDS");
    let limits = match vpcnet_limits::lookup(&facts.instance_type) {
        Some(l) => l.clone(),
        None => ec2
            .describe_instance_types(std::slice::from_ref(&facts.instance_type))
            .await
            .map_err(|e| anyhow!("instance type {} is not in the built-in table and DescribeInstanceTypes failed: {e}", facts.instance_type))?
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("EC2 does not know instance type {}", facts.instance_type))?,
    };
    let mut pool = Pool::new(warm_config(&opts, &limits)?);
    let policy = match checkpoint_file::load(&opts.checkpoint_path, now_ms()) {
        Loaded::Missing => UnknownIpPolicy::Free,
        Loaded::Valid(cp) => match pool.restore(&cp) {
            Ok(()) => {
                tracing::info!(
                    assignments = cp.assignments.len(),
                    cooldowns = cp.cooldowns.len(),
                    "restored checkpoint"
                );
                UnknownIpPolicy::Free
            }
            Err(e) => {
                tracing::error!(
                    "checkpoint {} is inconsistent ({e}); rebuilding from EC2",
                    opts.checkpoint_path.display()
                );
                pool = Pool::new(pool.config().clone());
                UnknownIpPolicy::Cooling
            }
        },
        Loaded::Corrupt { reason, moved_to } => {
            tracing::error!(
                path = %opts.checkpoint_path.display(),
                moved_to = ?moved_to,
                "checkpoint is corrupt ({reason}); rebuilding from EC2: addresses already on the node cool down before reuse, since running pods may hold them"
            );
            UnknownIpPolicy::Cooling
        }
    };
    let shared = Arc::new(Shared::new(opts.clone(), facts, pool, metrics.clone()));
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(crate::grpc::serve(
        shared.clone(),
        listener,
        stop_rx.clone(),
    )));

    crate::reconciler::adopt(&shared, &ec2, enis, policy)
        .await
        .map_err(|e| anyhow!("adopting the instance's ENIs: {e}"))?;
    shared.persist().await;
    crate::reconciler::setup_node_enis(&shared).await;
    crate::reconciler::setup_node_firewall(&shared).await;
    // Fill the pool; EC2 errors are retried by the reconciler, but serve as soon as one
    // address is available.
    if let Err(e) = crate::reconciler::fill(&shared, &ec2).await {
        tracing::warn!("initial pool fill failed: {e}; the reconciler retries");
        shared.set_error(Some(e.to_string()));
        shared.wake.notify_one();
    }
    shared.ready.store(true, Ordering::Release);
    let time_to_ready = started.elapsed();
    shared.update_gauges();
    tracing::info!(summary = ?shared.pool().summary(now_ms()), ?time_to_ready, "pool ready; serving");

    if let Some(path) = &opts.conflist_path {
        let mut settings = opts.conflist.clone();
        settings.agent_socket = opts.socket_path.display().to_string();
        settings.mtu = opts.mtu;
        write_conflist(path, &vpcnet_cni::conflist::render(&settings))
            .with_context(|| format!("writing CNI conflist {}", path.display()))?;
    }
    tasks.push(tokio::spawn(crate::reconciler::run(
        shared.clone(),
        ec2.clone(),
        stop_rx.clone(),
    )));
    if opts.node_network.is_some() {
        let (shared, mut stop) = (shared.clone(), stop_rx.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                crate::reconciler::reclaim_unrouted(&shared).await;
                tokio::select! {
                    _ = tokio::time::sleep(crate::reconciler::POD_RECLAIM_INTERVAL) => {}
                    _ = stop.changed() => return,
                }
            }
        }));
    }
    if opts.sweep_leaked_enis {
        let (shared, ec2) = (shared.clone(), ec2.clone());
        tasks.push(tokio::spawn(async move {
            crate::reconciler::sweep_leaked(&shared, &ec2).await
        }));
    }
    let mut introspection_addr = None;
    if let Some(addr) = opts.introspection_addr {
        let l = bind_tcp(addr, "introspection").await?;
        introspection_addr = Some(l.local_addr()?);
        tasks.push(tokio::spawn(crate::introspection::serve(
            crate::introspection::router(shared.clone()),
            l,
            stop_rx.clone(),
        )));
    }
    let mut metrics_addr = None;
    if let Some(addr) = opts.metrics_addr {
        let l = bind_tcp(addr, "metrics").await?;
        metrics_addr = Some(l.local_addr()?);
        tasks.push(tokio::spawn(crate::introspection::serve(
            crate::introspection::metrics_router(metrics),
            l,
            stop_rx.clone(),
        )));
    }
    if let Some(path) = &opts.introspection_socket {
        let l = crate::introspection::bind_unix(path, "introspection")?;
        tasks.push(tokio::spawn(crate::introspection::serve(
            crate::introspection::router(shared.clone()),
            l,
            stop_rx.clone(),
        )));
    }
    if let Some(path) = &opts.metrics_socket {
        let l = crate::introspection::bind_unix(path, "metrics")?;
        tasks.push(tokio::spawn(crate::introspection::serve(
            crate::introspection::metrics_router(shared.metrics.clone()),
            l,
            stop_rx.clone(),
        )));
    }
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

fn write_conflist(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("conflist")
    ));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Runs the agent until SIGINT/SIGTERM.
pub async fn run(opts: AgentOptions) -> anyhow::Result<()> {
    let handle = start(opts).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}

/// Options from the environment configuration (`config.rs`).
pub fn options_from_config(c: &crate::config::Config) -> anyhow::Result<AgentOptions> {
    // Refuse rather than ignore: with custom networking asked for, running anyway would put
    // pods in the node's subnet and security groups instead of the ENIConfig's.
    if c.custom_network_cfg {
        anyhow::bail!(
            "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true (custom networking with ENIConfig) is not \
             supported by this vpcnet-agent yet: pods would get addresses from the node's subnet \
             instead of the ENIConfig's. Unset it (or set it to false) to run without custom \
             networking, or keep the VPC CNI on the nodes that need ENIConfig"
        );
    }
    let tcp = |b: &BindAddress| match b {
        BindAddress::Tcp(a) => Some(*a),
        BindAddress::Unix(_) => None,
    };
    let unix = |b: &BindAddress| match b {
        BindAddress::Tcp(_) => None,
        BindAddress::Unix(p) => Some(p.clone()),
    };
    let conflist = vpcnet_cni::conflist::ConflistSettings {
        veth_prefix: c.veth_prefix.clone(),
        plugin_log_file: c.plugin_log_file.clone(),
        plugin_log_level: c.plugin_log_level.clone(),
        ..Default::default()
    };
    Ok(AgentOptions {
        targets: crate::options::Targets {
            warm_eni_target: c.warm_eni_target,
            warm_ip_target: c.warm_ip_target,
            minimum_ip_target: c.minimum_ip_target,
            warm_prefix_target: c.warm_prefix_target.unwrap_or(1),
            prefix_delegation: c.enable_prefix_delegation,
            max_eni: c.max_eni,
        },
        cooldown: c.ip_cooldown(),
        reconcile_interval: c.reconcile_interval(),
        socket_path: c.agent_socket.clone(),
        checkpoint_path: c.checkpoint_path.clone(),
        introspection_addr: (!c.disable_introspection)
            .then(|| tcp(&c.introspection_bind_address))
            .flatten(),
        introspection_socket: (!c.disable_introspection)
            .then(|| unix(&c.introspection_bind_address))
            .flatten(),
        metrics_addr: (!c.disable_metrics)
            .then(|| tcp(&c.metrics_bind_address))
            .flatten(),
        metrics_socket: (!c.disable_metrics)
            .then(|| unix(&c.metrics_bind_address))
            .flatten(),
        conflist_path: Some(c.cni_conflist.clone()),
        conflist,
        cluster_name: c.cluster_name.clone(),
        external_snat: c.external_snat,
        exclude_snat_cidrs: c.exclude_snat_cidrs.clone(),
        randomize_snat: match c.randomize_snat {
            crate::config::RandomizeSnat::None => vpcnet_datapath::firewall::RandomizeSnat::None,
            crate::config::RandomizeSnat::Hashrandom => {
                vpcnet_datapath::firewall::RandomizeSnat::Hashrandom
            }
            crate::config::RandomizeSnat::Prng => vpcnet_datapath::firewall::RandomizeSnat::Prng,
        },
        node_port_support: c.node_port_support,
        mtu: c.eni_mtu,
        ec2_endpoint: c.ec2.endpoint.clone(),
        imds_endpoint: std::env::var("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            .ok()
            .filter(|s| !s.is_empty()),
        ec2_calls: c.ec2_call_settings(),
        node_network: if c.node_datapath {
            Some(Arc::new(crate::node::NetlinkNode::default()))
        } else {
            None
        },
        env_settings: c
            .env_settings()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        additional_eni_tags: c.additional_eni_tags.clone(),
        sweep_leaked_enis: !c.disable_leaked_eni_cleanup,
        ..AgentOptions::default()
    })
}
