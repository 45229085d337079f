//! Policy event logs: what the rules of `table inet vpcnet_policy` send to NFLOG when
//! [`EventLog`] is on, and how a logged packet is read back into a [`PolicyEvent`].
//!
//! With events on, the table gets one named limit, and every isolated pod's chain logs before
//! it decides:
//!
//! ```text
//! limit vpcnet_events { rate 100/second burst 500 packets }
//! chain in_eni1a2b3c4d5e6 {
//!   iifname "eni1a2b3c4d5e6" return
//!   ip saddr @p_0123456789ab limit name "vpcnet_events" log prefix "A in eni1a2b3c4d5e6 ns/policy" group 1717
//!   ip saddr @p_0123456789ab counter return comment "ns/policy"
//!   limit name "vpcnet_events" log prefix "D in eni1a2b3c4d5e6" group 1717
//!   counter drop
//! }
//! ```
//!
//! - Each log rule repeats the match of the rule after it and has no verdict, so the verdicts
//!   and the counters are those of the table without events. Only packets that reach a pod's
//!   chain are logged: the first packets of connections (`forward` accepts
//!   `established,related` before), so one line per allowed connection and one per denied
//!   packet.
//! - The prefix ([`EventPrefix`]) names the verdict (`A` accept, `D` deny), the direction
//!   (`in`, `out`), the pod's host interface and, for an accept, the allowing policy
//!   (`namespace/name`, cut to what fits nft's 127 bytes).
//! - The limit is one token bucket for the whole node ([`RATE_PER_SECOND`], [`BURST`]): a SYN
//!   or UDP flood costs at most that many log messages a second; the packets past it are
//!   still allowed or dropped as without events, and counted by the rules' counters, just not
//!   logged.

use std::fmt;
use std::net::Ipv4Addr;

/// The NFLOG group the rules log to (`log group`), which the agent binds.
pub const EVENT_GROUP: u16 = 1717;
/// Name of the table's limit object shared by every log rule.
pub const EVENT_LIMIT: &str = "vpcnet_events";
/// Logged packets a second, node-wide, after the burst.
pub const RATE_PER_SECOND: u32 = 100;
/// Packets logged at once before the rate applies.
pub const BURST: u32 = 500;
/// Bytes of each packet the kernel copies into the NFLOG message: an IPv4 header with the
/// longest options (60) and the ports (4), rounded up.
pub const COPY_RANGE: u32 = 80;
/// nftables' limit on a log prefix (`NF_LOG_PREFIXLEN` − 1).
const PREFIX_MAX: usize = 127;

/// Policy event logs in the table: the rules log to NFLOG `group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLog {
    pub group: u16,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog { group: EVENT_GROUP }
    }
}

impl EventLog {
    /// The table's limit object (inside `table inet vpcnet_policy { … }`).
    pub(crate) fn limit_declaration(&self) -> String {
        format!("limit {}", self.limit_body())
    }

    /// The limit object's name and definition.
    pub(crate) fn limit_body(&self) -> String {
        format!("{EVENT_LIMIT} {{ rate {RATE_PER_SECOND}/second burst {BURST} packets }}")
    }

    /// The statement that logs a packet with `prefix`, within the limit.
    pub(crate) fn statement(&self, prefix: &EventPrefix) -> String {
        format!(
            "limit name \"{EVENT_LIMIT}\" log group {} prefix \"{prefix}\"",
            self.group
        )
    }
}

/// What the rule decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Deny,
}

impl Verdict {
    /// As the node agent writes it: `ACCEPT`, `DENY`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accept => "ACCEPT",
            Verdict::Deny => "DENY",
        }
    }
}

/// Which of the pod's directions the rule checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// What the pod receives.
    Ingress,
    /// What the pod sends.
    Egress,
}

impl Side {
    /// As the node agent writes it: `ingress`, `egress`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Ingress => "ingress",
            Side::Egress => "egress",
        }
    }

    fn code(self) -> &'static str {
        match self {
            Side::Ingress => "in",
            Side::Egress => "out",
        }
    }
}

/// The log prefix of a rule: `A in eni1a2b3c4d5e6 ns/policy`, `D out eni1a2b3c4d5e6`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPrefix {
    pub verdict: Verdict,
    pub side: Side,
    /// The pod's host-side interface.
    pub interface: String,
    /// The allowing policy (`namespace/name`, possibly cut), for an accept.
    pub policy: Option<String>,
}

impl fmt::Display for EventPrefix {
    /// Printable ASCII without `"` and `\` (nft has no escapes), at most 127 bytes: the policy
    /// is cut to fit.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = match self.verdict {
            Verdict::Accept => "A",
            Verdict::Deny => "D",
        };
        let mut text = format!("{v} {} {}", self.side.code(), self.interface);
        if let Some(policy) = &self.policy {
            text.push(' ');
            text.extend(policy.chars().map(|c| {
                if c.is_ascii_graphic() && c != '"' && c != '\\' {
                    c
                } else {
                    '_'
                }
            }));
        }
        text.truncate(PREFIX_MAX);
        f.write_str(&text)
    }
}

impl EventPrefix {
    /// Reads a prefix the rules wrote; `None` for anything else (another program's NFLOG
    /// message on the same group).
    pub fn parse(text: &str) -> Option<EventPrefix> {
        let mut parts = text.splitn(4, ' ');
        let verdict = match parts.next()? {
            "A" => Verdict::Accept,
            "D" => Verdict::Deny,
            _ => return None,
        };
        let side = match parts.next()? {
            "in" => Side::Ingress,
            "out" => Side::Egress,
            _ => return None,
        };
        let interface = parts.next().filter(|i| !i.is_empty())?.to_string();
        let policy = parts.next().map(str::to_string);
        if verdict == Verdict::Deny && policy.is_some() {
            return None;
        }
        Some(EventPrefix {
            verdict,
            side,
            interface,
            policy,
        })
    }
}

/// The addresses, protocol and ports of a logged IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// IANA protocol number.
    pub protocol: u8,
    /// 0 for protocols without ports (ICMP) and for a fragment after the first.
    pub src_port: u16,
    pub dst_port: u16,
}

/// IANA protocol numbers with ports in the first four bytes of their header.
const TCP: u8 = 6;
const UDP: u8 = 17;
const SCTP: u8 = 132;

impl Flow {
    /// Reads the IPv4 header (and the TCP, UDP or SCTP ports after it) at the start of a
    /// packet's copied bytes; `None` when they are not a whole IPv4 header.
    pub fn parse(packet: &[u8]) -> Option<Flow> {
        let first = *packet.first()?;
        if first >> 4 != 4 {
            return None;
        }
        let header_len = usize::from(first & 0x0f) * 4;
        if header_len < 20 || packet.len() < header_len {
            return None;
        }
        let protocol = packet[9];
        let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
        let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
        // Fragment offset: only the first fragment carries the ports.
        let first_fragment = u16::from_be_bytes([packet[6], packet[7]]) & 0x1fff == 0;
        let l4 = &packet[header_len..];
        let (src_port, dst_port) = match protocol {
            TCP | UDP | SCTP if first_fragment && l4.len() >= 4 => (
                u16::from_be_bytes([l4[0], l4[1]]),
                u16::from_be_bytes([l4[2], l4[3]]),
            ),
            _ => (0, 0),
        };
        Some(Flow {
            src,
            dst,
            protocol,
            src_port,
            dst_port,
        })
    }

    /// The protocol as the node agent names it: `TCP`, `UDP`, `SCTP`, `ICMP`, else `UNKNOWN`.
    pub fn protocol_name(&self) -> &'static str {
        match self.protocol {
            TCP => "TCP",
            UDP => "UDP",
            SCTP => "SCTP",
            1 => "ICMP",
            _ => "UNKNOWN",
        }
    }
}

/// One logged packet: what the rule decided and the packet's flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEvent {
    pub prefix: EventPrefix,
    pub flow: Flow,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_round_trip_and_are_cut_to_what_nft_takes() {
        let accept = EventPrefix {
            verdict: Verdict::Accept,
            side: Side::Ingress,
            interface: "eni1a2b3c4d5e6".into(),
            policy: Some("default/allow-web".into()),
        };
        assert_eq!(accept.to_string(), "A in eni1a2b3c4d5e6 default/allow-web");
        assert_eq!(EventPrefix::parse(&accept.to_string()), Some(accept));
        let deny = EventPrefix {
            verdict: Verdict::Deny,
            side: Side::Egress,
            interface: "eni1a2b3c4d5e6".into(),
            policy: None,
        };
        assert_eq!(deny.to_string(), "D out eni1a2b3c4d5e6");
        assert_eq!(EventPrefix::parse(&deny.to_string()), Some(deny));
        let long = EventPrefix {
            verdict: Verdict::Accept,
            side: Side::Egress,
            interface: "eni1".into(),
            policy: Some(format!("ns/{}\"x", "p".repeat(200))),
        };
        let text = long.to_string();
        assert_eq!(text.len(), 127);
        assert!(!text.contains('"'));
        for other in [
            "",
            "X in eni1",
            "A up eni1",
            "A in",
            "D in eni1 ns/p",
            "hello",
        ] {
            assert_eq!(EventPrefix::parse(other), None, "{other}");
        }
    }

    fn ipv4(protocol: u8, options: usize, l4: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 20 + options];
        p[0] = 0x40 | ((20 + options) / 4) as u8;
        p[9] = protocol;
        p[12..16].copy_from_slice(&[10, 0, 0, 11]);
        p[16..20].copy_from_slice(&[10, 0, 0, 12]);
        p.extend_from_slice(l4);
        p
    }

    #[test]
    fn flows_are_read_from_ipv4_headers_with_and_without_options() {
        let tcp = Flow::parse(&ipv4(6, 0, &[0x9c, 0x40, 0, 80, 1, 2])).unwrap();
        assert_eq!(
            (
                tcp.src,
                tcp.dst,
                tcp.src_port,
                tcp.dst_port,
                tcp.protocol_name()
            ),
            (
                Ipv4Addr::new(10, 0, 0, 11),
                Ipv4Addr::new(10, 0, 0, 12),
                40000,
                80,
                "TCP"
            )
        );
        let udp = Flow::parse(&ipv4(17, 8, &[0, 53, 0x1f, 0x90])).unwrap();
        assert_eq!(
            (udp.src_port, udp.dst_port, udp.protocol_name()),
            (53, 8080, "UDP")
        );
        let icmp = Flow::parse(&ipv4(1, 0, &[8, 0, 0, 0])).unwrap();
        assert_eq!(
            (icmp.src_port, icmp.dst_port, icmp.protocol_name()),
            (0, 0, "ICMP")
        );
        let mut fragment = ipv4(6, 0, &[0, 1, 0, 2]);
        fragment[7] = 8;
        assert_eq!(Flow::parse(&fragment).unwrap().dst_port, 0);
        assert_eq!(Flow::parse(&[0x45; 10]), None);
        assert_eq!(Flow::parse(&[0x60; 40]), None, "IPv6");
        assert_eq!(Flow::parse(&[]), None);
        assert_eq!(
            Flow::parse(&ipv4(47, 0, &[])).unwrap().protocol_name(),
            "UNKNOWN"
        );
    }
}
