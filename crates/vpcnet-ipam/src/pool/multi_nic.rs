//! ENABLE_MULTI_NIC: a pod annotated `k8s.amazonaws.com/nicConfig: multi-nic-attachment`
//! gets one address from each managed network card, as the VPC CNI's multi-homed pods do.
//! The first is the pod's own attachment (its [`PodKey`], the CNI_IFNAME interface) on card 0;
//! the one of the n-th further card is keyed by the interface the plugin creates for it in the
//! pod, `mNicIf<n>` ([`PodKey::extra_interface`]), so checkpoints, the reclaim and the
//! datapath audit treat each like any other attachment.

use std::collections::BTreeSet;

use super::Pool;
use crate::model::{Assignment, PodKey, PodRef};
use crate::pool::{AssignError, Granted};

/// Name prefix of a multi-homed pod's further interfaces (`mNicIf1`, ...), the VPC CNI's.
pub const EXTRA_INTERFACE_PREFIX: &str = "mNicIf";

/// [`PodKey::interface_index`] of interface name `if_name`.
pub(crate) fn interface_index(if_name: &str) -> u32 {
    if_name
        .strip_prefix(EXTRA_INTERFACE_PREFIX)
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0)
}

impl PodKey {
    /// The key of the pod's further interface `n` (1 for the second managed card, ...).
    pub fn extra_interface(&self, n: usize) -> PodKey {
        PodKey::new(
            self.container_id.clone(),
            format!("{EXTRA_INTERFACE_PREFIX}{n}"),
        )
    }

    /// Whether this is a further interface of a multi-homed pod.
    pub fn is_extra_interface(&self) -> bool {
        self.interface_index() > 0
    }

    /// Which of its pod's interfaces this is: n for the further interface `mNicIf<n>`, else 0.
    pub fn interface_index(&self) -> u32 {
        interface_index(&self.if_name)
    }
}

impl Pool {
    /// Hands `key` one address from each managed network card ([`crate::WarmConfig::cards`]),
    /// in card order: card 0's to `key`, the n-th further card's to
    /// [`PodKey::extra_interface`]`(n)`. All or nothing: when a card has nothing free, what
    /// this call assigned is taken back (no cooldown, no pod used it) and that card's error
    /// is returned. Idempotent like [`Pool::assign`].
    pub fn assign_multi_nic(
        &mut self,
        key: PodKey,
        pod: PodRef,
        now_ms: u64,
    ) -> Result<Vec<Granted>, AssignError> {
        let cards: Vec<u32> = self.cfg.cards().collect();
        let mut granted: Vec<(PodKey, Granted)> = Vec::new();
        for (n, card) in cards.into_iter().enumerate() {
            let k = if n == 0 {
                key.clone()
            } else {
                key.extra_interface(n)
            };
            match self.assign_on(k.clone(), pod.clone(), Some(card), now_ms) {
                Ok(g) => granted.push((k, g)),
                Err(e) => {
                    for (k, g) in granted {
                        if !g.existing {
                            self.unassign(&k);
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(granted.into_iter().map(|(_, g)| g).collect())
    }

    /// The keys of `key`'s further interfaces that hold an address, in interface order.
    pub fn extra_interfaces(&self, key: &PodKey) -> Vec<PodKey> {
        let mut keys: Vec<PodKey> = self
            .assignments
            .keys()
            .filter(|k| k.container_id == key.container_id && k.is_extra_interface())
            .cloned()
            .collect();
        keys.sort_by_key(PodKey::interface_index);
        keys
    }

    /// Releases `key` and its further interfaces ([`Pool::release`] each): what a CNI DEL of
    /// the pod gives back. The first entry is `key`'s when it held an address.
    pub fn release_pod(&mut self, key: &PodKey, now_ms: u64) -> Vec<(PodKey, Assignment)> {
        let mut keys = vec![key.clone()];
        keys.extend(self.extra_interfaces(key));
        self.release_all(keys, now_ms)
    }

    /// Whether `key` is vouched for by `valid` (a runtime's list of attachments): listed
    /// itself, or a further interface of a listed attachment of the same container.
    pub(crate) fn vouched(valid: &BTreeSet<PodKey>, key: &PodKey) -> bool {
        valid.contains(key)
            || (key.is_extra_interface()
                && valid.iter().any(|v| v.container_id == key.container_id))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::eni;
    use crate::{Action, EniObservation, NetworkCardLimit, PodKey, PodRef, Pool, WarmConfig};

    fn on_card(mut obs: EniObservation, card: u32) -> EniObservation {
        obs.info.network_card = card;
        obs.info.primary = false;
        obs
    }

    /// m5.large limits with a second card of 2 ENIs, default targets.
    fn two_card_config() -> WarmConfig {
        let mut cfg = WarmConfig::for_limits(vpcnet_limits::lookup("m5.large").unwrap());
        cfg.extra_cards = vec![NetworkCardLimit {
            index: 1,
            max_enis: 2,
        }];
        cfg
    }

    /// [`two_card_config`] with WARM_IP_TARGET=1.
    fn two_cards() -> Pool {
        let mut cfg = two_card_config();
        cfg.warm_ip_target = Some(1);
        Pool::new(cfg)
    }

    /// The plan's step creating an ENI with one address on card 1.
    fn create_on_card_1() -> Action {
        Action::CreateEni {
            ips: 1,
            prefixes: 0,
            network_card: 1,
        }
    }

    #[test]
    fn one_address_per_card_and_all_or_nothing() {
        let mut pool = two_cards();
        pool.add_eni(eni("eni-0", 0, &[10], &[]), 0);
        let key = PodKey::new("c1", "eth0");
        // Card 1 has no ENI yet: nothing is kept from card 0.
        assert!(pool
            .assign_multi_nic(key.clone(), PodRef::default(), 1)
            .is_err());
        assert_eq!(pool.assignments().count(), 0);
        pool.add_eni(on_card(eni("eni-1", 0, &[20], &[]), 1), 2);
        let g = pool
            .assign_multi_nic(key.clone(), PodRef::default(), 3)
            .unwrap();
        assert_eq!(
            g.iter()
                .map(|g| (g.network_card, g.eni_id.as_str()))
                .collect::<Vec<_>>(),
            vec![(0, "eni-0"), (1, "eni-1")]
        );
        assert_eq!(
            pool.extra_interfaces(&key),
            vec![PodKey::new("c1", "mNicIf1")]
        );
        // Idempotent.
        let again = pool
            .assign_multi_nic(key.clone(), PodRef::default(), 4)
            .unwrap();
        assert!(again.iter().all(|g| g.existing));
        let released = pool.release_pod(&key, 5);
        assert_eq!(released.len(), 2);
        assert_eq!(released[0].0, key);
        assert_eq!(pool.assignments().count(), 0);
    }

    #[test]
    fn each_card_is_planned_with_its_own_targets_and_limit() {
        let mut pool = two_cards();
        pool.add_eni(eni("eni-0", 0, &[10, 11], &[]), 0);
        // Card 1 has no ENI: the plan creates one there, on card 1.
        assert_eq!(pool.plan(1), vec![create_on_card_1()]);
        pool.add_eni(on_card(eni("eni-1", 0, &[20], &[]), 1), 2);
        assert_eq!(pool.plan(3), vec![]);
        // A plain pod takes card 0 first.
        let g = pool
            .assign(PodKey::new("c", "eth0"), PodRef::default(), 4)
            .unwrap();
        assert_eq!(g.network_card, 0);
    }

    #[test]
    fn further_cards_keep_one_warm_and_one_minimum_address_whatever_the_targets() {
        // WARM_ENI_TARGET=1 (the default): card 0 keeps a whole ENI's worth free; card 1, as
        // in the VPC CNI, one address.
        let mut pool = Pool::new(two_card_config());
        pool.add_eni(
            eni("eni-0", 0, &[10, 11, 12, 13, 14, 15, 16, 17, 18], &[]),
            0,
        );
        assert_eq!(pool.plan(1), vec![create_on_card_1()]);
    }

    #[test]
    fn gc_keeps_the_further_interfaces_of_listed_pods() {
        let mut pool = two_cards();
        pool.add_eni(eni("eni-0", 0, &[10], &[]), 0);
        pool.add_eni(on_card(eni("eni-1", 0, &[20], &[]), 1), 0);
        let key = PodKey::new("c1", "eth0");
        pool.assign_multi_nic(key.clone(), PodRef::default(), 1)
            .unwrap();
        let valid = [key.clone()].into_iter().collect();
        assert!(pool.garbage_collect(&valid, 2).is_empty());
        assert_eq!(pool.garbage_collect(&Default::default(), 3).len(), 2);
        assert!(!PodKey::new("c", "mNicIf0").is_extra_interface());
        assert!(!PodKey::new("c", "mNicIfx").is_extra_interface());
    }
}
