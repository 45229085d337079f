//! Which cluster DNS service IP kubelet hands to pods.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::settings::{IpFamily, Settings};

/// The cluster DNS IPs, first rule that applies:
/// 1. `--dns-cluster-ip` (a list);
/// 2. IPv6 cluster: the IPv6 service CIDR's address + `a` (`fd00:1234::/108` → `fd00:1234::a`);
/// 3. the IPv4 service CIDR with its last octet replaced by 10 (`10.96.0.0/12` → `10.96.0.10`);
/// 4. `172.20.0.10` if any of the VPC's IPv4 CIDRs starts with `10.`, otherwise `10.100.0.10`
///    (EKS's default service CIDRs, chosen so they do not overlap the VPC).
pub fn cluster_dns(settings: &Settings, vpc_ipv4_cidrs: &[String]) -> Vec<IpAddr> {
    if let Some(ips) = &settings.dns_cluster_ips {
        return ips.clone();
    }
    if settings.ip_family == IpFamily::Ipv6 {
        if let Some(net) = settings.service_ipv6_cidr {
            let a = u128::from(net.network()) + 0xa;
            return vec![IpAddr::V6(Ipv6Addr::from(a))];
        }
    }
    if let Some(net) = settings.service_ipv4_cidr {
        let [a, b, c, _] = net.network().octets();
        return vec![IpAddr::V4(Ipv4Addr::new(a, b, c, 10))];
    }
    if vpc_ipv4_cidrs.iter().any(|c| c.starts_with("10.")) {
        vec![IpAddr::V4(Ipv4Addr::new(172, 20, 0, 10))]
    } else {
        vec![IpAddr::V4(Ipv4Addr::new(10, 100, 0, 10))]
    }
}
