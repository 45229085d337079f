//! Test fixtures shared by the pool's unit tests.

use std::net::Ipv4Addr;

use crate::{EniInfo, EniObservation};

/// An ENI as EC2 shows it: device `device` in subnet 10.0.0.0/16, primary address
/// 10.0.<device>.1, secondary addresses 10.0.<device>.<each of `ips`>, and `prefixes` (/28s).
pub(super) fn eni(id: &str, device: u32, ips: &[u8], prefixes: &[&str]) -> EniObservation {
    EniObservation {
        info: EniInfo {
            id: id.into(),
            mac: format!("02:00:00:00:00:{device:02x}"),
            device_number: device,
            network_card: 0,
            subnet_id: "subnet-1".into(),
            subnet_cidr: "10.0.0.0/16".parse().unwrap(),
            primary: device == 0,
            primary_ip: Ipv4Addr::new(10, 0, device as u8, 1),
        },
        secondary_ips: ips
            .iter()
            .map(|i| Ipv4Addr::new(10, 0, device as u8, *i))
            .collect(),
        prefixes: prefixes.iter().map(|p| p.parse().unwrap()).collect(),
    }
}
