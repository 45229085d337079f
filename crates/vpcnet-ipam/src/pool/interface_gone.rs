//! ENIs whose network interface vanished from the node (detached behind the agent's back, a
//! netlink `RTM_DELLINK`): their addresses stop being handed out at once, before the describe
//! that settles what EC2 did.

use super::Pool;

impl Pool {
    /// Marks ENI `eni_id` as having no interface on the node: [`Pool::assign`] skips it and the
    /// plan counts it like an ENI being deleted (its addresses are not available, nothing is
    /// added to or released from it) until [`Pool::mark_interface_back`], [`Pool::remove_eni`]
    /// or a [`Pool::reconcile`] that no longer lists it. Existing assignments are kept (their
    /// pods are the reclaim's business). Returns false for an unknown or primary ENI (the
    /// primary's interface is the node's own: never marked).
    pub fn mark_interface_gone(&mut self, eni_id: &str) -> bool {
        match self.enis.get(eni_id) {
            Some(e) if !e.info.primary => self.interface_gone.insert(eni_id.to_string()),
            _ => false,
        }
    }

    /// The ENI's interface is on the node again: its addresses serve again. Returns whether
    /// it was marked.
    pub fn mark_interface_back(&mut self, eni_id: &str) -> bool {
        self.interface_gone.remove(eni_id)
    }

    /// Whether ENI `eni_id` is marked as having no interface ([`Pool::mark_interface_gone`]).
    pub fn interface_gone(&self, eni_id: &str) -> bool {
        self.interface_gone.contains(eni_id)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::super::fixtures::eni;
    use crate::{EniObservation, PodKey, PodRef, Pool, UnknownIpPolicy, WarmConfig};

    fn pool(view: &[EniObservation]) -> Pool {
        let mut p = Pool::new(WarmConfig::for_limits(
            vpcnet_limits::lookup("m5.large").unwrap(),
        ));
        p.reconcile(view, UnknownIpPolicy::Free, 0);
        p
    }

    fn assign(p: &mut Pool, i: u32) -> Option<Ipv4Addr> {
        p.assign(
            PodKey::new(format!("c{i}"), "eth0"),
            PodRef::default(),
            1_000_000,
        )
        .ok()
        .map(|g| g.ip)
    }

    #[test]
    fn an_eni_without_its_interface_hands_out_nothing() {
        let view = [
            eni("eni-0", 0, &[10], &[]),
            eni("eni-1", 1, &[10, 11, 12], &[]),
        ];
        let mut p = pool(&view);
        // Fill the primary first, then one pod on eni-1: new pods would pack onto eni-1.
        assert_eq!(assign(&mut p, 9), Some(Ipv4Addr::new(10, 0, 0, 10)));
        let first = assign(&mut p, 0).unwrap();
        assert_eq!(p.eni_of(first).unwrap().info.id, "eni-1");
        p.release(&PodKey::new("c9", "eth0"), 0);
        assert!(p.mark_interface_gone("eni-1"));
        assert!(
            !p.mark_interface_gone("eni-0"),
            "the primary is never marked"
        );
        assert!(!p.mark_interface_gone("eni-9"), "unknown ENI");
        // Only the primary's address (cooled down by now) is handed out; then nothing.
        assert_eq!(assign(&mut p, 1), Some(Ipv4Addr::new(10, 0, 0, 10)));
        assert_eq!(assign(&mut p, 2), None);
        // Not counted as available, and the plan neither releases from it nor deletes it.
        assert_eq!(p.summary(1_000_000).available_ips, 0);
        for a in p.plan(1_000_000) {
            assert!(a.grows(), "{a:?} touches the ENI without an interface");
        }
        // The existing assignment stays.
        assert!(p.assignment(&PodKey::new("c0", "eth0")).is_some());
        // The interface is back: its addresses serve again.
        assert!(p.mark_interface_back("eni-1"));
        let ip = assign(&mut p, 3).unwrap();
        assert_eq!(p.eni_of(ip).unwrap().info.id, "eni-1");
    }

    #[test]
    fn the_mark_ends_when_ec2_drops_the_eni_and_survives_a_describe_that_still_lists_it() {
        let view = [eni("eni-0", 0, &[], &[]), eni("eni-1", 1, &[10, 11], &[])];
        let mut p = pool(&view);
        p.mark_interface_gone("eni-1");
        p.reconcile(&view, UnknownIpPolicy::Free, 1);
        assert!(
            p.interface_gone("eni-1"),
            "EC2 still lists it: still marked"
        );
        p.reconcile(&view[..1], UnknownIpPolicy::Free, 2);
        assert!(!p.interface_gone("eni-1"));
        // A new ENI with the same id later is not born marked.
        p.reconcile(&view, UnknownIpPolicy::Free, 3);
        assert!(!p.interface_gone("eni-1"));
        assert!(assign(&mut p, 0).is_some());
    }
}
