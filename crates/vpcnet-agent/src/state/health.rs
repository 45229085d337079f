//! Health: the reconciler's last EC2 error, why an essential task stopped (the agent is then
//! unhealthy and exits), and the datapath audit's last pass.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::watch;
use vpcnet_introspection::DatapathDoc;

/// The agent's health (see the module doc).
pub struct Health {
    /// Last EC2 error of the reconciler (shown by Status and introspection).
    last_error: Mutex<Option<String>>,
    /// Why an essential task stopped (the agent is unhealthy and the process exits).
    failure: Mutex<Option<String>>,
    /// Flips to true when an essential task stops unexpectedly.
    failed: watch::Sender<bool>,
    /// The datapath audit's last pass (`/v1/datapath`), written by [`crate::datapath_audit`].
    datapath: Mutex<DatapathDoc>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            last_error: Mutex::new(None),
            failure: Mutex::new(None),
            failed: watch::channel(false).0,
            datapath: Mutex::default(),
        }
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Health {
    /// Sets (or clears) the reconciler's last EC2 error.
    pub fn set_error(&self, e: Option<String>) {
        *locked(&self.last_error) = e;
    }

    /// The reconciler's last EC2 error.
    pub fn last_error(&self) -> Option<String> {
        locked(&self.last_error).clone()
    }

    /// Records that an essential task stopped: health turns unhealthy and [`crate::run`]
    /// ends the process. The first reason is kept.
    pub fn fail(&self, reason: String) {
        let mut f = locked(&self.failure);
        if f.is_none() {
            *f = Some(reason);
        }
        drop(f);
        self.failed.send_replace(true);
    }

    /// Why the agent failed, if an essential task stopped.
    pub fn failure(&self) -> Option<String> {
        locked(&self.failure).clone()
    }

    /// Follows whether an essential task has stopped ([`Self::fail`]).
    pub fn failed(&self) -> watch::Receiver<bool> {
        self.failed.subscribe()
    }

    /// The datapath audit's last pass.
    pub fn datapath(&self) -> DatapathDoc {
        locked(&self.datapath).clone()
    }

    /// Updates the datapath audit's document in place.
    pub fn update_datapath(&self, f: impl FnOnce(&mut DatapathDoc)) {
        f(&mut locked(&self.datapath));
    }

    /// Why the datapath audit takes the node out of service (an unrepaired problem that cuts
    /// every pod off), if it does.
    pub fn datapath_not_ready(&self) -> Option<String> {
        locked(&self.datapath).not_ready.clone()
    }
}
