//! `lab up` as the steps it prints: the VPC (namespace, fabric, outside network), the nodes'
//! namespaces and files, the control-plane host, the lab cloud, the images, the Kubernetes
//! control plane, each node's services, the nodes joining the cluster, and EKS's add-ons when
//! asked (kube-proxy's DaemonSet, CoreDNS: [`crate::kube::addons`]). Every step records
//! what it creates before creating it ([`crate::state`]); [`Lab::up`] tears everything down when
//! a step fails.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ipnet::Ipv4Net;

use crate::containerd;
use crate::daemon::{self, DaemonSpec, NodeSpec, Ready};
use crate::image;
use crate::kube::control_plane::{self, ControlPlaneRecord};
use crate::kube::pki::Ca;
use crate::lab::{
    progress, KubeProxyMode, Lab, LabSubnet, UpOptions, VpcLayout, CONTROL_PLANE_NAME,
    MAX_FLEET_NODES, OUTSIDE_CIDR, OUTSIDE_HOST, SECONDARY_CIDR, TIMED_PLUGINS, VPC_CIDR,
};
use crate::netns;
use crate::procs;
use crate::spawn::Place;
use crate::state::{self, AgentInstall, LabState, NodeCni, NodeRecord};
use crate::teardown;
use crate::wait::{log_tail, wait_for};

/// The reference plugins copied into every node: those the conflists chain (portmap always,
/// bandwidth and tuning with ENABLE_BANDWIDTH_PLUGIN and DISABLE_POD_V6) and those of the bare
/// lab's tests.
const REFERENCE_PLUGINS: [&str; 6] = [
    "portmap",
    "bandwidth",
    "tuning",
    "loopback",
    "bridge",
    "host-local",
];

/// The VPC as built: its namespace and subnets in bridge order.
struct Vpc {
    netns: String,
    layout: Vec<LabSubnet>,
    subnets: Vec<Ipv4Net>,
}

/// The images every node imports.
struct Images {
    busybox: std::path::PathBuf,
    pause: std::path::PathBuf,
}

impl Lab {
    /// Builds a lab. On any failure everything created so far is removed and the error is
    /// returned. Errors: invalid name, a lab of that name exists, a binary is missing
    /// (build with `cargo build -p vpcnet-cli -p vpcnet-agent -p vpcnet-cni`), a component
    /// failed to start (the error quotes its log).
    pub fn up(opts: &UpOptions) -> Result<Lab> {
        state::check_name(&opts.name)?;
        if opts.fleet {
            if !(1..=MAX_FLEET_NODES).contains(&opts.nodes) {
                bail!(
                    "a fleet has between 1 and {MAX_FLEET_NODES} nodes (got {})",
                    opts.nodes
                );
            }
            if opts.kubernetes || opts.layout != VpcLayout::Fleet || opts.cni_timing {
                bail!("a fleet lab's nodes run agents only: no Kubernetes, the fleet layout, no timing shim (UpOptions::fleet)");
            }
        } else if !(1..=8).contains(&opts.nodes) {
            bail!("--nodes must be between 1 and 8 (got {})", opts.nodes);
        }
        if vpcnet_limits::lookup(&opts.instance_type).is_none() {
            bail!(
                "unknown instance type {:?}: use an EC2 type such as m5.large",
                opts.instance_type
            );
        }
        let chart = opts.agent_install == AgentInstall::Chart;
        if chart && !opts.kubernetes {
            bail!("the chart install needs Kubernetes: drop --no-kubernetes, or use --agent-install process");
        }
        if chart && opts.cni_timing {
            bail!(
                "the timing shim replaces the plugins the lab copies into /opt/cni/bin, but with \
                 the chart install the init container installs them: use --agent-install process \
                 with the timing shim"
            );
        }
        let mut ours = vec!["vpcnet", "vpcnet-agent", "vpcnet-cni"];
        if opts.kubernetes {
            ours.push("vpcnet-bootstrap");
        }
        if chart {
            // Helm first: a missing build fails now, not after the cluster is up.
            crate::kube::vpcnet_chart::helm()?;
            ours.push("vpcnet-init");
        }
        for b in ours {
            if !opts.bin_dir.join(b).is_file() {
                bail!(
                    "{} not found: build it with `cargo build -p vpcnet-cli -p vpcnet-agent -p vpcnet-cni -p vpcnet-bootstrap`",
                    opts.bin_dir.join(b).display()
                );
            }
        }
        let k8s_bin_dir = if opts.kubernetes {
            Some(crate::kube::bins::locate(opts.k8s_bin_dir.as_deref())?)
        } else {
            None
        };
        if !opts.kubernetes && (opts.coredns || opts.kube_proxy_mode == KubeProxyMode::DaemonSet) {
            bail!(
                "CoreDNS and the kube-proxy DaemonSet are Kubernetes add-ons: drop --no-kubernetes"
            );
        }
        let coredns_bin_dir = if opts.coredns {
            Some(crate::kube::bins::locate_coredns(
                opts.coredns_bin_dir.as_deref(),
            )?)
        } else {
            None
        };
        let dir = state::lab_dir(&opts.name);
        if dir.join("state.json").exists() {
            bail!(
                "lab {:?} already exists: remove it with `vpcnet lab down --name {}`",
                opts.name,
                opts.name
            );
        }
        fs::create_dir_all(dir.join("logs"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let prefix = random_prefix();
        LabState {
            name: opts.name.clone(),
            prefix: prefix.clone(),
            instance_type: opts.instance_type.clone(),
            agent_install: opts.agent_install,
            ..Default::default()
        }
        .save(&dir)?;
        let lab = Lab { dir: dir.clone() };
        let build = Build {
            lab: &lab,
            opts,
            prefix: &prefix,
        };
        match build.run(k8s_bin_dir.as_deref(), coredns_bin_dir.as_deref()) {
            Ok(()) => Ok(lab),
            Err(e) => {
                progress("lab up failed: tearing down");
                let problems = teardown::teardown(&dir);
                if !problems.is_empty() {
                    eprintln!("teardown problems: {}", problems.join("; "));
                }
                Err(e)
            }
        }
    }
}

fn random_prefix() -> String {
    format!("vl{:05x}", rand::random::<u32>() & 0xf_ffff)
}

/// One `lab up` in progress: the lab being built, what it is built from, and the prefix of
/// the names it creates (namespaces, interfaces). Each step is a method.
struct Build<'a> {
    lab: &'a Lab,
    opts: &'a UpOptions,
    prefix: &'a str,
}

impl Build<'_> {
    /// Builds the lab `opts` describes, step by step, with names prefixed `prefix`.
    fn run(&self, k8s_bin_dir: Option<&Path>, coredns_bin_dir: Option<&Path>) -> Result<()> {
        let opts = self.opts;
        fs::write(
            self.lab.dir.join("bin_dir"),
            opts.bin_dir.as_os_str().as_encoded_bytes(),
        )?;
        let vpc = self.build_vpc()?;
        let nodes = self.create_nodes()?;
        let cp_ns = format!("{}-cp", self.prefix);
        if opts.kubernetes {
            self.create_netns(&cp_ns)?;
        }
        let ready = self.start_cloud(&vpc, &nodes, &cp_ns)?;
        if opts.fleet {
            // Agent-only nodes: the fleet starts their agents itself, all at once.
            return Ok(());
        }
        let images = self.build_images(k8s_bin_dir, coredns_bin_dir)?;
        let k8s = match k8s_bin_dir {
            Some(bins) => Some(self.start_control_plane(&ready, &cp_ns, bins)?),
            None => None,
        };
        let nodes = self.lab.state()?.nodes;
        for node in &nodes {
            self.start_node(node, k8s.as_ref(), &images)?;
        }
        if k8s.is_some() {
            self.join_cluster(&nodes)?;
        }
        Ok(())
    }

    /// A network namespace, recorded first.
    fn create_netns(&self, name: &str) -> Result<()> {
        state::update(&self.lab.dir, |s| {
            s.namespaces.push(name.to_string());
            Ok(())
        })?;
        netns::create(name)
    }

    /// The VPC namespace with a bridge per subnet and the router, and, in the two-zone layout,
    /// the network outside the VPC.
    fn build_vpc(&self) -> Result<Vpc> {
        let (opts, prefix) = (self.opts, self.prefix);
        let vpc_ns = format!("{prefix}-vpc");
        let (layout, _) = opts.subnets();
        let subnets: Vec<Ipv4Net> = layout
            .iter()
            .map(|(_, c, _)| c.parse().expect("constant"))
            .collect();
        progress(&format!(
            "creating VPC namespace {vpc_ns} (bridge per subnet {}, router at each subnet's first address)",
            subnets.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
        ));
        self.create_netns(&vpc_ns)?;
        crate::fabric::setup_vpc(&vpc_ns, &subnets)?;
        if opts.layout == VpcLayout::TwoZones {
            crate::fabric::isolate_enis(&vpc_ns)?;
            let out_ns = format!("{prefix}-out");
            let cidr: Ipv4Net = OUTSIDE_CIDR.parse().expect("constant");
            progress(&format!(
                "outside network {cidr}: host {OUTSIDE_HOST} in {out_ns}, routed by the VPC router"
            ));
            state::update(&self.lab.dir, |s| {
                s.namespaces.push(out_ns.clone());
                s.outside = Some(state::OutsideRecord {
                    netns: out_ns.clone(),
                    ip: OUTSIDE_HOST,
                    cidr,
                });
                Ok(())
            })?;
            netns::create(&out_ns)?;
            crate::fabric::connect_outside(&vpc_ns, &out_ns, cidr, OUTSIDE_HOST)?;
        }
        Ok(Vpc {
            netns: vpc_ns,
            layout,
            subnets,
        })
    }

    /// Each node's network namespace (forwarding on, as EKS AMIs set it), mount namespace and
    /// files: the plugins of its CNI, the reference plugins, the timing shim when asked.
    fn create_nodes(&self) -> Result<Vec<NodeRecord>> {
        let (opts, prefix) = (self.opts, self.prefix);
        let dir = &self.lab.dir;
        let mut nodes = Vec::new();
        for i in 1..=opts.nodes {
            let mut node = NodeRecord {
                name: format!("n{i}"),
                netns: format!("{prefix}-n{i}"),
                dir: dir.join(format!("n{i}")),
                mntns: crate::machine::ns_dir(dir).join(format!("n{i}")),
                cni: opts.cni_of(&format!("n{i}")),
                ..Default::default()
            };
            state::update(dir, |s| {
                s.namespaces.push(node.netns.clone());
                s.nodes.push(node.clone());
                Ok(())
            })?;
            netns::create(&node.netns)?;
            crate::cmd::sysctl_in(&node.netns, "net.ipv4.ip_forward", "1")?;
            fs::create_dir_all(node.dir.join("bin"))?;
            node.mntns = crate::machine::create(dir, &node.name, &node.root())?;
            install_plugins(&node, opts)?;
            if opts.fleet && (i % 50 == 0 || i == opts.nodes) {
                progress(&format!("{i} of {} nodes' namespaces created", opts.nodes));
            }
            nodes.push(node);
        }
        Ok(nodes)
    }

    /// The lab cloud (`vpcnet lab serve`) in the VPC namespace, launching the nodes' and the
    /// control-plane host's instances; their instance IDs, addresses and zones are recorded.
    fn start_cloud(&self, vpc: &Vpc, nodes: &[NodeRecord], cp_ns: &str) -> Result<Ready> {
        let opts = self.opts;
        let dir = &self.lab.dir;
        progress(&format!(
            "starting the lab cloud (vpcnet-emu) in {}: {} x {}{}",
            vpc.netns,
            opts.nodes,
            opts.instance_type,
            if opts.kubernetes {
                " and the control-plane host"
            } else {
                ""
            }
        ));
        let (_, node_subnet) = opts.subnets();
        let mut specs: Vec<NodeSpec> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeSpec {
                name: n.name.clone(),
                netns: n.netns.clone(),
                instance_type: opts.instance_type.clone(),
                subnet: node_subnet(i + 1),
            })
            .collect();
        if opts.kubernetes {
            specs.push(NodeSpec {
                name: CONTROL_PLANE_NAME.into(),
                netns: cp_ns.to_string(),
                instance_type: "m5.large".into(),
                subnet: 1,
            });
        }
        let spec = DaemonSpec {
            vpc_netns: vpc.netns.clone(),
            vpc_cidr: VPC_CIDR.parse().expect("constant"),
            subnets: vpc.subnets.clone(),
            nodes: specs,
            seed: rand::random(),
            extra_cidrs: match opts.layout {
                VpcLayout::Basic | VpcLayout::Fleet => Vec::new(),
                VpcLayout::TwoZones => vec![SECONDARY_CIDR.parse().expect("constant")],
            },
            zones: vpc.layout.iter().map(|(_, _, z)| z.to_string()).collect(),
            subnet_names: vpc.layout.iter().map(|(n, _, _)| n.to_string()).collect(),
            enforce_security_groups: opts.layout == VpcLayout::TwoZones,
        };
        fs::write(daemon::spec_path(dir), serde_json::to_vec_pretty(&spec)?)?;
        let mut c = Command::new(opts.bin_dir.join("vpcnet"));
        c.args(["lab", "serve", "--dir"]).arg(dir);
        let log = self.lab.logs().join("emulator.log");
        let p = procs::spawn("emulator", c, &Place::netns(&vpc.netns), &log)?;
        state::update(dir, |s| {
            s.processes.push(p.clone());
            Ok(())
        })?;
        if opts.fleet {
            // AWS answers from its own machines; here the cloud shares two cores with hundreds
            // of agents starting at once, and IMDS answering a node's start-up after the SDK's
            // 1 s read timeout is the lab's artifact, not the fleet's: the cloud goes first.
            crate::cmd::run("renice", &["-n", "-10", "-p", &p.pid.to_string()])
                .context("raising the lab cloud's priority (renice, util-linux)")?;
        }
        // Launching a fleet's instances plugs each primary ENI into the fabric.
        let timeout = Duration::from_secs(30) + Duration::from_millis(100) * opts.nodes as u32;
        let ready: Ready = wait_for("the lab cloud", timeout, || {
            if let Ok(b) = fs::read(daemon::ready_path(dir)) {
                return Ok(Some(serde_json::from_slice(&b)?));
            }
            if !p.alive() {
                bail!("the lab cloud exited:\n{}", log_tail(&log));
            }
            Ok(None)
        })?;
        state::update(dir, |s| {
            for n in &mut s.nodes {
                if let Some(i) = ready.instances.get(&n.name) {
                    n.instance_id = i.instance_id.clone();
                    n.primary_ip = i.private_ip.to_string();
                    n.k8s_name = i.private_dns_name.clone();
                    n.zone = i.availability_zone.clone();
                }
            }
            s.ec2_endpoint = ready.ec2_endpoints.first().cloned();
            Ok(())
        })?;
        for n in nodes {
            if let Some(i) = ready.instances.get(&n.name) {
                crate::machine::set_hostname(&n.mntns, &i.private_dns_name)?;
            }
        }
        Ok(ready)
    }

    /// The busybox image and, with Kubernetes, the pause image, as OCI archives; the add-ons'
    /// images when the options ask for them (kube-proxy's DaemonSet, CoreDNS).
    fn build_images(&self, k8s: Option<&Path>, coredns: Option<&Path>) -> Result<Images> {
        progress("building the images (busybox from /bin/busybox; pause from lab/pause/pause.c)");
        let images = Images {
            busybox: self.lab.dir.join("busybox.tar"),
            pause: self.lab.dir.join("pause.tar"),
        };
        image::build(&images.busybox)?;
        if self.opts.kubernetes {
            image::build_pause(&images.pause, &self.lab.dir.join("pause-build"))?;
        }
        if let Some(k8s) = k8s {
            let daemonset = self.opts.kube_proxy_mode == KubeProxyMode::DaemonSet;
            for a in self.lab.addons().build_images(k8s, daemonset, coredns)? {
                progress(&format!(
                    "  {} {} ({} bytes of layer)",
                    a.reference, a.digest, a.layer_size
                ));
            }
        }
        Ok(images)
    }

    /// The Kubernetes control plane on its host, with a new cluster CA.
    fn start_control_plane(
        &self,
        ready: &Ready,
        cp_ns: &str,
        bins: &Path,
    ) -> Result<(Ca, ControlPlaneRecord)> {
        let cp = ready
            .instances
            .get(CONTROL_PLANE_NAME)
            .context("the lab cloud launched no control-plane host")?;
        let ca = Ca::new()?;
        let record = control_plane::start(
            self.lab,
            &ca,
            &control_plane::Spec {
                netns: cp_ns,
                instance_id: &cp.instance_id,
                ip: cp.private_ip,
                bin_dir: bins,
                vpc_id: &ready.vpc_id,
                subnet_id: &ready.subnet_ids[1],
                ec2_endpoint: &ready.ec2_endpoints[1],
                annotate_pod_ip: self.opts.agent_env.iter().any(|(k, v)| {
                    k == "ANNOTATE_POD_IP"
                        && ["1", "t", "T", "TRUE", "true", "True"].contains(&v.as_str())
                }),
                agent_chart: self.opts.agent_install == AgentInstall::Chart,
            },
        )?;
        Ok((ca, record))
    }

    /// One node's services: with Kubernetes vpcnet-bootstrap first, then containerd with the
    /// images, then its CNI's agent (the VPC CNI's ipamd waits for the Node when there is a
    /// cluster, [`Self::join_cluster`]).
    fn start_node(
        &self,
        node: &NodeRecord,
        k8s: Option<&(Ca, ControlPlaneRecord)>,
        images: &Images,
    ) -> Result<()> {
        let opts = self.opts;
        progress(&format!(
            "node {}: {} {} eth0 {}",
            node.name, node.instance_id, opts.instance_type, node.primary_ip
        ));
        if let Some((ca, cp)) = k8s {
            progress(&format!(
                "node {}: vpcnet-bootstrap (IMDS + EC2 → kubelet and containerd configuration, kubeconfig, units)",
                node.name
            ));
            self.lab.kube().bootstrap_node(node, ca, cp)?;
        }
        let cd = containerd::start(node, &self.lab.logs())?;
        state::update(&self.lab.dir, |s| {
            s.processes.push(cd);
            Ok(())
        })?;
        containerd::import(node, &node.ctr_namespace(), &images.busybox)?;
        if k8s.is_some() {
            containerd::import(node, containerd::CRI_NAMESPACE, &images.busybox)?;
            containerd::import(node, containerd::CRI_NAMESPACE, &images.pause)?;
            self.lab.addons().import_images(node)?;
        }
        match node.cni {
            // kubelet starts the agent's DaemonSet pod once the chart is installed
            // (`join_cluster`).
            NodeCni::Vpcnet if opts.agent_install == AgentInstall::Chart => Ok(()),
            NodeCni::Vpcnet => {
                progress(&format!("node {}: starting vpcnet-agent", node.name));
                self.lab.node(&node.name).start_agent_with(opts)
            }
            // With Kubernetes ipamd starts once kubelet has registered the Node (it reads the
            // Node at start and exits without it), as its DaemonSet pod does on EKS.
            NodeCni::VpcCni if k8s.is_some() => self.lab.node(&node.name).save_agent_env(opts),
            NodeCni::VpcCni => self.lab.node(&node.name).start_vpc_cni_with(opts),
        }
    }

    /// kubelet and kube-proxy on every node (kube-proxy as a process, or its DaemonSet created
    /// before the kubelets start, as both are scheduled onto a booting EKS node; so is vpcnet's
    /// `aws-node` DaemonSet with the chart install); the VPC CNI's
    /// ipamd on its nodes once their Node is registered; then, when asked, all nodes Ready;
    /// CoreDNS last, waited for when the nodes are and kube-proxy runs.
    fn join_cluster(&self, nodes: &[NodeRecord]) -> Result<()> {
        let opts = self.opts;
        let peers: Vec<&NodeRecord> = nodes.iter().filter(|n| n.cni == NodeCni::VpcCni).collect();
        let charted: Vec<NodeRecord> = nodes
            .iter()
            .filter(|n| n.cni == NodeCni::Vpcnet && opts.agent_install == AgentInstall::Chart)
            .cloned()
            .collect();
        let daemonset = opts.kube_proxy_mode == KubeProxyMode::DaemonSet;
        if daemonset {
            self.lab.addons().prepare_kube_proxy()?;
            if opts.kube_proxy {
                self.lab.addons().start_kube_proxy()?;
            }
        }
        // The aws-node DaemonSet too exists before the kubelets start (the seed scenario: both
        // DaemonSets' pods are scheduled onto a booting node at the same moment).
        let chart = self.lab.vpcnet_chart();
        if !charted.is_empty() {
            chart.install_on_nodes(&charted, opts.cluster_endpoint, &opts.agent_env)?;
        }
        self.lab.kube().join_nodes(
            opts.kube_proxy && !daemonset,
            opts.wait_ready && peers.is_empty() && charted.is_empty(),
        )?;
        if !charted.is_empty() && opts.wait_ready {
            progress("waiting for the aws-node pods (started by kubelet) to turn Ready");
            chart.wait_agents_ready(Duration::from_secs(180))?;
        }
        for node in &peers {
            self.lab
                .kube()
                .wait_node_registered(node, Duration::from_secs(120))?;
            self.lab.node(&node.name).start_vpc_cni_with(opts)?;
        }
        if opts.wait_ready && !(peers.is_empty() && charted.is_empty()) {
            progress("waiting for the nodes to turn Ready and be initialized");
            self.lab.kube().wait_nodes_ready(Duration::from_secs(180))?;
        }
        if daemonset && opts.kube_proxy && opts.wait_ready {
            progress("waiting for a kube-proxy pod on every node");
            self.lab
                .addons()
                .wait_kube_proxy(Duration::from_secs(120))?;
        }
        if opts.coredns {
            self.lab.addons().install_coredns()?;
            if opts.wait_ready && opts.kube_proxy {
                progress("waiting for CoreDNS to be Ready");
                self.lab.addons().wait_coredns(Duration::from_secs(180))?;
            }
        }
        Ok(())
    }
}

/// Copies the node's plugins into its `/opt/cni/bin`: vpcnet-cni, the VPC CNI's plugins and
/// ipamd on a VPC CNI node, the reference plugins, and the timing shim in front of the timed
/// ones when asked.
fn install_plugins(node: &NodeRecord, opts: &UpOptions) -> Result<()> {
    let bin = node.cni_bin_dir();
    // A fleet's hundreds of nodes link the binaries instead of copying them (a node's
    // processes see the host's files outside the node's own directories).
    let copy = |from: &Path, to: &Path| -> std::io::Result<()> {
        if opts.fleet {
            std::os::unix::fs::symlink(from, to)
        } else {
            fs::copy(from, to).map(|_| ())
        }
    };
    // With the chart, the agent pod's init container installs vpcnet-cni (and its own copies of
    // the reference plugins the conflist chains); the lab's copies of the reference plugins are
    // the ones an EKS AMI ships in /opt/cni/bin (containerd needs `loopback` for every pod).
    if !(node.cni == NodeCni::Vpcnet && opts.agent_install == AgentInstall::Chart) {
        copy(&opts.bin_dir.join("vpcnet-cni"), &bin.join("vpcnet-cni"))
            .context("copying vpcnet-cni into the node's CNI bin dir")?;
    }
    if node.cni == NodeCni::VpcCni {
        let peer = crate::kube::bins::locate_peer(opts.k8s_bin_dir.as_deref())?;
        for b in ["aws-cni", "egress-cni"] {
            copy(&peer.join(b), &bin.join(b))
                .with_context(|| format!("copying {b} into the node's CNI bin dir"))?;
        }
        copy(
            &peer.join("aws-k8s-agent"),
            &node.dir.join("bin/aws-k8s-agent"),
        )
        .context("copying aws-k8s-agent into the node's bin dir")?;
    }
    for p in REFERENCE_PLUGINS {
        copy(Path::new(&format!("/usr/lib/cni/{p}")), &bin.join(p)).with_context(|| {
            format!(
                "/usr/lib/cni/{p} missing: install containernetworking-plugins \
                 (scripts/install-deps.sh)"
            )
        })?;
    }
    if opts.cni_timing {
        let shim = opts.bin_dir.join("vpcnet-cni-timing");
        for p in TIMED_PLUGINS {
            if bin.join(p).is_file() {
                vpcnet_cni_harness::timing::install_in_place(&bin, p, &shim).context(
                    "build it with `cargo build -p vpcnet-cni-harness --bin vpcnet-cni-timing`",
                )?;
            }
        }
    }
    Ok(())
}
