//! Start-up's discovery of the instance: IMDS identity and the primary ENI's facts, the EC2
//! client and the one batched describe, the instance type's limits, and the warm-pool
//! configuration they give.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use tokio::time::Instant;
use vpcnet_ec2::{Ec2, Ec2Options, NetworkInterface};
use vpcnet_imds::Imds;
use vpcnet_ipam::WarmConfig;
use vpcnet_limits::InstanceLimits;

use crate::cloud::{CloudApis, Ec2Api, MetadataApi};
use crate::deps::AgentDeps;
use crate::metrics::Metrics;
use crate::options::AgentOptions;
use crate::provisioning::{ImdsOnlyEc2, Provisioning};
use crate::state::NodeFacts;

/// What start-up learns about the instance before the pool exists.
pub(super) struct Discovered {
    pub(super) ec2: Arc<dyn Ec2Api>,
    /// IMDS, for the reconciler's drift check.
    pub(super) imds: Arc<dyn MetadataApi>,
    /// The instance's ENIs from the one batched describe.
    pub(super) enis: Vec<NetworkInterface>,
    pub(super) facts: NodeFacts,
    /// Pods get no addresses of the primary ENI: its subnet is excluded from subnet discovery
    /// ([`crate::reconciler::subnet_discovery::primary_eni_excluded`]).
    pub(super) primary_excluded: bool,
}

/// IMDS identity, then the EC2 client and the one batched describe while IMDS answers the
/// second round (the primary ENI's facts).
pub(super) async fn discover(
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
pub(super) async fn instance_limits(
    ec2: &dyn Ec2Api,
    facts: &NodeFacts,
) -> anyhow::Result<InstanceLimits> {
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
pub(super) fn warm_config(
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
