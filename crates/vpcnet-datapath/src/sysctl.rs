//! Reading and writing `/proc/sys/net/...` of a network namespace. `/proc/sys/net` shows the
//! namespace of the thread that opens it, so each access runs on a short-lived helper thread
//! that enters the namespace (`setns`) first; the caller's threads never change namespace.

use std::path::Path;

use crate::{Error, Result};

/// The sysctl file of a dotted key: `net.ipv4.ip_forward` → `/proc/sys/net/ipv4/ip_forward`.
/// Dots inside an interface name cannot be written this way; pass the path (starting with
/// `/proc/sys/`) instead.
pub fn path_of(key: &str) -> String {
    if key.starts_with('/') {
        key.to_string()
    } else {
        format!("/proc/sys/{}", key.replace('.', "/"))
    }
}

/// Reads sysctl `key` (dotted, or a `/proc/sys/...` path) of `netns` (`None`: the caller's
/// namespace), trimmed.
///
/// Errors: [`Error::Netns`] when the namespace cannot be opened, [`Error::Io`] when the file
/// cannot be read (e.g. no interface of that name).
pub async fn read(netns: Option<&Path>, key: &str) -> Result<String> {
    let path = path_of(key);
    let what = format!("read {path}");
    in_netns(netns, what, move || std::fs::read_to_string(&path))
        .await
        .map(|s| s.trim().to_string())
}

/// Writes `value` to sysctl `key` (dotted, or a `/proc/sys/...` path) of `netns` (`None`: the
/// caller's namespace).
///
/// Errors: [`Error::Netns`], [`Error::Io`] (e.g. a read-only `/proc/sys` in an unprivileged
/// container: run the agent with `CAP_NET_ADMIN` in the host network namespace).
pub async fn write(netns: Option<&Path>, key: &str, value: &str) -> Result<()> {
    let (path, value) = (path_of(key), value.to_string());
    let what = format!("write {value} to {path}");
    in_netns(netns, what, move || std::fs::write(&path, &value)).await
}

/// Runs `f` on a helper thread inside `netns` (or the caller's namespace).
async fn in_netns<T, F>(netns: Option<&Path>, what: String, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> std::io::Result<T> + Send + 'static,
{
    let fd = netns.map(crate::netns::open).transpose()?;
    let r = tokio::task::spawn_blocking(move || {
        std::thread::scope(|s| {
            s.spawn(|| {
                if let Some(fd) = &fd {
                    nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(std::io::Error::from)?;
                }
                f()
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("sysctl thread panicked")))
        })
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    r.map_err(|source| Error::Io { what, source })
}

#[cfg(test)]
mod tests {
    #[test]
    fn dotted_keys_map_to_proc_sys() {
        assert_eq!(
            super::path_of("net.ipv4.ip_forward"),
            "/proc/sys/net/ipv4/ip_forward"
        );
        assert_eq!(
            super::path_of("/proc/sys/net/ipv4/conf/eth0.5/rp_filter"),
            "/proc/sys/net/ipv4/conf/eth0.5/rp_filter"
        );
    }
}
