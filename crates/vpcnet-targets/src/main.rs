//! `vpcnet-targets`: registers the pod IPs of Services named by TargetGroupBindings as ELBv2
//! targets. See the crate docs (`lib.rs`) for the parts.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use ipnet::Ipv4Net;
use kube::runtime::events::Reporter;
use vpcnet_elbv2::{CallSettings, Elbv2, Elbv2Options};
use vpcnet_targets::controller::{self, Settings};
use vpcnet_targets::group::GroupSettings;
use vpcnet_targets::metrics::Metrics;

/// Registers pod IPs in ELBv2 target groups (TargetGroupBinding, target type ip).
#[derive(Debug, Parser)]
#[command(name = "vpcnet-targets", version)]
struct Args {
    /// Reconcile every target group at least this often, repairing drift (seconds).
    #[arg(long, env = "VPCNET_TARGETS_RESYNC_SECONDS", default_value_t = 60)]
    resync_seconds: u64,
    /// While a pod's readiness gate waits for its target to turn healthy, re-check target
    /// health this often (milliseconds, a fixed interval; at least 100). 0 (default): follow
    /// the target group's health check: first when the target can be healthy (registration +
    /// healthy threshold × interval + 1 s), then every health-check interval.
    #[arg(long, env = "VPCNET_TARGETS_GATE_RECHECK_MS", default_value_t = 0)]
    gate_recheck_ms: u64,
    /// Re-read a target group's health check (DescribeTargetGroups) when older than this
    /// (seconds); it paces the readiness-gate re-checks.
    #[arg(
        long,
        env = "VPCNET_TARGETS_HEALTH_CHECK_CACHE_SECONDS",
        default_value_t = 600
    )]
    health_check_cache_seconds: u64,
    /// CIDR of the VPC (repeatable): IP targets outside every one are registered with
    /// AvailabilityZone all. Without any, no zone is sent.
    #[arg(
        long = "vpc-cidr",
        env = "VPCNET_TARGETS_VPC_CIDRS",
        value_delimiter = ','
    )]
    vpc_cidrs: Vec<Ipv4Net>,
    /// AWS region (else AWS_REGION).
    #[arg(long, env = "AWS_REGION")]
    region: Option<String>,
    /// ELBv2 endpoint URL (else the SDK's: AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING_V2,
    /// AWS_ENDPOINT_URL, the region's).
    #[arg(long, env = "VPCNET_TARGETS_ELBV2_ENDPOINT")]
    elbv2_endpoint: Option<String>,
    /// Address of /healthz and /metrics.
    #[arg(
        long,
        env = "VPCNET_TARGETS_HTTP_ADDR",
        default_value = "0.0.0.0:61779"
    )]
    http_addr: SocketAddr,
    /// This replica's name (Events, leader election); default the host name.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Elect a leader on a Lease; only the leader writes to ELBv2. `false` for a single
    /// replica that always writes.
    #[arg(long, env = "VPCNET_TARGETS_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(
        long,
        env = "VPCNET_TARGETS_LEADER_ELECTION_NAMESPACE",
        default_value = "kube-system"
    )]
    leader_election_namespace: String,
    /// Name of the Lease.
    #[arg(
        long,
        env = "VPCNET_TARGETS_LEADER_ELECTION_ID",
        default_value = "vpcnet-targets"
    )]
    leader_election_id: String,
    /// Serve TargetGroupBindings (their CRD must be installed: charts/vpcnet-targets/crds/
    /// targetgroupbinding.yaml). `false` for the label-selector mode alone.
    #[arg(long, env = "VPCNET_TARGETS_TARGET_GROUP_BINDINGS", default_value_t = true, action = clap::ArgAction::Set)]
    target_group_bindings: bool,
    /// Label-selected pods (kube-ingress-aws-controller's "AWS CNI" mode): their namespace.
    /// With --pod-selector, --pod-target-port and --pod-target-group-arn and/or
    /// --pod-target-group-tag.
    #[arg(long, env = "VPCNET_TARGETS_POD_NAMESPACE", requires_all = ["pod_selector", "pod_target_port"])]
    pod_namespace: Option<String>,
    /// Equality label selector of those pods (`app=web,tier=front`).
    #[arg(long, env = "VPCNET_TARGETS_POD_SELECTOR", requires = "pod_namespace")]
    pod_selector: Option<String>,
    /// Target group ARN(s) the selected pods are registered in (repeatable).
    #[arg(
        long,
        env = "VPCNET_TARGETS_POD_TARGET_GROUP_ARNS",
        value_delimiter = ',',
        requires = "pod_namespace"
    )]
    pod_target_group_arn: Vec<String>,
    /// Target groups by tag: every target group carrying all of these `KEY=VALUE` tags
    /// (repeatable; looked up once at start with DescribeTargetGroups + DescribeTags, so a
    /// target group tagged later is picked up by a restart), added to --pod-target-group-arn.
    #[arg(
        long,
        env = "VPCNET_TARGETS_POD_TARGET_GROUP_TAGS",
        value_delimiter = ',',
        value_parser = vpcnet_targets::tagged::parse_tag,
        requires = "pod_namespace"
    )]
    pod_target_group_tag: Vec<(String, String)>,
    /// Port the selected pods receive traffic on.
    #[arg(
        long,
        env = "VPCNET_TARGETS_POD_TARGET_PORT",
        requires = "pod_namespace"
    )]
    pod_target_port: Option<u16>,
    /// `leaseDurationSeconds`: a follower takes over this long after the leader's last renewal.
    #[arg(
        long,
        env = "VPCNET_TARGETS_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
    lease_duration_seconds: u64,
}

/// The label-selected mode's target groups: the ARNs given and those carrying the tags given.
/// Errors: neither given, or the tag lookup failed or found none.
async fn pod_target_groups(a: &Args, elb: &Elbv2) -> Result<Vec<String>> {
    let mut arns = a.pod_target_group_arn.clone();
    if !a.pod_target_group_tag.is_empty() {
        arns.extend(
            vpcnet_targets::tagged::target_groups_tagged(elb, &a.pod_target_group_tag)
                .await
                .context("--pod-target-group-tag")?,
        );
    }
    arns.sort();
    arns.dedup();
    if arns.is_empty() {
        anyhow::bail!(
            "--pod-namespace needs target groups: give --pod-target-group-arn or --pod-target-group-tag"
        );
    }
    Ok(arns)
}

fn identity(a: &Args) -> String {
    a.identity.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "vpcnet-targets".into())
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let args = Args::parse();
    // kube-rs and the AWS SDK both use rustls; with more than one provider compiled in, the
    // process must name one (ring, as the agent does).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let id = identity(&args);
    let elb = Elbv2::connect(Elbv2Options {
        region: args.region.clone(),
        endpoint_url: args.elbv2_endpoint.clone(),
        credentials: None,
        calls: CallSettings::default(),
    })
    .await
    .context("building the ELBv2 client")?;
    let mut selections = Vec::new();
    if let (Some(ns), Some(sel), Some(port)) = (
        &args.pod_namespace,
        &args.pod_selector,
        args.pod_target_port,
    ) {
        selections.push(vpcnet_targets::views::Selection {
            namespace: ns.clone(),
            labels: vpcnet_targets::views::parse_selector(sel)
                .map_err(anyhow::Error::msg)
                .context("--pod-selector")?,
            target_groups: pod_target_groups(&args, &elb).await?,
            port,
        });
    }
    let client = kube::Client::try_default()
        .await
        .context("building the Kubernetes client (in-cluster service account or KUBECONFIG)")?;
    let metrics = Metrics::new();
    let synced = Arc::new(AtomicBool::new(false));
    let settings = Settings {
        group: GroupSettings {
            resync: Duration::from_secs(args.resync_seconds.max(1)),
            gate_recheck: (args.gate_recheck_ms > 0)
                .then(|| Duration::from_millis(args.gate_recheck_ms.max(100))),
            health_check_cache: Duration::from_secs(args.health_check_cache_seconds.max(1)),
            vpc_cidrs: args.vpc_cidrs.clone(),
            ..GroupSettings::default()
        },
        selections,
        bindings: args.target_group_bindings,
        reporter: Reporter {
            controller: "vpcnet-targets".into(),
            instance: Some(id.clone()),
        },
    };
    tracing::info!(identity = %id, region = elb.region(), resync = ?settings.group.resync, "starting");
    let (leader_tx, leader) = tokio::sync::watch::channel(!args.leader_elect);
    // Without election the sender is held here for the life of the process (the controller
    // ends when it is dropped).
    let election = args.leader_elect.then(|| {
        let duration = Duration::from_secs(args.lease_duration_seconds.max(2));
        vpcnet_targets::leader::Election {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_id.clone(),
            identity: id.clone(),
            duration,
            retry: (duration / 5).max(Duration::from_millis(500)),
        }
    });
    let (_always_leader, election_task) = if let Some(e) = &election {
        let task = tokio::spawn(vpcnet_targets::leader::run(
            client.clone(),
            e.clone(),
            leader_tx,
            metrics.clone(),
        ));
        (None, Some(task))
    } else {
        metrics.leader.set(1);
        (Some(leader_tx), None)
    };
    let http = tokio::spawn(vpcnet_targets::http::serve(
        args.http_addr,
        metrics.clone(),
        synced.clone(),
    ));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    // As a container's PID 1 the process gets no default action for SIGTERM: without this it
    // would run (and hold the Lease) until the kubelet's SIGKILL after the grace period.
    let signal = tokio::select! {
        r = controller::run(client.clone(), elb, settings, metrics, leader, synced) => return r,
        r = http => return r.context("the HTTP task panicked")?,
        _ = term.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    };
    // The controller's future is dropped here: no more target-group writes of ours. Stop
    // renewing, then hand the Lease over.
    tracing::info!(signal, "stopping");
    if let Some(task) = election_task {
        task.abort();
    }
    if let Some(e) = &election {
        match tokio::time::timeout(
            Duration::from_secs(5),
            vpcnet_targets::leader::release(client, e),
        )
        .await
        {
            Ok(Ok(true)) => tracing::info!(identity = %e.identity, "released the lease"),
            Ok(Ok(false)) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "releasing the lease failed"),
            Err(_) => tracing::warn!("releasing the lease timed out"),
        }
    }
    Ok(())
}
