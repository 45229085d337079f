//! Connection tracking of released addresses: the node may still track flows of a deleted pod
//! (a UDP stream for 120 s after its last packet, an established TCP connection for days), and
//! a stale entry would steer the old flow — a client's stream through a Service's DNAT, a
//! reply of a SNATed connection — to the next pod given the address. The pool is pure: it
//! only says which addresses need their entries deleted now ([`Pool::conntrack_due`]) and
//! learns when that was done ([`Pool::conntrack_flushed`]); the agent does the deleting.
//!
//! Every release (into cooldown) is due for a flush at once, and again once its cooldown has
//! ended, since a client may re-create an entry during the cooldown (it keeps sending to the
//! old address until its Service endpoint is removed). An address is handed out only after a
//! flush that started at or after the end of its cooldown.

use std::net::Ipv4Addr;

use super::Pool;

/// Where a released address stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Released, no flush since: due at once.
    Released,
    /// Flushed once since the release (or restored from a checkpoint): due again when the
    /// cooldown ends.
    Flushed,
}

impl Pool {
    /// Puts `ip` into cooldown from `released_ms` and marks its conntrack entries for deletion.
    pub(super) fn cool(&mut self, ip: Ipv4Addr, released_ms: u64) {
        self.cooldowns.insert(ip, released_ms);
        if self.cfg.conntrack_flush {
            self.conntrack.insert(ip, Stage::Released);
        }
    }

    /// `ip` is in use again or left the pool: neither cooling nor waiting for a flush.
    pub(super) fn uncool(&mut self, ip: Ipv4Addr) {
        self.cooldowns.remove(&ip);
        self.conntrack.remove(&ip);
    }

    /// Whether `ip` is kept from new pods by its cooldown or by a flush still to do.
    pub(super) fn held_back(&self, ip: Ipv4Addr, now_ms: u64) -> bool {
        self.is_cooling(ip, now_ms) || self.conntrack.contains_key(&ip)
    }

    fn cooldown_end(&self, ip: Ipv4Addr) -> Option<u64> {
        self.cooldowns
            .get(&ip)
            .map(|r| r.saturating_add(self.cfg.cooldown_ms))
    }

    /// Addresses whose conntrack entries must be deleted now: released and not flushed since,
    /// or at the end of their cooldown and not flushed since it ended. Ascending.
    pub fn conntrack_due(&self, now_ms: u64) -> Vec<Ipv4Addr> {
        self.conntrack
            .iter()
            .filter(|(ip, stage)| match stage {
                Stage::Released => true,
                Stage::Flushed => self.cooldown_end(**ip).is_none_or(|end| end <= now_ms),
            })
            .map(|(ip, _)| *ip)
            .collect()
    }

    /// When the next flush falls due (a cooldown ends), if any is pending; a time in the past
    /// means one is due now.
    pub fn next_conntrack_due_ms(&self) -> Option<u64> {
        self.conntrack
            .iter()
            .map(|(ip, stage)| match stage {
                Stage::Released => 0,
                Stage::Flushed => self.cooldown_end(*ip).unwrap_or(0),
            })
            .min()
    }

    /// Addresses released and not yet cleared for reuse by a flush after their cooldown.
    pub fn conntrack_unflushed(&self) -> usize {
        self.conntrack.len()
    }

    /// Addresses whose cooldown is over but which still wait for their flush (one that failed,
    /// or one about to run): kept from new pods.
    pub fn conntrack_overdue(&self, now_ms: u64) -> usize {
        self.conntrack
            .keys()
            .filter(|ip| self.cooldown_end(**ip).is_none_or(|end| end <= now_ms))
            .count()
    }

    /// Whether `ip` waits for its conntrack entries to be deleted before reuse.
    pub fn conntrack_pending(&self, ip: Ipv4Addr) -> bool {
        self.conntrack.contains_key(&ip)
    }

    /// Records that the conntrack entries of `ips` were deleted by a flush that started at
    /// `started_ms`. An address whose cooldown had ended when the flush started is cleared
    /// for reuse; one still cooling waits for its cooldown's end. A flush that started before
    /// the address's (latest) release says nothing about it. Returns the addresses cleared.
    pub fn conntrack_flushed(&mut self, ips: &[Ipv4Addr], started_ms: u64) -> Vec<Ipv4Addr> {
        let mut cleared = Vec::new();
        for ip in ips {
            if !self.conntrack.contains_key(ip) {
                continue;
            }
            let released = self.cooldowns.get(ip).copied();
            if released.is_some_and(|r| started_ms < r) {
                continue;
            }
            if self.cooldown_end(*ip).is_none_or(|end| end <= started_ms) {
                self.conntrack.remove(ip);
                cleared.push(*ip);
            } else {
                self.conntrack.insert(*ip, Stage::Flushed);
            }
        }
        cleared
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::eni;
    use super::*;
    use crate::{PodKey, PodRef, UnknownIpPolicy, WarmConfig};

    fn key(c: &str) -> PodKey {
        PodKey::new(c, "eth0")
    }

    /// An empty pool with cooldown `cooldown_ms` (no ENIs known yet).
    fn one_ip_pool_empty(cooldown_ms: u64) -> Pool {
        let mut cfg = WarmConfig::for_limits(vpcnet_limits::lookup("m5.large").unwrap());
        cfg.cooldown_ms = cooldown_ms;
        cfg.conntrack_flush = true;
        Pool::new(cfg)
    }

    /// The primary ENI with one secondary address, 10.0.0.10.
    fn one_ip_pool(cooldown_ms: u64) -> Pool {
        let mut p = one_ip_pool_empty(cooldown_ms);
        p.reconcile_fixture();
        p
    }

    impl Pool {
        fn reconcile_fixture(&mut self) {
            self.reconcile(&[eni("eni-0", 0, &[10], &[])], UnknownIpPolicy::Free, 0);
        }
    }

    /// A pool of one ENI with one free address, assigned to `a` at t=0 and released at t=1000.
    fn released_pool(cooldown_ms: u64) -> (Pool, Ipv4Addr) {
        let mut p = one_ip_pool(cooldown_ms);
        let g = p.assign(key("a"), PodRef::default(), 0).unwrap();
        p.release(&key("a"), 1_000).unwrap();
        (p, g.ip)
    }

    #[test]
    fn release_is_due_at_once_and_again_at_the_end_of_the_cooldown() {
        let (mut p, ip) = released_pool(30_000);
        assert_eq!(p.conntrack_due(1_000), vec![ip]);
        assert_eq!(p.next_conntrack_due_ms(), Some(0));
        assert!(p.conntrack_flushed(&[ip], 1_010).is_empty());
        assert!(p.conntrack_due(30_999).is_empty());
        assert_eq!(p.next_conntrack_due_ms(), Some(31_000));
        assert_eq!(p.conntrack_due(31_000), vec![ip]);
        assert_eq!(p.conntrack_unflushed(), 1);
        assert_eq!(p.conntrack_overdue(30_999), 0);
        assert_eq!(p.conntrack_overdue(31_000), 1);
    }

    #[test]
    fn the_address_is_not_handed_out_after_its_cooldown_until_flushed() {
        let (mut p, ip) = released_pool(30_000);
        p.conntrack_flushed(&[ip], 1_010);
        // The cooldown is over but the flush that follows it has not run.
        let err = p.assign(key("b"), PodRef::default(), 40_000).unwrap_err();
        assert!(matches!(
            err,
            crate::AssignError::PoolEmpty { cooling: 1, .. }
        ));
        assert_eq!(p.summary(40_000).cooling_ips, 1);
        assert_eq!(p.summary(40_000).available_ips, 0);
        // A flush that started before the end of the cooldown does not clear it.
        assert!(p.conntrack_flushed(&[ip], 30_999).is_empty());
        assert!(p.assign(key("b"), PodRef::default(), 40_000).is_err());
        assert_eq!(p.conntrack_flushed(&[ip], 31_000), vec![ip]);
        assert_eq!(
            p.assign(key("b"), PodRef::default(), 40_000).unwrap().ip,
            ip
        );
        assert!(p.conntrack_due(40_000).is_empty());
        assert_eq!(p.next_conntrack_due_ms(), None);
    }

    #[test]
    fn zero_cooldown_needs_one_flush() {
        let (mut p, ip) = released_pool(0);
        assert!(p.assign(key("b"), PodRef::default(), 1_000).is_err());
        assert_eq!(p.conntrack_flushed(&[ip], 1_000), vec![ip]);
        assert_eq!(p.assign(key("b"), PodRef::default(), 1_001).unwrap().ip, ip);
    }

    #[test]
    fn a_flush_older_than_the_release_does_not_count() {
        let (mut p, ip) = released_pool(0);
        assert!(p.conntrack_flushed(&[ip], 999).is_empty());
        assert_eq!(p.conntrack_due(1_000), vec![ip]);
    }

    #[test]
    fn a_failed_flush_keeps_the_address_out_of_service() {
        let (p, ip) = released_pool(30_000);
        // Nothing recorded (the flush failed): due again, never assignable.
        assert_eq!(p.conntrack_due(100_000), vec![ip]);
        let mut p2 = p.clone();
        assert!(p2.assign(key("b"), PodRef::default(), 100_000).is_err());
    }

    #[test]
    fn an_address_held_again_or_reinstated_needs_no_flush() {
        let (mut p, ip) = released_pool(30_000);
        assert!(p.hold_for(key("c"), PodRef::default(), ip, 2_000));
        assert!(!p.conntrack_pending(ip));
        assert!(p.conntrack_due(2_000).is_empty());
    }

    #[test]
    fn without_conntrack_flush_the_cooldown_alone_decides() {
        let mut p = one_ip_pool_empty(30_000);
        let mut cfg = p.config().clone();
        cfg.conntrack_flush = false;
        p.set_config(cfg);
        p.reconcile_fixture();
        let ip = p.assign(key("a"), PodRef::default(), 0).unwrap().ip;
        p.release(&key("a"), 1_000).unwrap();
        assert!(p.conntrack_due(1_000).is_empty());
        assert_eq!(
            p.assign(key("b"), PodRef::default(), 31_000).unwrap().ip,
            ip
        );
    }

    #[test]
    fn restored_cooldowns_are_flushed_again_before_reuse() {
        let (p, ip) = released_pool(30_000);
        let cp = p.checkpoint();
        let mut q = one_ip_pool_empty(30_000);
        q.restore(&cp).unwrap();
        q.reconcile_fixture();
        // Still cooling at restore: due at the end of the cooldown only.
        assert!(q.conntrack_due(2_000).is_empty());
        assert_eq!(q.conntrack_due(31_000), vec![ip]);
        assert!(q.assign(key("b"), PodRef::default(), 31_000).is_err());
        assert_eq!(q.conntrack_flushed(&[ip], 31_000), vec![ip]);
        assert!(q.assign(key("b"), PodRef::default(), 31_000).is_ok());
    }
}
