//! The fabric's security groups: EC2's stateful ingress filtering per ENI, as one nftables
//! table (`table ip vpcnet_sg`) in the VPC namespace, rebuilt atomically from the emulator's
//! ingress view ([`vpcnet_emu::IngressRulesChanged`]) whenever a rule, a group membership or
//! an ENI's addresses change.
//!
//! Every packet the fabric routes (hook `forward`) or sends itself (hook `output`: the lab
//! cloud's load balancers and endpoints) to an address owned by an ENI is checked: packets of
//! a connection already accepted pass (`ct state established,related`), anything else must
//! match a rule of one of the ENI's groups, else it is dropped. Map `eni` sends each ENI
//! address to the ENI's chain `e_<id>`, which jumps to one chain `g_<id>` per group; a rule
//! whose source is a group matches set `m_<id>`, the addresses of the ENIs carrying that group.
//! Traffic to addresses no ENI owns (routers, the outside network) is not filtered. Egress is
//! not filtered (EC2's default egress rule allows all).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use vpcnet_emu::model::{IngressRule, Source};
use vpcnet_emu::IngressRulesChanged;

/// Name of the nftables table (family `ip`) in the VPC namespace.
pub const TABLE: &str = "vpcnet_sg";

/// nft identifier for an EC2 ID: `sg-0ab..` → `sg_0ab..`.
fn ident(id: &str) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The match of one rule, without the verdict: source, protocol and ports.
fn rule_match(r: &IngressRule) -> String {
    let src = match &r.source {
        Source::Cidr(c) => format!("ip saddr {c}"),
        Source::Group(g) => format!("ip saddr @m_{}", ident(g)),
    };
    let p = &r.permission;
    let l4 = match (p.protocol.as_str(), p.from_port, p.to_port) {
        ("-1", _, _) => String::new(),
        ("tcp" | "udp", Some(f), Some(t)) if f == t => format!(" {} dport {f}", p.protocol),
        ("tcp" | "udp", Some(f), Some(t)) => format!(" {} dport {f}-{t}", p.protocol),
        ("icmp", Some(t), _) if t < 0 => " meta l4proto icmp".to_string(),
        ("icmp", Some(t), Some(c)) if c < 0 => format!(" icmp type {t}"),
        ("icmp", Some(t), Some(c)) => format!(" icmp type {t} icmp code {c}"),
        (proto, _, _) => format!(" meta l4proto {proto}"),
    };
    format!("{src}{l4}")
}

/// Renders the `nft -f` transaction that replaces the table with one enforcing `view`.
/// Deterministic; the table exists (with its base chains) even when no ENI exists yet.
pub fn render(view: &IngressRulesChanged) -> String {
    let mut out = format!("table ip {TABLE} {{}}\ndelete table ip {TABLE}\ntable ip {TABLE} {{\n");
    let w = &mut out;
    // Member sets of the groups some rule names as its source.
    let sources: BTreeSet<&str> = view
        .groups
        .iter()
        .flat_map(|g| &g.rules)
        .filter_map(|r| match &r.source {
            Source::Group(g) => Some(g.as_str()),
            Source::Cidr(_) => None,
        })
        .collect();
    for src in &sources {
        let members: Vec<String> = view
            .enis
            .iter()
            .filter(|e| e.groups.iter().any(|g| g == src))
            .flat_map(|e| e.addresses.iter().map(|a| a.to_string()))
            .collect();
        let _ = write!(
            w,
            "  set m_{} {{ type ipv4_addr; flags interval;",
            ident(src)
        );
        if !members.is_empty() {
            let _ = write!(w, " elements = {{ {} }};", members.join(", "));
        }
        let _ = writeln!(w, " }}");
    }
    for g in &view.groups {
        let _ = writeln!(w, "  chain g_{} {{", ident(&g.group_id));
        for r in &g.rules {
            let _ = writeln!(w, "    {} accept", rule_match(r));
        }
        let _ = writeln!(w, "  }}");
    }
    let mut map = Vec::new();
    for e in &view.enis {
        let chain = format!("e_{}", ident(&e.eni_id));
        let _ = writeln!(w, "  chain {chain} {{");
        for g in &e.groups {
            if view.groups.iter().any(|x| &x.group_id == g) {
                let _ = writeln!(w, "    jump g_{}", ident(g));
            }
        }
        let _ = writeln!(w, "    counter drop\n  }}");
        map.extend(e.addresses.iter().map(|a| format!("{a} : jump {chain}")));
    }
    let _ = write!(w, "  map eni {{ type ipv4_addr : verdict; flags interval;");
    if !map.is_empty() {
        let _ = write!(w, " elements = {{ {} }};", map.join(", "));
    }
    let _ = writeln!(w, " }}");
    for hook in ["forward", "output"] {
        let _ = writeln!(
            w,
            "  chain {hook} {{\n    type filter hook {hook} priority 0; policy accept;\n    ct state established,related accept\n    ip daddr vmap @eni\n  }}"
        );
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vpcnet_emu::model::Permission;
    use vpcnet_emu::{EniIngress, GroupIngress};

    fn rule(proto: &str, from: Option<i32>, to: Option<i32>, source: Source) -> IngressRule {
        IngressRule {
            permission: Permission::new(proto, from, to).unwrap(),
            source,
        }
    }

    #[test]
    fn renders_group_chains_member_sets_and_the_eni_map() {
        let view = IngressRulesChanged {
            groups: vec![
                GroupIngress {
                    group_id: "sg-1".into(),
                    rules: vec![
                        rule(
                            "tcp",
                            Some(80),
                            Some(80),
                            Source::Cidr("10.0.1.0/24".parse().unwrap()),
                        ),
                        rule("udp", Some(53), Some(54), Source::Group("sg-2".into())),
                        rule(
                            "icmp",
                            Some(8),
                            Some(-1),
                            Source::Cidr("0.0.0.0/0".parse().unwrap()),
                        ),
                        rule(
                            "-1",
                            None,
                            None,
                            Source::Cidr("10.200.0.0/24".parse().unwrap()),
                        ),
                    ],
                },
                GroupIngress {
                    group_id: "sg-2".into(),
                    rules: vec![],
                },
            ],
            enis: vec![
                EniIngress {
                    eni_id: "eni-a".into(),
                    addresses: vec![
                        "100.64.0.5/32".parse().unwrap(),
                        "100.64.0.16/28".parse().unwrap(),
                    ],
                    groups: vec!["sg-1".into()],
                },
                EniIngress {
                    eni_id: "eni-b".into(),
                    addresses: vec!["10.0.1.9/32".parse().unwrap()],
                    groups: vec!["sg-2".into()],
                },
            ],
        };
        let t = render(&view);
        assert!(
            t.starts_with("table ip vpcnet_sg {}\ndelete table ip vpcnet_sg\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "set m_sg_2 { type ipv4_addr; flags interval; elements = { 10.0.1.9/32 }; }"
            ),
            "{t}"
        );
        assert!(
            t.contains("ip saddr 10.0.1.0/24 tcp dport 80 accept"),
            "{t}"
        );
        assert!(t.contains("ip saddr @m_sg_2 udp dport 53-54 accept"), "{t}");
        assert!(t.contains("ip saddr 0.0.0.0/0 icmp type 8 accept"), "{t}");
        assert!(t.contains("ip saddr 10.200.0.0/24 accept"), "{t}");
        assert!(
            t.contains("chain e_eni_a {\n    jump g_sg_1\n    counter drop\n  }"),
            "{t}"
        );
        assert!(t.contains("100.64.0.5/32 : jump e_eni_a, 100.64.0.16/28 : jump e_eni_a, 10.0.1.9/32 : jump e_eni_b"), "{t}");
        assert!(
            t.contains("ct state established,related accept\n    ip daddr vmap @eni"),
            "{t}"
        );
    }

    #[test]
    fn an_empty_view_still_defines_the_base_chains() {
        let t = render(&IngressRulesChanged {
            groups: vec![],
            enis: vec![],
        });
        assert!(
            t.contains("map eni { type ipv4_addr : verdict; flags interval; }"),
            "{t}"
        );
        assert!(t.contains("type filter hook forward priority 0"), "{t}");
    }
}
