//! Node-side setup of secondary ENIs, behind a trait so emulator-only tests run without
//! touching any network namespace.

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

/// Programs the node for a secondary ENI: find its interface by MAC, set MTU, bring it up,
/// route table N (device number) with the subnet route and a default route via the subnet
/// gateway. Must be idempotent.
pub trait NodeNetwork: Send + Sync + 'static {
    fn setup_eni<'a>(&'a self, eni: &'a NodeEni) -> BoxFuture<'a, anyhow::Result<()>>;

    /// IPv4 addresses the node currently routes to pods (main-table /32 routes via a
    /// device). An assignment whose address is missing here has no pod datapath: the plugin's
    /// DEL ran while the agent was down, so the agent reclaims the address.
    fn pod_route_ips(&self) -> BoxFuture<'_, anyhow::Result<BTreeSet<Ipv4Addr>>>;
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
}
