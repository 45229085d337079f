//! Node-side setup of secondary ENIs and of the node firewall (SNAT, connmark), behind a trait
//! so emulator-only tests run without touching any network namespace.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::Ipv4Addr;
use std::pin::Pin;

use ipnet::Ipv4Net;

/// A boxed future (object-safe async trait methods).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One secondary ENI as the node must see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEni {
    pub mac: String,
    /// Device number = route table id.
    pub device_number: u32,
    pub subnet: Ipv4Net,
    pub primary_ip: std::net::Ipv4Addr,
    pub mtu: u32,
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

/// Programs the node for a secondary ENI: find its interface by MAC, set MTU, bring it up,
/// route table N (device number) with the subnet route and a default route via the subnet
/// gateway. Must be idempotent.
pub trait NodeNetwork: Send + Sync + 'static {
    fn setup_eni<'a>(&'a self, eni: &'a NodeEni) -> BoxFuture<'a, anyhow::Result<()>>;

    /// IPv4 addresses the node currently routes to pods (main-table /32 routes via a
    /// device). An assignment whose address is missing here has no pod datapath: the plugin's
    /// DEL ran while the agent was down, so the agent reclaims the address.
    fn pod_route_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>>;

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
}

/// The real implementation over netlink in the agent's network namespace
/// (`vpcnet_datapath::node::setup_eni`). The interface may appear a moment after EC2 reports
/// the attachment, so a missing interface is retried for up to `wait`.
pub struct NetlinkNode {
    pub wait: std::time::Duration,
}

impl Default for NetlinkNode {
    fn default() -> Self {
        NetlinkNode {
            wait: std::time::Duration::from_secs(10),
        }
    }
}

impl NodeNetwork for NetlinkNode {
    fn setup_eni<'a>(&'a self, eni: &'a NodeEni) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let handle = vpcnet_datapath::netns::connect()?;
            let spec = vpcnet_datapath::node::EniSpec {
                mac: eni.mac.clone(),
                device_number: eni.device_number,
                subnet: eni.subnet,
                mtu: eni.mtu,
                primary_ip: Some(eni.primary_ip),
            };
            let deadline = tokio::time::Instant::now() + self.wait;
            loop {
                match vpcnet_datapath::node::setup_eni(&handle, &spec).await {
                    Ok(_) => return Ok(()),
                    Err(vpcnet_datapath::Error::NotFound(m))
                        if tokio::time::Instant::now() < deadline =>
                    {
                        tracing::debug!("ENI interface not there yet: {m}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    Err(e) => {
                        return Err(anyhow::anyhow!(
                            "setting up ENI {} (device {}): {e}",
                            eni.mac,
                            eni.device_number
                        ))
                    }
                }
            }
        })
    }

    fn pod_route_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>> {
        Box::pin(async move {
            let handle = vpcnet_datapath::netns::connect()?;
            Ok(vpcnet_datapath::host::pod_route_ips(&handle).await?)
        })
    }

    fn link_names(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<String>>> {
        Box::pin(async move {
            let handle = vpcnet_datapath::netns::connect()?;
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
            let handle = vpcnet_datapath::netns::connect()?;
            let link = vpcnet_datapath::node::find_link_by_mac(&handle, &fw.primary_mac)
                .await?
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no interface has the primary ENI's MAC {} (IMDS mac)",
                        fw.primary_mac
                    )
                })?;
            let spec = fw.spec(&link.name);
            vpcnet_datapath::firewall::apply(&handle, None, &spec)
                .await
                .map_err(|e| anyhow::anyhow!("node firewall on {}: {e}", link.name))?;
            tracing::debug!(interface = %link.name, external_snat = fw.external_snat, node_port_support = fw.node_port_support, "node firewall applied");
            Ok(())
        })
    }
}
