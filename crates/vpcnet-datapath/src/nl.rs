//! Small typed views over netlink dumps (links, IPv4 addresses, routes, rules, neighbours), used
//! by the setup, teardown and verification code and by tests.

use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use rtnetlink::packet_route::{
    address::AddressAttribute,
    link::{LinkAttribute, LinkFlags, LinkMessage},
    neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourState},
    route::{RouteAddress, RouteAttribute, RouteMessage, RouteScope},
    rule::{RuleAttribute, RuleMessage},
    AddressFamily,
};
use rtnetlink::{Handle, IpVersion, RouteMessageBuilder};

use crate::error::{errno, errnos};
use crate::{error::nl, Result};

/// A network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// Hardware address (6 bytes for Ethernet).
    pub mac: Vec<u8>,
    /// MTU in bytes.
    pub mtu: u32,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// IFLA_LINK: for a veth, the peer's index (in the peer's namespace).
    pub peer_index: Option<u32>,
}

impl Link {
    fn from_msg(m: &LinkMessage) -> Self {
        let mut l = Link {
            index: m.header.index,
            name: String::new(),
            mac: Vec::new(),
            mtu: 0,
            up: m.header.flags.contains(LinkFlags::Up),
            peer_index: None,
        };
        for a in &m.attributes {
            match a {
                LinkAttribute::IfName(n) => l.name = n.clone(),
                LinkAttribute::Address(mac) => l.mac = mac.clone(),
                LinkAttribute::Mtu(mtu) => l.mtu = *mtu,
                LinkAttribute::Link(i) => l.peer_index = Some(*i),
                _ => {}
            }
        }
        l
    }
}

/// An IPv4 route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination network address (0.0.0.0 for default).
    pub dst: Ipv4Addr,
    /// Destination prefix length (0 for default).
    pub dst_len: u8,
    pub gateway: Option<Ipv4Addr>,
    /// Output interface index.
    pub oif: Option<u32>,
    /// Route table id (254 = main).
    pub table: u32,
    pub scope: RouteScope,
    /// The raw message (to delete the route exactly).
    pub msg: RouteMessage,
}

/// An IPv4 policy rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub priority: u32,
    /// `from` selector as (address, prefix length).
    pub src: Option<(Ipv4Addr, u8)>,
    /// `to` selector as (address, prefix length).
    pub dst: Option<(Ipv4Addr, u8)>,
    /// Lookup table id (254 = main).
    pub table: u32,
    /// `fwmark` selector value, if any.
    pub fwmark: Option<u32>,
    /// `fwmark` selector mask, if any (`fwmark 0x80/0x80` has mark and mask 0x80).
    pub fwmask: Option<u32>,
    /// The raw message (to delete the rule exactly).
    pub msg: RuleMessage,
}

/// An IPv4 neighbour entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub ifindex: u32,
    pub ip: Ipv4Addr,
    pub mac: Vec<u8>,
    pub permanent: bool,
}

/// All links of the namespace.
pub async fn links(h: &Handle) -> Result<Vec<Link>> {
    let msgs: Vec<LinkMessage> = nl(h.link().get().execute().try_collect().await, || {
        "list links".into()
    })?;
    Ok(msgs.iter().map(Link::from_msg).collect())
}

/// The link named `name`, `None` when it does not exist.
pub async fn link_by_name(h: &Handle, name: &str) -> Result<Option<Link>> {
    let r: Result<Vec<LinkMessage>, _> = h
        .link()
        .get()
        .match_name(name.to_string())
        .execute()
        .try_collect()
        .await;
    match r {
        Ok(m) => Ok(m.first().map(Link::from_msg)),
        Err(e) if matches!(errno(&e), Some(errnos::ENODEV) | Some(errnos::ENOENT)) => Ok(None),
        Err(e) => nl(Err(e), || format!("get link {name}")),
    }
}

/// IPv4 addresses (address, prefix length) on interface `index`.
pub async fn addrs_v4(h: &Handle, index: u32) -> Result<Vec<(Ipv4Addr, u8)>> {
    let msgs: Vec<_> = nl(
        h.address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await,
        || format!("list addresses of link {index}"),
    )?;
    Ok(msgs
        .iter()
        .filter(|m| m.header.index == index)
        .flat_map(|m| {
            m.attributes.iter().filter_map(move |a| match a {
                AddressAttribute::Local(IpAddr::V4(ip)) => Some((*ip, m.header.prefix_len)),
                _ => None,
            })
        })
        .collect())
}

/// IPv4 routes of every table.
pub async fn routes_v4(h: &Handle) -> Result<Vec<Route>> {
    let mut filter = RouteMessageBuilder::<Ipv4Addr>::new().build();
    // Table 0 in the request = dump all tables.
    filter.header.table = 0;
    let msgs: Vec<RouteMessage> = nl(h.route().get(filter).execute().try_collect().await, || {
        "list routes".into()
    })?;
    Ok(msgs.into_iter().map(route_view).collect())
}

fn route_view(m: RouteMessage) -> Route {
    let mut r = Route {
        dst: Ipv4Addr::UNSPECIFIED,
        dst_len: m.header.destination_prefix_length,
        gateway: None,
        oif: None,
        table: m.header.table as u32,
        scope: m.header.scope,
        msg: m.clone(),
    };
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(RouteAddress::Inet(ip)) => r.dst = *ip,
            RouteAttribute::Gateway(RouteAddress::Inet(ip)) => r.gateway = Some(*ip),
            RouteAttribute::Oif(i) => r.oif = Some(*i),
            RouteAttribute::Table(t) => r.table = *t,
            _ => {}
        }
    }
    r
}

/// IPv4 policy rules.
pub async fn rules_v4(h: &Handle) -> Result<Vec<Rule>> {
    let msgs: Vec<RuleMessage> = nl(
        h.rule().get(IpVersion::V4).execute().try_collect().await,
        || "list rules".into(),
    )?;
    Ok(msgs
        .into_iter()
        .map(|m| {
            let mut r = Rule {
                priority: 0,
                src: None,
                dst: None,
                table: m.header.table as u32,
                fwmark: None,
                fwmask: None,
                msg: m.clone(),
            };
            for a in &m.attributes {
                match a {
                    RuleAttribute::Priority(p) => r.priority = *p,
                    RuleAttribute::Source(IpAddr::V4(ip)) => r.src = Some((*ip, m.header.src_len)),
                    RuleAttribute::Destination(IpAddr::V4(ip)) => {
                        r.dst = Some((*ip, m.header.dst_len))
                    }
                    RuleAttribute::Table(t) => r.table = *t,
                    RuleAttribute::FwMark(m) => r.fwmark = Some(*m),
                    RuleAttribute::FwMask(m) => r.fwmask = Some(*m),
                    _ => {}
                }
            }
            r
        })
        .collect())
}

/// IPv4 neighbour entries of every interface.
pub async fn neighbours_v4(h: &Handle) -> Result<Vec<Neighbour>> {
    let msgs: Vec<_> = nl(
        h.neighbours()
            .get()
            .set_address_family(AddressFamily::Inet)
            .execute()
            .try_collect()
            .await,
        || "list neighbours".into(),
    )?;
    Ok(msgs
        .iter()
        .filter_map(|m| {
            let mut ip = None;
            let mut mac = Vec::new();
            for a in &m.attributes {
                match a {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(i)) => ip = Some(*i),
                    NeighbourAttribute::LinkLayerAddress(l) => mac = l.clone(),
                    _ => {}
                }
            }
            Some(Neighbour {
                ifindex: m.header.ifindex,
                ip: ip?,
                mac,
                permanent: m.header.state == NeighbourState::Permanent,
            })
        })
        .collect())
}

/// Deletes link `index`; a link that is already gone is not an error.
pub async fn delete_link(h: &Handle, index: u32, name: &str) -> Result<()> {
    match h.link().del(index).execute().await {
        Err(e) if matches!(errno(&e), Some(errnos::ENODEV) | Some(errnos::ENOENT)) => Ok(()),
        r => nl(r, || format!("delete link {name}")),
    }
}

/// Deletes a rule; one that is already gone is not an error.
pub async fn delete_rule(h: &Handle, rule: &Rule) -> Result<()> {
    match h.rule().del(rule.msg.clone()).execute().await {
        Err(e) if matches!(errno(&e), Some(errnos::ENOENT) | Some(errnos::ESRCH)) => Ok(()),
        r => nl(r, || format!("delete rule priority {}", rule.priority)),
    }
}

/// Deletes a route; one that is already gone is not an error.
pub async fn delete_route(h: &Handle, route: &Route) -> Result<()> {
    match h.route().del(route.msg.clone()).execute().await {
        Err(e) if matches!(errno(&e), Some(errnos::ENOENT) | Some(errnos::ESRCH)) => Ok(()),
        r => nl(r, || {
            format!("delete route {}/{}", route.dst, route.dst_len)
        }),
    }
}
