//! Long-lived lab processes (emulator daemon, containerd, agent, `ctr run`): started detached
//! in their own process group with output to a log file, recorded by pid and kernel start time
//! (so a recycled pid is never signalled), and stopped with SIGTERM then SIGKILL.

use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::spawn::Place;

pub use crate::state::ProcRecord;

/// Start time (clock ticks since boot) and state letter of `pid`, if it exists.
fn stat(pid: i32) -> Option<(u64, char)> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // rest starts at field 3 (state); start time is field 22.
    let start = fields.get(19)?.parse().ok()?;
    Some((start, state))
}

impl ProcRecord {
    /// Whether this exact process is still running (not exited, not a zombie).
    pub fn alive(&self) -> bool {
        reap(self.pid);
        matches!(stat(self.pid), Some((st, state)) if st == self.start_time && state != 'Z')
    }

    /// Sends `signal` if this exact process is still running.
    pub fn signal(&self, signal: Signal) {
        if self.alive() {
            let _ = kill(Pid::from_raw(self.pid), signal);
        }
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL and wait up to 5 s more. Returns whether the
    /// process is gone.
    pub fn stop(&self, grace: Duration) -> bool {
        self.signal(Signal::SIGTERM);
        if wait_gone(self, grace) {
            return true;
        }
        self.signal(Signal::SIGKILL);
        wait_gone(self, Duration::from_secs(5))
    }
}

/// [`ProcRecord::stop`] for many at once: SIGTERM to all, one grace for all, then SIGKILL to
/// those left. Returns those still running after all that.
pub fn stop_all<'a>(procs: &[&'a ProcRecord], grace: Duration) -> Vec<&'a ProcRecord> {
    for p in procs {
        p.signal(Signal::SIGTERM);
    }
    let t0 = Instant::now();
    while t0.elapsed() < grace && procs.iter().any(|p| p.alive()) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<&ProcRecord> = procs.iter().copied().filter(|p| p.alive()).collect();
    for p in &left {
        p.signal(Signal::SIGKILL);
    }
    left.into_iter()
        .filter(|p| !wait_gone(p, Duration::from_secs(5)))
        .collect()
}

fn wait_gone(p: &ProcRecord, timeout: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if !p.alive() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !p.alive()
}

/// A process's memory from `/proc/<pid>/status`: resident set (`VmRSS`) and its peak
/// (`VmHWM`), KiB. Errors: the process is gone, or a field is missing.
pub fn memory_kib(pid: i32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status (the process is gone?)"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Collects `pid`'s exit status if it is our child (no effect otherwise), so it does not
/// linger as a zombie.
pub fn reap(pid: i32) {
    // ECHILD when it is not our child.
    let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
}

/// Kills a pid (SIGKILL) that was found by a scan (namespace or cgroup), not recorded.
pub fn kill_pid(pid: i32) {
    // The pid was just found in one of the lab's own namespaces or cgroups.
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    reap(pid);
}

/// Starts `cmd` in `place`, detached from our process group (Ctrl-C on the CLI does not hit
/// it), stdin from /dev/null, stdout and stderr appended to `log`. Errors: the program cannot
/// be started or the namespace is missing.
pub fn spawn(role: &str, mut cmd: Command, place: &Place, log: &Path) -> Result<ProcRecord> {
    let log_file = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening log {}", log.display()))?;
    // Placed first: the place's wrapper becomes the command that the settings below apply to.
    place.apply(&mut cmd)?;
    cmd.stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .process_group(0);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {role} ({:?})", cmd.get_program()))?;
    let pid = child.id() as i32;
    let start_time = stat(pid).map(|(s, _)| s).unwrap_or(0);
    Ok(ProcRecord {
        role: role.to_string(),
        pid,
        start_time,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_of_this_process_and_of_none() {
        let (rss, hwm) = super::memory_kib(std::process::id() as i32).unwrap();
        assert!(rss > 0 && hwm >= rss, "{rss} {hwm}");
        let e = super::memory_kib(i32::MAX).unwrap_err();
        assert!(format!("{e:#}").contains("is gone"), "{e:#}");
    }
}
