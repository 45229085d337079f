//! The pool and its persistence: the address pool under its lock, the checkpoint store and
//! the lock that orders its writes, whether the pool has been filled once (ready), and the
//! notifications around pool changes (the reconciler's wake, the conntrack flush's wake, the
//! growth that waiting ADDs listen for).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use vpcnet_ipam::Pool;

use crate::checkpoint_file::{CheckpointStore, CheckpointWriteError};
use crate::metrics::Metrics;

/// The pool, its checkpoint and the wake-ups around it (see the module doc).
pub struct PoolState {
    pool: Mutex<Pool>,
    /// Serialises checkpoint writes so an older snapshot never overwrites a newer one.
    persist_lock: tokio::sync::Mutex<()>,
    /// Where the checkpoint lives ([`crate::AgentDeps::store`]: the injected store, else the
    /// file at `checkpoint_path`).
    store: Arc<dyn CheckpointStore>,
    /// Counts failed checkpoint writes.
    metrics: Arc<Metrics>,
    /// The pool has been filled once: ADD may be served.
    ready: AtomicBool,
    /// Wakes those waiting for [`Self::set_ready`] ([`Self::wait_ready`]).
    became_ready: Notify,
    /// Wakes the reconciler (an ADD took the pool below target, or a DEL freed something).
    wake: Notify,
    /// Wakes the conntrack flush ([`crate::conntrack`]): an address was released.
    conntrack_wake: Notify,
    /// Wakes the ADDs waiting for the pool to grow ([`PoolState::grew`]).
    grew: Notify,
}

impl PoolState {
    pub(super) fn new(pool: Pool, store: Arc<dyn CheckpointStore>, metrics: Arc<Metrics>) -> Self {
        PoolState {
            pool: Mutex::new(pool),
            persist_lock: tokio::sync::Mutex::new(()),
            store,
            metrics,
            ready: AtomicBool::new(false),
            became_ready: Notify::new(),
            wake: Notify::new(),
            conntrack_wake: Notify::new(),
            grew: Notify::new(),
        }
    }

    /// The pool, locked (keep the guard short; never across an await).
    pub fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pool has been filled once: ADD may be served.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Marks the pool filled once (start-up is done with it).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
        self.became_ready.notify_waiters();
    }

    /// Waits until the pool is ready ([`Self::set_ready`]), at most `limit`. Returns whether
    /// it is.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Listen before looking, so a set_ready between the look and the wait is seen.
            let woken = self.became_ready.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.is_ready() {
                return true;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return self.is_ready();
            }
        }
    }

    /// Writes the checkpoint (atomic, 0600) from the pool as it is now.
    ///
    /// Errors: the write failed ([`CheckpointWriteError`], logged here too with its cause);
    /// the previous checkpoint is still in place. ADD undoes its assignment and fails; other
    /// callers go on, since the next write records their change (a release missing from the
    /// file only keeps an address held until the reclaim frees it, never hands it out twice).
    pub async fn persist(&self) -> Result<(), CheckpointWriteError> {
        let _g = self.persist_lock.lock().await;
        let cp = self.lock().checkpoint();
        let store = self.store.clone();
        let res = tokio::task::spawn_blocking(move || store.write(&cp))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        res.map_err(|source| {
            let e = CheckpointWriteError {
                location: self.store.location(),
                source,
            };
            tracing::error!(error = %e, cause = %e.source, "checkpoint write failed");
            self.metrics.inc_ipamd_error("checkpointWrite");
            e
        })
    }

    /// Wakes the reconciler: the pool may be below its targets or have something to free.
    pub fn wake_reconciler(&self) {
        self.wake.notify_one();
    }

    /// Resolves when [`Self::wake_reconciler`] is called (or was, since the last wait).
    pub fn reconciler_woken(&self) -> Notified<'_> {
        self.wake.notified()
    }

    /// Wakes the conntrack flush: an address was released.
    pub fn wake_conntrack(&self) {
        self.conntrack_wake.notify_one();
    }

    /// Resolves when [`Self::wake_conntrack`] is called (or was, since the last wait).
    pub fn conntrack_woken(&self) -> Notified<'_> {
        self.conntrack_wake.notified()
    }

    /// Addresses or an ENI were added to the pool: every waiting ADD looks again.
    pub fn grew(&self) {
        self.grew.notify_waiters();
    }

    /// Resolves at the next [`Self::grew`] (enable it before looking at the pool, so growth
    /// between the look and the wait is not missed).
    pub fn growth(&self) -> Notified<'_> {
        self.grew.notified()
    }
}
