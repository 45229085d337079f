//! /etc/hosts entries for the API server of a local cluster on Outposts, so nodes keep
//! resolving it while the Outpost is disconnected from its region.
//!
//! The entries live in one marked block that every run replaces, so rerunning never
//! duplicates them; the rest of the file is kept byte for byte.

use std::net::IpAddr;

const BEGIN: &str = "# BEGIN vpcnet-bootstrap: API server of the local cluster";
const END: &str = "# END vpcnet-bootstrap";

/// The new /etc/hosts: `existing` with the vpcnet block (re)placed. Addresses are sorted,
/// then rotated by a hash of `instance_id`, so each node tries the control-plane instances in
/// its own (stable) order and load spreads across them.
pub fn with_apiserver_entries(
    existing: &str,
    host: &str,
    ips: &[IpAddr],
    instance_id: &str,
) -> String {
    let mut ips = ips.to_vec();
    ips.sort();
    ips.dedup();
    if !ips.is_empty() {
        let k = (fnv1a(instance_id.as_bytes()) % ips.len() as u64) as usize;
        ips.rotate_left(k);
    }
    let mut block = format!("{BEGIN}\n");
    for ip in &ips {
        block.push_str(&format!("{ip}\t{host}\n"));
    }
    block.push_str(END);
    block.push('\n');

    let mut out = String::new();
    let mut inside = false;
    let mut placed = false;
    for line in existing.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare == BEGIN {
            inside = true;
            if !placed {
                out.push_str(&block);
                placed = true;
            }
        } else if inside {
            if bare == END {
                inside = false;
            }
        } else {
            out.push_str(line);
        }
    }
    if !placed {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&block);
    }
    out
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_block_and_keeps_the_rest() {
        let ips: Vec<IpAddr> = vec!["10.0.0.2".parse().unwrap(), "10.0.0.1".parse().unwrap()];
        let base = "127.0.0.1\tlocalhost\n::1\tlocalhost";
        let once = with_apiserver_entries(base, "api.example", &ips, "i-1");
        assert!(
            once.starts_with("127.0.0.1\tlocalhost\n::1\tlocalhost\n# BEGIN"),
            "{once}"
        );
        assert_eq!(once.matches("api.example").count(), 2);
        let twice = with_apiserver_entries(&once, "api.example", &ips, "i-1");
        assert_eq!(once, twice);
        let changed = with_apiserver_entries(
            &(twice + "10.9.9.9 other\n"),
            "api.example",
            &ips[..1],
            "i-1",
        );
        assert_eq!(changed.matches("api.example").count(), 1);
        assert!(changed.ends_with("10.9.9.9 other\n"), "{changed}");
    }

    #[test]
    fn order_is_stable_per_instance_and_spread_across_instances() {
        let ips: Vec<IpAddr> = (1..=3)
            .map(|i| format!("10.0.0.{i}").parse().unwrap())
            .collect();
        let first = |id: &str| {
            with_apiserver_entries("", "h", &ips, id)
                .lines()
                .nth(1)
                .unwrap()
                .to_string()
        };
        assert_eq!(first("i-a"), first("i-a"));
        let distinct: std::collections::BTreeSet<String> =
            (0..20).map(|n| first(&format!("i-{n}"))).collect();
        assert!(distinct.len() > 1);
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn other_lines() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec("[0-9a-z .#\t:]{0,30}", 0..8).prop_map(|v| {
            v.into_iter()
                .filter(|l| !l.starts_with("# BEGIN") && !l.starts_with("# END"))
                .collect()
        })
    }

    proptest! {
        /// Applying twice equals applying once; every foreign line survives in order; the
        /// block holds exactly the given addresses.
        #[test]
        fn idempotent_and_keeps_foreign_lines(
            lines in other_lines(),
            ips in prop::collection::vec(any::<[u8; 4]>(), 1..6),
            id in "i-[0-9a-f]{8}",
        ) {
            let existing: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let ips: Vec<IpAddr> = ips.into_iter().map(IpAddr::from).collect();
            let once = with_apiserver_entries(&existing, "api.example", &ips, &id);
            prop_assert_eq!(&with_apiserver_entries(&once, "api.example", &ips, &id), &once);
            let kept: Vec<&str> = once.lines().filter(|l| !l.contains("api.example") && !l.starts_with("# BEGIN") && !l.starts_with("# END")).collect();
            prop_assert_eq!(kept, lines.iter().map(String::as_str).collect::<Vec<_>>());
            let mut want: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
            want.sort();
            want.dedup();
            let mut got: Vec<String> = once.lines().filter_map(|l| l.strip_suffix("\tapi.example")).map(str::to_string).collect();
            got.sort();
            prop_assert_eq!(got, want);
        }
    }
}
