//! Self-healing of the node side of running pods: the periodic audit compares what ADD built
//! ([`crate::host::add`], [`crate::pod::create_veth`]) with the node's state, repairs what
//! it can and names what it cannot. One dump of links, routes and rules ([`NodeView`]) serves
//! every pod of a pass.
//!
//! Per pod (`ip`, host veth, route table as ADD programmed them):
//! - the host veth exists ([`Kind::HostVeth`]; a missing one is not repairable here: the pair
//!   went with the pod's namespace), is up (repaired: set up);
//! - its MAC is the one derived from its name ([`crate::names::veth_macs`]), which is what the
//!   pod's permanent neighbour `169.254.1.1` points to ([`Kind::HostVethMac`]; repaired: the
//!   MAC is set back, so the pod's gateway resolves again);
//! - main has `<ip>/32 dev <host veth> scope link` ([`Kind::PodRoute`]);
//! - rule `to <ip> lookup main` at 512 ([`Kind::RuleToPod`]) and, for a pod on a secondary
//!   ENI, `from <ip> lookup <table>` at 1536 ([`Kind::RuleFromPod`]); route and rules are
//!   repaired with [`crate::host::add`] (idempotent).

use std::net::Ipv4Addr;

use rtnetlink::packet_route::route::RouteScope;
use rtnetlink::{Handle, LinkUnspec};

use crate::error::nl;
use crate::names::{format_mac, veth_macs};
use crate::nl::{delete_rule, links, routes_v4, rules_v4, Link, Route, Rule};
use crate::{host, Result, MAIN_TABLE, PRIO_FROM_POD, PRIO_TO_POD};

/// What a finding is about (also the `kind` label of the agent's repair metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// The pod's host /32 route in main.
    PodRoute,
    /// Rule `to <ip> lookup main` at priority 512.
    RuleToPod,
    /// Rule `from <ip> lookup <ENI table>` at priority 1536.
    RuleFromPod,
    /// The pod's host veth (missing or down).
    HostVeth,
    /// The host veth's MAC differs from the one the pod's gateway neighbour expects.
    HostVethMac,
    /// `net.ipv4.ip_forward` of the node namespace.
    IpForward,
    /// `rp_filter` of the primary interface (loose, 2, with node port support).
    RpFilter,
    /// A secondary ENI's interface (found by MAC).
    EniInterface,
    /// A secondary ENI's route table (table = device number + 1, [`crate::node::eni_route_table`]).
    EniTable,
    /// vpcnet's nftables table `ip vpcnet` (SNAT, connmark).
    FirewallTable,
}

impl Kind {
    /// The stable name (`pod_route`, `rule_to_pod`, ..., `firewall_table`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::PodRoute => "pod_route",
            Kind::RuleToPod => "rule_to_pod",
            Kind::RuleFromPod => "rule_from_pod",
            Kind::HostVeth => "host_veth",
            Kind::HostVethMac => "host_veth_mac",
            Kind::IpForward => "ip_forward",
            Kind::RpFilter => "rp_filter",
            Kind::EniInterface => "eni_interface",
            Kind::EniTable => "eni_table",
            Kind::FirewallTable => "firewall_table",
        }
    }
}

/// One difference between what vpcnet programmed and the node, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: Kind,
    /// The object, e.g. `eni1a2b3c4d5e6` or `10.0.1.5/32` or `table 2`.
    pub object: String,
    /// What was wrong, as a sentence.
    pub problem: String,
    /// `None`: repaired. `Some(why)`: still wrong, and why (the repair's error, or why it is
    /// not attempted).
    pub unrepaired: Option<String>,
}

impl Finding {
    pub fn repaired(&self) -> bool {
        self.unrepaired.is_none()
    }
}

/// One dump of the node's links, IPv4 routes and rules, shared by every pod check of a pass.
#[derive(Debug, Clone, Default)]
pub struct NodeView {
    pub links: Vec<Link>,
    pub routes: Vec<Route>,
    pub rules: Vec<Rule>,
}

impl NodeView {
    /// Dumps the namespace of `h`, one dump after the other (a netlink socket runs one dump
    /// at a time; concurrent ones fail with EBUSY).
    ///
    /// Errors: [`crate::Error::Netlink`] when a dump fails.
    pub async fn read(h: &Handle) -> Result<NodeView> {
        Ok(NodeView {
            links: links(h).await?,
            routes: routes_v4(h).await?,
            rules: rules_v4(h).await?,
        })
    }
}

/// What ADD built on the node for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodExpect {
    pub ip: Ipv4Addr,
    /// Host veth name ([`crate::names::host_veth_name`]).
    pub host_veth: String,
    /// 0 for a pod on the primary ENI (no 1536 rule), else the ENI's route table
    /// ([`crate::node::eni_route_table`] of its device number).
    pub route_table: u32,
    /// The pod's ADD may still be building its datapath (its address was handed out moments
    /// ago): a missing host veth is no finding then (ADD creates it); everything the veth
    /// exists for is checked and repaired as for any pod.
    pub building: bool,
    /// Check the host veth's MAC against vpcnet's derived one: only for a pod whose datapath
    /// vpcnet's plugin built (another CNI's veths have their own MACs, which the pod's
    /// gateway neighbour already points to).
    pub check_mac: bool,
}

/// Checks one pod's node side against `view` and, with `repair`, fixes what differs. Returns
/// every finding (empty = healthy). A missing host veth is reported alone: the pair goes with
/// the pod's namespace (the pod is being deleted, or its sandbox is gone), so there is nothing
/// to route to and the reclaim decides about the address.
///
/// Errors: none for a repair that fails (that is an unrepaired finding); the caller's
/// [`NodeView::read`] reports dump errors.
pub async fn check_pod(
    h: &Handle,
    view: &NodeView,
    want: &PodExpect,
    repair: bool,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let veth = &want.host_veth;
    let Some(link) = view.links.iter().find(|l| &l.name == veth) else {
        if want.building {
            return out;
        }
        out.push(Finding {
            kind: Kind::HostVeth,
            object: veth.clone(),
            problem: format!("host veth {veth} of {} is missing", want.ip),
            unrepaired: Some(
                "the veth pair goes with the pod's network namespace: recreate the pod".into(),
            ),
        });
        return out;
    };
    let (want_mac, _) = veth_macs(veth);
    if want.check_mac && link.mac != want_mac {
        let problem = format!(
            "host veth {veth} has MAC {}, the pod's gateway neighbour {} expects {}",
            format_mac(&link.mac),
            crate::POD_GATEWAY,
            format_mac(&want_mac)
        );
        let r = if repair {
            let msg = LinkUnspec::new_with_index(link.index)
                .address(want_mac.to_vec())
                .build();
            set_link(h, veth, msg, "restore MAC").await
        } else {
            Err(not_repairing())
        };
        out.push(finding(Kind::HostVethMac, veth, problem, r));
    }
    if !link.up {
        let r = if repair {
            set_link(
                h,
                veth,
                LinkUnspec::new_with_index(link.index).up().build(),
                "set up",
            )
            .await
        } else {
            Err(not_repairing())
        };
        out.push(finding(
            Kind::HostVeth,
            veth,
            format!("host veth {veth} is down"),
            r,
        ));
    }
    let ip = want.ip;
    let routes: Vec<&Route> = view
        .routes
        .iter()
        .filter(|r| r.table == MAIN_TABLE && r.dst == ip && r.dst_len == 32)
        .collect();
    let mut wrong = Vec::new();
    if !routes
        .iter()
        .any(|r| r.oif == Some(link.index) && r.scope == RouteScope::Link)
    {
        let problem = match routes.iter().find_map(|r| r.oif) {
            Some(other) => {
                let name = view
                    .links
                    .iter()
                    .find(|l| l.index == other)
                    .map_or_else(|| format!("index {other}"), |l| l.name.clone());
                format!("{ip}/32 is routed via {name}, not the pod's host veth {veth}")
            }
            None => format!("host route {ip}/32 dev {veth} is missing"),
        };
        wrong.push((Kind::PodRoute, format!("{ip}/32"), problem));
    }
    let rules: Vec<&Rule> = view
        .rules
        .iter()
        .filter(|r| host::is_pod_rule(r, ip))
        .collect();
    if !rules
        .iter()
        .any(|r| r.priority == PRIO_TO_POD && r.table == MAIN_TABLE)
    {
        wrong.push((
            Kind::RuleToPod,
            format!("{ip}/32"),
            format!("rule \"to {ip} lookup main\" at priority {PRIO_TO_POD} is missing"),
        ));
    }
    let mut stale_from = Vec::new();
    if want.route_table != 0 {
        let from: Vec<&&Rule> = rules
            .iter()
            .filter(|r| r.priority == PRIO_FROM_POD)
            .collect();
        // A rule looking up another table (e.g. table = device number, the numbering of older
        // vpcnet releases) is stale even next to the right one: at equal priority the kernel
        // evaluates the older rule first.
        let t = want.route_table;
        let stale: Vec<&Rule> = from.iter().filter(|r| r.table != t).map(|r| **r).collect();
        if !stale.is_empty() || from.is_empty() {
            let problem = match stale.first() {
                Some(r) => format!(
                    "rule \"from {ip}\" at priority {PRIO_FROM_POD} looks up table {}, want {t}",
                    r.table
                ),
                None => {
                    format!("rule \"from {ip} lookup {t}\" at priority {PRIO_FROM_POD} is missing")
                }
            };
            stale_from.extend(stale.into_iter().cloned());
            wrong.push((Kind::RuleFromPod, format!("{ip}/32"), problem));
        }
    }
    if wrong.is_empty() {
        return out;
    }
    let r = if repair {
        async {
            for r in &stale_from {
                delete_rule(h, r).await?;
            }
            host::add(h, ip, link.index, want.route_table).await
        }
        .await
        .map_err(|e| e.to_string())
    } else {
        Err(not_repairing())
    };
    for (kind, object, problem) in wrong {
        out.push(finding(kind, &object, problem, r.clone()));
    }
    out
}

async fn set_link(
    h: &Handle,
    name: &str,
    msg: rtnetlink::packet_route::link::LinkMessage,
    what: &str,
) -> Result<(), String> {
    nl(h.link().set(msg).execute().await, || {
        format!("{what} of {name}")
    })
    .map_err(|e| e.to_string())
}

pub(crate) fn not_repairing() -> String {
    "repair is off".into()
}

/// A finding from a repair's result.
pub(crate) fn finding(
    kind: Kind,
    object: &str,
    problem: String,
    repair: Result<(), String>,
) -> Finding {
    Finding {
        kind,
        object: object.to_string(),
        problem,
        unrepaired: repair.err(),
    }
}
