//! NetworkPolicy enforcement: a [`Ruleset`] (from `vpcnet-policy`'s compiler) rendered into
//! one nftables table owned by vpcnet, `table inet vpcnet_policy`, and applied with `nft -f -`
//! (one transaction each time, so the kernel switches atomically).
//!
//! # The table
//!
//! ```text
//! table inet vpcnet_policy {
//!   map egress  { type ifname : verdict; elements = { "eni1a2b3c4d5e6" : jump out_eni1a2b3c4d5e6 } }
//!   map ingress { type ifname : verdict; elements = { "eni1a2b3c4d5e6" : jump in_eni1a2b3c4d5e6 } }
//!   set p_0123456789ab { type ipv4_addr; flags interval; elements = { 10.0.0.5, 10.1.0.0-10.1.255.255 } }
//!   set n_0123456789ab { type ipv4_addr . inet_proto . inet_service; elements = { 10.0.0.5 . tcp . 8080 } }
//!   chain forward {
//!     type filter hook forward priority filter; policy accept;
//!     ct state established,related accept
//!     iifname vmap @egress
//!     oifname vmap @ingress
//!   }
//!   chain out_eni1a2b3c4d5e6 {
//!     oifname "eni1a2b3c4d5e6" return
//!     ip daddr @p_0123456789ab meta l4proto tcp th dport 80-90 counter return comment "ns/policy"
//!     ip daddr . meta l4proto . th dport @n_0123456789ab counter return comment "ns/other"
//!     counter drop
//!   }
//!   chain in_eni1a2b3c4d5e6 { iifname "eni1a2b3c4d5e6" return; ip saddr @p_0123456789ab counter return; counter drop }
//! }
//! ```
//!
//! - Pods are known by their host-side veth (`eni…`): a packet a pod sends arrives on it
//!   (`iifname`), a packet to a pod leaves by it (`oifname`). Both are in the `forward` hook
//!   of the node's namespace, so one base chain sees pod-to-pod, pod-to-outside and
//!   outside-to-pod traffic, after kube-proxy's DNAT (prerouting), i.e. with the real
//!   destination pod of a Service.
//! - `forward` accepts packets of connections conntrack has already seen both ways or that
//!   relate to one (replies, ICMP errors): an allowed connection stays allowed for its life.
//!   Everything else goes through the sender's egress chain, then the receiver's ingress chain,
//!   each found by one map lookup (`vmap`), so the cost does not grow with the number of pods.
//! - A pod is in the `egress` (`ingress`) map only while that direction is isolated
//!   ([`Direction::Isolated`]); an open direction has no element and no chain. In its chain
//!   every allow rule ends in `return` (back to `forward`, which goes on to the other side's
//!   check and finally its `accept` policy); nothing allowed: `counter drop`. An isolated
//!   direction with no rule (`Isolated(vec![])`) is just the self rule and the drop.
//! - The first rule of each chain lets a pod reach itself through the node (a Service whose
//!   endpoint is the client: the packet comes in and goes out by the same veth).
//! - Traffic from the node to a pod and from a pod to the node never passes the forward hook
//!   (it is output or input): the node is always allowed, as Kubernetes requires.
//! - Peer addresses are in named sets shared by every chain that needs them: `p_…` interval
//!   sets of IPv4 addresses ([`PeerSet::Addrs`]); `n_…` sets of address . protocol . port
//!   ([`PeerSet::AddrPorts`], an egress rule's named port resolved per destination pod).
//!   Ports are matched with `meta l4proto P th dport A-B` (TCP, UDP and SCTP alike).
//! - Every allow rule counts its packets and carries the allowing policy (`namespace/name`)
//!   as its comment; the final drop counts denials ([`counters`]).
//! - IPv6 packets of an isolated pod match no allow rule that names addresses and are dropped.
//!
//! # Updates
//!
//! [`render_full`] replaces the whole table in one transaction (at start and to resync).
//! [`render_update`] changes a table that holds `old` into `new` in place, also in one
//! transaction: new sets are added, changed sets flushed and refilled, new chains added with
//! their rules, changed chains flushed and refilled, map elements added and deleted, then
//! chains no map names any more are deleted, then sets no rule names any more. Chains, sets
//! and rules that do not change keep their identity and counters, and the kernel never sees
//! a half-updated pod.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;

use vpcnet_policy::{Allow, Direction, PeerMatch, PeerSet, PortMatch, Ruleset};

use crate::policy_events::{EventLog, EventPrefix, Side, Verdict};
use crate::{nft, Error, Result};

/// Name of the nftables table of network policy (family `inet`).
pub const POLICY_TABLE: &str = "vpcnet_policy";

/// nftables' limit on a rule comment (`NFTNL_UDATA_COMMENT_MAXLEN`).
const COMMENT_MAX: usize = 128;

/// The chain of the pod behind host interface `interface` that checks what it sends.
pub fn egress_chain(interface: &str) -> String {
    format!("{}{interface}", Dir::Egress.chain_prefix())
}

/// The chain of the pod behind host interface `interface` that checks what it receives.
pub fn ingress_chain(interface: &str) -> String {
    format!("{}{interface}", Dir::Ingress.chain_prefix())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Dir {
    Egress,
    Ingress,
}

impl Dir {
    const BOTH: [Dir; 2] = [Dir::Egress, Dir::Ingress];

    /// The verdict map of this direction.
    fn map(self) -> &'static str {
        match self {
            Dir::Egress => "egress",
            Dir::Ingress => "ingress",
        }
    }

    fn chain_prefix(self) -> &'static str {
        match self {
            Dir::Egress => "out_",
            Dir::Ingress => "in_",
        }
    }

    /// The match of the pod's own interface on the other side (the self rule).
    fn other_side(self) -> &'static str {
        match self {
            Dir::Egress => "oifname",
            Dir::Ingress => "iifname",
        }
    }

    /// The address of the peer: the destination of what a pod sends, the source of what it
    /// receives.
    fn peer_addr(self) -> &'static str {
        match self {
            Dir::Egress => "ip daddr",
            Dir::Ingress => "ip saddr",
        }
    }

    fn side(self) -> Side {
        match self {
            Dir::Egress => Side::Egress,
            Dir::Ingress => Side::Ingress,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetKind {
    Addrs,
    AddrPorts,
}

impl SetKind {
    fn of(set: &PeerSet) -> SetKind {
        match set {
            PeerSet::Addrs(_) => SetKind::Addrs,
            PeerSet::AddrPorts(_) => SetKind::AddrPorts,
        }
    }

    fn declaration(self) -> &'static str {
        match self {
            SetKind::Addrs => "type ipv4_addr; flags interval;",
            SetKind::AddrPorts => "type ipv4_addr . inet_proto . inet_service;",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            SetKind::Addrs => "an address set (PeerSet::Addrs)",
            SetKind::AddrPorts => "an address-protocol-port set (PeerSet::AddrPorts)",
        }
    }
}

/// A set as nftables will hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SetDef {
    kind: SetKind,
    /// Element texts, sorted, no overlaps.
    elements: Vec<String>,
}

/// A pod's chain in one direction as nftables will hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ChainDef {
    dir: Dir,
    interface: String,
    rules: Vec<String>,
    /// The sets its rules name.
    sets: BTreeSet<String>,
}

impl ChainDef {
    fn map_key(&self) -> String {
        format!("\"{}\"", self.interface)
    }
}

/// The whole table as nftables will hold it: what both renderings are made from.
#[derive(Debug, Default, PartialEq, Eq)]
struct Table {
    sets: BTreeMap<String, SetDef>,
    /// By chain name.
    chains: BTreeMap<String, ChainDef>,
    /// Policy event logs: the limit object and the log rules.
    events: Option<EventLog>,
}

impl Table {
    fn new(rs: &Ruleset, events: Option<EventLog>) -> Result<Table> {
        let mut sets = BTreeMap::new();
        for (name, set) in &rs.sets {
            check_set_name(name)?;
            sets.insert(name.clone(), set_def(name, set)?);
        }
        let mut chains = BTreeMap::new();
        for (interface, pod) in &rs.pods {
            check_interface(interface, &pod.pod)?;
            for dir in Dir::BOTH {
                let direction = match dir {
                    Dir::Egress => &pod.egress,
                    Dir::Ingress => &pod.ingress,
                };
                let Direction::Isolated(allows) = direction else {
                    continue;
                };
                let mut rules = vec![format!("{} \"{interface}\" return", dir.other_side())];
                let mut named = BTreeSet::new();
                for allow in allows {
                    let context = || {
                        format!(
                            "network policy of pod {} ({interface}), {} rule of {}",
                            pod.pod,
                            dir.map(),
                            allow.policy
                        )
                    };
                    if let Some((set, kind)) = match &allow.peer {
                        PeerMatch::Any => None,
                        PeerMatch::Set(s) => Some((s, SetKind::Addrs)),
                        PeerMatch::AddrPorts(s) => Some((s, SetKind::AddrPorts)),
                    } {
                        match sets.get(set) {
                            Some(def) if def.kind == kind => {}
                            Some(def) => {
                                return Err(Error::Invalid(format!(
                                    "{}: names peer set {set} as {}, but the ruleset defines it as {} (a policy compiler bug: report it; the ruleset was not applied)",
                                    context(),
                                    kind.describe(),
                                    def.kind.describe()
                                )))
                            }
                            None => {
                                return Err(Error::Invalid(format!(
                                    "{}: names peer set {set}, which the ruleset does not define (a policy compiler bug: report it; the ruleset was not applied)",
                                    context()
                                )))
                            }
                        }
                        named.insert(set.clone());
                    }
                    let matches = allow_match(dir, allow).map_err(|e| {
                        Error::Invalid(format!(
                            "{}: {e} (a policy compiler bug: report it)",
                            context()
                        ))
                    })?;
                    if let Some(events) = events {
                        let prefix = EventPrefix {
                            verdict: Verdict::Accept,
                            side: dir.side(),
                            interface: interface.clone(),
                            policy: Some(allow.policy.clone()),
                        };
                        rules.push(format!("{matches}{}", events.statement(&prefix)));
                    }
                    rules.push(format!(
                        "{matches}counter return comment \"{}\"",
                        comment(&allow.policy)
                    ));
                }
                if let Some(events) = events {
                    let prefix = EventPrefix {
                        verdict: Verdict::Deny,
                        side: dir.side(),
                        interface: interface.clone(),
                        policy: None,
                    };
                    rules.push(events.statement(&prefix));
                }
                rules.push("counter drop".into());
                let name = format!("{}{interface}", dir.chain_prefix());
                chains.insert(
                    name,
                    ChainDef {
                        dir,
                        interface: interface.clone(),
                        rules,
                        sets: named,
                    },
                );
            }
        }
        Ok(Table {
            sets,
            chains,
            events,
        })
    }

    fn chains_of(&self, dir: Dir) -> impl Iterator<Item = (&String, &ChainDef)> {
        self.chains.iter().filter(move |(_, c)| c.dir == dir)
    }
}

/// Set names are used as nftables identifiers (`@name`): a lowercase letter first, then
/// `[a-z0-9_]` with at least one `_` (which no nftables keyword has, and which keeps them
/// apart from the maps `egress` and `ingress`), at most 31 bytes.
fn check_set_name(name: &str) -> Result<()> {
    let ok = name.len() <= 31
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && name.contains('_');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "peer set name {name:?} cannot name an nftables set: it must be a lowercase letter, then [a-z0-9_] with at least one '_', at most 31 bytes, like p_0123456789ab (a policy compiler bug: report it; the ruleset was not applied)"
        )))
    }
}

/// Interface names are quoted in map elements and rules, and follow `in_`/`out_` in chain
/// names: 1-15 of `[A-Za-z0-9_.-]`.
fn check_interface(interface: &str, pod: &str) -> Result<()> {
    let ok = !interface.is_empty()
        && interface.len() <= 15
        && interface
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "host interface {interface:?} of pod {pod} cannot be named in nftables (1-15 of [A-Za-z0-9_.-]; check AWS_VPC_K8S_CNI_VETHPREFIX); the ruleset was not applied"
        )))
    }
}

fn set_def(name: &str, set: &PeerSet) -> Result<SetDef> {
    let elements = match set {
        PeerSet::Addrs(ranges) => {
            let mut spans: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
            for r in ranges {
                let (first, last) = (u32::from(r.first), u32::from(r.last));
                if first > last {
                    return Err(Error::Invalid(format!(
                        "peer set {name}: range {}-{} ends before it starts (a policy compiler bug: report it; the ruleset was not applied)",
                        r.first, r.last
                    )));
                }
                spans.push((first, last));
            }
            // nftables rejects overlapping intervals: merge what overlaps or touches (the
            // compiler's output is already disjoint; this keeps nft from failing if not).
            spans.sort_unstable();
            let mut merged: Vec<(u32, u32)> = Vec::with_capacity(spans.len());
            for (first, last) in spans {
                match merged.last_mut() {
                    Some((_, end)) if first <= end.saturating_add(1) => *end = (*end).max(last),
                    _ => merged.push((first, last)),
                }
            }
            merged
                .into_iter()
                .map(|(first, last)| {
                    if first == last {
                        Ipv4Addr::from(first).to_string()
                    } else {
                        format!("{}-{}", Ipv4Addr::from(first), Ipv4Addr::from(last))
                    }
                })
                .collect()
        }
        PeerSet::AddrPorts(elements) => {
            let mut elements = elements.clone();
            elements.sort_unstable();
            elements.dedup();
            elements
                .into_iter()
                .map(|(addr, proto, port)| format!("{addr} . {} . {port}", proto.nft()))
                .collect()
        }
    };
    Ok(SetDef {
        kind: SetKind::of(set),
        elements,
    })
}

/// The matches of one allow rule (empty, or ending in a space), which its log rule repeats.
fn allow_match(dir: Dir, allow: &Allow) -> std::result::Result<String, String> {
    let mut rule = String::new();
    match &allow.peer {
        PeerMatch::Any => {}
        PeerMatch::Set(set) => {
            let _ = write!(rule, "{} @{set} ", dir.peer_addr());
        }
        PeerMatch::AddrPorts(set) => {
            let _ = write!(
                rule,
                "{} . meta l4proto . th dport @{set} ",
                dir.peer_addr()
            );
        }
    }
    match &allow.ports {
        PortMatch::Any => {}
        PortMatch::Protocol(p) => {
            let _ = write!(rule, "meta l4proto {} ", p.nft());
        }
        PortMatch::Ports {
            protocol,
            first,
            last,
        } => {
            let _ = write!(rule, "meta l4proto {} th dport ", protocol.nft());
            match first.cmp(last) {
                std::cmp::Ordering::Equal => {
                    let _ = write!(rule, "{first} ");
                }
                std::cmp::Ordering::Less => {
                    let _ = write!(rule, "{first}-{last} ");
                }
                std::cmp::Ordering::Greater => {
                    return Err(format!("port range {first}-{last} ends before it starts"));
                }
            }
        }
    }
    Ok(rule)
}

/// A rule comment nft accepts: printable ASCII without `"` and `\` (nft has no escapes in
/// quoted strings), at most 128 bytes.
fn comment(text: &str) -> String {
    let mut c: String = text
        .chars()
        .map(|c| {
            if (c.is_ascii_graphic() || c == ' ') && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    c.truncate(COMMENT_MAX);
    c
}

/// Renders the transaction that makes the table exactly `rs`: create `table inet
/// vpcnet_policy` if missing, delete it and define it completely (module docs). Applying it is
/// atomic and idempotent; use it at start and whenever the table must be resynchronised.
/// With `events`, the rules also log to NFLOG ([`crate::policy_events`]).
///
/// Errors: [`Error::Invalid`] when `rs` cannot be expressed in nftables (an interface or set
/// name nft cannot take, a rule naming a set the ruleset lacks or of the other kind, a range
/// that ends before it starts); nothing is rendered then.
pub fn render_full(rs: &Ruleset, events: Option<EventLog>) -> Result<String> {
    let t = Table::new(rs, events)?;
    let mut out = format!(
        "table inet {POLICY_TABLE} {{}}\ndelete table inet {POLICY_TABLE}\ntable inet {POLICY_TABLE} {{\n"
    );
    let w = &mut out;
    if let Some(events) = &t.events {
        let _ = writeln!(w, "  {}", events.limit_declaration());
    }
    for dir in Dir::BOTH {
        let _ = writeln!(w, "  map {} {{", dir.map());
        let _ = writeln!(w, "    type ifname : verdict;");
        let elements: Vec<String> = t
            .chains_of(dir)
            .map(|(name, c)| format!("{} : jump {name}", c.map_key()))
            .collect();
        write_elements(w, &elements);
        let _ = writeln!(w, "  }}");
    }
    for (name, set) in &t.sets {
        let _ = writeln!(w, "  set {name} {{");
        let _ = writeln!(w, "    {}", set.kind.declaration());
        write_elements(w, &set.elements);
        let _ = writeln!(w, "  }}");
    }
    let _ = writeln!(w, "  chain forward {{");
    let _ = writeln!(
        w,
        "    type filter hook forward priority filter; policy accept;"
    );
    let _ = writeln!(w, "    ct state established,related accept");
    let _ = writeln!(w, "    iifname vmap @{}", Dir::Egress.map());
    let _ = writeln!(w, "    oifname vmap @{}", Dir::Ingress.map());
    let _ = writeln!(w, "  }}");
    for (name, chain) in &t.chains {
        let _ = writeln!(w, "  chain {name} {{");
        for rule in &chain.rules {
            let _ = writeln!(w, "    {rule}");
        }
        let _ = writeln!(w, "  }}");
    }
    let _ = writeln!(w, "}}");
    Ok(out)
}

fn write_elements(w: &mut String, elements: &[String]) {
    if elements.is_empty() {
        return;
    }
    let _ = writeln!(w, "    elements = {{");
    for (i, e) in elements.iter().enumerate() {
        let comma = if i + 1 < elements.len() { "," } else { "" };
        let _ = writeln!(w, "      {e}{comma}");
    }
    let _ = writeln!(w, "    }}");
}

/// Renders the transaction that changes the table from `old` (what was applied last) into
/// `new` in place (module docs), both with `events` (which is fixed for the agent's run; a
/// change of it needs [`render_full`]), or `None` when nftables would hold the same table for both
/// (e.g. only a pod's `namespace/name` differs). Unchanged chains and sets are not touched and
/// keep their counters; the kernel switches atomically.
///
/// Within the transaction nothing is deleted while a rule or map element still names it:
///
/// 1. sets new in `new` are added with their elements;
/// 2. sets whose elements changed lose the elements that went and gain those that came (or,
///    when that is longer, are flushed and refilled);
/// 3. a set whose kind changed (same name, addresses ↔ address-protocol-port) is deleted and
///    added again, after flushing every chain whose rules name it (all such chains change);
/// 4. new chains are added with their rules;
/// 5. changed chains are flushed and refilled;
/// 6. map elements of new chains are added, those of chains that go are deleted;
/// 7. chains that go are deleted;
/// 8. sets that `new` lacks are deleted.
///
/// If applying it fails (someone changed the table, the agent lost track of what was
/// applied), apply [`render_full`] of `new` instead.
///
/// Errors: [`Error::Invalid`] as [`render_full`], for either ruleset.
pub fn render_update(
    old: &Ruleset,
    new: &Ruleset,
    events: Option<EventLog>,
) -> Result<Option<String>> {
    let o = Table::new(old, events)?;
    let n = Table::new(new, events)?;
    if o == n {
        return Ok(None);
    }
    let t = format!("inet {POLICY_TABLE}");
    let mut out = String::new();
    let w = &mut out;
    // The limit the log rules name (`add` keeps an existing one).
    if let Some(events) = &n.events {
        let _ = writeln!(w, "add limit {t} {}", events.limit_body());
    }

    // Sets whose kind changes: deleted and added again, so every chain naming them is
    // flushed first (step 3) and refilled (step 5).
    let recreated: BTreeSet<&String> = n
        .sets
        .iter()
        .filter(|(name, set)| o.sets.get(*name).is_some_and(|old| old.kind != set.kind))
        .map(|(name, _)| name)
        .collect();

    // 1. new sets.
    for (name, set) in &n.sets {
        if !o.sets.contains_key(name) {
            add_set(w, &t, name, set);
        }
    }
    // 2. changed sets, in place: the elements that went, then those that came (a pod starting
    // elsewhere in the cluster changes one element, not the set); flushed and refilled when
    // that would be shorter.
    for (name, set) in &n.sets {
        if let Some(old) = o.sets.get(name) {
            if old.kind == set.kind && old.elements != set.elements {
                let was: BTreeSet<&String> = old.elements.iter().collect();
                let is: BTreeSet<&String> = set.elements.iter().collect();
                let gone: Vec<String> = was.difference(&is).map(|e| e.to_string()).collect();
                let came: Vec<String> = is.difference(&was).map(|e| e.to_string()).collect();
                if gone.len() + came.len() < set.elements.len() {
                    if !gone.is_empty() {
                        let _ = writeln!(w, "delete element {t} {name} {{ {} }}", gone.join(", "));
                    }
                    add_elements(w, &t, name, &came);
                } else {
                    let _ = writeln!(w, "flush set {t} {name}");
                    add_elements(w, &t, name, &set.elements);
                }
            }
        }
    }
    // 3. sets of another kind.
    if !recreated.is_empty() {
        for (chain, c) in &o.chains {
            if c.sets.iter().any(|s| recreated.contains(s)) {
                let _ = writeln!(w, "flush chain {t} {chain}");
            }
        }
        for name in &recreated {
            let _ = writeln!(w, "delete set {t} {name}");
            add_set(w, &t, name, &n.sets[*name]);
        }
    }
    // 4. new chains.
    for (chain, c) in &n.chains {
        if !o.chains.contains_key(chain) {
            let _ = writeln!(w, "add chain {t} {chain}");
            add_rules(w, &t, chain, &c.rules);
        }
    }
    // 5. changed chains, in place.
    for (chain, c) in &n.chains {
        if let Some(old) = o.chains.get(chain) {
            let names_recreated = old.sets.iter().any(|s| recreated.contains(s));
            if old.rules != c.rules || names_recreated {
                let _ = writeln!(w, "flush chain {t} {chain}");
                add_rules(w, &t, chain, &c.rules);
            }
        }
    }
    // 6. map elements.
    for (chain, c) in &n.chains {
        if !o.chains.contains_key(chain) {
            let _ = writeln!(
                w,
                "add element {t} {} {{ {} : jump {chain} }}",
                c.dir.map(),
                c.map_key()
            );
        }
    }
    for (chain, c) in &o.chains {
        if !n.chains.contains_key(chain) {
            let _ = writeln!(
                w,
                "delete element {t} {} {{ {} }}",
                c.dir.map(),
                c.map_key()
            );
        }
    }
    // 7. chains that go (their rules go with them).
    for chain in o.chains.keys() {
        if !n.chains.contains_key(chain) {
            let _ = writeln!(w, "delete chain {t} {chain}");
        }
    }
    // 8. sets nothing names any more.
    for name in o.sets.keys() {
        if !n.sets.contains_key(name) {
            let _ = writeln!(w, "delete set {t} {name}");
        }
    }
    Ok(Some(out))
}

fn add_set(w: &mut String, t: &str, name: &str, set: &SetDef) {
    let _ = writeln!(w, "add set {t} {name} {{ {} }}", set.kind.declaration());
    add_elements(w, t, name, &set.elements);
}

fn add_elements(w: &mut String, t: &str, name: &str, elements: &[String]) {
    if !elements.is_empty() {
        let _ = writeln!(w, "add element {t} {name} {{ {} }}", elements.join(", "));
    }
}

fn add_rules(w: &mut String, t: &str, chain: &str, rules: &[String]) {
    for rule in rules {
        let _ = writeln!(w, "add rule {t} {chain} {rule}");
    }
}

/// Applies a transaction from [`render_full`] or [`render_update`] with one `nft -f -` in
/// `netns` (`None`: the caller's namespace; `Some(path)`: through `nsenter --net`). All of it
/// takes effect or none.
///
/// Errors: [`Error::Io`] when `nft` cannot run or rejects the transaction (its message
/// included; after a failed update, resynchronise with [`render_full`]).
pub async fn apply(netns: Option<&Path>, script: &str) -> Result<()> {
    nft::apply(
        netns,
        script,
        &format!("network policy, table inet {POLICY_TABLE}; if this was an update, resync with the full ruleset"),
    )
    .await
}

/// Deletes the table (every pod open again). Idempotent: no error when it is absent.
///
/// Errors: [`Error::Io`] when `nft` cannot run or fails.
pub async fn remove(netns: Option<&Path>) -> Result<()> {
    nft::apply(
        netns,
        &format!("table inet {POLICY_TABLE} {{}}\ndelete table inet {POLICY_TABLE}\n"),
        &format!("delete table inet {POLICY_TABLE}"),
    )
    .await
}

/// The counter of one rule of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCounter {
    /// `out_<interface>` or `in_<interface>` ([`egress_chain`], [`ingress_chain`]).
    pub chain: String,
    /// The allowing policy (`namespace/name`, as far as nft keeps it); `None` for the drop.
    pub policy: Option<String>,
    /// Whether this is the chain's final drop (denied packets) rather than an allow rule.
    pub drop: bool,
    pub packets: u64,
    pub bytes: u64,
}

/// The counter of every counting rule of the table in `netns`, in chain and rule order
/// (`nft -j list table inet vpcnet_policy`); empty when the table does not exist.
///
/// Errors: [`Error::Io`] when `nft` cannot run or its output is not what nft prints.
pub async fn counters(netns: Option<&Path>) -> Result<Vec<RuleCounter>> {
    match nft::list(netns, &["-j", "list", "table", "inet", POLICY_TABLE]).await? {
        None => Ok(Vec::new()),
        Some(json) => parse_counters(&json),
    }
}

/// The counters in nft's JSON listing of the table.
fn parse_counters(json: &str) -> Result<Vec<RuleCounter>> {
    let bad = |why: String| {
        Error::Io {
        what: format!(
            "read the counters of nft -j list table inet {POLICY_TABLE} (is nft built with JSON support?)"
        ),
        source: std::io::Error::other(why),
    }
    };
    let doc: serde_json::Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    let items = doc
        .get("nftables")
        .and_then(|v| v.as_array())
        .ok_or_else(|| bad("no \"nftables\" array".into()))?;
    let mut out = Vec::new();
    for rule in items.iter().filter_map(|i| i.get("rule")) {
        if rule.get("table").and_then(|t| t.as_str()) != Some(POLICY_TABLE) {
            continue;
        }
        let Some(exprs) = rule.get("expr").and_then(|e| e.as_array()) else {
            continue;
        };
        let Some(counter) = exprs.iter().find_map(|e| e.get("counter")) else {
            continue;
        };
        let num = |key: &str| {
            counter
                .get(key)
                .and_then(|v| v.as_u64())
                .ok_or_else(|| bad(format!("counter without {key}: {counter}")))
        };
        out.push(RuleCounter {
            chain: rule
                .get("chain")
                .and_then(|c| c.as_str())
                .ok_or_else(|| bad(format!("rule without chain: {rule}")))?
                .to_string(),
            policy: rule
                .get("comment")
                .and_then(|c| c.as_str())
                .map(str::to_string),
            drop: exprs.iter().any(|e| e.get("drop").is_some()),
            packets: num("packets")?,
            bytes: num("bytes")?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vpcnet_policy::{AddrRange, PodRules, Protocol};

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn range(first: &str, last: &str) -> AddrRange {
        AddrRange {
            first: ip(first),
            last: ip(last),
        }
    }

    fn allow(policy: &str, peer: PeerMatch, ports: PortMatch) -> Allow {
        Allow {
            policy: policy.into(),
            peer,
            ports,
        }
    }

    fn set(name: &str) -> PeerMatch {
        PeerMatch::Set(name.into())
    }

    fn tcp(first: u16, last: u16) -> PortMatch {
        PortMatch::Ports {
            protocol: Protocol::Tcp,
            first,
            last,
        }
    }

    fn pod(name: &str, ingress: Direction, egress: Direction) -> PodRules {
        PodRules {
            pod: name.into(),
            ingress,
            egress,
        }
    }

    /// The module docs' example: one pod isolated both ways, one open, one isolated for
    /// ingress only.
    fn example() -> Ruleset {
        let mut rs = Ruleset::default();
        rs.sets.insert(
            "p_0123456789ab".into(),
            PeerSet::Addrs(vec![
                range("10.0.0.5", "10.0.0.5"),
                range("10.1.0.0", "10.1.255.255"),
            ]),
        );
        rs.sets.insert(
            "n_0123456789ab".into(),
            PeerSet::AddrPorts(vec![
                (ip("10.0.0.6"), Protocol::Tcp, 8080),
                (ip("10.0.0.5"), Protocol::Udp, 53),
            ]),
        );
        rs.pods.insert(
            "eni1a2b3c4d5e6".into(),
            pod(
                "default/web",
                Direction::Isolated(vec![]),
                Direction::Isolated(vec![
                    allow("default/allow-web", set("p_0123456789ab"), tcp(80, 90)),
                    allow(
                        "default/named",
                        PeerMatch::AddrPorts("n_0123456789ab".into()),
                        PortMatch::Any,
                    ),
                ]),
            ),
        );
        rs.pods.insert(
            "enifffffffffff".into(),
            pod("default/open", Direction::Open, Direction::Open),
        );
        rs.pods.insert(
            "eni00000000001".into(),
            pod(
                "kube-system/dns",
                Direction::Isolated(vec![
                    allow(
                        "kube-system/dns",
                        PeerMatch::Any,
                        PortMatch::Protocol(Protocol::Udp),
                    ),
                    allow(
                        "kube-system/sctp",
                        set("p_0123456789ab"),
                        PortMatch::Ports {
                            protocol: Protocol::Sctp,
                            first: 7,
                            last: 7,
                        },
                    ),
                    allow("kube-system/all", PeerMatch::Any, PortMatch::Any),
                ]),
                Direction::Open,
            ),
        );
        rs
    }

    #[test]
    fn full_render_is_the_documented_table() {
        let want = r#"table inet vpcnet_policy {}
delete table inet vpcnet_policy
table inet vpcnet_policy {
  map egress {
    type ifname : verdict;
    elements = {
      "eni1a2b3c4d5e6" : jump out_eni1a2b3c4d5e6
    }
  }
  map ingress {
    type ifname : verdict;
    elements = {
      "eni00000000001" : jump in_eni00000000001,
      "eni1a2b3c4d5e6" : jump in_eni1a2b3c4d5e6
    }
  }
  set n_0123456789ab {
    type ipv4_addr . inet_proto . inet_service;
    elements = {
      10.0.0.5 . udp . 53,
      10.0.0.6 . tcp . 8080
    }
  }
  set p_0123456789ab {
    type ipv4_addr; flags interval;
    elements = {
      10.0.0.5,
      10.1.0.0-10.1.255.255
    }
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ct state established,related accept
    iifname vmap @egress
    oifname vmap @ingress
  }
  chain in_eni00000000001 {
    iifname "eni00000000001" return
    meta l4proto udp counter return comment "kube-system/dns"
    ip saddr @p_0123456789ab meta l4proto sctp th dport 7 counter return comment "kube-system/sctp"
    counter return comment "kube-system/all"
    counter drop
  }
  chain in_eni1a2b3c4d5e6 {
    iifname "eni1a2b3c4d5e6" return
    counter drop
  }
  chain out_eni1a2b3c4d5e6 {
    oifname "eni1a2b3c4d5e6" return
    ip daddr @p_0123456789ab meta l4proto tcp th dport 80-90 counter return comment "default/allow-web"
    ip daddr . meta l4proto . th dport @n_0123456789ab counter return comment "default/named"
    counter drop
  }
}
"#;
        let got = render_full(&example(), None).unwrap();
        assert_eq!(got, want, "\n{got}");
        // The open pod has neither a map element nor a chain.
        assert!(!got.contains("enifffffffffff"));
    }

    #[test]
    fn an_empty_ruleset_is_the_table_with_empty_maps() {
        let got = render_full(&Ruleset::default(), None).unwrap();
        assert!(
            got.contains("  map egress {\n    type ifname : verdict;\n  }\n"),
            "{got}"
        );
        assert!(
            got.contains("  map ingress {\n    type ifname : verdict;\n  }\n"),
            "{got}"
        );
        assert!(!got.contains("elements"), "{got}");
        assert!(!got.contains("set "), "{got}");
        assert_eq!(got.matches("chain ").count(), 1, "only forward: {got}");
    }

    #[test]
    fn sets_are_normalised_and_an_empty_set_has_no_elements() {
        let mut rs = Ruleset::default();
        rs.sets.insert(
            "p_x".into(),
            PeerSet::Addrs(vec![
                range("10.0.0.9", "10.0.0.20"),
                range("10.0.0.1", "10.0.0.4"),
                // Touches the first, overlaps the second: merged.
                range("10.0.0.5", "10.0.0.10"),
                range("255.255.255.0", "255.255.255.255"),
            ]),
        );
        rs.sets.insert("p_empty".into(), PeerSet::Addrs(vec![]));
        rs.sets.insert(
            "n_x".into(),
            PeerSet::AddrPorts(vec![
                (ip("10.0.0.2"), Protocol::Sctp, 9),
                (ip("10.0.0.1"), Protocol::Tcp, 1),
                (ip("10.0.0.2"), Protocol::Sctp, 9),
            ]),
        );
        let got = render_full(&rs, None).unwrap();
        assert!(
            got.contains(
                "  set p_x {\n    type ipv4_addr; flags interval;\n    elements = {\n      10.0.0.1-10.0.0.20,\n      255.255.255.0-255.255.255.255\n    }\n  }\n"
            ),
            "{got}"
        );
        assert!(
            got.contains("  set p_empty {\n    type ipv4_addr; flags interval;\n  }\n"),
            "{got}"
        );
        assert!(
            got.contains(
                "elements = {\n      10.0.0.1 . tcp . 1,\n      10.0.0.2 . sctp . 9\n    }"
            ),
            "{got}"
        );
    }

    #[test]
    fn comments_are_quoted_safely_and_cut_to_what_nft_takes() {
        assert_eq!(comment("ns/name"), "ns/name");
        assert_eq!(comment("a\"b\\c\nd€"), "a_b_c_d_");
        let long = "n".repeat(63) + "/" + &"p".repeat(253);
        assert_eq!(comment(&long).len(), COMMENT_MAX);
    }

    #[test]
    fn chain_names_follow_the_interface() {
        assert_eq!(egress_chain("eni1a2b3c4d5e6"), "out_eni1a2b3c4d5e6");
        assert_eq!(ingress_chain("eni1a2b3c4d5e6"), "in_eni1a2b3c4d5e6");
    }

    fn invalid(rs: &Ruleset) -> String {
        match render_full(rs, None) {
            Err(Error::Invalid(m)) => {
                // The update path validates the same way.
                assert!(matches!(
                    render_update(&Ruleset::default(), rs, None),
                    Err(Error::Invalid(_))
                ));
                assert!(matches!(
                    render_update(rs, &Ruleset::default(), None),
                    Err(Error::Invalid(_))
                ));
                m
            }
            other => panic!("not invalid: {other:?}"),
        }
    }

    #[test]
    fn what_nft_cannot_express_is_rejected_with_the_reason() {
        for bad in ["", "eni\"x", "eni x", "eni1234567890abc", "eni*"] {
            let mut rs = Ruleset::default();
            rs.pods.insert(
                bad.into(),
                pod("ns/p", Direction::Isolated(vec![]), Direction::Open),
            );
            let m = invalid(&rs);
            assert!(m.contains("cannot be named in nftables"), "{bad:?}: {m}");
            assert!(m.contains("ns/p"), "{m}");
        }
        // An open pod is validated too (its name would otherwise surface later).
        for bad in [
            "egress",
            "ingress",
            "tcp",
            "1_abc",
            "_abc",
            "P_abc",
            "p-abc",
            "p_abc.d",
            "p_0123456789abcdef0123456789abcd",
        ] {
            let mut rs = Ruleset::default();
            rs.sets.insert(bad.into(), PeerSet::Addrs(vec![]));
            let m = invalid(&rs);
            assert!(m.contains("cannot name an nftables set"), "{bad:?}: {m}");
        }
        let isolated = |peer: PeerMatch, ports: PortMatch| {
            let mut rs = Ruleset::default();
            rs.sets.insert("p_a".into(), PeerSet::Addrs(vec![]));
            rs.sets.insert("n_a".into(), PeerSet::AddrPorts(vec![]));
            rs.pods.insert(
                "eni1".into(),
                pod(
                    "ns/p",
                    Direction::Open,
                    Direction::Isolated(vec![allow("ns/pol", peer, ports)]),
                ),
            );
            rs
        };
        let m = invalid(&isolated(set("p_missing"), PortMatch::Any));
        assert!(
            m.contains("p_missing, which the ruleset does not define"),
            "{m}"
        );
        assert!(m.contains("ns/pol") && m.contains("eni1"), "{m}");
        let m = invalid(&isolated(set("n_a"), PortMatch::Any));
        assert!(m.contains("names peer set n_a as an address set"), "{m}");
        let m = invalid(&isolated(
            PeerMatch::AddrPorts("p_a".into()),
            PortMatch::Any,
        ));
        assert!(
            m.contains("names peer set p_a as an address-protocol-port set"),
            "{m}"
        );
        let m = invalid(&isolated(PeerMatch::Any, tcp(90, 80)));
        assert!(m.contains("port range 90-80"), "{m}");
        let mut rs = Ruleset::default();
        rs.sets.insert(
            "p_a".into(),
            PeerSet::Addrs(vec![range("10.0.0.2", "10.0.0.1")]),
        );
        let m = invalid(&rs);
        assert!(m.contains("10.0.0.2-10.0.0.1 ends before it starts"), "{m}");
        // A valid name of each kind is accepted.
        assert!(render_full(&isolated(set("p_a"), tcp(1, 65535)), None).is_ok());
    }

    #[test]
    fn an_update_between_equal_tables_is_none() {
        assert_eq!(render_update(&example(), &example(), None).unwrap(), None);
        let mut renamed = example();
        renamed.pods.get_mut("eni1a2b3c4d5e6").unwrap().pod = "default/web-2".into();
        assert_eq!(render_update(&example(), &renamed, None).unwrap(), None);
        assert_eq!(
            render_update(&Ruleset::default(), &Ruleset::default(), None).unwrap(),
            None
        );
    }

    fn lines(s: &str) -> Vec<&str> {
        s.lines().collect()
    }

    #[test]
    fn an_update_creates_before_use_and_deletes_after_last_use() {
        let old = example();
        let mut new = example();
        // A set's contents change; a set goes, another comes.
        new.sets.insert(
            "p_0123456789ab".into(),
            PeerSet::Addrs(vec![range("10.0.0.7", "10.0.0.7")]),
        );
        new.sets.remove("n_0123456789ab");
        new.sets.insert(
            "p_new".into(),
            PeerSet::Addrs(vec![range("10.2.0.0", "10.2.0.255")]),
        );
        // Pod eni1a2b3c4d5e6: egress now allows p_new only (the chain changes), ingress
        // opens (its chain goes).
        let web = new.pods.get_mut("eni1a2b3c4d5e6").unwrap();
        web.ingress = Direction::Open;
        web.egress = Direction::Isolated(vec![allow("default/new", set("p_new"), PortMatch::Any)]);
        // The open pod isolates its egress (a chain comes).
        new.pods.get_mut("enifffffffffff").unwrap().egress = Direction::Isolated(vec![]);
        // Pod eni00000000001 leaves (its ingress chain goes, though p_0123456789ab stays).
        new.pods.remove("eni00000000001");

        let got = render_update(&old, &new, None).unwrap().unwrap();
        let t = "inet vpcnet_policy";
        let want = [
            format!("add set {t} p_new {{ type ipv4_addr; flags interval; }}"),
            format!("add element {t} p_new {{ 10.2.0.0-10.2.0.255 }}"),
            format!("flush set {t} p_0123456789ab"),
            format!("add element {t} p_0123456789ab {{ 10.0.0.7 }}"),
            format!("add chain {t} out_enifffffffffff"),
            format!("add rule {t} out_enifffffffffff oifname \"enifffffffffff\" return"),
            format!("add rule {t} out_enifffffffffff counter drop"),
            format!("flush chain {t} out_eni1a2b3c4d5e6"),
            format!("add rule {t} out_eni1a2b3c4d5e6 oifname \"eni1a2b3c4d5e6\" return"),
            format!(
                "add rule {t} out_eni1a2b3c4d5e6 ip daddr @p_new counter return comment \"default/new\""
            ),
            format!("add rule {t} out_eni1a2b3c4d5e6 counter drop"),
            format!(
                "add element {t} egress {{ \"enifffffffffff\" : jump out_enifffffffffff }}"
            ),
            format!("delete element {t} ingress {{ \"eni00000000001\" }}"),
            format!("delete element {t} ingress {{ \"eni1a2b3c4d5e6\" }}"),
            format!("delete chain {t} in_eni00000000001"),
            format!("delete chain {t} in_eni1a2b3c4d5e6"),
            format!("delete set {t} n_0123456789ab"),
        ];
        assert_eq!(lines(&got), want, "\n{got}");
    }

    #[test]
    fn a_set_changes_by_its_elements_unless_refilling_is_shorter() {
        let set = |ranges: &[(&str, &str)]| {
            PeerSet::Addrs(ranges.iter().map(|(a, b)| range(a, b)).collect())
        };
        let mut old = example();
        old.sets.insert(
            "p_0123456789ab".into(),
            set(&[
                ("10.0.0.1", "10.0.0.1"),
                ("10.0.0.3", "10.0.0.3"),
                ("10.0.0.9", "10.0.0.9"),
                ("10.0.1.0", "10.0.1.255"),
                ("10.0.3.1", "10.0.3.1"),
                ("10.0.4.1", "10.0.4.1"),
            ]),
        );
        // 10.0.0.2 starts: 10.0.0.1 and 10.0.0.3 become one range; the rest stays.
        let mut new = old.clone();
        new.sets.insert(
            "p_0123456789ab".into(),
            set(&[
                ("10.0.0.1", "10.0.0.3"),
                ("10.0.0.9", "10.0.0.9"),
                ("10.0.1.0", "10.0.1.255"),
                ("10.0.3.1", "10.0.3.1"),
                ("10.0.4.1", "10.0.4.1"),
            ]),
        );
        let t = "inet vpcnet_policy";
        assert_eq!(
            lines(&render_update(&old, &new, None).unwrap().unwrap()),
            [
                format!("delete element {t} p_0123456789ab {{ 10.0.0.1, 10.0.0.3 }}"),
                format!("add element {t} p_0123456789ab {{ 10.0.0.1-10.0.0.3 }}"),
            ]
        );
        // Everything changes: flushed and refilled.
        let mut other = old.clone();
        other
            .sets
            .insert("p_0123456789ab".into(), set(&[("10.9.0.1", "10.9.0.1")]));
        assert_eq!(
            lines(&render_update(&old, &other, None).unwrap().unwrap()),
            [
                format!("flush set {t} p_0123456789ab"),
                format!("add element {t} p_0123456789ab {{ 10.9.0.1 }}"),
            ]
        );
    }

    #[test]
    fn a_set_that_changes_kind_is_recreated_between_its_chains_flush_and_refill() {
        let mut old = Ruleset::default();
        old.sets.insert(
            "s_a".into(),
            PeerSet::Addrs(vec![range("10.0.0.1", "10.0.0.1")]),
        );
        old.pods.insert(
            "eni1".into(),
            pod(
                "ns/a",
                Direction::Isolated(vec![allow("ns/p", set("s_a"), PortMatch::Any)]),
                Direction::Open,
            ),
        );
        old.pods.insert(
            "eni2".into(),
            pod(
                "ns/b",
                Direction::Open,
                Direction::Isolated(vec![allow("ns/p", set("s_a"), PortMatch::Any)]),
            ),
        );
        let mut new = Ruleset::default();
        new.sets.insert(
            "s_a".into(),
            PeerSet::AddrPorts(vec![(ip("10.0.0.1"), Protocol::Tcp, 80)]),
        );
        new.pods.insert(
            "eni1".into(),
            pod(
                "ns/a",
                Direction::Isolated(vec![allow(
                    "ns/p",
                    PeerMatch::AddrPorts("s_a".into()),
                    PortMatch::Any,
                )]),
                Direction::Open,
            ),
        );
        let got = render_update(&old, &new, None).unwrap().unwrap();
        let t = "inet vpcnet_policy";
        let want = [
            format!("flush chain {t} in_eni1"),
            format!("flush chain {t} out_eni2"),
            format!("delete set {t} s_a"),
            format!("add set {t} s_a {{ type ipv4_addr . inet_proto . inet_service; }}"),
            format!("add element {t} s_a {{ 10.0.0.1 . tcp . 80 }}"),
            format!("flush chain {t} in_eni1"),
            format!("add rule {t} in_eni1 iifname \"eni1\" return"),
            format!(
                "add rule {t} in_eni1 ip saddr . meta l4proto . th dport @s_a counter return comment \"ns/p\""
            ),
            format!("add rule {t} in_eni1 counter drop"),
            format!("delete element {t} egress {{ \"eni2\" }}"),
            format!("delete chain {t} out_eni2"),
        ];
        assert_eq!(lines(&got), want, "\n{got}");
    }

    #[test]
    fn counters_are_read_from_nfts_json() {
        // The shape of `nft -j list table inet vpcnet_policy` (nftables 1.0.6), shortened.
        let json = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
          {"table": {"family": "inet", "name": "vpcnet_policy", "handle": 2}},
          {"chain": {"family": "inet", "table": "vpcnet_policy", "name": "in_eni1", "handle": 4}},
          {"rule": {"family": "inet", "table": "vpcnet_policy", "chain": "forward", "handle": 10,
            "expr": [{"vmap": {"key": {"meta": {"key": "iifname"}}, "data": "@egress"}}]}},
          {"rule": {"family": "inet", "table": "vpcnet_policy", "chain": "in_eni1", "handle": 13,
            "expr": [{"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": "eni1"}}, {"return": null}]}},
          {"rule": {"family": "inet", "table": "vpcnet_policy", "chain": "in_eni1", "handle": 14, "comment": "ns/allow",
            "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "@p_a"}},
                     {"counter": {"packets": 3, "bytes": 180}}, {"return": null}]}},
          {"rule": {"family": "inet", "table": "vpcnet_policy", "chain": "in_eni1", "handle": 15,
            "expr": [{"counter": {"packets": 2, "bytes": 120}}, {"drop": null}]}}]}"#;
        assert_eq!(
            parse_counters(json).unwrap(),
            [
                RuleCounter {
                    chain: "in_eni1".into(),
                    policy: Some("ns/allow".into()),
                    drop: false,
                    packets: 3,
                    bytes: 180,
                },
                RuleCounter {
                    chain: "in_eni1".into(),
                    policy: None,
                    drop: true,
                    packets: 2,
                    bytes: 120,
                },
            ]
        );
        assert!(matches!(parse_counters("Error"), Err(Error::Io { .. })));
        assert!(matches!(parse_counters("{}"), Err(Error::Io { .. })));
    }
}
