//! The warm-pool decision: which EC2 actions bring the pool to its targets.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::config::{WarmConfig, WarmMode, IPS_PER_PREFIX};
use crate::pool::EniStats;

/// One EC2 step of a plan. Each is one request sized to the real shortfall or surplus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// AssignPrivateIpAddresses with SecondaryPrivateIpAddressCount=`count` on `eni_id`.
    AssignIps { eni_id: String, count: u32 },
    /// AssignPrivateIpAddresses with Ipv4PrefixCount=`count` (/28 prefixes) on `eni_id`.
    AssignPrefixes { eni_id: String, count: u32 },
    /// CreateNetworkInterface with SecondaryPrivateIpAddressCount=`ips` (or
    /// Ipv4PrefixCount=`prefixes`), then AttachNetworkInterface on network card
    /// `network_card` at its next free device index and ModifyNetworkInterfaceAttribute
    /// DeleteOnTermination=true.
    CreateEni {
        ips: u32,
        prefixes: u32,
        /// EC2 `NetworkCardIndex` (0 unless ENABLE_MULTI_NIC manages more cards).
        #[serde(default)]
        network_card: u32,
    },
    /// UnassignPrivateIpAddresses of `ips` (free, not cooling) from `eni_id`.
    UnassignIps { eni_id: String, ips: Vec<Ipv4Addr> },
    /// UnassignPrivateIpAddresses of `prefixes` (wholly free) from `eni_id`.
    UnassignPrefixes {
        eni_id: String,
        prefixes: Vec<Ipv4Net>,
    },
    /// DetachNetworkInterface + DeleteNetworkInterface of a non-primary ENI without
    /// assignments or cooling addresses.
    DeleteEni { eni_id: String },
}

impl Action {
    /// Whether the action adds capacity.
    pub fn grows(&self) -> bool {
        matches!(
            self,
            Action::AssignIps { .. } | Action::AssignPrefixes { .. } | Action::CreateEni { .. }
        )
    }

    /// Whether the action gives addresses (or an ENI) back to EC2: a failure of it must go
    /// through [`crate::Pool::unsettle`], never [`crate::Pool::abort`].
    pub fn is_release(&self) -> bool {
        !self.grows()
    }
}

/// `recent_low`: the fewest assignable addresses an assignment left within the surplus hold
/// ([`crate::Pool::recent_low_available`]); in the IP target modes only surplus above it is
/// returned. `with_ips`: prefix delegation has fallen back to secondary /32s
/// ([`crate::Pool::fall_back_to_ips`]): growth is counted and requested in addresses (the
/// prefix target as its 16 addresses each), and free /32s are kept.
pub(crate) fn plan(
    cfg: &WarmConfig,
    stats: &[EniStats],
    eni_count: u32,
    recent_low: Option<u32>,
    with_ips: bool,
) -> Vec<Action> {
    let active: Vec<&EniStats> = stats
        .iter()
        .filter(|s| !s.deleting && cfg.eni_for_pods(s.primary))
        .collect();
    let total: i64 = active.iter().map(|s| s.total as i64).sum();
    let available: i64 = active.iter().map(|s| s.available.len() as i64).sum();
    let free_prefixes: i64 = active.iter().map(|s| s.free_prefixes as i64).sum();
    let per_eni = cfg.ips_per_eni() as i64;
    let need = match cfg.mode() {
        WarmMode::Eni { warm_enis } => warm_enis as i64 * per_eni - available,
        WarmMode::Ip {
            warm_ips,
            minimum_ips,
        } => (warm_ips as i64 - available).max(minimum_ips as i64 - total),
        WarmMode::Prefix { warm_prefixes } if with_ips => {
            warm_prefixes as i64 * IPS_PER_PREFIX as i64 - available
        }
        WarmMode::Prefix { warm_prefixes } => warm_prefixes as i64 - free_prefixes,
        WarmMode::PrefixIp {
            warm_ips,
            minimum_ips,
        } => {
            let ips = (warm_ips as i64 - available).max(minimum_ips as i64 - total);
            if with_ips {
                ips
            } else if ips > 0 {
                (ips + IPS_PER_PREFIX as i64 - 1) / IPS_PER_PREFIX as i64
            } else {
                0
            }
        }
    };
    if need > 0 {
        grow(cfg, &active, eni_count, need as u32, with_ips)
    } else {
        // Surplus of the IP target modes counts from the lowest point of the hold window.
        let lasting = recent_low.map_or(available, |low| available.min(low as i64));
        let counts = Counts {
            available,
            lasting,
            total,
            free_prefixes,
        };
        shrink(cfg, &active, counts, with_ips)
    }
}

/// The pool's counts over the ENIs that serve pods.
struct Counts {
    available: i64,
    /// `available` at its lowest within the surplus hold.
    lasting: i64,
    total: i64,
    free_prefixes: i64,
}

/// Fill existing ENIs (fullest first) with one request each, then create ENIs.
/// `need` is in addresses, or in prefixes in prefix mode (unless `with_ips`).
fn grow(
    cfg: &WarmConfig,
    active: &[&EniStats],
    eni_count: u32,
    need: u32,
    with_ips: bool,
) -> Vec<Action> {
    let whole_enis = matches!(cfg.mode(), WarmMode::Eni { .. });
    let prefix = cfg.prefix_delegation && !with_ips;
    let slots = cfg.slots_per_eni();
    let mut order: Vec<&&EniStats> = active
        .iter()
        .filter(|s| s.slots_used < slots && !s.subnet_full)
        .collect();
    order.sort_by_key(|s| (std::cmp::Reverse(s.assigned), s.device_number));
    let mut remaining = need;
    let mut actions = Vec::new();
    for s in order {
        if remaining == 0 {
            break;
        }
        let room = slots - s.slots_used;
        let n = if whole_enis {
            room
        } else {
            room.min(remaining)
        };
        actions.push(if prefix {
            Action::AssignPrefixes {
                eni_id: s.id.clone(),
                count: n,
            }
        } else {
            Action::AssignIps {
                eni_id: s.id.clone(),
                count: n,
            }
        });
        remaining = remaining.saturating_sub(n);
    }
    let mut free_enis = cfg.max_enis().saturating_sub(eni_count);
    while remaining > 0 && free_enis > 0 {
        let n = if whole_enis {
            slots
        } else {
            slots.min(remaining)
        };
        actions.push(if prefix {
            Action::CreateEni {
                ips: 0,
                prefixes: n,
                network_card: 0,
            }
        } else {
            Action::CreateEni {
                ips: n,
                prefixes: 0,
                network_card: 0,
            }
        });
        remaining = remaining.saturating_sub(n);
        free_enis -= 1;
    }
    if prefix && remaining > 0 {
        actions.extend(make_room(active, remaining));
    }
    actions
}

/// Prefix mode with every slot taken and no ENI to add: free secondary /32s (left from a
/// fallback, [`crate::Pool::fall_back_to_ips`], or from before prefix delegation) are
/// returned, one per missing prefix, so the next plan can put a /28 in their slots.
fn make_room(active: &[&EniStats], prefixes: u32) -> Vec<Action> {
    let mut left = prefixes as usize;
    let mut actions = Vec::new();
    for s in active.iter().filter(|s| !s.subnet_full) {
        if left == 0 {
            break;
        }
        if s.held_free.is_empty() {
            continue;
        }
        let mut ips = s.held_free.clone();
        ips.sort();
        ips.truncate(left);
        left -= ips.len();
        actions.push(Action::UnassignIps {
            eni_id: s.id.clone(),
            ips,
        });
    }
    actions
}

/// Return surplus to EC2: whole ENIs when an unused ENI fits in the surplus, else single
/// addresses (or prefixes) from the least-used ENIs. Only addresses free for the surplus
/// hold are touched; the primary ENI is never deleted. In the IP target modes the surplus is
/// what lasted the hold: counted from `lasting` (the fewest assignable addresses since the
/// hold began), not from `available` alone. In prefix mode free secondary /32s (left from a
/// fallback, [`crate::Pool::fall_back_to_ips`]) go first, unless `with_ips`.
fn shrink(cfg: &WarmConfig, active: &[&EniStats], counts: Counts, with_ips: bool) -> Vec<Action> {
    let Counts {
        available,
        lasting,
        total,
        free_prefixes,
    } = counts;
    let mut actions = Vec::new();
    let mut order: Vec<&&EniStats> = active.iter().collect();
    order.sort_by_key(|s| (s.assigned, std::cmp::Reverse(s.device_number)));
    let deletable = |s: &EniStats| !s.primary && s.assigned == 0 && s.cooling == 0;
    match cfg.mode() {
        WarmMode::Eni { warm_enis } => {
            let mut spare = available - warm_enis as i64 * cfg.ips_per_eni() as i64;
            for s in order {
                let n = s.available.len() as i64;
                let whole_held = s.held_free.len() as i64 == n && s.total as i64 == n;
                if deletable(s) && whole_held && (n == 0 || n <= spare) {
                    actions.push(Action::DeleteEni {
                        eni_id: s.id.clone(),
                    });
                    spare -= n;
                }
            }
        }
        WarmMode::Ip {
            warm_ips,
            minimum_ips,
        } => {
            let mut surplus = (lasting - warm_ips as i64)
                .min(total - minimum_ips as i64)
                .max(0);
            for s in order {
                let n = s.total as i64;
                if deletable(s) && s.held_free.len() as i64 == n && n <= surplus {
                    actions.push(Action::DeleteEni {
                        eni_id: s.id.clone(),
                    });
                    surplus -= n;
                    continue;
                }
                if surplus > 0 && !s.held_free.is_empty() {
                    let take = (s.held_free.len() as i64).min(surplus) as usize;
                    let mut ips = s.held_free.clone();
                    ips.sort();
                    ips.reverse();
                    ips.truncate(take);
                    ips.sort();
                    surplus -= take as i64;
                    actions.push(Action::UnassignIps {
                        eni_id: s.id.clone(),
                        ips,
                    });
                }
            }
        }
        WarmMode::Prefix { .. } | WarmMode::PrefixIp { .. } => {
            // Addresses beyond the IP targets (prefix mode: every free /32 is beyond the
            // prefix target, which counts whole free prefixes only).
            let mut ip_surplus = match cfg.mode() {
                WarmMode::PrefixIp {
                    warm_ips,
                    minimum_ips,
                } => (lasting - warm_ips as i64)
                    .min(total - minimum_ips as i64)
                    .max(0),
                _ => i64::MAX,
            };
            if !with_ips {
                for s in &order {
                    if ip_surplus > 0 && !s.held_free.is_empty() {
                        let mut ips = s.held_free.clone();
                        ips.sort();
                        ips.truncate(ip_surplus.min(ips.len() as i64) as usize);
                        ip_surplus -= ips.len() as i64;
                        actions.push(Action::UnassignIps {
                            eni_id: s.id.clone(),
                            ips,
                        });
                    }
                }
            }
            let mut surplus = match cfg.mode() {
                WarmMode::Prefix { warm_prefixes } => free_prefixes - warm_prefixes as i64,
                WarmMode::PrefixIp { .. } => ip_surplus / IPS_PER_PREFIX as i64,
                _ => 0,
            }
            .max(0);
            for s in order {
                let np = s.held_free_prefixes.len() as i64;
                let only_prefixes = s.total as i64 == np * IPS_PER_PREFIX as i64;
                if deletable(s) && only_prefixes && np <= surplus {
                    actions.push(Action::DeleteEni {
                        eni_id: s.id.clone(),
                    });
                    surplus -= np;
                    continue;
                }
                if surplus > 0 && np > 0 {
                    let take = np.min(surplus) as usize;
                    let prefixes: Vec<Ipv4Net> = s
                        .held_free_prefixes
                        .iter()
                        .rev()
                        .take(take)
                        .rev()
                        .copied()
                        .collect();
                    surplus -= take as i64;
                    actions.push(Action::UnassignPrefixes {
                        eni_id: s.id.clone(),
                        prefixes,
                    });
                }
            }
        }
    }
    actions
}
