//! What the fuzz target `imds` (fuzz/) checks for one input; shared by the target (through
//! `#[path]`) and by `fuzz_regressions.rs`, which feeds the seeds and every kept reproducer
//! in CI. Panics on a broken property.
#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use vpcnet_imds::{parse_interface, parse_macs, parse_value, InterfaceTexts};

/// IMDS text: the whole input as the MAC list and as single values; then split at NUL bytes
/// into the MAC and the ten items of `INTERFACE_ITEMS` (a missing optional item is a 404)
/// for `parse_interface`, whose errors name the item's path.
pub fn imds(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for mac in parse_macs(&text) {
        assert!(!mac.ends_with('/'), "{mac:?}");
        assert_eq!(mac, mac.to_ascii_lowercase());
    }
    let _ = parse_value::<Ipv4Addr>("local-ipv4", &text);
    let _ = parse_value::<Ipv6Addr>("ipv6", &text);
    let f: Vec<&str> = text.split('\0').collect();
    let req = |i: usize| f.get(i).map(|s| s.to_string()).unwrap_or_default();
    let opt = |i: usize| f.get(i).map(|s| s.to_string());
    let texts = InterfaceTexts {
        device_number: req(1),
        network_card: opt(2),
        interface_id: req(3),
        subnet_id: req(4),
        subnet_cidr: req(5),
        vpc_id: req(6),
        vpc_cidrs: req(7),
        security_group_ids: opt(8),
        local_ipv4s: opt(9),
        ipv4_prefixes: opt(10),
    };
    match parse_interface(f[0], &texts) {
        Ok(i) => assert_eq!(i.mac, f[0].to_ascii_lowercase()),
        Err(e) => assert!(
            e.path()
                .starts_with("/latest/meta-data/network/interfaces/macs/"),
            "{e}"
        ),
    }
}
