//! Netlink handles bound to a network namespace, without moving the calling thread.
//!
//! A netlink socket stays in the namespace it was created in. [`connect_in`] creates the socket
//! on a short-lived helper thread that enters the target namespace (`setns`) and exits; the
//! caller's threads never change namespace.

use std::fs::File;
use std::os::fd::{AsFd, IntoRawFd, OwnedFd};
use std::os::unix::io::FromRawFd;
use std::path::Path;

use nix::sched::{setns, CloneFlags};
use rtnetlink::sys::{protocols::NETLINK_ROUTE, Socket, TokioSocket};
use rtnetlink::Handle;

use crate::{Error, Result};

/// Opens a network namespace file (`/var/run/netns/NAME`, `/proc/PID/ns/net`, a CNI_NETNS path).
///
/// Errors: [`Error::Netns`] when the path does not exist, cannot be opened or is not a namespace
/// file (nsfs).
pub fn open(path: &Path) -> Result<OwnedFd> {
    let err = |source| Error::Netns {
        path: path.display().to_string(),
        source,
    };
    let fd = File::open(path).map(OwnedFd::from).map_err(err)?;
    let fs = nix::sys::statfs::fstatfs(&fd).map_err(|e| err(e.into()))?;
    if fs.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
        return Err(err(std::io::Error::other(
            "not a namespace file (expected /var/run/netns/NAME or /proc/PID/ns/net)",
        )));
    }
    Ok(fd)
}

/// An rtnetlink handle in the caller's current namespace. Must be called inside a tokio runtime:
/// the connection task is spawned on it.
pub fn connect() -> Result<Handle> {
    let (conn, handle, _) = rtnetlink::new_connection().map_err(|source| Error::Io {
        what: "open netlink socket".into(),
        source,
    })?;
    tokio::spawn(conn);
    Ok(handle)
}

/// An rtnetlink handle whose socket lives in the namespace `ns` (an fd from [`open`]).
///
/// Errors: [`Error::Netns`] when `ns` is not a network namespace (`setns` fails).
/// Must be called inside a tokio runtime.
pub fn connect_in(ns: &OwnedFd, path_for_errors: &Path) -> Result<Handle> {
    socket_in(ns, path_for_errors)?.connect()
}

/// A netlink socket being opened inside a namespace by a helper thread; start it early
/// ([`socket_in`]) and [`PendingSocket::connect`] when the handle is needed, so the thread's
/// start-up overlaps other work (e.g. the agent call).
pub struct PendingSocket {
    thread: std::thread::JoinHandle<Result<Socket>>,
}

/// Starts opening a NETLINK_ROUTE socket inside `ns` on a helper thread that enters the
/// namespace with `setns` and exits; the caller's threads never change namespace.
///
/// Errors: [`Error::Io`] when `ns` cannot be duplicated or the thread cannot start.
pub fn socket_in(ns: &OwnedFd, path: &Path) -> Result<PendingSocket> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| Error::Io { what, source }
    };
    let fd = ns.try_clone().map_err(io("duplicate namespace fd"))?;
    let path = path.display().to_string();
    let thread = std::thread::Builder::new()
        .name("netns".into())
        .spawn(move || {
            setns(fd.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| Error::Netns {
                path,
                source: std::io::Error::from(e),
            })?;
            Socket::new(NETLINK_ROUTE).map_err(|source| Error::Io {
                what: "open netlink socket in namespace".into(),
                source,
            })
        })
        .map_err(io("start namespace helper thread"))?;
    Ok(PendingSocket { thread })
}

impl PendingSocket {
    /// Waits for the socket itself (e.g. to bind it to multicast groups before connecting).
    ///
    /// Errors: [`Error::Netns`] when the namespace could not be entered, [`Error::Io`].
    pub fn into_socket(self) -> Result<Socket> {
        self.thread.join().unwrap_or_else(|_| {
            Err(Error::Io {
                what: "namespace helper thread".into(),
                source: std::io::Error::other("panicked"),
            })
        })
    }

    /// Waits for the socket and wraps it in an rtnetlink handle (connection task spawned on the
    /// current tokio runtime).
    ///
    /// Errors: [`Error::Netns`] when the namespace could not be entered, [`Error::Io`].
    pub fn connect(self) -> Result<Handle> {
        let socket = self.into_socket()?;
        socket.set_non_blocking(true).map_err(|source| Error::Io {
            what: "set netlink socket non-blocking".into(),
            source,
        })?;
        // SAFETY: the fd comes from a freshly created netlink socket we own and hand over.
        let socket = unsafe { TokioSocket::from_raw_fd(socket.into_raw_fd()) };
        let (conn, handle, _) = rtnetlink::from_socket(socket);
        tokio::spawn(conn);
        Ok(handle)
    }
}
