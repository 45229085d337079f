//! Links that disappear, as the kernel announces them: a NETLINK_ROUTE socket subscribed to
//! the `RTMGRP_LINK` multicast group, turned into a channel of [`RemovedLink`]s. The agent
//! uses it to notice at once that a secondary ENI's interface vanished (the ENI was detached
//! behind its back) instead of at its next periodic pass.

use std::os::fd::{FromRawFd, IntoRawFd};
use std::path::Path;

use futures::StreamExt;
use rtnetlink::constants::RTMGRP_LINK;
use rtnetlink::packet_core::NetlinkPayload;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr, TokioSocket};
use tokio::sync::mpsc;

use crate::{Error, Result};

/// A link the kernel deleted (`RTM_DELLINK`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedLink {
    pub index: u32,
    pub name: String,
    /// Hardware address, formatted `aa:bb:cc:dd:ee:ff` (empty when the message had none).
    pub mac: String,
}

impl RemovedLink {
    fn from_msg(m: &LinkMessage) -> Self {
        let mut l = RemovedLink {
            index: m.header.index,
            name: String::new(),
            mac: String::new(),
        };
        for a in &m.attributes {
            match a {
                LinkAttribute::IfName(n) => l.name = n.clone(),
                LinkAttribute::Address(mac) => l.mac = crate::names::format_mac(mac),
                _ => {}
            }
        }
        l
    }
}

/// Subscribes to link removals in `netns` (`None`: the caller's namespace) and returns them
/// as they happen, until the receiver is dropped. Must be called inside a tokio runtime (the
/// connection and the forwarding task are spawned on it).
///
/// Errors: [`Error::Netns`] when the namespace cannot be entered, [`Error::Io`] when the
/// socket cannot be opened or bound to the group.
pub fn removed_links(netns: Option<&Path>) -> Result<mpsc::UnboundedReceiver<RemovedLink>> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| Error::Io { what, source }
    };
    let mut socket = match netns {
        Some(p) => crate::netns::socket_in(&crate::netns::open(p)?, p)?.into_socket()?,
        None => Socket::new(NETLINK_ROUTE).map_err(io("open netlink socket"))?,
    };
    socket
        .bind(&SocketAddr::new(0, RTMGRP_LINK))
        .map_err(io("subscribe to link events (bind RTMGRP_LINK)"))?;
    socket
        .set_non_blocking(true)
        .map_err(io("set netlink socket non-blocking"))?;
    // SAFETY: the fd comes from the netlink socket created above, handed over whole.
    let socket = unsafe { TokioSocket::from_raw_fd(socket.into_raw_fd()) };
    let (conn, _handle, mut messages) = rtnetlink::from_socket(socket);
    let (tx, rx) = mpsc::unbounded_channel();
    let conn = tokio::spawn(conn);
    tokio::spawn(async move {
        while let Some((m, _)) = messages.next().await {
            if let NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(l)) = m.payload {
                if tx.send(RemovedLink::from_msg(&l)).is_err() {
                    break;
                }
            }
        }
        conn.abort();
    });
    Ok(rx)
}
