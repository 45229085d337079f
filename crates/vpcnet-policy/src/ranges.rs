//! ipBlock arithmetic on inclusive [`AddrRange`]s, in `u32` (no overflow at `0.0.0.0` or
//! `255.255.255.255`): a `cidr` minus its `except`s, addresses to ranges, and the normal form
//! nftables interval sets need — sorted, disjoint and not adjacent (adjacent ranges merged).

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use crate::ruleset::AddrRange;

impl AddrRange {
    /// `first..=last`.
    pub fn new(first: Ipv4Addr, last: Ipv4Addr) -> Self {
        Self { first, last }
    }

    /// One address.
    pub fn single(addr: Ipv4Addr) -> Self {
        Self::new(addr, addr)
    }

    /// Every address of a network, host bits of `net` ignored.
    pub fn net(net: Ipv4Net) -> Self {
        Self::new(net.network(), net.broadcast())
    }

    /// Whether `addr` is in the range.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        self.first <= addr && addr <= self.last
    }

    fn bounds(&self) -> (u32, u32) {
        (u32::from(self.first), u32::from(self.last))
    }

    fn from_bounds(first: u32, last: u32) -> Self {
        Self::new(Ipv4Addr::from(first), Ipv4Addr::from(last))
    }
}

/// The addresses of an ipBlock: `cidr` minus every `except`, in normal form. An `except`
/// outside `cidr` removes nothing; one containing it removes everything.
pub fn block(cidr: Ipv4Net, except: &[Ipv4Net]) -> Vec<AddrRange> {
    let mut left = vec![AddrRange::net(cidr)];
    for cut in except {
        left = left
            .into_iter()
            .flat_map(|r| subtract(r, AddrRange::net(*cut)))
            .collect();
    }
    normalize(left)
}

/// `range` minus `cut`: nothing, `range` itself, or one or two pieces of it.
fn subtract(range: AddrRange, cut: AddrRange) -> Vec<AddrRange> {
    let (first, last) = range.bounds();
    let (cut_first, cut_last) = cut.bounds();
    if cut_last < first || cut_first > last {
        return vec![range];
    }
    let mut pieces = Vec::with_capacity(2);
    if cut_first > first {
        // cut_first > first >= 0, so no underflow.
        pieces.push(AddrRange::from_bounds(first, cut_first - 1));
    }
    if cut_last < last {
        // cut_last < last <= u32::MAX, so no overflow.
        pieces.push(AddrRange::from_bounds(cut_last + 1, last));
    }
    pieces
}

/// The union of `ranges` in normal form: sorted, disjoint, and with overlapping or adjacent
/// ranges merged. Empty ranges (`first > last`) are dropped.
pub fn normalize(ranges: impl IntoIterator<Item = AddrRange>) -> Vec<AddrRange> {
    let mut sorted: Vec<(u32, u32)> = ranges
        .into_iter()
        .map(|r| r.bounds())
        .filter(|(first, last)| first <= last)
        .collect();
    sorted.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(sorted.len());
    for (first, last) in sorted {
        match merged.last_mut() {
            // u64 so that a range ending at 255.255.255.255 is compared without overflow.
            Some((_, end)) if u64::from(first) <= u64::from(*end) + 1 => {
                *end = (*end).max(last);
            }
            _ => merged.push((first, last)),
        }
    }
    merged
        .into_iter()
        .map(|(first, last)| AddrRange::from_bounds(first, last))
        .collect()
}

/// A set of addresses as ranges in normal form (runs of consecutive addresses merged).
pub fn from_addrs(addrs: impl IntoIterator<Item = Ipv4Addr>) -> Vec<AddrRange> {
    normalize(addrs.into_iter().map(AddrRange::single))
}

/// Whether `ranges` are in normal form.
#[cfg(test)]
pub fn is_normal(ranges: &[AddrRange]) -> bool {
    ranges.iter().all(|r| r.first <= r.last)
        && ranges
            .windows(2)
            .all(|w| u64::from(w[0].bounds().1) + 1 < u64::from(w[1].bounds().0))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    fn r(first: &str, last: &str) -> AddrRange {
        AddrRange::new(first.parse().unwrap(), last.parse().unwrap())
    }

    #[test]
    fn everything_but_ten_slash_eight() {
        assert_eq!(
            block(net("0.0.0.0/0"), &[net("10.0.0.0/8")]),
            [
                r("0.0.0.0", "9.255.255.255"),
                r("11.0.0.0", "255.255.255.255")
            ]
        );
    }

    #[test]
    fn excepts_at_both_ends_of_the_address_space() {
        assert_eq!(
            block(net("0.0.0.0/0"), &[net("0.0.0.0/8"), net("255.0.0.0/8")]),
            [r("1.0.0.0", "254.255.255.255")]
        );
        assert_eq!(
            block(
                net("0.0.0.0/0"),
                &[net("0.0.0.0/32"), net("255.255.255.255/32")]
            ),
            [r("0.0.0.1", "255.255.255.254")]
        );
        assert_eq!(
            block(net("0.0.0.0/0"), &[]),
            [r("0.0.0.0", "255.255.255.255")]
        );
    }

    #[test]
    fn excepts_outside_are_ignored_and_covering_ones_empty_it() {
        assert_eq!(
            block(
                net("10.0.0.0/24"),
                &[net("10.0.1.0/24"), net("192.168.0.0/16")]
            ),
            [r("10.0.0.0", "10.0.0.255")]
        );
        assert_eq!(block(net("10.0.0.0/24"), &[net("10.0.0.0/16")]), []);
        assert_eq!(block(net("10.0.0.0/24"), &[net("10.0.0.0/24")]), []);
    }

    #[test]
    fn nested_and_repeated_excepts() {
        assert_eq!(
            block(
                net("10.0.0.0/24"),
                &[
                    net("10.0.0.0/26"),
                    net("10.0.0.16/28"),
                    net("10.0.0.128/25"),
                    net("10.0.0.128/25")
                ]
            ),
            [r("10.0.0.64", "10.0.0.127")]
        );
    }

    #[test]
    fn host_bits_of_the_cidr_are_ignored() {
        assert_eq!(
            block(net("10.0.0.7/24"), &[net("10.0.0.9/31")]),
            [r("10.0.0.0", "10.0.0.7"), r("10.0.0.10", "10.0.0.255")]
        );
    }

    #[test]
    fn normalize_merges_overlapping_and_adjacent() {
        assert_eq!(
            normalize([
                r("10.0.0.10", "10.0.0.20"),
                r("10.0.0.0", "10.0.0.9"),
                r("10.0.0.15", "10.0.0.30"),
                r("10.0.0.32", "10.0.0.32"),
                r("10.0.0.5", "10.0.0.6"),
            ]),
            [r("10.0.0.0", "10.0.0.30"), r("10.0.0.32", "10.0.0.32")]
        );
        assert_eq!(
            normalize([
                r("255.255.255.255", "255.255.255.255"),
                r("255.255.255.0", "255.255.255.254"),
                r("0.0.0.0", "0.0.0.0"),
                r("0.0.0.1", "0.0.0.1"),
            ]),
            [
                r("0.0.0.0", "0.0.0.1"),
                r("255.255.255.0", "255.255.255.255")
            ]
        );
        assert_eq!(
            normalize([r("0.0.0.0", "255.255.255.255"), r("1.2.3.4", "1.2.3.4")]),
            [r("0.0.0.0", "255.255.255.255")]
        );
        assert_eq!(normalize([r("10.0.0.2", "10.0.0.1")]), []);
        assert_eq!(normalize([]), []);
    }

    #[test]
    fn addresses_become_runs() {
        let addrs = ["10.0.0.3", "10.0.0.1", "10.0.0.2", "10.0.0.9", "10.0.0.2"]
            .map(|a| a.parse::<Ipv4Addr>().unwrap());
        assert_eq!(
            from_addrs(addrs),
            [r("10.0.0.1", "10.0.0.3"), r("10.0.0.9", "10.0.0.9")]
        );
    }

    fn small_net() -> impl Strategy<Value = Ipv4Net> {
        // Addresses near both ends of the space so the edges are exercised.
        (
            prop_oneof![Just(0u32), Just(0xffff_ff00u32)],
            0u32..256,
            24u8..=32,
        )
            .prop_map(|(base, off, len)| {
                Ipv4Net::new(Ipv4Addr::from(base + off), len)
                    .unwrap()
                    .trunc()
            })
    }

    proptest! {
        #[test]
        fn block_is_normal_and_exact(cidr in small_net(), except in proptest::collection::vec(small_net(), 0..4)) {
            let ranges = block(cidr, &except);
            prop_assert!(is_normal(&ranges));
            for base in [0u32, 0xffff_ff00] {
                for off in 0..256u32 {
                    let a = Ipv4Addr::from(base + off);
                    let want = cidr.contains(&a) && !except.iter().any(|e| e.contains(&a));
                    prop_assert_eq!(ranges.iter().any(|r| r.contains(a)), want, "{}", a);
                }
            }
        }

        #[test]
        fn normalize_keeps_the_union(raw in proptest::collection::vec((0u32..64, 0u32..64, any::<bool>()), 0..8)) {
            // Ranges low or high in the address space.
            let ranges: Vec<AddrRange> = raw.iter().map(|&(a, b, high)| {
                let base = if high { u32::MAX - 63 } else { 0 };
                AddrRange::from_bounds(base + a.min(b), base + a.max(b))
            }).collect();
            let normal = normalize(ranges.clone());
            prop_assert!(is_normal(&normal));
            for base in [0u32, u32::MAX - 63] {
                for off in 0..64u32 {
                    let a = Ipv4Addr::from(base + off);
                    prop_assert_eq!(
                        normal.iter().any(|r| r.contains(a)),
                        ranges.iter().any(|r| r.contains(a))
                    );
                }
            }
        }
    }
}
