//! Starting a process inside a lab namespace: a node's mount namespace (its own `/etc/kubernetes`,
//! `/var/lib/kubelet`, `/etc/cni/net.d`, ... see [`crate::machine`]) and network namespace joined
//! with `setns(2)`, and, when asked, a further private mount namespace with bind mounts, all done
//! in the child between fork and exec.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::netns;

/// Where a child process runs: a named network namespace, a persistent mount namespace, and
/// optional bind mounts (source → target, both directories; the target must exist) in a private
/// mount namespace made after joining that one.
#[derive(Debug, Clone, Default)]
pub struct Place {
    /// Named network namespace to join (`/run/netns/<name>`); `None` keeps the caller's.
    pub netns: Option<String>,
    /// Persistent mount namespace to join (a file bind-mounted from `/proc/<pid>/ns/mnt`, see
    /// [`crate::machine`]); `None` keeps the caller's.
    pub mntns: Option<PathBuf>,
    /// Bind mounts made in a private mount namespace before exec.
    pub binds: Vec<(PathBuf, PathBuf)>,
}

impl Place {
    /// The named network namespace, no mounts.
    pub fn netns(name: &str) -> Self {
        Place {
            netns: Some(name.to_string()),
            ..Default::default()
        }
    }

    /// Also joins the persistent mount namespace at `path` (a lab node's filesystem view).
    pub fn mount_ns(mut self, path: impl AsRef<Path>) -> Self {
        self.mntns = Some(path.as_ref().to_path_buf());
        self
    }

    /// Adds a bind mount `source` → `target`.
    pub fn bind(mut self, source: impl AsRef<Path>, target: impl AsRef<Path>) -> Self {
        self.binds
            .push((source.as_ref().to_path_buf(), target.as_ref().to_path_buf()));
        self
    }

    /// Arranges for `cmd` to start in this place. Errors: the namespace does not exist or a
    /// path holds a NUL byte. Failures inside the child (mount, setns) make spawn fail.
    pub fn apply(&self, cmd: &mut Command) -> Result<()> {
        let ns_file = match &self.netns {
            Some(name) => Some(
                File::open(netns::path(name))
                    .with_context(|| format!("network namespace {name} does not exist"))?,
            ),
            None => None,
        };
        let mnt_file = match &self.mntns {
            Some(p) => Some(
                File::open(p)
                    .with_context(|| format!("mount namespace {} does not exist", p.display()))?,
            ),
            None => None,
        };
        let binds = self
            .binds
            .iter()
            .map(|(s, t)| Ok((cstr(s)?, cstr(t)?)))
            .collect::<Result<Vec<_>>>()?;
        let root = CString::new("/").expect("no NUL");
        // SAFETY: the closure runs in the forked child before exec and only makes raw
        // syscalls (setns, chdir, unshare, mount) on data prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(f) = &mnt_file {
                    // The child is single-threaded, as setns(CLONE_NEWNS) requires.
                    if libc::setns(f.as_raw_fd(), libc::CLONE_NEWNS) != 0
                        || libc::chdir(root.as_ptr()) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if !binds.is_empty() {
                    if libc::unshare(libc::CLONE_NEWNS) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // Slave, not private: unmounts in the host (e.g. `ip netns delete`) still propagate here.
                    let flags = libc::MS_REC | libc::MS_SLAVE;
                    if libc::mount(
                        std::ptr::null(),
                        root.as_ptr(),
                        std::ptr::null(),
                        flags,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    for (s, t) in &binds {
                        if libc::mount(
                            s.as_ptr(),
                            t.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND,
                            std::ptr::null(),
                        ) != 0
                        {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                }
                if let Some(f) = &ns_file {
                    if libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok(())
    }
}

fn cstr(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .with_context(|| format!("path {} contains a NUL byte", p.display()))
}

/// Runs `f` on a new thread that has joined the named network namespace, and returns its
/// result. Sockets the closure opens live in that namespace (used to reach the lab's EC2
/// endpoint, which is only reachable inside the VPC namespace).
pub fn in_netns<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let file = File::open(netns::path(name))
        .with_context(|| format!("network namespace {name} does not exist"))?;
    std::thread::spawn(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
            .context("setns into the lab namespace")?;
        f()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("thread in the lab namespace panicked"))?
}
