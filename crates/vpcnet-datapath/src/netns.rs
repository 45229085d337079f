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
/// Errors: [`Error::Netns`] when the path does not exist or cannot be opened.
pub fn open(path: &Path) -> Result<OwnedFd> {
    File::open(path)
        .map(OwnedFd::from)
        .map_err(|source| Error::Netns {
            path: path.display().to_string(),
            source,
        })
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
    let socket = socket_in(ns, path_for_errors)?;
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

/// Creates a NETLINK_ROUTE socket inside `ns` on a helper thread.
fn socket_in(ns: &OwnedFd, path: &Path) -> Result<Socket> {
    let fd = ns.as_fd();
    std::thread::scope(|s| {
        s.spawn(|| {
            setns(fd, CloneFlags::CLONE_NEWNET).map_err(|e| Error::Netns {
                path: path.display().to_string(),
                source: std::io::Error::from(e),
            })?;
            Socket::new(NETLINK_ROUTE).map_err(|source| Error::Io {
                what: "open netlink socket in namespace".into(),
                source,
            })
        })
        .join()
        .unwrap_or_else(|_| {
            Err(Error::Io {
                what: "namespace helper thread".into(),
                source: std::io::Error::other("panicked"),
            })
        })
    })
}
