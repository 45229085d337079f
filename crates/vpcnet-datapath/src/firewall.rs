//! Node firewall: SNAT of VPC-external pod traffic to the node's primary IP and the connmark
//! that sends replies (and SNATed traffic) out of the primary ENI. Mirrors the VPC CNI's
//! `AWS-SNAT-CHAIN-*`, `AWS-CONNMARK-CHAIN-*` and "AWS, primary ENI" mangle rules, as one
//! nftables table owned by vpcnet (`table ip vpcnet`), plus the policy rule
//! `fwmark 0x80/0x80 lookup main` at priority 1024 and loose `rp_filter` on the primary
//! interface.
//!
//! The ruleset is rendered by the pure [`render`] from a [`FirewallSpec`] and applied by
//! [`apply`] with one `nft -f -` transaction that creates, deletes and redefines the table, so
//! the kernel switches from the old ruleset to the new one atomically and applying again is a
//! no-op in effect (reconcile = apply again). Nothing outside our table is touched.
//!
//! What the table does (`<veth>` is the host veth prefix, `eth0` the primary interface):
//!
//! - `mangle-prerouting` (filter, priority mangle), with node port support: a connection that
//!   arrives on `eth0` for a local address of `eth0` gets ct mark bit 0x80 (NodePort traffic).
//! - `prerouting` (filter, priority dstnat + 10, so it sees kube-proxy's DNAT): unless external
//!   SNAT is set, a new connection from a pod (`iifname "<veth>*"`) to an address outside every
//!   VPC CIDR and exclude CIDR that is not local gets ct mark bit 0x80; then, for every packet
//!   from a pod, the 0x80 bit of the ct mark is copied to the packet mark. The policy rule sends
//!   marked packets to the main table, i.e. out of `eth0`: replies to NodePort traffic go back
//!   the way they came, and SNATed traffic leaves by the ENI that owns the node's primary IP
//!   (EC2's source/destination check would drop it on a secondary ENI).
//! - `postrouting` (nat, priority srcnat): unless external SNAT is set, a packet to an address
//!   outside every VPC CIDR and exclude CIDR, not local, leaving by a non-pod interface (not
//!   `<veth>*`, not `vlan*`), is source-NATed to the primary IP, with `random` (`hashrandom`)
//!   or `fully-random` (`prng`) port allocation per `AWS_VPC_K8S_CNI_RANDOMIZESNAT`.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;

use ipnet::Ipv4Net;
use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute};
use rtnetlink::Handle;

use crate::error::{errno, errnos, nl};
use crate::nft;
use crate::nl::{delete_rule, rules_v4, Rule};
use crate::{Error, Result, MAIN_TABLE};

/// Name of the nftables table vpcnet owns (family `ip`).
pub const TABLE: &str = "vpcnet";
/// Connection/packet mark bit meaning "route by the main table, out of the primary ENI"
/// (the VPC CNI's `AWS_VPC_K8S_CNI_CONNMARK` default, 0x80).
pub const CONNMARK: u32 = 0x80;
/// Priority of the policy rule `fwmark 0x80/0x80 lookup main` (VPC CNI `hostRulePriority`).
pub const PRIO_CONNMARK_RULE: u32 = 1024;
/// Branch-ENI interfaces of pods with their own security groups (never SNATed, as in the VPC CNI).
const VLAN_PREFIX: &str = "vlan";

/// Source-port randomisation of the SNAT rule (`AWS_VPC_K8S_CNI_RANDOMIZESNAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RandomizeSnat {
    /// `none`: the kernel's default port selection.
    None,
    /// `hashrandom`: nft `random` (iptables `--random`).
    Hashrandom,
    /// `prng` (default): nft `fully-random` (iptables `--random-fully`).
    #[default]
    Prng,
}

/// Everything the node firewall depends on. Pure data; [`render`] turns it into nft text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallSpec {
    /// The node's primary private IPv4 (IMDS `local-ipv4`): the SNAT source.
    pub primary_ip: Ipv4Addr,
    /// Interface of the primary ENI, e.g. `eth0` or `ens5`.
    pub primary_interface: String,
    /// The VPC's IPv4 CIDRs (IMDS `vpc-ipv4-cidr-blocks`): never SNATed.
    pub vpc_cidrs: Vec<Ipv4Net>,
    /// `AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS`: more destinations that are never SNATed.
    pub exclude_snat_cidrs: Vec<Ipv4Net>,
    /// `AWS_VPC_K8S_CNI_RANDOMIZESNAT`.
    pub randomize_snat: RandomizeSnat,
    /// `AWS_VPC_K8S_CNI_EXTERNALSNAT`: an external NAT device does SNAT; no SNAT and no SNAT
    /// connmark on the node.
    pub external_snat: bool,
    /// `AWS_VPC_CNI_NODE_PORT_SUPPORT`: mark connections arriving on the primary interface so
    /// replies leave by it; loose `rp_filter` on it.
    pub node_port_support: bool,
    /// Host-side veth prefix of pods (`AWS_VPC_K8S_CNI_VETHPREFIX`, default `eni`).
    pub veth_prefix: String,
}

impl FirewallSpec {
    /// Whether any rule marks packets, so the `fwmark 0x80/0x80 lookup main` rule is needed.
    pub fn uses_connmark(&self) -> bool {
        self.node_port_support || !self.external_snat
    }

    fn check(&self) -> Result<()> {
        let ifname_ok = |s: &str, max: usize| {
            !s.is_empty()
                && s.len() <= max
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        };
        if !ifname_ok(&self.primary_interface, 15) {
            return Err(Error::Invalid(format!(
                "primary interface {:?} is not an interface name (1-15 of [A-Za-z0-9_.-])",
                self.primary_interface
            )));
        }
        if !ifname_ok(&self.veth_prefix, 4) {
            return Err(Error::Invalid(format!(
                "veth prefix {:?} must be 1-4 of [A-Za-z0-9_.-] (AWS_VPC_K8S_CNI_VETHPREFIX)",
                self.veth_prefix
            )));
        }
        if self.vpc_cidrs.is_empty() {
            return Err(Error::Invalid(
                "no VPC CIDR: SNAT would apply to VPC traffic (IMDS vpc-ipv4-cidr-blocks is empty)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Renders the `nft -f` transaction for `spec`: make sure `table ip vpcnet` exists, delete it,
/// and (unless nothing is enabled) define it again with the chains described in the module
/// docs. Applying the text is atomic and idempotent.
///
/// Errors: [`Error::Invalid`] for an interface name or veth prefix nft could not quote safely,
/// or no VPC CIDR.
pub fn render(spec: &FirewallSpec) -> Result<String> {
    spec.check()?;
    let mut out = format!("table ip {TABLE} {{}}\ndelete table ip {TABLE}\n");
    if !spec.uses_connmark() {
        return Ok(out);
    }
    let veth = format!("\"{}*\"", spec.veth_prefix);
    let eth0 = &spec.primary_interface;
    let mark = format!("{CONNMARK:#x}");
    let snat = !spec.external_snat;
    let w = &mut out;
    let _ = writeln!(w, "table ip {TABLE} {{");
    if snat {
        let mut exempt: Vec<Ipv4Net> = spec
            .vpc_cidrs
            .iter()
            .chain(&spec.exclude_snat_cidrs)
            .map(|c| c.trunc())
            .collect();
        exempt.sort();
        exempt.dedup();
        let elems: Vec<String> = exempt.iter().map(ToString::to_string).collect();
        let _ = writeln!(w, "  set snat_exempt {{");
        let _ = writeln!(w, "    type ipv4_addr; flags interval; auto-merge;");
        let _ = writeln!(w, "    elements = {{ {} }}", elems.join(", "));
        let _ = writeln!(w, "  }}");
    }
    if spec.node_port_support {
        let _ = writeln!(w, "  chain mangle-prerouting {{");
        let _ = writeln!(
            w,
            "    type filter hook prerouting priority mangle; policy accept;"
        );
        let _ = writeln!(
            w,
            "    iifname \"{eth0}\" fib daddr . iif type local counter ct mark set ct mark | {mark} comment \"node port: replies leave by {eth0}\""
        );
        let _ = writeln!(w, "  }}");
    }
    let _ = writeln!(w, "  chain prerouting {{");
    let _ = writeln!(
        w,
        "    type filter hook prerouting priority dstnat + 10; policy accept;"
    );
    if snat {
        let _ = writeln!(
            w,
            "    iifname {veth} ct state new fib daddr type != local ip daddr != @snat_exempt counter ct mark set ct mark | {mark} comment \"outbound to outside the VPC: leave by {eth0}\""
        );
    }
    let _ = writeln!(
        w,
        "    iifname {veth} ct mark & {mark} == {mark} meta mark set meta mark | {mark}"
    );
    let _ = writeln!(
        w,
        "    iifname {veth} ct mark & {mark} == 0 meta mark set meta mark & {:#x}",
        !CONNMARK
    );
    let _ = writeln!(w, "  }}");
    if snat {
        let random = match spec.randomize_snat {
            RandomizeSnat::None => "",
            RandomizeSnat::Hashrandom => " random",
            RandomizeSnat::Prng => " fully-random",
        };
        let _ = writeln!(w, "  chain postrouting {{");
        let _ = writeln!(
            w,
            "    type nat hook postrouting priority srcnat; policy accept;"
        );
        let _ = writeln!(
            w,
            "    oifname != {{ {veth}, \"{VLAN_PREFIX}*\" }} ip daddr != @snat_exempt fib daddr type != local counter snat to {}{random} comment \"SNAT to the primary IP\"",
            spec.primary_ip
        );
        let _ = writeln!(w, "  }}");
    }
    let _ = writeln!(w, "}}");
    Ok(out)
}

/// Applies `spec` to the node: the nftables table ([`render`], one `nft -f -` transaction),
/// the policy rule `fwmark 0x80/0x80 lookup main` at priority 1024 (added when a rule marks
/// packets, removed otherwise), and `rp_filter` = 2 (loose) on the primary interface with node
/// port support. `h` must be bound to the namespace `netns` names (`None`: the caller's own;
/// `Some(path)`: `nft` runs there through `nsenter`, the sysctl is written from a thread that
/// entered it). Idempotent: call again to repair drift.
///
/// Errors: [`Error::Invalid`] for a bad spec; [`Error::Io`] when `nft` cannot run or rejects
/// the ruleset (its message is included), or the sysctl cannot be written; [`Error::Netlink`].
pub async fn apply(h: &Handle, netns: Option<&Path>, spec: &FirewallSpec) -> Result<()> {
    let ruleset = render(spec)?;
    nft::apply(netns, &ruleset, &format!("table ip {TABLE}")).await?;
    if spec.uses_connmark() {
        add_connmark_rule(h).await?;
    } else {
        remove_connmark_rule(h).await?;
    }
    if spec.node_port_support {
        let key = format!(
            "/proc/sys/net/ipv4/conf/{}/rp_filter",
            spec.primary_interface
        );
        write_sysctl(netns, &key, "2").await?;
    }
    Ok(())
}

/// Removes what [`apply`] installed (our table and the fwmark rule); `rp_filter` is left as
/// is. Idempotent.
///
/// Errors: [`Error::Io`] when `nft` fails, [`Error::Netlink`].
pub async fn remove(h: &Handle, netns: Option<&Path>) -> Result<()> {
    nft::apply(
        netns,
        &format!("table ip {TABLE} {{}}\ndelete table ip {TABLE}\n"),
        &format!("table ip {TABLE}"),
    )
    .await?;
    remove_connmark_rule(h).await
}

/// Whether `r` is the rule `fwmark 0x80/0x80 lookup main` at priority 1024.
pub fn is_connmark_rule(r: &Rule) -> bool {
    r.priority == PRIO_CONNMARK_RULE
        && r.fwmark == Some(CONNMARK)
        && r.fwmask == Some(CONNMARK)
        && r.table == MAIN_TABLE
        && r.src.is_none()
        && r.dst.is_none()
}

async fn add_connmark_rule(h: &Handle) -> Result<()> {
    if rules_v4(h).await?.iter().any(is_connmark_rule) {
        return Ok(());
    }
    let mut req = h
        .rule()
        .add()
        .v4()
        .fw_mark(CONNMARK)
        .table_id(MAIN_TABLE)
        .priority(PRIO_CONNMARK_RULE)
        .action(RuleAction::ToTable);
    req.message_mut()
        .attributes
        .push(RuleAttribute::FwMask(CONNMARK));
    match req.execute().await {
        Err(e) if errno(&e) == Some(errnos::EEXIST) => Ok(()),
        r => nl(r, || {
            format!("add rule fwmark {CONNMARK:#x}/{CONNMARK:#x} lookup main priority {PRIO_CONNMARK_RULE}")
        }),
    }
}

async fn remove_connmark_rule(h: &Handle) -> Result<()> {
    for r in rules_v4(h).await?.iter().filter(|r| is_connmark_rule(r)) {
        delete_rule(h, r).await?;
    }
    Ok(())
}

/// Writes `value` to the sysctl file `key` (`/proc/sys/...`) of `netns` or of the caller's
/// namespace ([`crate::sysctl::write`]).
async fn write_sysctl(netns: Option<&Path>, key: &str, value: &str) -> Result<()> {
    crate::sysctl::write(netns, key, value).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> FirewallSpec {
        FirewallSpec {
            primary_ip: Ipv4Addr::new(10, 0, 1, 230),
            primary_interface: "eth0".into(),
            vpc_cidrs: vec!["10.0.0.0/16".parse().unwrap()],
            exclude_snat_cidrs: vec![],
            randomize_snat: RandomizeSnat::Prng,
            external_snat: false,
            node_port_support: true,
            veth_prefix: "eni".into(),
        }
    }

    fn lines(text: &str) -> Vec<&str> {
        text.lines().map(str::trim).collect()
    }

    fn snat_line(text: &str) -> Option<&str> {
        lines(text).into_iter().find(|l| l.contains(" snat to "))
    }

    #[test]
    fn default_snats_outside_the_vpc_to_the_primary_ip_fully_random() {
        let t = render(&spec()).unwrap();
        let l = lines(&t);
        assert_eq!(
            &l[..3],
            [
                "table ip vpcnet {}",
                "delete table ip vpcnet",
                "table ip vpcnet {"
            ],
            "{t}"
        );
        assert!(l.contains(&"elements = { 10.0.0.0/16 }"), "{t}");
        assert!(
            l.contains(&"type nat hook postrouting priority srcnat; policy accept;"),
            "{t}"
        );
        let snat = snat_line(&t).unwrap();
        assert!(
            snat.starts_with(
                "oifname != { \"eni*\", \"vlan*\" } ip daddr != @snat_exempt fib daddr type != local counter snat to 10.0.1.230 fully-random"
            ),
            "{snat}"
        );
    }

    #[test]
    fn external_snat_has_no_snat_and_no_snat_connmark() {
        let s = FirewallSpec {
            external_snat: true,
            ..spec()
        };
        let t = render(&s).unwrap();
        assert!(snat_line(&t).is_none(), "{t}");
        assert!(!t.contains("snat_exempt"), "{t}");
        assert!(!t.contains("ct state new"), "{t}");
        // Node port connmark stays.
        assert!(
            t.contains(
                "iifname \"eth0\" fib daddr . iif type local counter ct mark set ct mark | 0x80"
            ),
            "{t}"
        );
        assert!(s.uses_connmark());
    }

    #[test]
    fn external_snat_without_node_port_support_only_deletes_the_table() {
        let s = FirewallSpec {
            external_snat: true,
            node_port_support: false,
            ..spec()
        };
        assert_eq!(
            render(&s).unwrap(),
            "table ip vpcnet {}\ndelete table ip vpcnet\n"
        );
        assert!(!s.uses_connmark());
    }

    #[test]
    fn exclude_cidrs_join_the_vpc_cidrs_sorted_and_deduplicated() {
        let s = FirewallSpec {
            vpc_cidrs: vec![
                "10.0.0.0/16".parse().unwrap(),
                "100.64.0.0/16".parse().unwrap(),
            ],
            // Host bits are dropped; a duplicate of a VPC CIDR appears once.
            exclude_snat_cidrs: vec![
                "192.168.7.9/16".parse().unwrap(),
                "10.0.0.0/16".parse().unwrap(),
            ],
            ..spec()
        };
        let t = render(&s).unwrap();
        assert!(
            lines(&t).contains(&"elements = { 10.0.0.0/16, 100.64.0.0/16, 192.168.0.0/16 }"),
            "{t}"
        );
        // Both the SNAT rule and the outbound connmark use the same exemption set.
        assert_eq!(t.matches("ip daddr != @snat_exempt").count(), 2, "{t}");
    }

    #[test]
    fn random_modes() {
        for (mode, tail) in [
            (RandomizeSnat::None, "snat to 10.0.1.230 comment"),
            (
                RandomizeSnat::Hashrandom,
                "snat to 10.0.1.230 random comment",
            ),
            (
                RandomizeSnat::Prng,
                "snat to 10.0.1.230 fully-random comment",
            ),
        ] {
            let t = render(&FirewallSpec {
                randomize_snat: mode,
                ..spec()
            })
            .unwrap();
            assert!(snat_line(&t).unwrap().contains(tail), "{mode:?}: {t}");
        }
    }

    #[test]
    fn connmark_rules_follow_node_port_support_and_the_veth_prefix() {
        let t = render(&FirewallSpec {
            veth_prefix: "vpc".into(),
            primary_interface: "ens5".into(),
            ..spec()
        })
        .unwrap();
        let l = lines(&t);
        assert!(
            l.contains(&"type filter hook prerouting priority mangle; policy accept;"),
            "{t}"
        );
        assert!(
            t.contains(
                "iifname \"ens5\" fib daddr . iif type local counter ct mark set ct mark | 0x80"
            ),
            "{t}"
        );
        assert!(
            t.contains("iifname \"vpc*\" ct state new fib daddr type != local ip daddr != @snat_exempt counter ct mark set ct mark | 0x80"),
            "{t}"
        );
        assert!(
            l.contains(&"iifname \"vpc*\" ct mark & 0x80 == 0x80 meta mark set meta mark | 0x80"),
            "{t}"
        );
        assert!(
            l.contains(
                &"iifname \"vpc*\" ct mark & 0x80 == 0 meta mark set meta mark & 0xffffff7f"
            ),
            "{t}"
        );
        assert!(snat_line(&t).unwrap().contains("{ \"vpc*\", \"vlan*\" }"));
        assert!(!t.contains("\"eni*\""), "{t}");

        let off = render(&FirewallSpec {
            node_port_support: false,
            ..spec()
        })
        .unwrap();
        assert!(!off.contains("mangle-prerouting"), "{off}");
        assert!(!off.contains("iif type local"), "{off}");
        // The SNAT connmark (and its restore) remain.
        assert!(off.contains("ct state new"), "{off}");
        assert!(off.contains("meta mark set meta mark | 0x80"), "{off}");
    }

    #[test]
    fn names_nft_cannot_quote_and_missing_vpc_cidrs_are_rejected() {
        for s in [
            FirewallSpec {
                primary_interface: "eth0\" accept".into(),
                ..spec()
            },
            FirewallSpec {
                primary_interface: String::new(),
                ..spec()
            },
            FirewallSpec {
                veth_prefix: "e*".into(),
                ..spec()
            },
            FirewallSpec {
                veth_prefix: "toolong".into(),
                ..spec()
            },
            FirewallSpec {
                vpc_cidrs: vec![],
                ..spec()
            },
        ] {
            let e = render(&s).unwrap_err();
            assert!(matches!(e, Error::Invalid(_)), "{s:?}: {e}");
        }
    }
}
