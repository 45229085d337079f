//! `vpcnet lab ...`: the local VPC lab. Namespaces, fabric, cloud daemon, the Kubernetes
//! control plane, per-node containerd, kubelet, kube-proxy and vpcnet-agent come from the
//! `vpcnet-lab` crate; this module is the command line and the tables, `demo` the demo.

mod conformance;
mod demo;
mod fleet;
mod requests;

use std::net::Ipv4Addr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use vpcnet_introspection::text::table;
use vpcnet_lab::containers::ContainerInfo;
use vpcnet_lab::lab::{progress, Lab, UpOptions};

#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(ClapArgs, Clone)]
struct NameArg {
    /// Lab name (state in /run/vpcnet-lab/<name>).
    #[arg(long, default_value = "lab")]
    name: String,
}

#[derive(ClapArgs, Clone)]
struct UpArgs {
    #[command(flatten)]
    name: NameArg,
    /// EC2 instance type of the nodes (sets ENI and IP limits).
    #[arg(long, default_value = "m5.large")]
    instance_type: String,
    /// Number of nodes (default 1; 2 for `lab demo`).
    #[arg(long)]
    nodes: Option<usize>,
    /// Extra agent environment, KEY=VALUE (e.g. WARM_IP_TARGET=5); repeatable.
    #[arg(long = "agent-env", value_name = "KEY=VALUE")]
    agent_env: Vec<String>,
    /// No Kubernetes: only the cloud, the fabric and, per node, containerd and vpcnet-agent
    /// (containers through `vpcnet lab run`); needs no Kubernetes binaries.
    #[arg(long)]
    no_kubernetes: bool,
    /// Directory of the Kubernetes binaries (default: the newest build of
    /// scripts/build-k8s.sh in /var/cache/vpcnet).
    #[arg(long, env = "VPCNET_K8S_BIN_DIR", value_name = "DIR")]
    k8s_bin_dir: Option<PathBuf>,
    /// Set the agents' CLUSTER_ENDPOINT to the API server's address (reach it without the
    /// `kubernetes` Service, i.e. before kube-proxy runs).
    #[arg(long)]
    cluster_endpoint: bool,
    /// How vpcnet's agent runs on the nodes: `process` (a lab process per node, the default)
    /// or `chart` (the node image imported into each node's containerd and charts/vpcnet
    /// installed with Helm, built by scripts/build-helm.sh: the `aws-node` DaemonSet's pods,
    /// started by kubelet).
    #[arg(long, value_name = "process|chart", default_value = "process")]
    agent_install: vpcnet_lab::state::AgentInstall,
    /// CNI of the nodes: `vpcnet` (default) or `vpc-cni` (AWS's VPC CNI, built by
    /// scripts/build-k8s.sh); `NODE=CNI` (e.g. `n2=vpc-cni`) for one node; repeatable, later wins.
    #[arg(long = "cni", value_name = "[NODE=]CNI")]
    cni: Vec<String>,
    /// The two-zone VPC for custom networking: secondary CIDR 100.64.0.0/16, node and pod
    /// subnets in us-east-1a and us-east-1b (odd nodes in a, even in b), and a host outside
    /// the VPC (10.200.0.10) routed through the VPC router. See docs/lab.md, "VPC layouts".
    #[arg(long)]
    two_zones: bool,
    /// How kube-proxy runs: `process` (default; a lab process per node) or `daemonset`
    /// (EKS's add-on: the kube-proxy DaemonSet from the lab's image, started by kubelet).
    #[arg(long, default_value = "process", value_name = "MODE")]
    kube_proxy: String,
    /// Install CoreDNS as EKS does (Deployment `coredns` behind Service `kube-dns`), from
    /// scripts/build-coredns.sh's build.
    #[arg(long)]
    coredns: bool,
    /// Directory of the CoreDNS binary (default: the newest build of scripts/build-coredns.sh
    /// in /var/cache/vpcnet).
    #[arg(long, env = "VPCNET_COREDNS_BIN_DIR", value_name = "DIR")]
    coredns_bin_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum LabCommand {
    /// Build the lab: VPC fabric and cloud, Kubernetes control plane, nodes with containerd,
    /// vpcnet-agent, kubelet and kube-proxy.
    Up(UpArgs),
    /// Run kubectl (admin) against the lab's cluster, e.g. `vpcnet lab kubectl get pods -o wide`.
    Kubectl {
        #[command(flatten)]
        name: NameArg,
        /// kubectl's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Start containers (busybox) on a node through `ctr run --cni`.
    Run {
        #[command(flatten)]
        name: NameArg,
        /// Node to run on.
        #[arg(long, default_value = "n1")]
        node: String,
        /// How many containers (named c<N>) when no names are given.
        #[arg(long, default_value_t = 1)]
        count: usize,
        /// Run busybox httpd on this port (answers its name on `/`; `/cgi-bin/stream` streams),
        /// for load-balancer targets.
        #[arg(long, value_name = "PORT")]
        httpd: Option<u16>,
        /// Container names.
        names: Vec<String>,
    },
    /// Delete a container (CNI DEL runs as the task exits).
    Rm {
        #[command(flatten)]
        name: NameArg,
        /// Container names.
        names: Vec<String>,
    },
    /// Containers with their IP, ENI and device number; the lab's ENIs.
    Status {
        #[command(flatten)]
        name: NameArg,
    },
    /// Ping from a container to a container, a node (n1) or an IPv4 address.
    Ping {
        #[command(flatten)]
        name: NameArg,
        from: String,
        to: String,
    },
    /// A node agent's state as tables (`vpcnet inspect`, fetched inside the node's namespace).
    Inspect {
        #[command(flatten)]
        name: NameArg,
        /// Node whose agent to ask.
        #[arg(long, default_value = "n1")]
        node: String,
        #[command(flatten)]
        view: crate::inspect::View,
    },
    /// The lab cloud's request log: EC2 and IMDS calls per action and answer, for a node's
    /// instance (`--node n1`: its agent, bootstrap, kubelet) or all; `--failed` only errors.
    Requests(requests::Args),
    /// Load balancers (ELBv2 on the lab cloud, served by HAProxy): create, list, register,
    /// deregister, health, load, delete.
    Lb(crate::lab_lb::Args),
    /// Remove everything the lab created.
    Down {
        #[command(flatten)]
        name: NameArg,
        /// Remove every lab under /run/vpcnet-lab (e.g. after an interrupted run).
        #[arg(long)]
        all: bool,
    },
    /// List the labs that exist.
    List,
    /// Up (two nodes), a Deployment of 12 httpd pods and a Service, tables, pings and an HTTP
    /// request through the Service, down (always down, even on failure).
    Demo {
        #[command(flatten)]
        up: UpArgs,
        /// Pods (or, with --no-kubernetes, containers) to start.
        #[arg(long, default_value_t = 12)]
        count: usize,
    },
    /// A fleet: N agent-only nodes (vpcnet or the VPC CNI) join at once against one lab cloud
    /// with the account's EC2 rate limits; prints time to each node's first pod and full warm
    /// pool, EC2 calls by action, throttles and the buckets' floor; always tears down.
    Fleet(fleet::Args),
    /// Kubernetes' own network end-to-end tests (lab/e2e/selection.toml) on a lab installed as
    /// on EKS, per CNI, with a table of results (docs/conformance.md).
    Conformance(conformance::Args),
    /// (internal) The lab cloud daemon, run by `lab up` inside the VPC namespace.
    #[command(hide = true)]
    Serve {
        #[arg(long)]
        dir: PathBuf,
    },
    /// (internal) Approves kubelet serving certificates as EKS does, run by `lab up` on the
    /// control-plane host.
    #[command(hide = true)]
    CsrApprover {
        #[arg(long)]
        dir: PathBuf,
    },
}

fn up_options(a: &UpArgs, default_nodes: usize) -> Result<UpOptions> {
    let mut o = UpOptions::new(&a.name.name);
    o.instance_type = a.instance_type.clone();
    o.nodes = a.nodes.unwrap_or(default_nodes);
    o.kubernetes = !a.no_kubernetes;
    o.k8s_bin_dir = a.k8s_bin_dir.clone();
    o.cluster_endpoint = a.cluster_endpoint;
    o.agent_install = a.agent_install;
    o.agent_env = vpcnet_lab::lab::parse_agent_env(&a.agent_env)?;
    o.cni = parse_cni(&a.cni)?;
    o.kube_proxy_mode = a
        .kube_proxy
        .parse()
        .with_context(|| format!("--kube-proxy {:?}", a.kube_proxy))?;
    o.coredns = a.coredns;
    o.coredns_bin_dir = a.coredns_bin_dir.clone();
    if a.two_zones {
        o.layout = vpcnet_lab::lab::VpcLayout::TwoZones;
    }
    Ok(o)
}

/// `--cni [NODE=]CNI` arguments as `(node or "*", cni)`; errors name a malformed one.
fn parse_cni(args: &[String]) -> Result<Vec<(String, vpcnet_lab::state::NodeCni)>> {
    args.iter()
        .map(|a| {
            let (node, cni) = a.split_once('=').unwrap_or(("*", a));
            Ok((
                node.to_string(),
                cni.parse().with_context(|| format!("--cni {a:?}"))?,
            ))
        })
        .collect()
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        LabCommand::Up(a) => {
            let lab = Lab::up(&up_options(&a, 1)?)?;
            let s = lab.state()?;
            if s.control_plane.is_some() {
                progress(&format!(
                    "lab {} is up ({} node(s)); `vpcnet lab kubectl --name {} get nodes -o wide`",
                    s.name,
                    s.nodes.len(),
                    s.name
                ));
            } else {
                progress(&format!(
                    "lab {} is up ({} node(s)); `vpcnet lab run --name {}` starts a container",
                    s.name,
                    s.nodes.len(),
                    s.name
                ));
            }
            Ok(())
        }
        LabCommand::Kubectl { name, args } => {
            let lab = Lab::open(&name.name)?;
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let status = lab.kube().kubectl()?.command(&args)?.status()?;
            if !status.success() {
                std::process::exit(status.code().unwrap_or(1));
            }
            Ok(())
        }
        LabCommand::Run {
            name,
            node,
            count,
            httpd,
            names,
        } => {
            let lab = Lab::open(&name.name)?;
            let names = if names.is_empty() {
                lab.containers().next_names(count)?
            } else {
                names
            };
            let started = match httpd {
                Some(port) => lab.containers().run_with(&node, &names, &|id| {
                    vpcnet_lab::web::httpd_command(id, port)
                })?,
                None => lab.containers().run(&node, &names)?,
            };
            for c in started {
                println!("{}\t{}\t{}", c.id, c.node, c.ip);
            }
            Ok(())
        }
        LabCommand::Rm { name, names } => {
            let lab = Lab::open(&name.name)?;
            for n in names {
                lab.containers().remove(&n)?;
            }
            Ok(())
        }
        LabCommand::Status { name } => {
            let lab = Lab::open(&name.name)?;
            print!("{}", status_text(&lab)?);
            Ok(())
        }
        LabCommand::Ping { name, from, to } => {
            let lab = Lab::open(&name.name)?;
            let ip = lab.containers().resolve(&to)?;
            if lab.containers().ping(&from, ip)? {
                println!("{from} -> {to} ({ip}): ok");
                Ok(())
            } else {
                bail!("{from} -> {to} ({ip}): no reply")
            }
        }
        LabCommand::Inspect { name, node, view } => {
            let lab = Lab::open(&name.name)?;
            let netns = lab.state()?.node(&node)?.netns.clone();
            // The lab's agents listen on 127.0.0.1:61679 of their node's namespace.
            use vpcnet_introspection::client::{Endpoint, DEFAULT_ENDPOINT};
            let ep = Endpoint::parse(DEFAULT_ENDPOINT)?;
            let fetched =
                vpcnet_lab::spawn::in_netns(&netns, move || crate::inspect::fetch(&ep, view))?;
            crate::inspect::show(view, &fetched)
        }
        LabCommand::Down { name, all } => {
            let names = if all {
                vpcnet_lab::state::list_labs()
            } else {
                vec![name.name]
            };
            for n in names {
                Lab::open(&n)?.down()?;
                progress(&format!("lab {n} removed"));
            }
            Ok(())
        }
        LabCommand::List => {
            for n in vpcnet_lab::state::list_labs() {
                println!("{n}");
            }
            Ok(())
        }
        LabCommand::Lb(args) => crate::lab_lb::run(args),
        LabCommand::Requests(a) => requests::run(&a),
        LabCommand::Conformance(a) => conformance::run(&a),
        LabCommand::Fleet(a) => fleet::run(&a),
        LabCommand::Demo { up, count } => {
            if up.no_kubernetes {
                demo(&up, count)
            } else {
                demo::run(&up_options(&up, 2)?, count)
            }
        }
        LabCommand::Serve { dir } => vpcnet_lab::daemon::serve(&dir),
        LabCommand::CsrApprover { dir } => {
            vpcnet_lab::kube::csr::run(&Lab { dir }.kube().kubectl()?)
        }
    }
}

pub(crate) fn status_text(lab: &Lab) -> Result<String> {
    let enis = lab.cloud().enis()?;
    let mut containers = lab.containers().list()?;
    containers.sort_by_key(|c| (c.node.clone(), c.id.len(), c.id.clone()));
    let mut rows = vec![vec![
        "CONTAINER".into(),
        "NODE".into(),
        "IP".into(),
        "ENI".into(),
        "DEVICE".into(),
    ]];
    for c in &containers {
        let (eni, dev) = match vpcnet_lab::cloud::owner(&enis, c.ip) {
            Some(o) => (o.eni_id, format!("eth{}", o.device_index)),
            None => ("(not on any ENI!)".into(), "-".into()),
        };
        rows.push(vec![
            c.id.clone(),
            c.node.clone(),
            c.ip.to_string(),
            eni,
            dev,
        ]);
    }
    let mut out = table(&rows);
    out.push('\n');
    out.push_str(&enis_table(lab, &enis)?);
    Ok(out)
}

/// The lab nodes' ENIs: ID, node, device, MAC, primary IP, secondary IPs, prefixes.
pub(crate) fn enis_table(lab: &Lab, enis: &[vpcnet_lab::cloud::EniInfo]) -> Result<String> {
    let s = lab.state()?;
    let mut rows = vec![vec![
        "ENI".into(),
        "NODE".into(),
        "DEVICE".into(),
        "MAC".into(),
        "PRIMARY IP".into(),
        "SECONDARY IPS".into(),
        "PREFIXES".into(),
    ]];
    let mut ours: Vec<_> = enis
        .iter()
        .filter_map(|e| {
            let a = e.attachment.as_ref()?;
            let node = s.nodes.iter().find(|n| n.instance_id == a.instance_id)?;
            Some((node.name.clone(), a.device_index, e))
        })
        .collect();
    ours.sort_by_key(|(n, d, _)| (n.clone(), *d));
    for (node, dev, e) in ours {
        rows.push(vec![
            e.eni_id.clone(),
            node,
            format!("eth{dev}"),
            e.mac.clone(),
            e.primary_ip.to_string(),
            e.secondary_ips.len().to_string(),
            e.prefixes.len().to_string(),
        ]);
    }
    Ok(table(&rows))
}

fn demo(up: &UpArgs, count: usize) -> Result<()> {
    let failed = vpcnet_lab::lab::with_lab(&up_options(up, 1)?, |lab| demo_steps(lab, count))?;
    if failed > 0 {
        bail!("{failed} ping(s) failed");
    }
    println!(
        "demo passed: every container has a VPC IP on one of the node's ENIs; all pings answered"
    );
    Ok(())
}

/// Runs the demo on a lab that is up; returns the number of failed pings.
fn demo_steps(lab: &Lab, count: usize) -> Result<usize> {
    progress(&format!(
        "starting {count} containers on n1 (ctr run --cni -> vpcnet-cni)"
    ));
    let names = lab.containers().next_names(count)?;
    lab.containers().run("n1", &names)?;
    println!();
    print!("{}", status_text(lab)?);
    println!();
    let enis = lab.cloud().enis()?;
    let containers = lab.containers().list()?;
    let on = |c: &ContainerInfo| vpcnet_lab::cloud::owner(&enis, c.ip).map(|o| o.device_index);
    let unowned: Vec<&ContainerInfo> = containers.iter().filter(|c| on(c).is_none()).collect();
    if !unowned.is_empty() {
        bail!("containers without an ENI-owned IP: {unowned:?}");
    }
    let mut pings: Vec<(String, String, String, Ipv4Addr)> = Vec::new();
    // Same ENI, across ENIs (secondary ENI <-> eth0's pool), container -> node.
    let mut by_dev: std::collections::BTreeMap<u32, Vec<&ContainerInfo>> = Default::default();
    for c in &containers {
        by_dev.entry(on(c).unwrap_or(0)).or_default().push(c);
    }
    if let Some(same) = by_dev.values().find(|v| v.len() >= 2) {
        pings.push((
            "same ENI".into(),
            same[0].id.clone(),
            same[1].id.clone(),
            same[1].ip,
        ));
    }
    let primary = by_dev.get(&0).and_then(|v| v.first());
    let secondary = by_dev
        .iter()
        .find(|(d, _)| **d > 0)
        .and_then(|(_, v)| v.first());
    if let (Some(p), Some(s)) = (primary, secondary) {
        pings.push(("across ENIs".into(), s.id.clone(), p.id.clone(), p.ip));
        pings.push(("across ENIs".into(), p.id.clone(), s.id.clone(), s.ip));
    }
    let node_ip: Ipv4Addr = lab.state()?.node("n1")?.primary_ip.parse()?;
    if let Some(c) = secondary.or(primary) {
        pings.push((
            "container -> node".into(),
            c.id.clone(),
            "n1".into(),
            node_ip,
        ));
        let router = vpcnet_lab::fabric::gateway(vpcnet_lab::lab::SUBNET.parse()?);
        pings.push((
            "container -> VPC router".into(),
            c.id.clone(),
            "router".into(),
            router,
        ));
    }
    let mut rows = vec![vec![
        "PING".into(),
        "FROM".into(),
        "TO".into(),
        "RESULT".into(),
    ]];
    let mut failed = 0;
    for (kind, from, to, ip) in &pings {
        let ok = lab.containers().ping(from, *ip)?;
        if !ok {
            failed += 1;
        }
        let dev = |id: &str| {
            containers
                .iter()
                .find(|c| c.id == id)
                .and_then(on)
                .map(|d| format!(" (eth{d})"))
                .unwrap_or_default()
        };
        rows.push(vec![
            kind.clone(),
            format!("{from}{}", dev(from)),
            format!("{to} {ip}{}", dev(to)),
            if ok { "ok".into() } else { "FAILED".into() },
        ]);
    }
    print!("{}", table(&rows));
    println!();
    Ok(failed)
}
