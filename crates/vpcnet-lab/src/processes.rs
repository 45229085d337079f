//! The lab's process supervisor ([`Lab::processes`]): starts recorded lab processes (each
//! with its log under the lab's `logs/`), checks that they still run, waits on a condition
//! while they do, and stops them by role. The processes themselves are [`procs`] records.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::lab::Lab;
use crate::procs::{self, ProcRecord};
use crate::spawn::Place;
use crate::state;
use crate::wait::{log_tail, wait_for};

/// The lab's recorded processes ([`Lab::processes`]).
#[derive(Debug, Clone, Copy)]
pub struct Processes<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// The process supervisor.
    pub fn processes(&self) -> Processes<'_> {
        Processes { lab: self }
    }
}

impl Processes<'_> {
    /// Starts `cmd` in `place` as a recorded lab process (its log is
    /// `logs/<role with '-' for ' '>.log`).
    pub fn start(&self, role: &str, cmd: Command, place: &Place) -> Result<ProcRecord> {
        let p = procs::spawn(role, cmd, place, &self.log(role))?;
        state::update(&self.lab.dir, |s| {
            s.processes.push(p.clone());
            Ok(())
        })?;
        Ok(p)
    }

    /// The log of the lab process with `role`: `logs/<role with '-' for ' '>.log`.
    pub fn log(&self, role: &str) -> PathBuf {
        self.lab
            .logs()
            .join(format!("{}.log", role.replace(' ', "-")))
    }

    /// Errors naming the first of `procs` that is no longer running, with the end of its log.
    pub fn check_alive(&self, procs: &[&ProcRecord]) -> Result<()> {
        for p in procs {
            if !p.alive() {
                bail!("{} exited:\n{}", p.role, log_tail(&self.log(&p.role)));
            }
        }
        Ok(())
    }

    /// [`wait_for`] that also fails as soon as one of `procs` exits (naming it, with the end of
    /// its log).
    pub fn wait_ready<T>(
        &self,
        what: &str,
        timeout: Duration,
        procs: &[&ProcRecord],
        mut check: impl FnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        wait_for(what, timeout, || {
            self.check_alive(procs)?;
            check()
        })
    }

    /// Stops every recorded lab process with `role` (e.g. `kube-apiserver`, `kube-proxy n1`):
    /// SIGTERM, then SIGKILL after 10 s; drops them from the record. Returns how many there
    /// were.
    pub fn stop_role(&self, role: &str) -> Result<usize> {
        let recs: Vec<ProcRecord> = self
            .lab
            .state()?
            .processes
            .into_iter()
            .filter(|p| p.role == role)
            .collect();
        for p in &recs {
            p.stop(Duration::from_secs(10));
        }
        state::update(&self.lab.dir, |s| {
            s.processes.retain(|p| p.role != role || p.alive());
            Ok(())
        })?;
        Ok(recs.len())
    }
}
