//! Starting a process inside a lab namespace: a node's mount namespace (its own `/etc/kubernetes`,
//! `/var/lib/kubelet`, `/etc/cni/net.d`, ... see [`crate::machine`]) and network namespace joined
//! by util-linux's `nsenter`, which execs the program: no code of ours runs between fork and
//! exec.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::netns;
use crate::state::NodeRecord;

/// Where a child process runs: a named network namespace and a persistent mount namespace.
#[derive(Debug, Clone, Default)]
pub struct Place {
    /// Named network namespace to join (`/run/netns/<name>`); `None` keeps the caller's.
    pub netns: Option<String>,
    /// Persistent mount namespace to join (a file bind-mounted from `/proc/<pid>/ns/mnt`, see
    /// [`crate::machine`]); `None` keeps the caller's.
    pub mntns: Option<PathBuf>,
    /// Persistent UTS namespace to join (the node's hostname, [`crate::machine::uts_file`]);
    /// `None`, or a file that does not exist (a lab made before nodes had one), keeps the
    /// caller's.
    pub utsns: Option<PathBuf>,
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

    /// Rewrites `cmd` to start in this place, through util-linux's `nsenter`, which execs the
    /// program in the same process: the pid `cmd` spawns is the program's. The program,
    /// arguments, environment and working directory are kept; everything else (stdio, process
    /// group) is set after this call. `env_clear` is not kept: start the program with `env -i`
    /// for that. Errors: a namespace does not exist.
    pub fn apply(&self, cmd: &mut Command) -> Result<()> {
        let launcher = self.launcher()?;
        let Some((program, args)) = launcher.split_first() else {
            return Ok(());
        };
        let mut w = Command::new(program);
        w.args(args);
        w.arg(cmd.get_program()).args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => w.env(k, v),
                None => w.env_remove(k),
            };
        }
        if let Some(d) = cmd.get_current_dir() {
            w.current_dir(d);
        }
        *cmd = w;
        Ok(())
    }

    /// The `nsenter` command line (ending in `--`) that starts a program in this place, to
    /// which the program and its arguments are appended; empty when the place is the caller's
    /// own. Errors: a namespace does not exist.
    pub fn launcher(&self) -> Result<Vec<OsString>> {
        if let Some(name) = &self.netns {
            if !netns::path(name).exists() {
                bail!("network namespace {name} does not exist");
            }
        }
        if let Some(p) = &self.mntns {
            if !p.exists() {
                bail!("mount namespace {} does not exist", p.display());
            }
        }
        if self.netns.is_none() && self.mntns.is_none() {
            return Ok(Vec::new());
        }
        let mut w = vec![OsString::from("nsenter")];
        if let Some(p) = &self.mntns {
            w.push(arg_with("--mount=", p));
            w.push("--wd=/".into());
        }
        if let Some(p) = self.utsns.as_ref().filter(|p| p.exists()) {
            w.push(arg_with("--uts=", p));
        }
        if let Some(name) = &self.netns {
            w.push(arg_with("--net=", &netns::path(name)));
        }
        w.push("--".into());
        Ok(w)
    }
}

impl NodeRecord {
    /// Where the node's processes run: its network, mount and UTS namespaces.
    pub fn place(&self) -> Place {
        let mut p = Place::netns(&self.netns).mount_ns(&self.mntns);
        p.utsns = Some(crate::machine::uts_file(&self.mntns));
        p
    }
}

/// `--flag=` followed by a path (paths need not be UTF-8).
fn arg_with(flag: &str, path: &Path) -> OsString {
    let mut a = OsString::from(flag);
    a.push(path);
    a
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

/// [`in_netns`] for async work: the future `f` makes runs on a current-thread runtime of that
/// thread, so every task and socket of it stays in the namespace. (A runtime shared with other
/// threads would open some sockets from worker threads outside the namespace: this is why the
/// lab keeps one runtime per namespace call besides its host-side one, [`crate::runtime`].)
pub fn in_netns_async<T, F>(name: &str, f: impl FnOnce() -> F + Send + 'static) -> Result<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T>>,
{
    in_netns(name, move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("a runtime for the lab namespace")?
            .block_on(f())
    })
}
