//! Reading an NFLOG group (`nfnetlink_log`): [`NflogSocket::open`] binds the group in a
//! network namespace, asks for the first [`COPY_RANGE`] bytes of each packet and per-group
//! sequence numbers; [`NflogSocket::recv`] returns the next datagram's packets, waiting at
//! most the socket's receive timeout.
//!
//! Blocking by design: run it on a thread of its own. A full receive buffer makes the kernel
//! drop messages and the next read fail with `ENOBUFS` ([`RecvError::Overrun`]); the socket
//! stays usable, and the messages lost are counted from the gaps in the sequence numbers
//! ([`NflogSocket::take_lost`]).

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_netfilter::nflog::{
    config_request, ConfigCmd, ConfigFlags, ConfigMode, ConfigNla, PacketNla, ULogMessage,
};
use netlink_packet_netfilter::{NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily};
use nix::sched::{setns, CloneFlags};
use rtnetlink::sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use crate::policy_events::COPY_RANGE;
use crate::{Error, Result};

/// Receive buffer asked for (the kernel may cap it at `net.core.rmem_max`).
const RCVBUF: usize = 1 << 20;
/// One datagram: the kernel batches messages up to its `nlbufsiz` (one page by default).
const DATAGRAM: usize = 64 * 1024;

/// One logged packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NflogPacket {
    /// The rule's `log prefix`.
    pub prefix: String,
    /// The first bytes of the packet from its network header on.
    pub payload: Vec<u8>,
}

/// Why [`NflogSocket::recv`] returned no packets.
#[derive(Debug)]
pub enum RecvError {
    /// Nothing arrived within the receive timeout.
    Timeout,
    /// The receive buffer overflowed (`ENOBUFS`): messages were lost; read on.
    Overrun,
    /// Any other failure (the socket may be unusable).
    Io(Error),
}

/// A netlink socket bound to one NFLOG group.
pub struct NflogSocket {
    socket: Socket,
    group: u16,
    buf: Vec<u8>,
    /// The sequence number expected next, once one was seen.
    next_seq: Option<u32>,
    lost: u64,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: what.to_string(),
        source,
    }
}

impl NflogSocket {
    /// Binds NFLOG `group` in the namespace at `netns` (`None`: the caller's), with reads
    /// waiting at most `timeout`.
    ///
    /// Errors: [`Error::Netns`] when the namespace cannot be entered; [`Error::Io`] when the
    /// socket cannot be opened or the kernel refuses the binding (e.g. another program has
    /// bound the group: `Device or resource busy`).
    pub fn open(netns: Option<&Path>, group: u16, timeout: Duration) -> Result<NflogSocket> {
        let socket = match netns {
            None => Socket::new(NETLINK_NETFILTER).map_err(io("open NFLOG netlink socket"))?,
            Some(path) => {
                let ns = crate::netns::open(path)?;
                let path = path.display().to_string();
                std::thread::Builder::new()
                    .name("netns".into())
                    .spawn(move || {
                        setns(ns.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| Error::Netns {
                            path,
                            source: e.into(),
                        })?;
                        Socket::new(NETLINK_NETFILTER)
                            .map_err(io("open NFLOG netlink socket in namespace"))
                    })
                    .map_err(io("start namespace helper thread"))?
                    .join()
                    .unwrap_or_else(|_| {
                        Err(Error::Io {
                            what: "namespace helper thread".into(),
                            source: std::io::Error::other("panicked"),
                        })
                    })?
            }
        };
        let mut s = NflogSocket {
            socket,
            group,
            buf: vec![0; DATAGRAM],
            next_seq: None,
            lost: 0,
        };
        s.socket
            .bind_auto()
            .map_err(io("bind NFLOG netlink socket"))?;
        s.socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(io("connect NFLOG netlink socket"))?;
        // A larger buffer rides out bursts; failing to get it is not fatal.
        let _ = nix::sys::socket::setsockopt(&s.socket, nix::sys::socket::sockopt::RcvBuf, &RCVBUF);
        let t = nix::sys::time::TimeVal::new(timeout.as_secs() as _, timeout.subsec_micros() as _);
        nix::sys::socket::setsockopt(&s.socket, nix::sys::socket::sockopt::ReceiveTimeout, &t)
            .map_err(|e| io("set NFLOG socket timeout")(e.into()))?;
        s.configure(vec![ConfigNla::Cmd(ConfigCmd::Bind)], "bind")?;
        s.configure(
            vec![
                ConfigNla::Mode(ConfigMode::new_packet(COPY_RANGE)),
                ConfigNla::Flags(ConfigFlags::SEQ),
            ],
            "configure",
        )?;
        Ok(s)
    }

    /// Sends one config request and waits for its acknowledgement.
    fn configure(&mut self, nlas: Vec<ConfigNla>, what: &str) -> Result<()> {
        let context = format!("{what} NFLOG group {}", self.group);
        let mut msg = config_request(NetfilterProtoFamily::Unspec, self.group, nlas);
        msg.header.sequence_number = 1;
        let mut buf = vec![0; msg.buffer_len()];
        msg.serialize(&mut buf);
        self.socket.send(&buf, 0).map_err(io(&context))?;
        loop {
            let n = self
                .socket
                .recv(&mut &mut self.buf[..], 0)
                .map_err(io(&context))?;
            for msg in messages(&self.buf[..n]) {
                let msg = msg.map_err(|e| Error::Invalid(format!("{context}: {e}")))?;
                if let NetlinkPayload::Error(e) = msg.payload {
                    return match e.code {
                        None => Ok(()),
                        Some(code) => Err(Error::Io {
                            what: format!(
                                "{context} (is another program reading that group, or is nfnetlink_log missing?)"
                            ),
                            source: std::io::Error::from_raw_os_error(code.get().abs()),
                        }),
                    };
                }
            }
        }
    }

    /// The packets of the next datagram (possibly none: another message type).
    pub fn recv(&mut self) -> std::result::Result<Vec<NflogPacket>, RecvError> {
        let n = match self.socket.recv(&mut &mut self.buf[..], 0) {
            Ok(n) => n,
            Err(e) => {
                return Err(match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EINTR) => RecvError::Timeout,
                    Some(libc::ENOBUFS) => {
                        // The gap shows in the next sequence number.
                        RecvError::Overrun
                    }
                    _ => RecvError::Io(io("receive from NFLOG")(e)),
                });
            }
        };
        let mut packets = Vec::new();
        for msg in messages(&self.buf[..n]) {
            let Ok(msg) = msg else { continue };
            let NetlinkPayload::InnerMessage(NetfilterMessage {
                inner: NetfilterMessageInner::ULog(ULogMessage::Packet(nlas)),
                ..
            }) = msg.payload
            else {
                continue;
            };
            let mut packet = NflogPacket {
                prefix: String::new(),
                payload: Vec::new(),
            };
            for nla in nlas {
                match nla {
                    PacketNla::Prefix(p) => packet.prefix = p.to_string_lossy().into_owned(),
                    PacketNla::Payload(p) => packet.payload = p,
                    PacketNla::Seq(seq) => {
                        if let Some(next) = self.next_seq {
                            self.lost += u64::from(seq.wrapping_sub(next));
                        }
                        self.next_seq = Some(seq.wrapping_add(1));
                    }
                    _ => {}
                }
            }
            packets.push(packet);
        }
        Ok(packets)
    }

    /// Messages the kernel dropped since the last call (gaps in the sequence numbers).
    pub fn take_lost(&mut self) -> u64 {
        std::mem::take(&mut self.lost)
    }
}

/// The netlink messages of one datagram.
fn messages(
    mut buf: &[u8],
) -> impl Iterator<Item = std::result::Result<NetlinkMessage<NetfilterMessage>, String>> + '_ {
    std::iter::from_fn(move || {
        if buf.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len < 16 || len > buf.len() {
            buf = &[];
            return Some(Err("truncated netlink message".into()));
        }
        let msg =
            NetlinkMessage::<NetfilterMessage>::deserialize(&buf[..len]).map_err(|e| e.to_string());
        buf = &buf[((len + 3) & !3).min(buf.len())..];
        Some(msg)
    })
}
