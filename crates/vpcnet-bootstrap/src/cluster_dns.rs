//! Which cluster DNS service IP kubelet hands to pods.

use std::net::{IpAddr, Ipv4Addr};

use crate::cluster::{Cluster, IpFamily};

/// The cluster DNS IPs, first rule that applies:
/// 1. `--dns-cluster-ip` (`given`, a list);
/// 2. IPv6 cluster: the IPv6 service CIDR's address + `a` (`fd00:1234::/108` → `fd00:1234::a`);
/// 3. the IPv4 service CIDR with its last octet replaced by 10 (`10.96.0.0/12` → `10.96.0.10`);
/// 4. `172.20.0.10` if any of the VPC's IPv4 CIDRs starts with `10.`, otherwise `10.100.0.10`
///    (EKS's default service CIDRs, chosen so they do not overlap the VPC).
///
/// (Rules 2 and 3 use [`crate::cluster::ServiceCidr::dns`].)
pub fn cluster_dns(
    given: Option<&[IpAddr]>,
    cluster: &Cluster,
    vpc_ipv4_cidrs: &[String],
) -> Vec<IpAddr> {
    if let Some(ips) = given {
        return ips.to_vec();
    }
    if cluster.ip_family == IpFamily::Ipv6 {
        if let Some(c) = &cluster.service_ipv6_cidr {
            return vec![c.dns];
        }
    }
    if let Some(c) = &cluster.service_ipv4_cidr {
        return vec![c.dns];
    }
    if vpc_ipv4_cidrs.iter().any(|c| c.starts_with("10.")) {
        vec![IpAddr::V4(Ipv4Addr::new(172, 20, 0, 10))]
    } else {
        vec![IpAddr::V4(Ipv4Addr::new(10, 100, 0, 10))]
    }
}
