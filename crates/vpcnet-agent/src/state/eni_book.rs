//! The ENI book: what the agent knows of the instance's ENIs beyond the pool — attachment IDs
//! (to detach), the ENIs and device slots of ENIs it does not manage, the lock that keeps the
//! leaked-ENI sweep away from an ENI between create and attach, whether the next pass must
//! describe in EC2, and whether ENI management is paused (the Node cordoned).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The agent's book of the instance's ENIs (see the module doc).
#[derive(Default)]
pub struct EniBook {
    /// ENI id → attachment id, from EC2 (needed to detach).
    attachments: Mutex<BTreeMap<String, String>>,
    /// (Network card, device index) pairs taken by ENIs the agent does not manage.
    foreign_devices: Mutex<Vec<(u32, u32)>>,
    /// IDs of the attached ENIs the agent does not manage (from the last describe): the IMDS
    /// drift check skips them.
    foreign_enis: Mutex<BTreeSet<String>>,
    /// Held across create → attach of an ENI and by the leaked-ENI sweep, so the sweep never
    /// sees (and deletes) an ENI the reconciler is about to attach.
    lifecycle: tokio::sync::Mutex<()>,
    /// The last periodic pass or an unknown EC2 outcome asks the reconciler for a describe.
    need_describe: AtomicBool,
    /// The Node is cordoned and `AWS_MANAGE_ENIS_NON_SCHEDULABLE` is false: the reconciler
    /// neither grows the pool nor deletes ENIs ([`crate::kubernetes::node_watch`]).
    management_paused: AtomicBool,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl EniBook {
    /// Records a describe of the instance's ENIs: every attachment, and the ENIs (with their
    /// card and device slots) the agent does not manage. Replaces what was known.
    pub fn record_described(
        &self,
        attachments: BTreeMap<String, String>,
        foreign_devices: Vec<(u32, u32)>,
        foreign_enis: BTreeSet<String>,
    ) {
        *locked(&self.attachments) = attachments;
        *locked(&self.foreign_devices) = foreign_devices;
        *locked(&self.foreign_enis) = foreign_enis;
    }

    /// The attachment ID of ENI `eni_id`, if it is attached (as far as the agent knows).
    pub fn attachment(&self, eni_id: &str) -> Option<String> {
        locked(&self.attachments).get(eni_id).cloned()
    }

    /// ENI `eni_id` was attached as `attachment_id`.
    pub fn attached(&self, eni_id: &str, attachment_id: &str) {
        locked(&self.attachments).insert(eni_id.to_string(), attachment_id.to_string());
    }

    /// ENI `eni_id` is gone (deleted).
    pub fn forget(&self, eni_id: &str) {
        locked(&self.attachments).remove(eni_id);
    }

    /// Device indexes on network card `card` taken by ENIs the agent does not manage.
    pub fn foreign_devices_on(&self, card: u32) -> Vec<u32> {
        locked(&self.foreign_devices)
            .iter()
            .filter(|(c, _)| *c == card)
            .map(|(_, d)| *d)
            .collect()
    }

    /// IDs of the attached ENIs the agent does not manage (from the last describe).
    pub fn foreign_enis(&self) -> BTreeSet<String> {
        locked(&self.foreign_enis).clone()
    }

    /// Held across create → attach of an ENI and by the leaked-ENI sweep.
    pub async fn lifecycle(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lifecycle.lock().await
    }

    /// Asks the reconciler's next pass for a describe in EC2.
    pub fn request_describe(&self) {
        self.need_describe.store(true, Ordering::Release);
    }

    /// Whether a describe was asked for since the last call (and clears the request).
    pub fn take_describe_request(&self) -> bool {
        self.need_describe.swap(false, Ordering::AcqRel)
    }

    /// ENI management is paused: the Node is cordoned ([`crate::kubernetes::node_watch`]).
    pub fn management_paused(&self) -> bool {
        self.management_paused.load(Ordering::Acquire)
    }

    /// Sets the pause; returns what it was.
    pub fn set_management_paused(&self, paused: bool) -> bool {
        self.management_paused.swap(paused, Ordering::AcqRel)
    }
}
