//! Node prerequisites of pod networking, checked (and repaired where safe) by the periodic
//! audit: IPv4 forwarding, each secondary ENI's interface and route table, vpcnet's nftables
//! table and `rp_filter` of the primary interface. Each check acts only in the namespace it is
//! given (the agent's own; tests pass their namespaces).

use std::path::Path;

use rtnetlink::Handle;

use crate::audit::{finding, not_repairing, Finding, Kind};
use crate::firewall::{FirewallSpec, TABLE};
use crate::node::{self, EniSpec};
#[cfg(doc)]
use crate::Error;
use crate::{sysctl, Result};

/// The forwarding sysctl: without it the node routes nothing to or from its pods.
pub const IP_FORWARD: &str = "net.ipv4.ip_forward";

/// Checks `net.ipv4.ip_forward` of `netns` (`None`: the caller's namespace) and, with
/// `repair`, sets it to 1 (then reads it back: a hardened image may pin it).
///
/// Errors: [`Error::Io`] when the sysctl cannot be read.
pub async fn check_forwarding(netns: Option<&Path>, repair: bool) -> Result<Option<Finding>> {
    let now = sysctl::read(netns, IP_FORWARD).await?;
    if now == "1" {
        return Ok(None);
    }
    let problem = format!("IPv4 forwarding is disabled ({IP_FORWARD} = {now}): pods are cut off");
    let r = if repair {
        match sysctl::write(netns, IP_FORWARD, "1").await {
            Err(e) => Err(format!("{e}: enable it ({IP_FORWARD}=1) in the node's sysctl settings")),
            Ok(()) => match sysctl::read(netns, IP_FORWARD).await?.as_str() {
                "1" => Ok(()),
                v => Err(format!("{IP_FORWARD} reads {v} after writing 1: something on the node pins it; enable it in the node's sysctl settings")),
            },
        }
    } else {
        Err(not_repairing())
    };
    Ok(Some(finding(Kind::IpForward, IP_FORWARD, problem, r)))
}

/// Checks one secondary ENI ([`node::verify_eni`]): no interface with its MAC is an
/// [`Kind::EniInterface`] finding that is never repaired here (the ENI was detached, or is not
/// up yet; the agent re-describes); any other drift (MTU, down, address, the routes of its table [`node::eni_route_table`]) is an
/// [`Kind::EniTable`] finding repaired with [`node::setup_eni`].
///
/// Errors: [`Error::Invalid`] for a bad spec, [`Error::Netlink`] when a dump fails.
pub async fn check_eni(h: &Handle, spec: &EniSpec, repair: bool) -> Result<Vec<Finding>> {
    if node::find_link_by_mac(h, &spec.mac).await?.is_none() {
        return Ok(vec![Finding {
            kind: Kind::EniInterface,
            object: spec.mac.clone(),
            problem: format!(
                "no interface has the MAC {} of the ENI at device {}",
                spec.mac, spec.device_number
            ),
            unrepaired: Some("the ENI is detached (or its device is not up yet): its addresses are not handed out and EC2 is asked again".into()),
        }]);
    }
    let drift = node::verify_eni(h, spec).await?;
    if drift.is_empty() {
        return Ok(vec![]);
    }
    let r = if repair {
        node::setup_eni(h, spec)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    } else {
        Err(not_repairing())
    };
    Ok(vec![finding(
        Kind::EniTable,
        &format!("table {}", spec.table()),
        drift.join("; "),
        r,
    )])
}

/// Whether vpcnet's nftables table `ip vpcnet` exists in `netns` (`nft list table`, through
/// `nsenter` for another namespace).
///
/// Errors: [`Error::Io`] when `nft` cannot run or fails for another reason than a missing
/// table.
pub async fn firewall_table_present(netns: Option<&Path>) -> Result<bool> {
    Ok(crate::nft::list(netns, &["list", "table", "ip", TABLE])
        .await?
        .is_some())
}

/// Checks the node firewall of `spec`: the table `ip vpcnet` exists and, with node port
/// support, `rp_filter` of the primary interface is 2 (loose). With `repair` any drift is
/// repaired by re-applying the firewall ([`crate::firewall::apply`]).
///
/// Errors: [`Error::Io`] when `nft` or the sysctl cannot be read.
pub async fn check_firewall(
    h: &Handle,
    netns: Option<&Path>,
    spec: &FirewallSpec,
    repair: bool,
) -> Result<Vec<Finding>> {
    let mut wrong = Vec::new();
    if !firewall_table_present(netns).await? {
        wrong.push((
            Kind::FirewallTable,
            format!("table ip {TABLE}"),
            format!("nftables table ip {TABLE} (SNAT, connmark) is missing"),
        ));
    }
    if spec.node_port_support {
        let key = format!(
            "/proc/sys/net/ipv4/conf/{}/rp_filter",
            spec.primary_interface
        );
        let now = sysctl::read(netns, &key).await?;
        if now != "2" {
            wrong.push((
                Kind::RpFilter,
                key,
                format!(
                    "rp_filter of {} is {now}, want 2 (loose) for node port traffic",
                    spec.primary_interface
                ),
            ));
        }
    }
    if wrong.is_empty() {
        return Ok(vec![]);
    }
    let r = if repair {
        crate::firewall::apply(h, netns, spec)
            .await
            .map_err(|e| e.to_string())
    } else {
        Err(not_repairing())
    };
    Ok(wrong
        .into_iter()
        .map(|(kind, object, problem)| finding(kind, &object, problem, r.clone()))
        .collect())
}
