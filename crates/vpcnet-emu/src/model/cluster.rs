//! EKS clusters: the records EKS DescribeCluster answers (endpoint, CA, Kubernetes network
//! configuration, and for local clusters on Outposts the cluster ID and Outpost ARNs).

use std::net::IpAddr;

use ipnet::IpNet;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::Cloud;
use crate::error::Ec2Error;

/// The cluster statuses EKS reports.
pub const CLUSTER_STATUSES: [&str; 6] = [
    "CREATING", "ACTIVE", "DELETING", "FAILED", "UPDATING", "PENDING",
];

/// A cluster to create (JSON shape of the control API's `POST /_emu/eks/clusters`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EksClusterSpec {
    /// 1-100 characters: letters, digits, `-`, `_`; starts with a letter or digit.
    pub name: String,
    /// API server URL, e.g. `https://10.0.0.10:6443` in the lab.
    pub endpoint: String,
    /// `certificateAuthority.data`: base64 of the PEM CA.
    pub certificate_authority: String,
    /// Kubernetes version; default `1.34`.
    #[serde(default)]
    pub version: Option<String>,
    /// `ipv4` (default) or `ipv6`.
    #[serde(default)]
    pub ip_family: Option<String>,
    /// Default `10.100.0.0/16` for IPv4 clusters (EKS's default when the VPC is not in 10/8).
    #[serde(default)]
    pub service_ipv4_cidr: Option<String>,
    /// Required for IPv6 clusters.
    #[serde(default)]
    pub service_ipv6_cidr: Option<String>,
    /// Outposts of a local cluster; non-empty makes it one.
    #[serde(default)]
    pub outpost_arns: Vec<String>,
    /// Cluster ID; a local cluster gets a generated UUID when empty, others none.
    #[serde(default)]
    pub id: Option<String>,
    /// Status; default `ACTIVE`.
    #[serde(default)]
    pub status: Option<String>,
}

/// A cluster as the emulator keeps it (and the control API reports it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EksCluster {
    pub name: String,
    pub arn: String,
    pub endpoint: String,
    pub certificate_authority: String,
    pub version: String,
    pub ip_family: String,
    pub service_ipv4_cidr: Option<String>,
    pub service_ipv6_cidr: Option<String>,
    pub outpost_arns: Vec<String>,
    pub id: Option<String>,
    pub status: String,
    /// Creation time, seconds since the Unix epoch.
    pub created_at: i64,
}

impl Cloud {
    /// Create an EKS cluster record. `now_epoch`: creation time in Unix seconds.
    ///
    /// Errors: `ResourceInUseException` (name taken), `InvalidParameterException` naming the bad
    /// field (name, IP family, CIDRs, status, an IPv6 cluster without IPv6 service CIDR).
    pub fn create_eks_cluster(
        &mut self,
        spec: EksClusterSpec,
        now_epoch: i64,
    ) -> Result<EksCluster, Ec2Error> {
        let bad = |m: String| Ec2Error::new("InvalidParameterException", m);
        let n = &spec.name;
        let name_ok = !n.is_empty()
            && n.len() <= 100
            && n.starts_with(|c: char| c.is_ascii_alphanumeric())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(bad(format!(
                "name {n:?}: 1-100 letters, digits, '-' or '_', starting with a letter or digit"
            )));
        }
        if self.eks_clusters.contains_key(n) {
            return Err(Ec2Error::new(
                "ResourceInUseException",
                format!("Cluster already exists with name: {n}"),
            ));
        }
        if spec.endpoint.is_empty() || spec.certificate_authority.is_empty() {
            return Err(bad(
                "endpoint and certificate_authority must not be empty".into()
            ));
        }
        let ip_family = spec.ip_family.clone().unwrap_or_else(|| "ipv4".into());
        let (want_v4, want_v6) = match ip_family.as_str() {
            "ipv4" => (true, false),
            "ipv6" => (false, true),
            other => return Err(bad(format!("ip_family {other:?}: ipv4 or ipv6"))),
        };
        for (field, cidr, v6) in [
            ("service_ipv4_cidr", &spec.service_ipv4_cidr, false),
            ("service_ipv6_cidr", &spec.service_ipv6_cidr, true),
        ] {
            if let Some(c) = cidr {
                match c.parse::<IpNet>() {
                    Ok(net) if matches!(net.network(), IpAddr::V6(_)) == v6 => {}
                    _ => {
                        return Err(bad(format!(
                            "{field} {c:?} is not an IPv{} CIDR",
                            if v6 { 6 } else { 4 }
                        )))
                    }
                }
            }
        }
        if want_v6 && spec.service_ipv6_cidr.is_none() {
            return Err(bad("an ipv6 cluster needs service_ipv6_cidr".into()));
        }
        let service_ipv4_cidr = match (&spec.service_ipv4_cidr, want_v4) {
            (Some(c), _) => Some(c.clone()),
            (None, true) => Some("10.100.0.0/16".into()),
            (None, false) => None,
        };
        let status = spec.status.clone().unwrap_or_else(|| "ACTIVE".into());
        if !CLUSTER_STATUSES.contains(&status.as_str()) {
            return Err(bad(format!(
                "status {status:?}: one of {CLUSTER_STATUSES:?}"
            )));
        }
        let id = match (&spec.id, spec.outpost_arns.is_empty()) {
            (Some(id), _) => Some(id.clone()),
            (None, false) => Some(self.new_uuid()),
            (None, true) => None,
        };
        let c = EksCluster {
            arn: format!(
                "arn:aws:eks:{}:{}:cluster/{n}",
                self.region, self.account_id
            ),
            name: n.clone(),
            endpoint: spec.endpoint,
            certificate_authority: spec.certificate_authority,
            version: spec.version.unwrap_or_else(|| "1.34".into()),
            ip_family,
            service_ipv4_cidr,
            service_ipv6_cidr: spec.service_ipv6_cidr,
            outpost_arns: spec.outpost_arns,
            id,
            status,
            created_at: now_epoch,
        };
        self.eks_clusters.insert(c.name.clone(), c.clone());
        Ok(c)
    }

    pub fn eks_cluster(&self, name: &str) -> Option<&EksCluster> {
        self.eks_clusters.get(name)
    }

    /// Every cluster, sorted by name.
    pub fn eks_clusters(&self) -> impl Iterator<Item = &EksCluster> {
        self.eks_clusters.values()
    }

    /// Remove a cluster record. Errors: `ResourceNotFoundException`.
    pub fn delete_eks_cluster(&mut self, name: &str) -> Result<(), Ec2Error> {
        self.eks_clusters
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| cluster_not_found(name))
    }

    /// A random UUID (version 4 layout) from the seeded RNG.
    fn new_uuid(&mut self) -> String {
        let b: [u8; 16] = self.rng().random();
        let h =
            |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
        format!(
            "{}-{}-4{}-a{}-{}",
            h(0..4),
            h(4..6),
            &h(6..8)[1..],
            &h(8..10)[1..],
            h(10..16)
        )
    }
}

/// EKS's answer for an unknown cluster name.
pub fn cluster_not_found(name: &str) -> Ec2Error {
    Ec2Error::new(
        "ResourceNotFoundException",
        format!("No cluster found for name: {name}."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> EksClusterSpec {
        EksClusterSpec {
            name: name.into(),
            endpoint: "https://api.lab".into(),
            certificate_authority: "Q0E=".into(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_and_checks() {
        let mut c = Cloud::new(1, "us-west-2", "123456789012");
        let k = c.create_eks_cluster(spec("lab"), 1_700_000_000).unwrap();
        assert_eq!(
            (
                k.status.as_str(),
                k.ip_family.as_str(),
                k.service_ipv4_cidr.as_deref(),
                k.id.as_deref()
            ),
            ("ACTIVE", "ipv4", Some("10.100.0.0/16"), None)
        );
        assert_eq!(k.arn, "arn:aws:eks:us-west-2:123456789012:cluster/lab");
        assert_eq!(
            c.create_eks_cluster(spec("lab"), 0).unwrap_err().code,
            "ResourceInUseException"
        );
        let local = c
            .create_eks_cluster(
                EksClusterSpec {
                    outpost_arns: vec![
                        "arn:aws:outposts:us-west-2:123456789012:outpost/op-1".into()
                    ],
                    ..spec("local")
                },
                0,
            )
            .unwrap();
        let id = local.id.unwrap();
        assert_eq!((id.len(), id.as_bytes()[14]), (36, b'4'), "{id}");
        for bad in [
            EksClusterSpec {
                ip_family: Some("ipv5".into()),
                ..spec("a")
            },
            EksClusterSpec {
                ip_family: Some("ipv6".into()),
                ..spec("b")
            },
            EksClusterSpec {
                service_ipv4_cidr: Some("fd00::/108".into()),
                ..spec("c")
            },
            EksClusterSpec {
                status: Some("RUNNING".into()),
                ..spec("d")
            },
            spec("-x"),
        ] {
            assert_eq!(
                c.create_eks_cluster(bad, 0).unwrap_err().code,
                "InvalidParameterException"
            );
        }
        c.delete_eks_cluster("lab").unwrap();
        assert_eq!(
            c.delete_eks_cluster("lab").unwrap_err().code,
            "ResourceNotFoundException"
        );
    }
}
