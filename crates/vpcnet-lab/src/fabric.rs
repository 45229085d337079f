//! The VPC fabric inside the lab's `vpc` namespace: one Linux bridge per subnet with the
//! subnet's router (first address) on it, a dummy interface holding the IMDS address
//! 169.254.169.254 on its loopback, and one veth pair per attached ENI (one end on the subnet's bridge, the
//! other moved into the node's namespace as `eth<device index>` with the ENI's MAC).
//!
//! Routing of ENI-owned addresses mirrors the VPC's: the fabric does not learn who owns an
//! address by ARP; each secondary IP (/32) and prefix (/28) gets a route to the subnet's bridge
//! and a permanent neighbour entry per address pointing at the owning ENI's MAC. The bridges
//! answer ARP for the whole subnet (proxy ARP on the same port, as the VPC router does), so a
//! node reaches any address of the subnet through the fabric.

use std::net::Ipv4Addr;

use anyhow::{Context, Result};
use ipnet::Ipv4Net;

use crate::cmd::{self, ip_in, ip_in_quiet};

/// IMDS link-local address, as on EC2.
pub const IMDS_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
/// Interface holding [`IMDS_ADDR`] in the VPC namespace (its loopback: the address is local to
/// the fabric, like the VPC's own link-local services).
pub const IMDS_LINK: &str = "lo";

/// The subnet's router address: network address + 1 (EC2's reserved "VPC router").
pub fn gateway(subnet: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(subnet.network()) + 1)
}

/// Bridge name of the subnet at `index` (0-based) in the VPC namespace: "br0", "br1", ...
pub fn bridge_name(index: usize) -> String {
    format!("br{index}")
}

/// Bridge-side veth name of an ENI: "p" + the last 14 characters of the ENI id (interface
/// names are at most 15 bytes; ENI ids end in 17 hex digits, unique per emulator).
pub fn port_name(eni_id: &str) -> String {
    let tail: String = eni_id
        .chars()
        .rev()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(14)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("p{tail}")
}

/// The node-side interface name for an ENI at `device_index` on network card 0: "eth0",
/// "eth1", ... ([`card_link_name`] for the other cards).
pub fn node_link_name(device_index: u32) -> String {
    card_link_name(0, device_index)
}

/// The node-side interface name for an ENI at `device_index` on `network_card`: `eth<d>` on
/// card 0, `c<card>eth<d>` on the others (device indexes count per card). The agent finds
/// interfaces by MAC, as on EC2, where the names follow the PCI slots.
pub fn card_link_name(network_card: u32, device_index: u32) -> String {
    if network_card == 0 {
        format!("eth{device_index}")
    } else {
        format!("c{network_card}eth{device_index}")
    }
}

/// Every /32 address covered by `cidr` (one for a /32, sixteen for a /28).
pub fn addresses(cidr: Ipv4Net) -> Vec<Ipv4Addr> {
    cidr.hosts_all()
}

trait HostsAll {
    fn hosts_all(&self) -> Vec<Ipv4Addr>;
}

impl HostsAll for Ipv4Net {
    fn hosts_all(&self) -> Vec<Ipv4Addr> {
        let start = u32::from(self.network());
        let n = 1u64 << (32 - self.prefix_len());
        (0..n).map(|i| Ipv4Addr::from(start + i as u32)).collect()
    }
}

/// Builds the fabric in the (new, empty) VPC namespace `vpc`: forwarding on, redirects off,
/// one bridge per subnet with its gateway address and proxy ARP, and the IMDS address.
pub fn setup_vpc(vpc: &str, subnets: &[Ipv4Net]) -> Result<()> {
    cmd::sysctl_in(vpc, "net.ipv4.ip_forward", "1")?;
    cmd::sysctl_in(vpc, "net.ipv4.conf.all.send_redirects", "0")?;
    cmd::sysctl_in(vpc, "net.ipv4.conf.default.send_redirects", "0")?;
    for (i, subnet) in subnets.iter().enumerate() {
        let br = bridge_name(i);
        let gw = format!("{}/{}", gateway(*subnet), subnet.prefix_len());
        // A fixed MAC: otherwise the bridge takes its lowest port's MAC, and each change of
        // address flushes its neighbour table, permanent entries included.
        let mac = format!("02:00:0a:00:00:{:02x}", i + 1);
        ip_in(
            vpc,
            &["link", "add", &br, "address", &mac, "type", "bridge"],
        )?;
        ip_in(vpc, &["addr", "add", &gw, "dev", &br])?;
        cmd::sysctl_in(vpc, &format!("net.ipv4.conf.{br}.proxy_arp"), "1")?;
        cmd::sysctl_in(vpc, &format!("net.ipv4.conf.{br}.proxy_arp_pvlan"), "1")?;
        cmd::sysctl_in(vpc, &format!("net.ipv4.neigh.{br}.proxy_delay"), "0")?;
        ip_in(vpc, &["link", "set", &br, "up"])?;
    }
    ip_in(
        vpc,
        &["addr", "add", &format!("{IMDS_ADDR}/32"), "dev", IMDS_LINK],
    )?;
    cmd::nft_in(vpc, SOURCE_DEST_CHECK)?;
    Ok(())
}

/// nftables table of the VPC namespace: EC2's source/destination check. An IPv4 packet that
/// enters the fabric from an ENI port is dropped unless its source address is owned by that
/// ENI (set `owned` holds `port . address` for each ENI's primary IP, secondary IPs and the
/// addresses of its prefixes; [`route`] and [`unroute`] keep it in step).
pub const SOURCE_DEST_CHECK: &str = r#"table bridge vpcnet {
  set owned { type ifname . ipv4_addr; }
  chain source_dest_check {
    type filter hook prerouting priority 0; policy accept;
    iifname "p*" ether type ip iifname . ip saddr != @owned counter drop
  }
}
"#;

/// nftables table of the VPC namespace that makes ENIs reach each other only through the VPC
/// router, as on EC2 (no layer-2 path between ENIs, so security groups and routes always
/// apply): frames bridged from one ENI port to another are dropped; ARP is answered by the
/// bridge's proxy ARP.
pub const ISOLATE_ENIS: &str = r#"table bridge vpcnet_isolate {
  chain forward {
    type filter hook forward priority 0; policy accept;
    iifname "p*" oifname "p*" counter drop
  }
}
"#;

/// Makes ENIs of the same subnet reach each other only through the router ([`ISOLATE_ENIS`]).
pub fn isolate_enis(vpc: &str) -> Result<()> {
    cmd::nft_in(vpc, ISOLATE_ENIS).context("isolating ENI ports")
}

/// Name of the VPC-side link of the outside network in the VPC namespace.
pub const OUTSIDE_LINK: &str = "vout";

/// Connects the (new, empty) namespace `outside` to the VPC router as a network outside the
/// VPC (on-premises over a VPN): a veth pair, VPC side [`OUTSIDE_LINK`] with the network's
/// first address, outside side `eth0` with `host`, default route via the VPC side.
pub fn connect_outside(vpc: &str, outside: &str, cidr: Ipv4Net, host: Ipv4Addr) -> Result<()> {
    ip_in(
        vpc,
        &[
            "link",
            "add",
            OUTSIDE_LINK,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            outside,
        ],
    )
    .context("creating the outside network's link")?;
    let gw = gateway(cidr);
    ip_in(
        vpc,
        &[
            "addr",
            "add",
            &format!("{gw}/{}", cidr.prefix_len()),
            "dev",
            OUTSIDE_LINK,
        ],
    )?;
    ip_in(vpc, &["link", "set", OUTSIDE_LINK, "up"])?;
    ip_in(
        outside,
        &[
            "addr",
            "add",
            &format!("{host}/{}", cidr.prefix_len()),
            "dev",
            "eth0",
        ],
    )?;
    ip_in(outside, &["link", "set", "eth0", "up"])?;
    ip_in(outside, &["link", "set", "lo", "up"])?;
    ip_in(
        outside,
        &[
            "route",
            "add",
            "default",
            "via",
            &gw.to_string(),
            "dev",
            "eth0",
        ],
    )?;
    Ok(())
}

/// Index of the subnet (and so the bridge) that contains `cidr`, if any.
pub fn subnet_index(subnets: &[Ipv4Net], cidr: Ipv4Net) -> Option<usize> {
    subnets.iter().position(|s| s.contains(&cidr))
}

/// An ENI as the fabric sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniPort {
    /// `eni-...`
    pub eni_id: String,
    /// `02:..` MAC of the ENI (set on the node-side interface).
    pub mac: String,
    /// Bridge of the ENI's subnet in the VPC namespace.
    pub bridge: String,
    /// Node namespace the ENI is attached to.
    pub node_netns: String,
    /// EC2 device index (node-side interface [`card_link_name`]).
    pub device_index: u32,
    /// EC2 network card index.
    pub network_card: u32,
}

/// Creates the ENI's veth pair: bridge side [`port_name`] enslaved to its bridge and up; node
/// side `eth<device index>` with the ENI's MAC, created directly in the node namespace and left
/// down and unconfigured (the agent configures secondary ENIs; [`configure_primary`] does eth0).
/// Idempotent: an existing port is replaced.
pub fn plug(vpc: &str, eni: &EniPort) -> Result<()> {
    let port = port_name(&eni.eni_id);
    ip_in_quiet(vpc, &["link", "del", &port]);
    let node_link = card_link_name(eni.network_card, eni.device_index);
    ip_in_quiet(&eni.node_netns, &["link", "del", &node_link]);
    ip_in(
        vpc,
        &[
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            &node_link,
            "address",
            &eni.mac,
            "netns",
            &eni.node_netns,
        ],
    )
    .with_context(|| format!("plugging {} into {}", eni.eni_id, eni.node_netns))?;
    ip_in(vpc, &["link", "set", &port, "master", &eni.bridge])?;
    ip_in(vpc, &["link", "set", &port, "up"])?;
    // The bridge forwards frames for the ENI's MAC to this port without waiting to learn it.
    ip_in(
        vpc,
        &[
            "link",
            "set",
            &port,
            "type",
            "bridge_slave",
            "learning",
            "off",
        ],
    )?;
    cmd::run(
        "bridge",
        &[
            "-n", vpc, "fdb", "replace", &eni.mac, "dev", &port, "master", "static",
        ],
    )?;
    Ok(())
}

/// Removes the ENI's veth pair (both ends). Idempotent.
pub fn unplug(vpc: &str, eni_id: &str) {
    ip_in_quiet(vpc, &["link", "del", &port_name(eni_id)]);
}

/// Configures the primary ENI's interface in the node namespace as the instance's OS does at
/// boot (DHCP on EC2): `eth0` up with `ip/prefix_len`, default route via the subnet router.
pub fn configure_primary(node: &str, ip: Ipv4Addr, subnet: Ipv4Net) -> Result<()> {
    let link = node_link_name(0);
    let addr = format!("{ip}/{}", subnet.prefix_len());
    ip_in(node, &["addr", "replace", &addr, "dev", &link])?;
    ip_in(node, &["link", "set", &link, "up"])?;
    ip_in(
        node,
        &[
            "route",
            "replace",
            "default",
            "via",
            &gateway(subnet).to_string(),
            "dev",
            &link,
        ],
    )?;
    Ok(())
}

/// Routes `cidrs` (each a /32 or /28 owned by the ENI with `mac` behind bridge port `port`)
/// through `bridge`: a route for each CIDR, a permanent neighbour entry for each of its
/// addresses, and each address in the source/destination check's `owned` set for `port`. One
/// `ip -batch` and one nft transaction for all of them, however many (an attachment or an
/// assignment of a whole pool is one event, and a fleet of nodes makes thousands).
pub fn route(vpc: &str, bridge: &str, port: &str, cidrs: &[Ipv4Net], mac: &str) -> Result<()> {
    if cidrs.is_empty() {
        return Ok(());
    }
    let mut lines = Vec::new();
    for cidr in cidrs {
        lines.push(format!("route replace {cidr} dev {bridge}"));
        lines.extend(
            addresses(*cidr)
                .into_iter()
                .map(|a| format!("neigh replace {a} lladdr {mac} dev {bridge} nud permanent")),
        );
    }
    let what = cidr_list(cidrs);
    let (ok, err) = cmd::ip_batch(vpc, &lines)?;
    if !ok {
        anyhow::bail!("routing {what} to {mac} on {bridge}: {}", err.trim());
    }
    cmd::nft_in(vpc, &owned_elements("add", port, cidrs))
        .with_context(|| format!("allowing {what} as a source on {port}"))?;
    Ok(())
}

fn cidr_list(cidrs: &[Ipv4Net]) -> String {
    cidrs
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn owned_elements(verb: &str, port: &str, cidrs: &[Ipv4Net]) -> String {
    let elems: Vec<String> = cidrs
        .iter()
        .flat_map(|c| addresses(*c))
        .map(|a| format!("\"{port}\" . {a}"))
        .collect();
    format!(
        "{verb} element bridge vpcnet owned {{ {} }}\n",
        elems.join(", ")
    )
}

/// Removes what [`route`] added for `cidrs`. Idempotent (missing entries are fine).
pub fn unroute(vpc: &str, bridge: &str, port: &str, cidrs: &[Ipv4Net]) {
    if cidrs.is_empty() {
        return;
    }
    let mut lines = Vec::new();
    for cidr in cidrs {
        lines.push(format!("route del {cidr} dev {bridge}"));
        lines.extend(
            addresses(*cidr)
                .into_iter()
                .map(|a| format!("neigh del {a} dev {bridge}")),
        );
    }
    let _ = cmd::ip_batch(vpc, &lines);
    // Adding first makes the delete succeed whether or not the elements were there.
    let batch = owned_elements("add", port, cidrs) + &owned_elements("delete", port, cidrs);
    let _ = cmd::nft_in(vpc, &batch);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_is_first_address() {
        assert_eq!(
            gateway("10.0.1.0/24".parse().unwrap()),
            Ipv4Addr::new(10, 0, 1, 1)
        );
    }

    #[test]
    fn port_names_fit_and_differ() {
        let a = port_name("eni-0123456789abcdef0");
        let b = port_name("eni-0123456789abcdef1");
        assert!(a.len() <= 15, "{a}");
        assert_ne!(a, b);
        assert_eq!(a, "p3456789abcdef0");
    }

    #[test]
    fn prefix_covers_sixteen_addresses() {
        let v = addresses("10.0.1.32/28".parse().unwrap());
        assert_eq!(v.len(), 16);
        assert_eq!(v[0], Ipv4Addr::new(10, 0, 1, 32));
        assert_eq!(v[15], Ipv4Addr::new(10, 0, 1, 47));
        assert_eq!(addresses("10.0.1.5/32".parse().unwrap()).len(), 1);
    }

    #[test]
    fn subnet_lookup() {
        let s: Vec<Ipv4Net> = vec![
            "10.0.1.0/24".parse().unwrap(),
            "10.0.2.0/24".parse().unwrap(),
        ];
        assert_eq!(subnet_index(&s, "10.0.2.16/28".parse().unwrap()), Some(1));
        assert_eq!(subnet_index(&s, "10.0.3.1/32".parse().unwrap()), None);
    }
}
