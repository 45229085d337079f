//! The lab's cloud process (`vpcnet lab serve`): started by `lab up` inside the VPC namespace,
//! it hosts the in-process [`Emulator`] with [`LabHooks`], creates the VPC, subnets and one
//! instance per node (their primary ENIs become the nodes' `eth0`), serves the EC2 endpoint (and
//! ELBv2 on the same port, its load balancers served by [`crate::lb::HaproxyPlane`]) on every
//! subnet router (port [`EC2_PORT`]), IMDS on 169.254.169.254:80 (callers known by source
//! address) and the emulator's API on a Unix socket in the lab directory (for `lab status` and
//! tests), then writes `ready.json` and serves until killed.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};
use vpcnet_emu::{Emulator, EmulatorOptions, InstanceInfo, RunInstance};

use crate::fabric;
use crate::hooks::LabHooks;

/// TCP port of the EC2 endpoint in the VPC namespace.
pub const EC2_PORT: u16 = 8080;
/// Region of the lab cloud.
pub const REGION: &str = "us-east-1";
/// Availability zone of the lab's subnets.
pub const AZ: &str = "us-east-1a";

/// What `lab up` asks the daemon to build (`spec.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonSpec {
    /// VPC namespace (where the daemon runs and the fabric lives).
    pub vpc_netns: String,
    /// VPC CIDR, e.g. 10.0.0.0/16.
    pub vpc_cidr: Ipv4Net,
    /// Subnets (bridge `br<i>` for subnet `i`), e.g. [10.0.1.0/24].
    pub subnets: Vec<Ipv4Net>,
    /// Nodes in launch order: (node name, node namespace, instance type, subnet index).
    pub nodes: Vec<NodeSpec>,
    /// Secondary VPC CIDRs (e.g. 100.64.0.0/16 for custom networking).
    #[serde(default)]
    pub extra_cidrs: Vec<Ipv4Net>,
    /// Availability zone of each subnet (same order as `subnets`); missing entries are [`AZ`].
    #[serde(default)]
    pub zones: Vec<String>,
    /// `Name` tag of each subnet (same order as `subnets`); missing or empty entries get none.
    #[serde(default)]
    pub subnet_names: Vec<String>,
    /// Whether the fabric enforces each ENI's security groups (the two-zone layout); without
    /// it, traffic between ENIs is not filtered, as in the lab before security groups.
    #[serde(default)]
    pub enforce_security_groups: bool,
    /// Seed of the emulator's random choices.
    pub seed: u64,
}

/// One node to launch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSpec {
    /// "n1"
    pub name: String,
    /// Node namespace.
    pub netns: String,
    /// EC2 instance type, e.g. "m5.large".
    pub instance_type: String,
    /// Index into [`DaemonSpec::subnets`].
    pub subnet: usize,
}

/// What the daemon reports once serving (`ready.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ready {
    /// VPC id.
    pub vpc_id: String,
    /// Subnet ids, same order as the spec's subnets.
    pub subnet_ids: Vec<String>,
    /// Instances by node name.
    pub instances: BTreeMap<String, InstanceInfo>,
    /// EC2 endpoint URL for a node in subnet `i`: `http://<router of subnet i>:8080`.
    pub ec2_endpoints: Vec<String>,
}

/// Path of the spec file in a lab directory.
pub fn spec_path(dir: &Path) -> PathBuf {
    dir.join("spec.json")
}
/// Path of the ready file in a lab directory.
pub fn ready_path(dir: &Path) -> PathBuf {
    dir.join("ready.json")
}
/// Path of the emulator API Unix socket in a lab directory.
pub fn api_socket(dir: &Path) -> PathBuf {
    dir.join("emu.sock")
}

/// Runs the daemon for the lab in `dir` (blocking; the process must already be in the VPC
/// namespace). Errors: bad spec, emulator refusal (e.g. unknown instance type), bind failure.
pub fn serve(dir: &Path) -> Result<()> {
    let spec: DaemonSpec = serde_json::from_slice(
        &std::fs::read(spec_path(dir))
            .with_context(|| format!("reading {}", spec_path(dir).display()))?,
    )
    .context("parsing the lab daemon spec")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve_async(dir, spec))
}

async fn serve_async(dir: &Path, spec: DaemonSpec) -> Result<()> {
    let emu = Emulator::with_options(EmulatorOptions {
        seed: spec.seed,
        region: REGION.into(),
        account_id: "123456789012".into(),
    });
    let hooks = LabHooks::new(&spec.vpc_netns, spec.subnets.clone())
        .enforcing_security_groups(spec.enforce_security_groups);
    emu.set_hooks(std::sync::Arc::new(hooks.clone()));
    emu.set_lb_plane(std::sync::Arc::new(crate::lb::HaproxyPlane::new(
        dir,
        &spec.vpc_netns,
        spec.subnets.clone(),
    )));
    let vpc = emu
        .create_vpc(spec.vpc_cidr, &spec.extra_cidrs)
        .map_err(|e| anyhow::anyhow!("CreateVpc {}: {e}", spec.vpc_cidr))?;
    // The fabric enforces security groups; the lab's default group admits everything, so what
    // runs in the lab without naming groups is reachable as before (EC2's default group admits
    // only itself).
    emu.authorize_ingress(
        &vpc.default_security_group_id,
        vec![vpcnet_emu::model::IngressRule {
            permission: vpcnet_emu::model::Permission::new("-1", None, None)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            source: vpcnet_emu::model::Source::Cidr("0.0.0.0/0".parse().expect("constant")),
        }],
    )
    .await
    .map_err(|e| anyhow::anyhow!("opening the lab's default security group: {e}"))?;
    let mut subnet_ids = Vec::new();
    for (i, s) in spec.subnets.iter().enumerate() {
        let az = spec.zones.get(i).map(String::as_str).unwrap_or(AZ);
        let id = emu
            .create_subnet(&vpc.vpc_id, *s, az)
            .map_err(|e| anyhow::anyhow!("CreateSubnet {s} in {az}: {e}"))?;
        if let Some(name) = spec.subnet_names.get(i).filter(|n| !n.is_empty()) {
            emu.create_tags(std::slice::from_ref(&id), &[("Name".into(), name.clone())])
                .map_err(|e| anyhow::anyhow!("tagging subnet {s}: {e}"))?;
        }
        subnet_ids.push(id);
    }
    let mut instances = BTreeMap::new();
    for n in &spec.nodes {
        hooks.expect_node(&n.netns);
        let info = emu
            .run_instance(RunInstance {
                instance_type: n.instance_type.clone(),
                subnet_id: subnet_ids
                    .get(n.subnet)
                    .cloned()
                    .with_context(|| format!("node {}: no subnet {}", n.name, n.subnet))?,
                tags: vec![("Name".into(), n.name.clone())],
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("launching node {} ({}): {e}", n.name, n.instance_type))?;
        instances.insert(n.name.clone(), info);
    }
    let errors = hooks.errors();
    if !errors.is_empty() {
        anyhow::bail!("fabric setup failed: {}", errors.join("; "));
    }

    let ec2 = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, EC2_PORT)))
        .await
        .context("binding the EC2 endpoint in the VPC namespace")?;
    let imds = tokio::net::TcpListener::bind(SocketAddr::from((fabric::IMDS_ADDR, 80)))
        .await
        .context("binding IMDS 169.254.169.254:80 in the VPC namespace")?;
    let sock = api_socket(dir);
    let _ = std::fs::remove_file(&sock);
    let api = tokio::net::UnixListener::bind(&sock).context("binding the emulator API socket")?;

    let e = emu.clone();
    tokio::spawn(async move { e.serve_imds(imds).await });
    let router = emu.router();
    tokio::spawn(async move { axum::serve(api, router).await });
    let ready = Ready {
        vpc_id: vpc.vpc_id,
        subnet_ids,
        instances,
        ec2_endpoints: spec
            .subnets
            .iter()
            .map(|s| format!("http://{}:{EC2_PORT}", fabric::gateway(*s)))
            .collect(),
    };
    let tmp = dir.join("ready.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&ready)?)?;
    std::fs::rename(&tmp, ready_path(dir))?;
    eprintln!("lab daemon ready");
    emu.serve(ec2).await.context("EC2 endpoint stopped")
}
