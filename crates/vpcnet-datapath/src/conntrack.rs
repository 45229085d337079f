//! Deleting the node's connection-tracking entries of pod addresses (ctnetlink, the kernel's
//! `NETLINK_NETFILTER` conntrack subsystem), so an address handed to a new pod does not
//! inherit a deleted pod's flows: a stale entry keeps steering a client's stream (a Service's
//! DNAT to the old pod, a SNATed connection's replies) for as long as it lives, 120 s for a
//! UDP stream, days for an established TCP connection.
//!
//! [`flush`] dumps the IPv4 table of the namespace once and deletes every entry whose original
//! or reply tuple has one of the addresses as source or destination, as kube-proxy does for
//! stale Service endpoints. The work runs on a short-lived helper thread that enters the
//! namespace when one is given; the caller's threads never change namespace.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use netlink_packet_core::{
    DefaultNla, NetlinkHeader, NetlinkMessage, NetlinkPayload, Nla, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_REQUEST,
};
use netlink_packet_netfilter::conntrack::{ConntrackAttribute, ConntrackMessage, IPTuple, Tuple};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use rtnetlink::sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use crate::{Error, Result};

/// `CTA_ZONE`: an entry's zone, part of its identity for a delete.
const CTA_ZONE: u16 = 18;
/// How long one receive may wait for the kernel before the flush fails.
const RECV_TIMEOUT: Duration = Duration::from_secs(5);
/// Receive buffer: a dump comes in multi-part messages of up to a page or 32 KiB each.
const RECV_BUF: usize = 64 * 1024;

/// What one [`flush`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Entries deleted.
    pub deleted: u64,
    /// Entries that matched but were gone when deleted (expired or deleted meanwhile).
    pub vanished: u64,
    /// Whether the namespace tracks connections at all: false when the kernel has no
    /// conntrack netlink support (nothing to flush then).
    pub tracking: bool,
}

/// One tracked connection: its tuples, as the kernel reported them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The original direction's tuple (the entry's key, echoed back to delete it).
    pub orig: Vec<Tuple>,
    /// The reply direction's tuple.
    pub reply: Vec<Tuple>,
    /// `CTA_ZONE`, when the entry has one.
    pub zone: Option<DefaultNla>,
}

impl Entry {
    /// Parses a conntrack message of a dump; `None` when it holds no original tuple.
    pub fn from_attributes(attrs: Vec<ConntrackAttribute>) -> Option<Entry> {
        let (mut orig, mut reply, mut zone) = (None, Vec::new(), None);
        for a in attrs {
            match a {
                ConntrackAttribute::CtaTupleOrig(t) => orig = Some(t),
                ConntrackAttribute::CtaTupleReply(t) => reply = t,
                ConntrackAttribute::Other(n) if n.kind() == CTA_ZONE => zone = Some(n),
                _ => {}
            }
        }
        Some(Entry {
            orig: orig?,
            reply,
            zone,
        })
    }

    /// Source and destination addresses of both tuples.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.orig
            .iter()
            .chain(self.reply.iter())
            .filter_map(|t| match t {
                Tuple::Ip(ips) => Some(ips),
                _ => None,
            })
            .flatten()
            .filter_map(|ip| match ip {
                IPTuple::SourceAddress(a) | IPTuple::DestinationAddress(a) => Some(*a),
                _ => None,
            })
    }

    /// Whether either tuple has one of `ips` as source or destination.
    pub fn involves(&self, ips: &BTreeSet<Ipv4Addr>) -> bool {
        self.addresses().any(|a| match a {
            IpAddr::V4(v4) => ips.contains(&v4),
            IpAddr::V6(_) => false,
        })
    }

    /// The delete request's attributes: the original tuple and the zone.
    fn delete_attributes(&self) -> Vec<ConntrackAttribute> {
        let mut attrs = vec![ConntrackAttribute::CtaTupleOrig(self.orig.clone())];
        if let Some(z) = &self.zone {
            attrs.push(ConntrackAttribute::Other(z.clone()));
        }
        attrs
    }
}

/// Deletes every IPv4 conntrack entry of the namespace at `netns` (`None`: the caller's own,
/// the node's in production) whose original or reply tuple has one of `ips` as source or
/// destination. An empty `ips` does nothing.
///
/// Errors: [`Error::Netns`] when the namespace cannot be entered, [`Error::Io`] when the
/// netlink socket cannot be used or the kernel does not answer within 5 s, [`Error::Invalid`]
/// when the kernel refuses the dump or a delete (with its errno) or sends what cannot be parsed.
pub async fn flush(netns: Option<&Path>, ips: &BTreeSet<Ipv4Addr>) -> Result<FlushReport> {
    if ips.is_empty() {
        return Ok(FlushReport {
            tracking: true,
            ..FlushReport::default()
        });
    }
    let ns = netns.map(Path::to_path_buf);
    let ips = ips.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("conntrack".into())
        .spawn(move || {
            let _ = tx.send(flush_blocking(ns.as_deref(), &ips));
        })
        .map_err(|source| Error::Io {
            what: "start conntrack helper thread".into(),
            source,
        })?;
    rx.await.unwrap_or_else(|_| {
        Err(Error::Io {
            what: "conntrack helper thread".into(),
            source: std::io::Error::other("ended without an answer"),
        })
    })
}

/// [`flush`] on the calling thread, which enters `netns` (when given) for good: call it only on
/// a thread of its own.
fn flush_blocking(netns: Option<&Path>, ips: &BTreeSet<Ipv4Addr>) -> Result<FlushReport> {
    if let Some(path) = netns {
        enter(path)?;
    }
    let mut sock = Conn::open()?;
    let entries = match sock.dump() {
        Ok(entries) => entries,
        Err(DumpError::NotSupported) => return Ok(FlushReport::default()),
        Err(DumpError::Other(e)) => return Err(e),
    };
    let mut report = FlushReport {
        tracking: true,
        ..FlushReport::default()
    };
    for e in entries.iter().filter(|e| e.involves(ips)) {
        match sock.delete(e)? {
            true => report.deleted += 1,
            false => report.vanished += 1,
        }
    }
    Ok(report)
}

fn enter(path: &Path) -> Result<()> {
    let fd = crate::netns::open(path)?;
    nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| Error::Netns {
        path: path.display().to_string(),
        source: std::io::Error::from(e),
    })
}

enum DumpError {
    /// No conntrack netlink in this kernel: nothing is tracked that could be flushed.
    NotSupported,
    Other(Error),
}

/// A ctnetlink socket with a receive timeout.
struct Conn {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: what.to_string(),
        source,
    }
}

impl Conn {
    fn open() -> Result<Conn> {
        let mut socket =
            Socket::new(NETLINK_NETFILTER).map_err(io("open conntrack netlink socket"))?;
        socket
            .bind_auto()
            .map_err(io("bind conntrack netlink socket"))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(io("connect conntrack netlink socket"))?;
        let t = nix::sys::time::TimeVal::new(RECV_TIMEOUT.as_secs() as _, 0);
        nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::ReceiveTimeout, &t)
            .map_err(|e| io("set conntrack socket timeout")(e.into()))?;
        Ok(Conn {
            socket,
            seq: 0,
            buf: vec![0; RECV_BUF],
        })
    }

    fn send(&mut self, flags: u16, msg: ConntrackMessage) -> Result<u32> {
        self.seq += 1;
        let mut hdr = NetlinkHeader::default();
        hdr.flags = flags;
        hdr.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(
            hdr,
            NetlinkPayload::from(NetfilterMessage::new(
                NetfilterHeader::new(NetfilterProtoFamily::IPv4, 0, 0),
                msg,
            )),
        );
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf[..]);
        self.socket
            .send(&buf, 0)
            .map_err(io("send to conntrack netlink"))?;
        Ok(self.seq)
    }

    /// Receives the messages of one datagram that answer `seq`; `f` returns true when the
    /// answer is complete.
    fn recv_until(
        &mut self,
        seq: u32,
        mut f: impl FnMut(NetlinkPayload<NetfilterMessage>) -> Result<bool>,
    ) -> Result<()> {
        loop {
            let n = self
                .socket
                .recv(&mut &mut self.buf[..], 0)
                .map_err(io("receive from conntrack netlink"))?;
            let mut off = 0;
            while off < n {
                let msg = NetlinkMessage::<NetfilterMessage>::deserialize(&self.buf[off..n])
                    .map_err(|e| Error::Invalid(format!("conntrack netlink message: {e}")))?;
                let len = msg.header.length as usize;
                if len == 0 {
                    break;
                }
                off += (len + 3) & !3;
                if msg.header.sequence_number != seq {
                    continue;
                }
                if f(msg.payload)? {
                    return Ok(());
                }
            }
        }
    }

    /// Every IPv4 entry of the namespace.
    fn dump(&mut self) -> Result<Vec<Entry>, DumpError> {
        let seq = self
            .send(NLM_F_REQUEST | NLM_F_DUMP, ConntrackMessage::Get(vec![]))
            .map_err(DumpError::Other)?;
        let mut entries = Vec::new();
        let mut unsupported = false;
        self.recv_until(seq, |p| match p {
            NetlinkPayload::Done(_) => Ok(true),
            NetlinkPayload::Error(e) => match e.code.map(|c| c.get().abs()) {
                None => Ok(true),
                Some(libc::EOPNOTSUPP | libc::EPROTONOSUPPORT) => {
                    unsupported = true;
                    Ok(true)
                }
                Some(errno) => Err(Error::Invalid(format!(
                    "conntrack dump refused: {}",
                    std::io::Error::from_raw_os_error(errno)
                ))),
            },
            NetlinkPayload::InnerMessage(NetfilterMessage {
                inner: NetfilterMessageInner::Conntrack(m),
                ..
            }) => {
                let attrs = match m {
                    ConntrackMessage::New(a) | ConntrackMessage::Get(a) => a,
                    _ => return Ok(false),
                };
                entries.extend(Entry::from_attributes(attrs));
                Ok(false)
            }
            _ => Ok(false),
        })
        .map_err(DumpError::Other)?;
        if unsupported {
            return Err(DumpError::NotSupported);
        }
        Ok(entries)
    }

    /// Deletes one entry; false when it was already gone.
    fn delete(&mut self, e: &Entry) -> Result<bool> {
        let seq = self.send(
            NLM_F_REQUEST | NLM_F_ACK,
            ConntrackMessage::Delete(e.delete_attributes()),
        )?;
        let mut existed = true;
        self.recv_until(seq, |p| match p {
            NetlinkPayload::Error(err) => match err.code.map(|c| c.get().abs()) {
                None => Ok(true),
                Some(libc::ENOENT) => {
                    existed = false;
                    Ok(true)
                }
                Some(errno) => Err(Error::Invalid(format!(
                    "conntrack delete refused: {}",
                    std::io::Error::from_raw_os_error(errno)
                ))),
            },
            NetlinkPayload::Done(_) => Ok(true),
            _ => Ok(false),
        })?;
        Ok(existed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_netfilter::conntrack::{ProtoTuple, Protocol};

    fn tuple(src: [u8; 4], dst: [u8; 4]) -> Vec<Tuple> {
        vec![
            Tuple::Ip(vec![
                IPTuple::SourceAddress(Ipv4Addr::from(src).into()),
                IPTuple::DestinationAddress(Ipv4Addr::from(dst).into()),
            ]),
            Tuple::Proto(vec![
                ProtoTuple::Protocol(Protocol::Udp),
                ProtoTuple::SourcePort(5000),
                ProtoTuple::DestinationPort(53),
            ]),
        ]
    }

    fn entry(orig: Vec<Tuple>, reply: Vec<Tuple>) -> Entry {
        Entry::from_attributes(vec![
            ConntrackAttribute::CtaTupleOrig(orig),
            ConntrackAttribute::CtaTupleReply(reply),
        ])
        .unwrap()
    }

    fn set(ips: &[[u8; 4]]) -> BTreeSet<Ipv4Addr> {
        ips.iter().map(|i| Ipv4Addr::from(*i)).collect()
    }

    #[test]
    fn matches_the_address_in_either_tuple_either_side() {
        // A client's stream to a Service address DNATed to the pod 10.0.1.5: the pod is only
        // in the reply tuple.
        let dnat = entry(
            tuple([10, 0, 9, 9], [172, 20, 0, 10]),
            tuple([10, 0, 1, 5], [10, 0, 9, 9]),
        );
        assert!(dnat.involves(&set(&[[10, 0, 1, 5]])));
        assert!(dnat.involves(&set(&[[10, 0, 9, 9]])));
        assert!(!dnat.involves(&set(&[[10, 0, 1, 6]])));
        // A SNATed connection of the pod: the pod only in the original tuple.
        let snat = entry(
            tuple([10, 0, 1, 5], [8, 8, 8, 8]),
            tuple([8, 8, 8, 8], [10, 0, 0, 1]),
        );
        assert!(snat.involves(&set(&[[10, 0, 1, 6], [10, 0, 1, 5]])));
        assert!(!snat.involves(&set(&[])));
    }

    #[test]
    fn delete_echoes_the_original_tuple_and_zone() {
        let zone = DefaultNla::new(CTA_ZONE, vec![0, 7]);
        let e = Entry::from_attributes(vec![
            ConntrackAttribute::CtaTupleOrig(tuple([1, 1, 1, 1], [2, 2, 2, 2])),
            ConntrackAttribute::CtaTupleReply(tuple([2, 2, 2, 2], [1, 1, 1, 1])),
            ConntrackAttribute::CtaTimeout(30),
            ConntrackAttribute::Other(zone.clone()),
        ])
        .unwrap();
        assert_eq!(
            e.delete_attributes(),
            vec![
                ConntrackAttribute::CtaTupleOrig(tuple([1, 1, 1, 1], [2, 2, 2, 2])),
                ConntrackAttribute::Other(zone),
            ]
        );
        assert!(Entry::from_attributes(vec![ConntrackAttribute::CtaTimeout(1)]).is_none());
    }
}
