//! Datapath errors.

use std::io;

/// Errors of the datapath functions. Each names the object and the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A namespace path could not be opened or entered (missing, not a netns, no permission).
    #[error("network namespace {path}: {source}")]
    Netns { path: String, source: io::Error },
    /// A netlink request failed; `what` says which (e.g. "add veth eni1234 / eth0").
    #[error("{what}: {source}")]
    Netlink {
        what: String,
        source: rtnetlink::Error,
    },
    /// An object that must exist does not (e.g. no interface with a given MAC).
    #[error("{0}")]
    NotFound(String),
    /// An argument is invalid (e.g. a veth prefix longer than 4 characters).
    #[error("{0}")]
    Invalid(String),
    /// I/O outside netlink (opening a netlink socket, spawning the namespace thread).
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The errno of a netlink error (positive, e.g. `libc::EEXIST` = 17), if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Netlink { source, .. } => errno(source),
            _ => None,
        }
    }
}

/// The positive errno carried by an rtnetlink error, if any.
pub fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.code.map(|c| c.get().abs()),
        _ => None,
    }
}

/// `errno` values this crate tests for.
pub mod errnos {
    pub const ENOENT: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const ENODEV: i32 = 19;
    pub const EEXIST: i32 = 17;
    pub const EADDRNOTAVAIL: i32 = 99;
}

/// Wraps a netlink result with a description of the operation.
pub(crate) fn nl<T>(r: Result<T, rtnetlink::Error>, what: impl FnOnce() -> String) -> Result<T> {
    r.map_err(|source| Error::Netlink {
        what: what(),
        source,
    })
}
