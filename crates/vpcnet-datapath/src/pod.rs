//! A pod's datapath: the veth pair (created in one request, peer directly in the pod netns,
//! both MACs set), the pod side (address, routes, static neighbour) and, via [`crate::host`],
//! the node side. [`setup`] builds it all or nothing; [`check`] names what differs.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, OwnedFd};

use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth};
use rtnetlink::packet_route::route::RouteScope;
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::error::{errno, errnos, nl};
use crate::names::{format_mac, veth_macs};
use crate::nl::{addrs_v4, link_by_name, neighbours_v4, routes_v4, Link};
use crate::{host, Error, Result, MAIN_TABLE, POD_GATEWAY, PRIO_FROM_POD, PRIO_TO_POD};

/// What to build for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpec {
    /// The pod's VPC IPv4 (a /32 in the pod).
    pub ip: Ipv4Addr,
    /// Host-side veth name (see [`crate::names::host_veth_name`]).
    pub host_veth: String,
    /// Interface name in the pod (CNI_IFNAME, e.g. "eth0").
    pub container_ifname: String,
    /// MTU of both veth ends, bytes.
    pub mtu: u32,
    /// Table for traffic from the pod: 0 = main (primary ENI), N = ENI device N.
    pub route_table: u32,
    /// Which of the pod's interfaces this is: 0 for CNI_IFNAME; n for the n-th further
    /// interface of a multi-homed pod (ENABLE_MULTI_NIC, `mNicIf<n>`), whose gateway is
    /// 169.254.1.(n + 1) and whose routes live in the pod's table n, looked up for its own
    /// address by the pod rule `from <ip> lookup n` at priority 1, as the VPC CNI builds them.
    pub interface: u32,
}

/// Priority of the pod-side rule `from <ip> lookup n` of a further interface (the VPC CNI's
/// `FromInterfaceRulePriority`).
pub const PRIO_FROM_INTERFACE: u32 = 1;

/// The gateway of the pod's interface `n` ([`PodSpec::interface`]): 169.254.1.(n + 1), the
/// VPC CNI's `CalculatePodIPv4GatewayIP`.
pub fn pod_gateway(interface: u32) -> Ipv4Addr {
    if interface == 0 {
        POD_GATEWAY
    } else {
        Ipv4Addr::new(169, 254, 1, (interface.min(254) + 1) as u8)
    }
}

/// The pod-side table of interface `n`: main for 0, n otherwise.
fn pod_table(interface: u32) -> u32 {
    if interface == 0 {
        MAIN_TABLE
    } else {
        interface
    }
}

/// The veth pair as built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLinks {
    pub host_index: u32,
    pub host_mac: [u8; 6],
    /// Interface index inside the pod netns.
    pub pod_index: u32,
    pub pod_mac: [u8; 6],
}

/// Creates the veth pair in one netlink request: host end `spec.host_veth` in the namespace of
/// `node`, peer `spec.container_ifname` directly in `pod_ns`; both MACs (derived from the host
/// veth name) and MTU set at creation, the host end up. (The pod end cannot be brought up in the
/// same request: the kernel opens the peer before the pair is linked and answers ENOTCONN; see
/// [`configure_pod_side`].) A stale host veth with the same name is deleted and the creation
/// retried once, as the VPC CNI's ADD does: the veth of an earlier pod with the same namespace
/// and name whose DEL was lost, or whose DEL ran but whose network namespace the runtime kept
/// (DEL leaves the veth to the namespace teardown, see [`crate::host::VethAction::Keep`]).
///
/// Errors: [`Error::Netlink`] (e.g. EEXIST when the pod already has `container_ifname`).
pub async fn create_veth(
    node: &Handle,
    pod_ns: &OwnedFd,
    spec: &PodSpec,
) -> Result<([u8; 6], [u8; 6])> {
    let (host_mac, pod_mac) = veth_macs(&spec.host_veth);
    let build = || {
        let peer = LinkMessageBuilder::<LinkUnspec>::new()
            .name(spec.container_ifname.clone())
            .address(pod_mac.to_vec())
            .mtu(spec.mtu)
            .setns_by_fd(pod_ns.as_raw_fd())
            .build();
        LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(spec.host_veth.clone())
            .address(host_mac.to_vec())
            .mtu(spec.mtu)
            .up()
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
            .build()
    };
    let what = || {
        format!(
            "create veth {} (pod side {})",
            spec.host_veth, spec.container_ifname
        )
    };
    match node.link().add(build()).execute().await {
        Ok(()) => Ok((host_mac, pod_mac)),
        Err(e) if errno(&e) == Some(errnos::EEXIST) => {
            let Some(stale) = link_by_name(node, &spec.host_veth).await? else {
                return nl(Err(e), || {
                    format!(
                        "{}: interface {} already exists in the pod",
                        what(),
                        spec.container_ifname
                    )
                });
            };
            crate::nl::delete_link(node, stale.index, &spec.host_veth).await?;
            nl(node.link().add(build()).execute().await, what)?;
            Ok((host_mac, pod_mac))
        }
        Err(e) => nl(Err(e), what),
    }
}

/// Configures the pod side, given a handle in the pod netns: interface up, `ip/32` on it, route
/// `169.254.1.1 dev <if> scope link`, permanent neighbour `169.254.1.1 → host_mac`, default via
/// `169.254.1.1`. A further interface ([`PodSpec::interface`] n > 0) has gateway
/// [`pod_gateway`]`(n)` and both routes in table n, with the rule `from <ip> lookup n`.
/// Returns the pod interface index.
pub async fn configure_pod_side(pod: &Handle, spec: &PodSpec, host_mac: [u8; 6]) -> Result<u32> {
    let gw = pod_gateway(spec.interface);
    let table = pod_table(spec.interface);
    let link = link_by_name(pod, &spec.container_ifname)
        .await?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "pod interface {} vanished after creation",
                spec.container_ifname
            ))
        })?;
    let idx = link.index;
    let ifname = &spec.container_ifname;
    let up = async {
        nl(
            pod.link()
                .set(LinkUnspec::new_with_index(idx).up().build())
                .execute()
                .await,
            || format!("set {ifname} up"),
        )
    };
    let addr = async {
        let r = pod
            .address()
            .add(idx, IpAddr::V4(spec.ip), 32)
            .execute()
            .await;
        match r {
            Err(e) if errno(&e) == Some(errnos::EEXIST) => Ok(()),
            r => nl(r, || format!("add {}/32 on {ifname}", spec.ip)),
        }
    };
    let neigh = async {
        nl(
            pod.neighbours()
                .add(idx, IpAddr::V4(gw))
                .link_layer_address(&host_mac)
                .replace()
                .execute()
                .await,
            || format!("add permanent neighbour {gw} on {ifname}"),
        )
    };
    let gw_route = async {
        let m = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(gw, 32)
            .output_interface(idx)
            .scope(RouteScope::Link)
            .table_id(table)
            .build();
        nl(pod.route().add(m).replace().execute().await, || {
            format!("add route {gw} dev {ifname} scope link table {table}")
        })?;
        let m = RouteMessageBuilder::<Ipv4Addr>::new()
            .gateway(gw)
            .output_interface(idx)
            .table_id(table)
            .build();
        nl(pod.route().add(m).replace().execute().await, || {
            format!("add default via {gw} dev {ifname} table {table}")
        })
    };
    let rule = async {
        if spec.interface == 0 {
            return Ok(());
        }
        let r = pod
            .rule()
            .add()
            .v4()
            .source_prefix(spec.ip, 32)
            .table_id(table)
            .priority(PRIO_FROM_INTERFACE)
            .action(rtnetlink::packet_route::rule::RuleAction::ToTable)
            .execute()
            .await;
        match r {
            Err(e) if errno(&e) == Some(errnos::EEXIST) => Ok(()),
            r => nl(r, || {
                format!(
                    "add pod rule from {} lookup {table} priority {PRIO_FROM_INTERFACE}",
                    spec.ip
                )
            }),
        }
    };
    let (u, a, b, c, d) = futures::join!(up, addr, neigh, gw_route, rule);
    u.and(a).and(b).and(c).and(d)?;
    Ok(idx)
}

/// Builds a pod's whole datapath, all or nothing: veth pair, pod side (through a netlink socket
/// opened in `pod_ns`), node side ([`host::add`]). On any error everything created here is
/// removed again (host veth, its peer, the /32 route, the rules) before the error is returned.
///
/// `node` is a handle in the node namespace; `pod_ns` an open pod netns (see
/// [`crate::netns::open`]); `pod_ns_path` is used in error messages.
pub async fn setup(
    node: &Handle,
    pod_ns: &OwnedFd,
    pod_ns_path: &std::path::Path,
    spec: &PodSpec,
) -> Result<PodLinks> {
    let pod = crate::netns::connect_in(pod_ns, pod_ns_path)?;
    setup_with(node, pod_ns, &pod, spec).await
}

/// [`setup`] with a handle already bound to the pod namespace (`pod`), e.g. from a
/// [`crate::netns::PendingSocket`] started early.
pub async fn setup_with(
    node: &Handle,
    pod_ns: &OwnedFd,
    pod: &Handle,
    spec: &PodSpec,
) -> Result<PodLinks> {
    let (host_mac, pod_mac) = create_veth(node, pod_ns, spec).await?;
    tracing::debug!(veth = %spec.host_veth, "veth pair created");
    let result = async {
        let host = link_by_name(node, &spec.host_veth).await?.ok_or_else(|| {
            Error::NotFound(format!(
                "host veth {} vanished after creation",
                spec.host_veth
            ))
        })?;
        let (pod_index, h) = futures::join!(
            configure_pod_side(pod, spec, host_mac),
            host::add(node, spec.ip, host.index, spec.route_table)
        );
        h?;
        tracing::debug!("pod and node side configured");
        Ok(PodLinks {
            host_index: host.index,
            host_mac,
            pod_index: pod_index?,
            pod_mac,
        })
    }
    .await;
    if result.is_err() {
        if let Err(e) = host::remove(
            node,
            &spec.host_veth,
            Some(spec.ip),
            host::VethAction::Delete,
        )
        .await
        {
            tracing::warn!(error = %e, veth = %spec.host_veth, "rollback after failed setup");
        }
    }
    result
}

/// What [`check`] compares against: the pod's expected state (from prevResult).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub ip: Ipv4Addr,
    pub host_veth: String,
    pub container_ifname: String,
    /// Expected MTU; `None` skips the check.
    pub mtu: Option<u32>,
}

/// Verifies a pod's datapath and returns every difference as a sentence naming the object
/// (empty = healthy): host veth present and up, pod interface with `ip/32`, the two pod routes,
/// the permanent neighbour to the host veth MAC, the node /32 route via the host veth, exactly one
/// rule `to ip lookup main` at 512, at most one `from ip` rule at 1536 whose table has a default
/// route. `pod` is `None` when the pod netns could not be opened.
pub async fn check(node: &Handle, pod: Option<&Handle>, exp: &Expected) -> Result<Vec<String>> {
    let mut bad = Vec::new();
    let ip = exp.ip;
    let host = link_by_name(node, &exp.host_veth).await?;
    match &host {
        None => bad.push(format!("host veth {} is missing", exp.host_veth)),
        Some(l) => {
            if !l.up {
                bad.push(format!("host veth {} is down", exp.host_veth));
            }
            check_mtu(&mut bad, l, exp.mtu);
        }
    }
    // Node routes and rules.
    let routes = host::pod_routes(node, ip).await?;
    let host_index = host.as_ref().map(|l| l.index);
    if !routes
        .iter()
        .any(|r| r.oif.is_some() && r.oif == host_index && r.scope == RouteScope::Link)
    {
        bad.push(format!(
            "node route {ip}/32 dev {} scope link is missing",
            exp.host_veth
        ));
    }
    let rules = host::pod_rules(node, ip).await?;
    let to: Vec<_> = rules.iter().filter(|r| r.priority == PRIO_TO_POD).collect();
    if to.len() != 1 || to[0].table != MAIN_TABLE {
        bad.push(format!(
            "want exactly one rule \"to {ip} lookup main\" at priority {PRIO_TO_POD}, found {}",
            to.len()
        ));
    }
    let from: Vec<_> = rules
        .iter()
        .filter(|r| r.priority == PRIO_FROM_POD)
        .collect();
    if from.len() > 1 {
        bad.push(format!(
            "{} rules \"from {ip}\" at priority {PRIO_FROM_POD}, want at most 1",
            from.len()
        ));
    }
    if let Some(r) = from.first() {
        let table_routes = routes_v4(node).await?;
        if !table_routes
            .iter()
            .any(|x| x.table == r.table && x.dst_len == 0)
        {
            bad.push(format!(
                "rule \"from {ip} lookup {}\": table {} has no default route",
                r.table, r.table
            ));
        }
    }
    // Pod side.
    let Some(pod) = pod else {
        bad.push("pod network namespace cannot be opened".into());
        return Ok(bad);
    };
    let ifname = &exp.container_ifname;
    let Some(pl) = link_by_name(pod, ifname).await? else {
        bad.push(format!("pod interface {ifname} is missing"));
        return Ok(bad);
    };
    if !pl.up {
        bad.push(format!("pod interface {ifname} is down"));
    }
    check_mtu(&mut bad, &pl, exp.mtu);
    if !addrs_v4(pod, pl.index).await?.contains(&(ip, 32)) {
        bad.push(format!("pod interface {ifname} lacks address {ip}/32"));
    }
    let proutes = routes_v4(pod).await?;
    let main: Vec<_> = proutes.iter().filter(|r| r.table == MAIN_TABLE).collect();
    if !main.iter().any(|r| {
        r.dst == POD_GATEWAY
            && r.dst_len == 32
            && r.oif == Some(pl.index)
            && r.scope == RouteScope::Link
    }) {
        bad.push(format!(
            "pod route {POD_GATEWAY} dev {ifname} scope link is missing"
        ));
    }
    if !main
        .iter()
        .any(|r| r.dst_len == 0 && r.gateway == Some(POD_GATEWAY) && r.oif == Some(pl.index))
    {
        bad.push(format!(
            "pod default route via {POD_GATEWAY} dev {ifname} is missing"
        ));
    }
    let neigh = neighbours_v4(pod)
        .await?
        .into_iter()
        .find(|n| n.ip == POD_GATEWAY && n.ifindex == pl.index);
    match (neigh, &host) {
        (None, _) => bad.push(format!(
            "pod neighbour {POD_GATEWAY} on {ifname} is missing"
        )),
        (Some(n), h) => {
            if !n.permanent {
                bad.push(format!("pod neighbour {POD_GATEWAY} is not permanent"));
            }
            if let Some(h) = h {
                if n.mac != h.mac {
                    bad.push(format!(
                        "pod neighbour {POD_GATEWAY} points to {}, host veth MAC is {}",
                        format_mac(&n.mac),
                        format_mac(&h.mac)
                    ));
                }
            }
        }
    }
    Ok(bad)
}

fn check_mtu(bad: &mut Vec<String>, l: &Link, want: Option<u32>) {
    if let Some(m) = want {
        if l.mtu != m {
            bad.push(format!("{}: MTU {}, want {m}", l.name, l.mtu));
        }
    }
}
