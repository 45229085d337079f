//! Node-side setup of secondary ENIs and of the node firewall (SNAT, connmark), the periodic
//! datapath audit (self-healing) and link-removal events, behind a trait so emulator-only
//! tests run without touching any network namespace.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::pin::Pin;

use anyhow::Context;
use ipnet::Ipv4Net;
use vpcnet_datapath::audit::{Finding, Kind, NodeView, PodExpect};
use vpcnet_datapath::link_watch::RemovedLink;

/// A boxed future (object-safe async trait methods).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One secondary ENI as the node must see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEni {
    pub mac: String,
    /// Attachment device number (on its card).
    pub device_number: u32,
    /// Attachment network card: with the device number, the route table
    /// ([`vpcnet_datapath::node::card_route_table`]).
    pub network_card: u32,
    pub subnet: Ipv4Net,
    pub primary_ip: std::net::Ipv4Addr,
    pub mtu: u32,
}

impl NodeEni {
    /// The datapath's view of this ENI (its interface, route table and rules).
    pub fn spec(&self) -> vpcnet_datapath::node::EniSpec {
        vpcnet_datapath::node::EniSpec {
            mac: self.mac.clone(),
            device_number: self.device_number,
            network_card: self.network_card,
            subnet: self.subnet,
            mtu: self.mtu,
            primary_ip: Some(self.primary_ip),
        }
    }
}

/// The node firewall as the agent knows it: the VPC CNI settings plus the static facts. The
/// primary ENI's interface is found by `primary_mac` (it is `eth0` on older AMIs, `ens5` on
/// newer ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFirewall {
    /// Primary ENI MAC (IMDS `mac`), `aa:bb:cc:dd:ee:ff`.
    pub primary_mac: String,
    /// The node's primary IPv4 (IMDS `local-ipv4`): the SNAT source.
    pub primary_ip: Ipv4Addr,
    /// The VPC's IPv4 CIDRs (IMDS): never SNATed.
    pub vpc_cidrs: Vec<Ipv4Net>,
    /// AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS.
    pub exclude_snat_cidrs: Vec<Ipv4Net>,
    /// AWS_VPC_K8S_CNI_RANDOMIZESNAT.
    pub randomize_snat: vpcnet_datapath::firewall::RandomizeSnat,
    /// AWS_VPC_K8S_CNI_EXTERNALSNAT.
    pub external_snat: bool,
    /// AWS_VPC_CNI_NODE_PORT_SUPPORT.
    pub node_port_support: bool,
    /// AWS_VPC_K8S_CNI_VETHPREFIX.
    pub veth_prefix: String,
}

impl NodeFirewall {
    /// The datapath's description, with the primary ENI's interface name.
    pub fn spec(&self, primary_interface: &str) -> vpcnet_datapath::firewall::FirewallSpec {
        vpcnet_datapath::firewall::FirewallSpec {
            primary_ip: self.primary_ip,
            primary_interface: primary_interface.to_string(),
            vpc_cidrs: self.vpc_cidrs.clone(),
            exclude_snat_cidrs: self.exclude_snat_cidrs.clone(),
            randomize_snat: self.randomize_snat,
            external_snat: self.external_snat,
            node_port_support: self.node_port_support,
            veth_prefix: self.veth_prefix.clone(),
        }
    }
}

/// What one pass of the datapath audit checks ([`NodeNetwork::audit`]).
pub struct AuditRequest {
    /// Assigned pods old enough to have their datapath built, as ADD built it.
    pub pods: Vec<PodExpect>,
    /// The secondary ENIs the pool holds (interface by MAC, table N).
    pub enis: Vec<NodeEni>,
    /// The node firewall as applied (table `ip vpcnet`, rp_filter of the primary interface).
    pub firewall: NodeFirewall,
    /// Repair what differs (else only report).
    pub repair: bool,
    /// Asked right before a pod's repair: whether its address is still assigned, so a DEL that
    /// ran during the pass does not get its route and rules back.
    pub still_assigned: Box<dyn Fn(Ipv4Addr) -> bool + Send + Sync>,
}

/// What one pass of the datapath audit found.
#[derive(Debug, Clone, Default)]
pub struct AuditReport {
    /// Per pod of [`AuditRequest::pods`], same order: what differed (empty = healthy).
    pub pods: Vec<Vec<Finding>>,
    /// Node prerequisites that differed.
    pub node: Vec<Finding>,
}

/// Programs the node for a secondary ENI: find its interface by MAC, set MTU, bring it up,
/// route table N (device number) with the subnet route and a default route via the subnet
/// gateway. Must be idempotent.
pub trait NodeNetwork: Send + Sync + 'static {
    fn setup_eni<'a>(&'a self, eni: &'a NodeEni) -> BoxFuture<'a, anyhow::Result<()>>;

    /// IPv4 addresses the node currently routes to pods (main-table /32 routes via a
    /// device). An assignment whose address is missing here has no pod datapath: the plugin's
    /// DEL ran while the agent was down, so the agent reclaims the address.
    fn pod_route_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>>;

    /// IPv4 addresses with a pod rule (`to <ip> lookup main` at 512): evidence at start that a
    /// pod holds the address even when its route is gone. `Ok` empty: this node network
    /// shows no rules (the default; fakes in tests that do not model them).
    fn pod_rule_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>> {
        Box::pin(async { Ok(BTreeSet::new()) })
    }

    /// Names of the node's network interfaces (host veths among them): a pod whose host veth
    /// still exists is not gone, whatever its route says.
    fn link_names(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<String>>>;

    /// Applies the node firewall: SNAT of VPC-external traffic to the primary IP (unless
    /// external SNAT), connmark and `fwmark 0x80/0x80 lookup main` so replies to traffic that
    /// arrived on the primary ENI leave by it, loose rp_filter on it (node port support). Only
    /// vpcnet's own nftables table and rule are touched. Must be idempotent (it is re-applied on
    /// every periodic pass to repair drift).
    fn setup_node_firewall<'a>(&'a self, fw: &'a NodeFirewall)
        -> BoxFuture<'a, anyhow::Result<()>>;

    /// One pass of the datapath audit (see [`crate::datapath_audit`]): checks each pod's host
    /// route, rules 512/1536, host veth and its MAC, and the node's prerequisites (IPv4
    /// forwarding, each ENI's interface and table, the firewall table, rp_filter), repairing
    /// what differs when `req.repair`. `Ok(None)`: this node network does not audit (the
    /// default; fakes in tests).
    fn audit<'a>(
        &'a self,
        req: &'a AuditRequest,
    ) -> BoxFuture<'a, anyhow::Result<Option<AuditReport>>> {
        let _ = req;
        Box::pin(async { Ok(None) })
    }

    /// Whether the node tracks connections that [`NodeNetwork::flush_conntrack`] can delete:
    /// released addresses then wait for their entries to be deleted before reuse
    /// ([`crate::conntrack`]). False (the default): fakes in tests, nothing to flush.
    fn tracks_connections(&self) -> bool {
        false
    }

    /// Deletes the node's connection-tracking entries whose original or reply tuple has one of
    /// `ips` as source or destination. `Ok` with nothing deleted: the default.
    fn flush_conntrack<'a>(
        &'a self,
        ips: &'a BTreeSet<Ipv4Addr>,
    ) -> BoxFuture<'a, anyhow::Result<vpcnet_datapath::conntrack::FlushReport>> {
        let _ = ips;
        Box::pin(async { Ok(Default::default()) })
    }

    /// Applies one network policy transaction (`vpcnet_datapath::policy`, an `nft -f -`
    /// script touching only the table `inet vpcnet_policy`). The default refuses: fakes in
    /// tests enforce nothing.
    fn apply_policy<'a>(&'a self, script: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        let _ = script;
        Box::pin(async {
            anyhow::bail!("this node network cannot enforce network policy (no nftables)")
        })
    }

    /// Opens the NFLOG group the network policy rules log to (policy event logs), in the
    /// node's namespace, with reads waiting at most `timeout`. The default refuses: fakes have
    /// no kernel.
    fn open_policy_events(
        &self,
        group: u16,
        timeout: std::time::Duration,
    ) -> anyhow::Result<vpcnet_datapath::nflog::NflogSocket> {
        let _ = (group, timeout);
        anyhow::bail!("this node network cannot read policy events (no netfilter)")
    }

    /// Removes the network policy table if present (enforcement off). `Ok`: the default.
    fn remove_policy(&self) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// The counters of the network policy table's rules (empty without the table). The
    /// default has no table to read and says so (an empty answer would mean the table is
    /// gone, and the enforcer would replace it).
    fn policy_counters(
        &self,
    ) -> BoxFuture<'_, anyhow::Result<Vec<vpcnet_datapath::policy::RuleCounter>>> {
        Box::pin(async { anyhow::bail!("this node network keeps no policy table to read") })
    }

    /// Links removed from the node from now on (netlink `RTM_DELLINK`), so a secondary ENI
    /// whose interface vanishes is noticed at once. `Ok(None)`: no events (the default).
    fn removed_links(
        &self,
    ) -> anyhow::Result<Option<tokio::sync::mpsc::UnboundedReceiver<RemovedLink>>> {
        Ok(None)
    }
}

/// Poll interval while waiting for a just-attached ENI's interface to appear.
const ENI_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// The real implementation over netlink in the agent's network namespace
/// (`vpcnet_datapath::node::setup_eni`). The interface may appear a moment after EC2 reports
/// the attachment, so a missing interface is retried for up to `wait`.
pub struct NetlinkNode {
    pub wait: std::time::Duration,
    /// The node's network namespace: `None` = the agent's own (production, the lab); tests
    /// point it at a namespace they created (`/var/run/netns/NAME`).
    pub netns: Option<PathBuf>,
}

impl Default for NetlinkNode {
    fn default() -> Self {
        NetlinkNode {
            wait: std::time::Duration::from_secs(10),
            netns: None,
        }
    }
}

impl NetlinkNode {
    /// A netlink handle in the node's namespace.
    pub(crate) fn handle(&self) -> vpcnet_datapath::Result<vpcnet_datapath::Handle> {
        match &self.netns {
            None => vpcnet_datapath::netns::connect(),
            Some(p) => vpcnet_datapath::netns::connect_in(&vpcnet_datapath::netns::open(p)?, p),
        }
    }
}

impl NodeNetwork for NetlinkNode {
    fn setup_eni<'a>(&'a self, eni: &'a NodeEni) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let handle = self.handle()?;
            let spec = eni.spec();
            // The interface may show up a moment after EC2 reports the attachment: poll for it
            // every ENI_POLL up to `wait`; any other error is final.
            let policy = vpcnet_backoff::Backoff::new(ENI_POLL, ENI_POLL)
                .with_jitter(vpcnet_backoff::Jitter::None)
                .with_deadline(self.wait);
            vpcnet_backoff::retry(
                &policy,
                &mut vpcnet_backoff::Cancel::never(),
                |e| matches!(e, vpcnet_datapath::Error::NotFound(_)),
                |_| vpcnet_datapath::node::setup_eni(&handle, &spec),
            )
            .await
            .map(|_| ())
            .map_err(|e| {
                anyhow::Error::new(e).context(format!(
                    "setting up ENI {} (device {})",
                    eni.mac, eni.device_number
                ))
            })
        })
    }

    fn pod_route_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>> {
        Box::pin(async move {
            let handle = self.handle()?;
            Ok(vpcnet_datapath::host::pod_route_ips(&handle).await?)
        })
    }

    fn pod_rule_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>> {
        Box::pin(async move {
            let handle = self.handle()?;
            Ok(vpcnet_datapath::host::pod_rule_ips(&handle).await?)
        })
    }

    fn link_names(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<String>>> {
        Box::pin(async move {
            let handle = self.handle()?;
            Ok(vpcnet_datapath::nl::links(&handle)
                .await?
                .into_iter()
                .map(|l| l.name)
                .collect())
        })
    }

    fn setup_node_firewall<'a>(
        &'a self,
        fw: &'a NodeFirewall,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let handle = self.handle()?;
            let link = vpcnet_datapath::node::find_link_by_mac(&handle, &fw.primary_mac)
                .await?
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no interface has the primary ENI's MAC {} (IMDS mac)",
                        fw.primary_mac
                    )
                })?;
            let spec = fw.spec(&link.name);
            vpcnet_datapath::firewall::apply(&handle, self.netns.as_deref(), &spec)
                .await
                .with_context(|| format!("node firewall on {}", link.name))?;
            tracing::debug!(interface = %link.name, external_snat = fw.external_snat, node_port_support = fw.node_port_support, "node firewall applied");
            Ok(())
        })
    }

    fn apply_policy<'a>(&'a self, script: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            vpcnet_datapath::policy::apply(self.netns.as_deref(), script)
                .await
                .context("network policy table inet vpcnet_policy")
        })
    }

    fn remove_policy(&self) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            vpcnet_datapath::policy::remove(self.netns.as_deref())
                .await
                .context("removing the network policy table inet vpcnet_policy")
        })
    }

    fn open_policy_events(
        &self,
        group: u16,
        timeout: std::time::Duration,
    ) -> anyhow::Result<vpcnet_datapath::nflog::NflogSocket> {
        vpcnet_datapath::nflog::NflogSocket::open(self.netns.as_deref(), group, timeout)
            .with_context(|| format!("policy event logs: NFLOG group {group}"))
    }

    fn policy_counters(
        &self,
    ) -> BoxFuture<'_, anyhow::Result<Vec<vpcnet_datapath::policy::RuleCounter>>> {
        Box::pin(async move {
            vpcnet_datapath::policy::counters(self.netns.as_deref())
                .await
                .context("reading the network policy table's counters")
        })
    }

    fn audit<'a>(
        &'a self,
        req: &'a AuditRequest,
    ) -> BoxFuture<'a, anyhow::Result<Option<AuditReport>>> {
        Box::pin(async move { netlink_audit(self, req).await.map(Some) })
    }

    fn tracks_connections(&self) -> bool {
        true
    }

    fn flush_conntrack<'a>(
        &'a self,
        ips: &'a BTreeSet<Ipv4Addr>,
    ) -> BoxFuture<'a, anyhow::Result<vpcnet_datapath::conntrack::FlushReport>> {
        Box::pin(async move {
            vpcnet_datapath::conntrack::flush(self.netns.as_deref(), ips)
                .await
                .context("deleting conntrack entries")
        })
    }

    fn removed_links(
        &self,
    ) -> anyhow::Result<Option<tokio::sync::mpsc::UnboundedReceiver<RemovedLink>>> {
        Ok(Some(vpcnet_datapath::link_watch::removed_links(
            self.netns.as_deref(),
        )?))
    }
}

/// The audit over netlink in the node's namespace ([`NetlinkNode::audit`]). A prerequisite
/// whose check itself fails is an unrepaired finding naming the error.
async fn netlink_audit(node: &NetlinkNode, req: &AuditRequest) -> anyhow::Result<AuditReport> {
    use vpcnet_datapath::prereq;
    let h = node.handle()?;
    let netns = node.netns.as_deref();
    let mut report = AuditReport::default();
    let failed = |kind: Kind, object: &str, e: &dyn std::fmt::Display| Finding {
        kind,
        object: object.to_string(),
        problem: format!("could not be checked: {e}"),
        unrepaired: Some(e.to_string()),
    };
    match prereq::check_forwarding(netns, req.repair).await {
        Ok(f) => report.node.extend(f),
        Err(e) => report
            .node
            .push(failed(Kind::IpForward, prereq::IP_FORWARD, &e)),
    }
    for eni in &req.enis {
        let spec = eni.spec();
        match prereq::check_eni(&h, &spec, req.repair).await {
            Ok(f) => report.node.extend(f),
            Err(e) => report.node.push(failed(Kind::EniTable, &eni.mac, &e)),
        }
    }
    let fw = &req.firewall;
    match vpcnet_datapath::node::find_link_by_mac(&h, &fw.primary_mac).await {
        Ok(Some(link)) => {
            match prereq::check_firewall(&h, netns, &fw.spec(&link.name), req.repair).await {
                Ok(f) => report.node.extend(f),
                Err(e) => report
                    .node
                    .push(failed(Kind::FirewallTable, "table ip vpcnet", &e)),
            }
        }
        Ok(None) => report.node.push(failed(
            Kind::FirewallTable,
            "table ip vpcnet",
            &format!("no interface has the primary ENI's MAC {}", fw.primary_mac),
        )),
        Err(e) => report
            .node
            .push(failed(Kind::FirewallTable, "table ip vpcnet", &e)),
    }
    let view = NodeView::read(&h).await?;
    for p in &req.pods {
        let repair = req.repair && (req.still_assigned)(p.ip);
        report
            .pods
            .push(vpcnet_datapath::audit::check_pod(&h, &view, p, repair).await);
    }
    Ok(report)
}
