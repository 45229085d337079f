//! Node side of a pod: the /32 route to the pod via its host veth and the policy rules
//! `to <ip> lookup main` (priority 512) and `from <ip> lookup <ENI table>` (priority 1536).

use std::net::Ipv4Addr;

use rtnetlink::packet_route::route::RouteScope;
use rtnetlink::packet_route::rule::RuleAction;
use rtnetlink::{Handle, RouteMessageBuilder};

use crate::error::{errno, errnos, nl};
use crate::nl::{delete_route, delete_rule, link_by_name, routes_v4, rules_v4, Route, Rule};
use crate::{Result, MAIN_TABLE, PRIO_FROM_POD, PRIO_TO_POD};

/// Adds the node side of a pod: `<ip>/32 dev <host veth> scope link` in main (replace),
/// rule `to <ip>/32 lookup main` at 512 and, when `route_table != 0`, rule
/// `from <ip>/32 lookup <route_table>` at 1536. Rules that already exist are kept (idempotent).
///
/// Errors: [`crate::Error::Netlink`] naming the failed step.
pub async fn add(h: &Handle, ip: Ipv4Addr, host_index: u32, route_table: u32) -> Result<()> {
    let route = RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(ip, 32)
        .output_interface(host_index)
        .scope(RouteScope::Link)
        .build();
    let route = async {
        nl(h.route().add(route).replace().execute().await, || {
            format!("add route {ip}/32 via host veth")
        })
    };
    let to_rule = async {
        let r = h
            .rule()
            .add()
            .v4()
            .destination_prefix(ip, 32)
            .table_id(MAIN_TABLE)
            .priority(PRIO_TO_POD)
            .action(RuleAction::ToTable)
            .execute()
            .await;
        ok_if_exists(r, || {
            format!("add rule to {ip} lookup main priority {PRIO_TO_POD}")
        })
    };
    let from_rule = async {
        if route_table == 0 {
            return Ok(());
        }
        let r = h
            .rule()
            .add()
            .v4()
            .source_prefix(ip, 32)
            .table_id(route_table)
            .priority(PRIO_FROM_POD)
            .action(RuleAction::ToTable)
            .execute()
            .await;
        ok_if_exists(r, || {
            format!("add rule from {ip} lookup {route_table} priority {PRIO_FROM_POD}")
        })
    };
    let (a, b, c) = futures::join!(route, to_rule, from_rule);
    a.and(b).and(c)
}

fn ok_if_exists(r: Result<(), rtnetlink::Error>, what: impl FnOnce() -> String) -> Result<()> {
    match r {
        Err(e) if errno(&e) == Some(errnos::EEXIST) => Ok(()),
        r => nl(r, what),
    }
}

/// Whether `rule` is one of ours for `ip`: `to ip/32` at 512 or `from ip/32` at 1536.
pub fn is_pod_rule(rule: &Rule, ip: Ipv4Addr) -> bool {
    (rule.priority == PRIO_TO_POD && rule.dst == Some((ip, 32)) && rule.src.is_none())
        || (rule.priority == PRIO_FROM_POD && rule.src == Some((ip, 32)) && rule.dst.is_none())
}

/// The pod rules present for `ip` (see [`is_pod_rule`]).
pub async fn pod_rules(h: &Handle, ip: Ipv4Addr) -> Result<Vec<Rule>> {
    Ok(rules_v4(h)
        .await?
        .into_iter()
        .filter(|r| is_pod_rule(r, ip))
        .collect())
}

/// Main-table /32 routes to `ip`.
pub async fn pod_routes(h: &Handle, ip: Ipv4Addr) -> Result<Vec<Route>> {
    Ok(routes_v4(h)
        .await?
        .into_iter()
        .filter(|r| r.table == MAIN_TABLE && r.dst == ip && r.dst_len == 32)
        .collect())
}

/// Every IPv4 address the node routes to a pod: main-table /32 routes with an output device
/// (`<ip>/32 dev <host veth>`, as [`add`] creates them). The agent uses this to find
/// assignments whose pod datapath is gone (DEL ran while the agent was down).
///
/// Errors: [`crate::Error::Netlink`] when the route dump fails.
pub async fn pod_route_ips(h: &Handle) -> Result<std::collections::BTreeSet<Ipv4Addr>> {
    Ok(routes_v4(h)
        .await?
        .into_iter()
        .filter(|r| r.table == MAIN_TABLE && r.dst_len == 32 && r.oif.is_some())
        .map(|r| r.dst)
        .collect())
}

/// Every IPv4 address with a pod rule `to <ip>/32 lookup main` at 512 (as [`add`] creates
/// them): evidence at the agent's start that a pod holds the address even when its route is
/// gone.
pub async fn pod_rule_ips(h: &Handle) -> Result<std::collections::BTreeSet<Ipv4Addr>> {
    Ok(rules_v4(h)
        .await?
        .into_iter()
        .filter(|r| r.priority == PRIO_TO_POD && r.src.is_none())
        .filter_map(|r| r.dst.filter(|(_, len)| *len == 32).map(|(ip, _)| ip))
        .collect())
}

/// The pod IP a host veth routes to: the destination of a main-table /32 route via it.
pub async fn ip_of_host_veth(h: &Handle, host_index: u32) -> Result<Option<Ipv4Addr>> {
    Ok(routes_v4(h)
        .await?
        .into_iter()
        .find(|r| r.table == MAIN_TABLE && r.dst_len == 32 && r.oif == Some(host_index))
        .map(|r| r.dst))
}

/// What [`remove`] does with the pod's host veth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VethAction {
    /// Leave it: the runtime's deletion of the pod network namespace destroys the pair (the
    /// kernel's namespace teardown deletes every veth with an end inside it). This is CNI DEL as
    /// the VPC CNI does it (its routed-eni plugin's teardown removes the pod's rules and /32
    /// route only), and it spares DEL the veth deletion's synchronous RCU wait (25-35 ms on a
    /// loaded 2-core VM). A veth that outlives its pod (a runtime that keeps the namespace) is
    /// replaced by the next ADD of a pod with the same name ([`crate::pod::create_veth`]).
    Keep,
    /// Delete it (and with it the pod-side peer and every route via it): for interfaces nobody
    /// else will remove (GC of attachments the runtime no longer knows, rollback of a failed
    /// ADD).
    Delete,
}

/// What [`remove`] found and removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    /// The host veth existed and was deleted (with its pod peer and routes via it); always
    /// false with [`VethAction::Keep`].
    pub veth: bool,
    /// The host veth exists and was left in place ([`VethAction::Keep`]).
    pub veth_kept: bool,
    /// The pod IP used for rule cleanup (given, or read from the veth's /32 route).
    pub ip: Option<Ipv4Addr>,
    /// Number of /32 routes deleted.
    pub routes: usize,
    /// Number of rules deleted.
    pub rules: usize,
    /// Rules were kept because another interface now routes the IP (it was reassigned).
    pub ip_in_use_elsewhere: bool,
    /// A veth with the name exists but routes another IP: it belongs to a newer pod with the
    /// same name and was left alone.
    pub veth_of_other_pod: bool,
}

/// Removes the node side of a pod, idempotently: the /32 route to the pod's IP and its rules
/// (`to ip` at 512, `from ip` at 1536) and, with [`VethAction::Delete`], the host veth named
/// `host_veth` (the kernel then drops the pod-side peer and the routes via it). The IP is `ip`
/// when given, otherwise read from the veth's /32 route (pass `None` only when the veth is known
/// to be this pod's). A veth of that name that routes a different IP belongs to a newer pod of
/// the same name and is never touched; if another interface routes the IP (it was already given
/// to another pod), that pod's route and rules are left alone.
///
/// Errors: [`crate::Error::Netlink`] for failures other than "already gone".
pub async fn remove(
    h: &Handle,
    host_veth: &str,
    ip: Option<Ipv4Addr>,
    veth: VethAction,
) -> Result<Removed> {
    let mut out = Removed::default();
    let mut ip = ip;
    // `ours`: the index of this pod's host veth while it still exists (routes via it are ours).
    let mut ours = None;
    if let Some(l) = link_by_name(h, host_veth).await? {
        let routed = ip_of_host_veth(h, l.index).await?;
        match (ip, routed) {
            (Some(want), Some(r)) if want != r => out.veth_of_other_pod = true,
            _ => {
                ip = ip.or(routed);
                match veth {
                    VethAction::Delete => {
                        crate::nl::delete_link(h, l.index, host_veth).await?;
                        out.veth = true;
                    }
                    VethAction::Keep => {
                        out.veth_kept = true;
                        ours = Some(l.index);
                    }
                }
            }
        }
    }
    out.ip = ip;
    let Some(ip) = ip else { return Ok(out) };
    let routes = pod_routes(h, ip).await?;
    if routes.iter().any(|r| r.oif.is_some() && r.oif != ours) {
        out.ip_in_use_elsewhere = true;
        return Ok(out);
    }
    for r in &routes {
        delete_route(h, r).await?;
        out.routes += 1;
    }
    for r in pod_rules(h, ip).await? {
        delete_rule(h, &r).await?;
        out.rules += 1;
    }
    Ok(out)
}
