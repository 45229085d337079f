//! The agent's spawned tasks and their supervision: an essential task that ends unexpectedly
//! fails the agent.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::state::Shared;

/// The agent's spawned tasks: each essential task runs under a supervisor that turns its
/// unexpected end (return, panic, abort) into [`Shared::fail`]. Dropping it aborts them all
/// (a start that fails half-way leaves nothing running).
#[derive(Default)]
pub(super) struct Tasks {
    /// Awaited at shutdown.
    pub(super) supervisors: Vec<JoinHandle<()>>,
    /// Name and abort handle of each essential task.
    pub(super) essential: Vec<(&'static str, tokio::task::AbortHandle)>,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.supervisors {
            t.abort();
        }
        for (_, a) in &self.essential {
            a.abort();
        }
    }
}

impl Tasks {
    /// Spawns `fut` as the essential task `name`. If it ends before `stop` flips, the agent
    /// fails: one error line naming the task and why, `/healthz` 503 at once, and [`crate::run`]
    /// returns the error (the process exits non-zero, so kubelet restarts it).
    pub(super) fn essential<F>(
        &mut self,
        name: &'static str,
        shared: &Arc<Shared>,
        stop: &watch::Receiver<bool>,
        fut: F,
    ) where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let inner = tokio::spawn(fut);
        self.essential.push((name, inner.abort_handle()));
        let (shared, stop) = (shared.clone(), stop.clone());
        self.supervisors.push(tokio::spawn(async move {
            let res = inner.await;
            if *stop.borrow() {
                return;
            }
            let why = match res {
                Ok(()) => "ended".to_string(),
                Err(e) if e.is_panic() => {
                    let p = e.into_panic();
                    let msg = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    format!("panicked: {msg}")
                }
                Err(_) => "was cancelled".to_string(),
            };
            tracing::error!(
                task = name,
                "essential task {name} {why} unexpectedly: the agent is unhealthy and exits so that it is restarted"
            );
            shared.fail(format!("essential task {name} {why}"));
        }));
    }

    /// Spawns a task that is not essential (its end is logged only).
    pub(super) fn other<F>(&mut self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.supervisors.push(tokio::spawn(fut));
    }

    /// [`Tasks::other`] for `fut`, which ends at the latest when `stop` flips.
    pub(super) fn other_until<F>(&mut self, stop: &watch::Receiver<bool>, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut stop = stop.clone();
        self.other(async move {
            tokio::select! {
                _ = fut => {}
                _ = stop.changed() => {}
            }
        });
    }
}
