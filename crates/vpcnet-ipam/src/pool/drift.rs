//! Drift between the pool and a cheap local view of the instance's ENIs (IMDS): whether the
//! agent needs an EC2 describe. IMDS is only a hint (docs/architecture.md, principle 2): a
//! difference found here never changes the pool; it asks for a `DescribeNetworkInterfaces`,
//! whose answer [`Pool::reconcile`] adopts.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use super::Pool;
use crate::model::EniObservation;

/// The first difference found between the pool and a view of the attached ENIs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "drift", rename_all = "snake_case")]
pub enum Drift {
    /// The view lists an ENI that the pool does not hold and that is not known as foreign
    /// (attached by someone else, or by this agent behind a lost reply).
    EniAttached { eni_id: String },
    /// The pool holds an ENI the view no longer lists (detached behind the agent's back).
    EniDetached { eni_id: String },
    /// An ENI both know carries other secondary addresses or prefixes: how many the view has
    /// that the pool lacks (`added`) and the other way round (`removed`), addresses and
    /// prefixes counted alike.
    Addresses {
        eni_id: String,
        added: u32,
        removed: u32,
    },
}

impl Pool {
    /// Compares the pool with `view`, the instance's attached ENIs as a local source lists them
    /// (IMDS `network/interfaces/macs/`: secondary addresses without the ENI's primary, /28
    /// prefixes). ENIs whose ID is in `foreign` (attached but not the agent's to manage, as the
    /// last describe classified them) are skipped. `None` when the view agrees with the pool:
    /// no describe is needed. Never changes the pool.
    pub fn drift(&self, view: &[EniObservation], foreign: &BTreeSet<String>) -> Option<Drift> {
        let listed: BTreeSet<&str> = view.iter().map(|o| o.info.id.as_str()).collect();
        for obs in view {
            if foreign.contains(&obs.info.id) {
                continue;
            }
            let Some(eni) = self.enis.get(&obs.info.id) else {
                return Some(Drift::EniAttached {
                    eni_id: obs.info.id.clone(),
                });
            };
            let ips: BTreeSet<Ipv4Addr> = obs
                .secondary_ips
                .iter()
                .copied()
                .filter(|ip| *ip != eni.info.primary_ip)
                .collect();
            let prefixes: BTreeSet<Ipv4Net> = obs.prefixes.iter().copied().collect();
            let added = ips.iter().filter(|ip| !eni.ips.contains_key(ip)).count()
                + prefixes
                    .iter()
                    .filter(|p| !eni.prefixes.contains_key(p))
                    .count();
            let removed = eni.ips.keys().filter(|ip| !ips.contains(ip)).count()
                + eni
                    .prefixes
                    .keys()
                    .filter(|p| !prefixes.contains(p))
                    .count();
            if added + removed > 0 {
                return Some(Drift::Addresses {
                    eni_id: obs.info.id.clone(),
                    added: added as u32,
                    removed: removed as u32,
                });
            }
        }
        self.enis
            .keys()
            .find(|id| !listed.contains(id.as_str()))
            .map(|id| Drift::EniDetached { eni_id: id.clone() })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::net::Ipv4Addr;

    use super::super::fixtures::eni;
    use super::Drift;
    use crate::{EniObservation, Pool, UnknownIpPolicy, WarmConfig};

    fn pool(view: &[EniObservation]) -> Pool {
        let limits = vpcnet_limits::lookup("m5.large").unwrap();
        let mut p = Pool::new(WarmConfig::for_limits(limits));
        p.reconcile(view, UnknownIpPolicy::Free, 0);
        p
    }

    #[test]
    fn the_same_view_is_no_drift_even_with_the_primary_address_listed() {
        let view = vec![eni("eni-a", 0, &[10, 11], &[]), eni("eni-b", 1, &[20], &[])];
        let p = pool(&view);
        // IMDS lists each ENI's primary address among its addresses: not a difference.
        let mut imds = view.clone();
        for o in &mut imds {
            o.secondary_ips.insert(0, o.info.primary_ip);
        }
        assert_eq!(p.drift(&imds, &BTreeSet::new()), None);
    }

    #[test]
    fn every_kind_of_difference_is_found() {
        let view = vec![
            eni("eni-a", 0, &[10, 11], &[]),
            eni("eni-b", 1, &[], &["10.0.9.0/28"]),
        ];
        let p = pool(&view);
        let none = BTreeSet::new();
        let mut more = view.clone();
        more[0].secondary_ips.push(Ipv4Addr::new(10, 0, 0, 12));
        assert_eq!(
            p.drift(&more, &none),
            Some(Drift::Addresses {
                eni_id: "eni-a".into(),
                added: 1,
                removed: 0
            })
        );
        let mut fewer = view.clone();
        fewer[1].prefixes.clear();
        assert_eq!(
            p.drift(&fewer, &none),
            Some(Drift::Addresses {
                eni_id: "eni-b".into(),
                added: 0,
                removed: 1
            })
        );
        assert_eq!(
            p.drift(&view[..1], &none),
            Some(Drift::EniDetached {
                eni_id: "eni-b".into()
            })
        );
        let mut extra = view.clone();
        extra.push(eni("eni-c", 2, &[], &[]));
        assert_eq!(
            p.drift(&extra, &none),
            Some(Drift::EniAttached {
                eni_id: "eni-c".into()
            })
        );
        // A foreign ENI (not ours to manage) is no drift.
        let foreign: BTreeSet<String> = ["eni-c".to_string()].into();
        assert_eq!(p.drift(&extra, &foreign), None);
    }
}
