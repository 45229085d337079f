//! The cluster a node joins: API server endpoint, CA, service CIDRs, IP family and (local
//! clusters on Outposts) cluster ID, from the flags and NodeConfig, completed by EKS
//! `DescribeCluster` when the endpoint or CA is missing (as bootstrap.sh does; given values
//! win over described ones).
//!
//! Parsing is as lenient as bootstrap.sh: what bootstrap.sh accepts is accepted, with a
//! warning when it is probably wrong; only values that cannot work are errors (pure, no I/O).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine;
use ipnet::{Ipv4Net, Ipv6Net};

use crate::error::BootstrapError;
use crate::version::KubeletVersion;

pub use vpcnet_eks::ClusterInfo;

/// Cluster IP family (bootstrap.sh `--ip-family`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    Ipv4,
    Ipv6,
}

impl IpFamily {
    /// `ipv4`/`ipv6` in any case. Errors name `flag`.
    pub fn parse(flag: &str, v: &str) -> Result<Self, BootstrapError> {
        match v.trim().to_ascii_lowercase().as_str() {
            "ipv4" => Ok(IpFamily::Ipv4),
            "ipv6" => Ok(IpFamily::Ipv6),
            _ => Err(BootstrapError::invalid(
                flag,
                v,
                "only ipv4 and ipv6 exist",
                "pass --ip-family ipv4 or --ip-family ipv6",
            )),
        }
    }
}

/// A service CIDR as given, with the cluster DNS address it implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceCidr {
    /// The value as given (e.g. `10.100.0.0/16`).
    pub given: String,
    /// The cluster DNS service IP: the network with last octet 10 (IPv4), or its address + `a`
    /// (IPv6), as EKS assigns kube-dns.
    pub dns: IpAddr,
}

/// The cluster, complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// API server URL for the kubeconfig (`https://host[:port][/path]`).
    pub endpoint: String,
    /// Host part of the endpoint (for /etc/hosts on Outposts).
    pub apiserver_host: String,
    /// CA certificate(s), PEM text.
    pub ca_pem: String,
    pub ip_family: IpFamily,
    pub service_ipv4_cidr: Option<ServiceCidr>,
    pub service_ipv6_cidr: Option<ServiceCidr>,
    /// Cluster ID when this is a local cluster on Outposts.
    pub outpost_cluster_id: Option<String>,
}

/// What the operator gave about the cluster (flags first, then NodeConfig), unresolved.
#[derive(Debug, Clone, Default)]
pub struct ClusterInput {
    pub name: String,
    pub endpoint: Option<String>,
    /// Base64 PEM as given.
    pub ca_b64: Option<String>,
    pub ip_family: Option<IpFamily>,
    pub service_ipv4_cidr: Option<String>,
    pub service_ipv6_cidr: Option<String>,
    /// The service CIDR came from NodeConfig `spec.cluster.cidr` (names it in errors).
    pub cidr_from_config: bool,
    /// `--enable-local-outpost` / `enableOutpost`, when given.
    pub outpost: Option<bool>,
    pub cluster_id: Option<String>,
    /// `--dns-cluster-ip` was given (an IPv6 cluster needs it or its service CIDR).
    pub dns_ip_given: bool,
    /// Which values came from NodeConfig `spec.cluster` (messages name them by their field).
    pub from_config: FromConfig,
}

/// Values of [`ClusterInput`] taken from NodeConfig `spec.cluster` rather than from flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FromConfig {
    pub endpoint: bool,
    pub ca: bool,
    pub outpost: bool,
    pub cluster_id: bool,
}

impl FromConfig {
    /// `flag`, or the NodeConfig field it stands for when the value came from there.
    pub fn label(&self, flag: &'static str) -> &'static str {
        match flag {
            "--apiserver-endpoint" if self.endpoint => "spec.cluster.apiServerEndpoint",
            "--b64-cluster-ca" if self.ca => "spec.cluster.certificateAuthority",
            "--enable-local-outpost" if self.outpost => "spec.cluster.enableOutpost",
            "--cluster-id" if self.cluster_id => "spec.cluster.id",
            other => other,
        }
    }
}

impl ClusterInput {
    /// Whether EKS DescribeCluster must be asked (endpoint or CA missing, as bootstrap.sh).
    pub fn needs_lookup(&self) -> bool {
        self.endpoint.is_none() || self.ca_b64.is_none()
    }

    /// Checks the given values alone, before any lookup, so bad input fails first (the
    /// warnings come with [`ClusterInput::resolve`]).
    pub fn check(&self) -> Result<(), BootstrapError> {
        let mut w = Vec::new();
        let l = |flag| self.from_config.label(flag);
        if let Some(e) = &self.endpoint {
            parse_endpoint(l("--apiserver-endpoint"), e, &mut w)?;
        }
        if let Some(c) = &self.ca_b64 {
            decode_ca(l("--b64-cluster-ca"), c, &mut w)?;
        }
        self.cidrs(&mut w)?;
        if !self.needs_lookup() {
            // Everything must be known now: the same checks a lookup would be followed by.
            self.resolve(None)?;
        }
        Ok(())
    }

    fn cidrs(
        &self,
        w: &mut Vec<String>,
    ) -> Result<(Option<ServiceCidr>, Option<ServiceCidr>), BootstrapError> {
        let label = |flag: &'static str| {
            if self.cidr_from_config {
                "spec.cluster.cidr"
            } else {
                flag
            }
        };
        let v4 = match &self.service_ipv4_cidr {
            Some(s) => Some(parse_v4(label("--service-ipv4-cidr"), s, w)?),
            None => None,
        };
        let v6 = match &self.service_ipv6_cidr {
            Some(s) => Some(parse_v6(label("--service-ipv6-cidr"), s, w)?),
            None => None,
        };
        if let (Some(IpFamily::Ipv4), Some(v6)) = (self.ip_family, &v6) {
            return Err(BootstrapError::invalid(
                "--ip-family",
                "ipv4",
                format!(
                    "--service-ipv6-cidr {} makes this an IPv6 cluster",
                    v6.given
                ),
                "drop --ip-family ipv4 (or pass --ip-family ipv6), or drop --service-ipv6-cidr",
            ));
        }
        Ok((v4, v6))
    }

    /// The cluster from the given values, completed by `described` (DescribeCluster's answer).
    /// Returns warnings for probably-wrong values.
    ///
    /// Errors: a value that cannot work; an IPv6 cluster without service CIDR or
    /// `--dns-cluster-ip`; a local cluster on Outposts without a cluster ID; endpoint or CA
    /// still missing.
    pub fn resolve(
        &self,
        described: Option<&ClusterInfo>,
    ) -> Result<(Cluster, Vec<String>), BootstrapError> {
        let mut w = Vec::new();
        let (mut v4, mut v6) = self.cidrs(&mut w)?;
        let d = described;
        let from_eks = |field: &str| format!("EKS DescribeCluster {field}");
        let endpoint_text = self
            .endpoint
            .clone()
            .or_else(|| d.and_then(|d| d.endpoint.clone()))
            .ok_or_else(|| {
                BootstrapError::missing(
                    "--apiserver-endpoint",
                    "pass the cluster endpoint (aws eks describe-cluster --query cluster.endpoint) or set spec.cluster.apiServerEndpoint",
                )
            })?;
        let l = |flag| self.from_config.label(flag);
        let endpoint_label = if self.endpoint.is_some() {
            l("--apiserver-endpoint").to_string()
        } else {
            from_eks("cluster.endpoint")
        };
        let (endpoint, apiserver_host) = parse_endpoint(&endpoint_label, &endpoint_text, &mut w)?;
        let ca_text = self
            .ca_b64
            .clone()
            .or_else(|| d.and_then(|d| d.certificate_authority.clone()))
            .ok_or_else(|| {
                BootstrapError::missing(
                    "--b64-cluster-ca",
                    "pass the base64 CA (aws eks describe-cluster --query cluster.certificateAuthority.data) or set spec.cluster.certificateAuthority",
                )
            })?;
        let ca_label = if self.ca_b64.is_some() {
            l("--b64-cluster-ca").to_string()
        } else {
            from_eks("cluster.certificateAuthority.data")
        };
        let ca_pem = decode_ca(&ca_label, &ca_text, &mut w)?;

        if let Some(d) = d {
            if v4.is_none() {
                if let Some(s) = &d.service_ipv4_cidr {
                    v4 = Some(parse_v4(&from_eks("serviceIpv4Cidr"), s, &mut w)?);
                }
            }
            if v6.is_none() {
                if let Some(s) = &d.service_ipv6_cidr {
                    v6 = Some(parse_v6(&from_eks("serviceIpv6Cidr"), s, &mut w)?);
                }
            }
        }
        let described_family = match d.and_then(|d| d.ip_family.as_deref()) {
            Some(f) => Some(IpFamily::parse(&from_eks("ipFamily"), f)?),
            None => None,
        };
        let ip_family = match (self.ip_family, self.service_ipv6_cidr.is_some()) {
            (Some(f), _) => f,
            (None, true) => IpFamily::Ipv6,
            (None, false) => described_family.unwrap_or(IpFamily::Ipv4),
        };
        if ip_family == IpFamily::Ipv6 && v6.is_none() && !self.dns_ip_given {
            return Err(BootstrapError::invalid(
                "--ip-family",
                "ipv6",
                "an IPv6 cluster's DNS IP comes from its IPv6 service CIDR, and neither --service-ipv6-cidr nor --dns-cluster-ip was given",
                "pass --service-ipv6-cidr (aws eks describe-cluster --query cluster.kubernetesNetworkConfig.serviceIpv6Cidr) or --dns-cluster-ip",
            ));
        }

        let outpost = self
            .outpost
            .or_else(|| d.map(|d| !d.outpost_arns.is_empty()))
            .unwrap_or(false);
        let outpost_cluster_id = if outpost {
            let id = self
                .cluster_id
                .clone()
                .or_else(|| d.and_then(|d| d.id.clone()))
                .ok_or_else(|| {
                    BootstrapError::invalid(
                        l("--enable-local-outpost"),
                        "true",
                        "a local cluster's bootstrap kubeconfig authenticates with the cluster ID, and neither --cluster-id nor spec.cluster.id was given",
                        "pass --cluster-id (aws eks describe-cluster --query cluster.id) or set spec.cluster.id",
                    )
                })?;
            check_name(l("--cluster-id"), &id)?;
            Some(id)
        } else {
            None
        };
        Ok((
            Cluster {
                endpoint,
                apiserver_host,
                ca_pem,
                ip_family,
                service_ipv4_cidr: v4,
                service_ipv6_cidr: v6,
                outpost_cluster_id,
            },
            w,
        ))
    }
}

/// Whether kubelet runs with `--cloud-provider=external`: always on local clusters on
/// Outposts; on regular clusters from kubelet 1.26 (older kubelets use the in-tree `aws`).
pub fn uses_external_provider(cluster: &Cluster, kubelet: KubeletVersion) -> bool {
    cluster.outpost_cluster_id.is_some() || kubelet >= KubeletVersion::new(1, 26, 0)
}

/// Cluster names and IDs go into YAML and command lines: letters, digits, `-`, `_`, `.` only
/// (EKS's own names are a subset).
pub fn check_name(flag: &str, v: &str) -> Result<(), BootstrapError> {
    let ok = !v.is_empty()
        && v.len() <= 100
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(BootstrapError::invalid(
            flag,
            v,
            "must be 1-100 letters, digits, '-', '_' or '.'",
            "pass the name or ID exactly as EKS shows it",
        ))
    }
}

/// The endpoint to write and its host. Accepted with a warning: no scheme (https:// is
/// assumed, as client-go does with a CA), `http://`, a path or query, a user name. Errors:
/// not a URL, another scheme, no host.
pub fn parse_endpoint(
    flag: &str,
    given: &str,
    w: &mut Vec<String>,
) -> Result<(String, String), BootstrapError> {
    let bad = |problem: &str| {
        BootstrapError::invalid(
            flag,
            given,
            problem,
            "pass the cluster endpoint as EKS shows it, e.g. https://0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com",
        )
    };
    let trimmed = given.trim();
    let endpoint = if trimmed.contains("://") {
        trimmed.to_string()
    } else {
        w.push(format!(
            "{flag} {given:?} has no scheme; using https://{trimmed} (kubelet would assume https too)"
        ));
        format!("https://{trimmed}")
    };
    let uri: http::Uri = endpoint.parse().map_err(|_| bad("not a URL"))?;
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") => w.push(format!(
            "{flag} {given:?} is plain http: kubelet will talk to the API server unencrypted and the CA is unused; EKS endpoints are https://"
        )),
        _ => return Err(bad("the scheme must be https://")),
    }
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("no host name"))?;
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        w.push(format!(
            "{flag} {given:?} has a path or query; kubelet sends every API request under it, which EKS endpoints do not expect"
        ));
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        w.push(format!(
            "{flag} {given:?} carries a user name, which kubelet ignores"
        ));
    }
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((endpoint, host))
}

/// The CA as PEM text. Accepted with a warning: PEM given as is (not base64); base64 of DER
/// (converted to PEM); base64 of other text (written as is, as bootstrap.sh and nodeadm do).
/// Errors: not base64 (bootstrap.sh's `base64 -d` fails too); base64 of binary that is not DER.
pub fn decode_ca(flag: &str, given: &str, w: &mut Vec<String>) -> Result<String, BootstrapError> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    let fix = "pass the base64 of the PEM CA certificate: aws eks describe-cluster --query cluster.certificateAuthority.data";
    let with_newline = |s: String| if s.ends_with('\n') { s } else { s + "\n" };
    if given.trim_start().starts_with("-----BEGIN") {
        w.push(format!(
            "{flag} is PEM text, not base64 of it; using it as is"
        ));
        return Ok(with_newline(given.trim_start().to_string()));
    }
    let compact: String = given.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| {
            BootstrapError::invalid(flag, abbreviate(given), format!("not base64 ({e})"), fix)
        })?;
    match String::from_utf8(bytes) {
        Ok(pem) if pem.contains(BEGIN) => Ok(with_newline(pem)),
        Ok(text) => {
            w.push(format!(
                "{flag} does not decode to a PEM certificate; it is written to /etc/kubernetes/pki/ca.crt as is, and kubelet will refuse to start unless that file is replaced"
            ));
            Ok(with_newline(text))
        }
        Err(e) if e.as_bytes().first() == Some(&0x30) => {
            w.push(format!(
                "{flag} decodes to a DER certificate; writing it as PEM"
            ));
            let b64 = base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
            let mut pem = format!("{BEGIN}\n");
            for chunk in b64.as_bytes().chunks(64) {
                pem.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
                pem.push('\n');
            }
            pem.push_str("-----END CERTIFICATE-----\n");
            Ok(pem)
        }
        Err(_) => Err(BootstrapError::invalid(
            flag,
            abbreviate(given),
            "decodes to binary data that is neither PEM nor a DER certificate",
            fix,
        )),
    }
}

fn abbreviate(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}

/// An IPv4 service CIDR. Accepted with a warning: host bits set (the network is used), a bare
/// address (last octet replaced by 10, as bootstrap.sh), a range too small for `.10`.
/// Errors: not IPv4.
pub fn parse_v4(flag: &str, s: &str, w: &mut Vec<String>) -> Result<ServiceCidr, BootstrapError> {
    let t = s.trim();
    let not = || {
        BootstrapError::invalid(flag, s, "not an IPv4 CIDR", "pass the cluster's service CIDR, e.g. 10.100.0.0/16 (aws eks describe-cluster --query cluster.kubernetesNetworkConfig.serviceIpv4Cidr)")
    };
    let with_ten = |a: Ipv4Addr| {
        let [x, y, z, _] = a.octets();
        Ipv4Addr::new(x, y, z, 10)
    };
    let dns = if t.contains('/') {
        let net: Ipv4Net = t.parse().map_err(|_| not())?;
        if net.trunc() != net {
            w.push(format!(
                "{flag} {s}: host bits are set; using the network {} (cluster DNS {})",
                net.trunc(),
                with_ten(net.network())
            ));
        }
        let dns = with_ten(net.network());
        if !net.trunc().contains(&dns) {
            w.push(format!(
                "{flag} {s} is too small to hold the cluster DNS address {dns}; EKS service CIDRs are /12 to /24"
            ));
        }
        dns
    } else {
        let a: Ipv4Addr = t.parse().map_err(|_| not())?;
        let dns = with_ten(a);
        w.push(format!(
            "{flag} {s} has no prefix length; cluster DNS is {dns} (last octet 10, as bootstrap.sh does)"
        ));
        dns
    };
    Ok(ServiceCidr {
        given: t.to_string(),
        dns: IpAddr::V4(dns),
    })
}

/// An IPv6 service CIDR. Accepted with a warning: host bits set (the network is used), a bare
/// address (`a` appended to its text, as bootstrap.sh, e.g. `fe80::1` → `fe80::1a`), a range
/// too small for `::a`. Errors: not IPv6.
pub fn parse_v6(flag: &str, s: &str, w: &mut Vec<String>) -> Result<ServiceCidr, BootstrapError> {
    let t = s.trim();
    let not = || {
        BootstrapError::invalid(flag, s, "not an IPv6 CIDR", "pass the cluster's IPv6 service CIDR, e.g. fd00:1234:5678::/108 (aws eks describe-cluster --query cluster.kubernetesNetworkConfig.serviceIpv6Cidr)")
    };
    let plus_a = |a: Ipv6Addr| Ipv6Addr::from(u128::from(a).wrapping_add(0xa));
    let dns = if t.contains('/') {
        let net: Ipv6Net = t.parse().map_err(|_| not())?;
        let dns = plus_a(net.network());
        if net.trunc() != net {
            w.push(format!(
                "{flag} {s}: host bits are set; using the network {} (cluster DNS {dns})",
                net.trunc()
            ));
        }
        if !net.trunc().contains(&dns) {
            w.push(format!(
                "{flag} {s} is too small to hold the cluster DNS address {dns}; EKS IPv6 service CIDRs are /108"
            ));
        }
        dns
    } else {
        let a: Ipv6Addr = t.parse().map_err(|_| not())?;
        let dns = format!("{t}a")
            .parse::<Ipv6Addr>()
            .unwrap_or_else(|_| plus_a(a));
        w.push(format!(
            "{flag} {s} has no prefix length; cluster DNS is {dns} (\"a\" appended, as bootstrap.sh does)"
        ));
        dns
    };
    Ok(ServiceCidr {
        given: t.to_string(),
        dns: IpAddr::V6(dns),
    })
}

#[cfg(test)]
mod tests;
