//! The pool to and from its checkpoint: every assignment and cooldown timestamp.

use super::{conntrack, Pool};
use crate::checkpoint::{
    Checkpoint, CheckpointAssignment, CheckpointCooldown, CheckpointError, CHECKPOINT_VERSION,
};
use crate::model::{Assignment, PodKey, PodRef};

impl Pool {
    /// The persisted model: every assignment and every cooldown timestamp.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            version: CHECKPOINT_VERSION,
            assignments: self
                .assignments
                .iter()
                .map(|(k, a)| CheckpointAssignment {
                    container_id: k.container_id.clone(),
                    if_name: k.if_name.clone(),
                    ip: a.ip,
                    eni_id: a.eni_id.clone(),
                    namespace: a.pod.namespace.clone(),
                    name: a.pod.name.clone(),
                    assigned_at_ms: a.assigned_at_ms,
                    foreign_datapath: a.foreign_datapath,
                    network_card: self.enis.get(&a.eni_id).map_or(0, |e| e.info.network_card),
                })
                .collect(),
            cooldowns: self
                .cooldowns
                .iter()
                .map(|(ip, t)| CheckpointCooldown {
                    ip: *ip,
                    released_at_ms: *t,
                })
                .collect(),
        }
    }

    /// Loads assignments and cooldowns from a checkpoint into a pool that has none yet
    /// (call before [`Pool::reconcile`], which then checks them against EC2).
    /// Errors when the checkpoint assigns one address twice.
    pub fn restore(&mut self, cp: &Checkpoint) -> Result<(), CheckpointError> {
        cp.check()?;
        for a in &cp.assignments {
            let key = PodKey::new(a.container_id.clone(), a.if_name.clone());
            self.by_ip.insert(a.ip, key.clone());
            self.assignments.insert(
                key,
                Assignment {
                    ip: a.ip,
                    eni_id: a.eni_id.clone(),
                    pod: PodRef {
                        namespace: a.namespace.clone(),
                        name: a.name.clone(),
                    },
                    assigned_at_ms: a.assigned_at_ms,
                    foreign_datapath: a.foreign_datapath,
                },
            );
        }
        for c in &cp.cooldowns {
            if !self.by_ip.contains_key(&c.ip) {
                self.cooldowns.insert(c.ip, c.released_at_ms);
                // Whether its entries were flushed after the cooldown is not persisted: flush
                // again (due at once when the cooldown is over) before reuse.
                if self.cfg.conntrack_flush {
                    self.conntrack.insert(c.ip, conntrack::Stage::Flushed);
                }
            }
        }
        Ok(())
    }
}
