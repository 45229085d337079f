//! Validated settings: the command line merged with the NodeConfig file (flags win).
//!
//! Pure: every check runs here, before anything is read from IMDS or written, so bad input
//! fails with an error naming the flag and the fix and leaves the node untouched.

use std::net::IpAddr;

use base64::Engine;
use ipnet::{Ipv4Net, Ipv6Net};
use vpcnet_limits::MaxPodsOptions;

use crate::args::{BootstrapArgs, MaxPodsCap};
use crate::error::BootstrapError;
use crate::node_config::NodeConfig;
use crate::version::KubeletVersion;

/// Cluster IP family (bootstrap.sh `--ip-family`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    Ipv4,
    Ipv6,
}

/// How max pods is computed for the instance type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPodsSettings {
    /// Custom networking, prefix delegation and max ENI; `show_max_allowed` is derived from `cap`.
    pub options: MaxPodsOptions,
    pub cap: MaxPodsCap,
}

impl MaxPodsSettings {
    /// The calculator options with the ceiling resolved: `auto` is uncapped in secondary-IP mode
    /// and capped with prefix delegation.
    pub fn calculator_options(&self) -> MaxPodsOptions {
        let show_max_allowed = match self.cap {
            MaxPodsCap::None => true,
            MaxPodsCap::Recommended => false,
            MaxPodsCap::Auto => !self.options.prefix_delegation,
        };
        MaxPodsOptions {
            show_max_allowed,
            ..self.options
        }
    }
}

/// Everything a bootstrap run needs from its user, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub cluster_name: String,
    /// The API server URL as given (https, with host).
    pub apiserver_endpoint: String,
    /// Host name part of the endpoint (for /etc/hosts on Outposts).
    pub apiserver_host: String,
    /// Decoded CA certificate (PEM text).
    pub ca_pem: String,
    pub ip_family: IpFamily,
    /// `--dns-cluster-ip`, when given.
    pub dns_cluster_ips: Option<Vec<IpAddr>>,
    pub service_ipv4_cidr: Option<Ipv4Net>,
    pub service_ipv6_cidr: Option<Ipv6Net>,
    /// Whether kubelet `maxPods` is written (bootstrap.sh `--use-max-pods`).
    pub use_max_pods: bool,
    pub max_pods: MaxPodsSettings,
    /// Extra kubelet flags (`--kubelet-extra-args` then NodeConfig `kubelet.flags`), one string.
    pub kubelet_extra_args: String,
    /// `--max-pods N` found in the extra flags (the value kubelet will use).
    pub max_pods_flag: Option<u32>,
    /// `maxPods` set in NodeConfig `kubelet.config`.
    pub max_pods_config: Option<u32>,
    /// `--reserved-cpus` is among the extra flags (then no reserved cgroups are configured).
    pub reserved_cpus_flag: bool,
    /// Cluster ID when this is a local cluster on Outposts.
    pub outpost_cluster_id: Option<String>,
    pub kubelet_version: Option<KubeletVersion>,
    /// NodeConfig `kubelet.config`, merged over the generated kubelet config.
    pub kubelet_config_overrides: serde_json::Map<String, serde_json::Value>,
    /// Non-fatal notes for the operator (ignored flags and the like).
    pub warnings: Vec<String>,
}

impl Settings {
    /// Merges and validates. `config` is the parsed `--config` file, if any.
    ///
    /// Errors: [`BootstrapError::Invalid`] / [`BootstrapError::Missing`] naming the flag.
    pub fn new(args: &BootstrapArgs, config: Option<&NodeConfig>) -> Result<Self, BootstrapError> {
        let default_nc = NodeConfig::default();
        let nc = config.unwrap_or(&default_nc);
        let cl = &nc.spec.cluster;
        let kl = &nc.spec.kubelet;
        let mut warnings = Vec::new();
        for flag in args.ignored.given() {
            warnings.push(format!(
                "{flag} is accepted for bootstrap.sh compatibility and ignored"
            ));
        }

        let cluster_name = args.cluster_name.clone().or_else(|| cl.name.clone()).ok_or_else(|| {
            BootstrapError::missing(
                "cluster name",
                "pass it as the first argument (vpcnet-bootstrap [options] <cluster-name>) or set spec.cluster.name",
            )
        })?;
        check_name("<cluster-name>", &cluster_name)?;

        let endpoint = args.apiserver_endpoint.clone().or_else(|| cl.api_server_endpoint.clone()).ok_or_else(|| {
            BootstrapError::missing(
                "--apiserver-endpoint",
                "pass the cluster endpoint (aws eks describe-cluster --query cluster.endpoint) or set spec.cluster.apiServerEndpoint; vpcnet-bootstrap does not call EKS DescribeCluster",
            )
        })?;
        let apiserver_host = endpoint_host(&endpoint)?;

        let b64 = args.b64_cluster_ca.clone().or_else(|| cl.certificate_authority.clone()).ok_or_else(|| {
            BootstrapError::missing(
                "--b64-cluster-ca",
                "pass the base64 CA (aws eks describe-cluster --query cluster.certificateAuthority.data) or set spec.cluster.certificateAuthority",
            )
        })?;
        let ca_pem = decode_ca(&b64)?;

        // IP family and service CIDRs.
        let family_flag = match args.ip_family.as_deref() {
            None => None,
            Some(f) => match f.to_ascii_lowercase().as_str() {
                "ipv4" => Some(IpFamily::Ipv4),
                "ipv6" => Some(IpFamily::Ipv6),
                _ => {
                    return Err(BootstrapError::invalid(
                        "--ip-family",
                        f,
                        "only ipv4 and ipv6 exist",
                        "pass --ip-family ipv4 or --ip-family ipv6",
                    ))
                }
            },
        };
        let mut service_ipv4_cidr = match &args.service_ipv4_cidr {
            Some(s) => Some(parse_v4_cidr("--service-ipv4-cidr", s)?),
            None => None,
        };
        let mut service_ipv6_cidr = match &args.service_ipv6_cidr {
            Some(s) => Some(parse_v6_cidr("--service-ipv6-cidr", s)?),
            None => None,
        };
        if let Some(cidr) = &cl.cidr {
            if cidr.contains(':') {
                if service_ipv6_cidr.is_none() && service_ipv4_cidr.is_none() {
                    service_ipv6_cidr = Some(parse_v6_cidr("spec.cluster.cidr", cidr)?);
                }
            } else if service_ipv4_cidr.is_none() && service_ipv6_cidr.is_none() {
                service_ipv4_cidr = Some(parse_v4_cidr("spec.cluster.cidr", cidr)?);
            }
        }
        let dns_cluster_ips = match &args.dns_cluster_ip {
            None => None,
            Some(list) => Some(parse_ip_list(list)?),
        };
        let ip_family = match (family_flag, &service_ipv6_cidr) {
            (Some(IpFamily::Ipv4), Some(v6)) if args.service_ipv6_cidr.is_some() => {
                return Err(BootstrapError::invalid(
                    "--ip-family",
                    "ipv4",
                    format!("--service-ipv6-cidr {v6} makes this an IPv6 cluster"),
                    "drop --ip-family ipv4 (or pass --ip-family ipv6), or drop --service-ipv6-cidr",
                ))
            }
            (Some(f), _) => f,
            (None, Some(_)) => IpFamily::Ipv6,
            (None, None) => IpFamily::Ipv4,
        };
        if ip_family == IpFamily::Ipv6 && service_ipv6_cidr.is_none() && dns_cluster_ips.is_none() {
            return Err(BootstrapError::invalid(
                "--ip-family",
                "ipv6",
                "an IPv6 cluster's DNS IP comes from its IPv6 service CIDR, and neither --service-ipv6-cidr nor --dns-cluster-ip was given",
                "pass --service-ipv6-cidr (aws eks describe-cluster --query cluster.kubernetesNetworkConfig.serviceIpv6Cidr) or --dns-cluster-ip",
            ));
        }

        // Max pods.
        let policy = &kl.max_pods_policy;
        let use_max_pods = args.use_max_pods.or(policy.use_max_pods).unwrap_or(true);
        let max_eni = args.cni_max_eni.or(policy.max_eni);
        if max_eni == Some(0) {
            return Err(BootstrapError::invalid(
                "--cni-max-eni",
                "0",
                "pods need at least one ENI",
                "pass --cni-max-eni 1 or more, or leave it out to use every ENI",
            ));
        }
        let max_pods = MaxPodsSettings {
            options: MaxPodsOptions {
                custom_networking: args.cni_custom_networking_enabled || policy.custom_networking,
                prefix_delegation: args.cni_prefix_delegation_enabled || policy.prefix_delegation,
                max_eni,
                show_max_allowed: false,
            },
            cap: args.max_pods_cap.or(policy.cap).unwrap_or_default(),
        };

        // Extra kubelet flags.
        if let Some(extra) = &args.kubelet_extra_args {
            check_unit_value("--kubelet-extra-args", extra)?;
        }
        for f in &kl.flags {
            check_unit_value("spec.kubelet.flags", f)?;
        }
        let kubelet_extra_args = args
            .kubelet_extra_args
            .iter()
            .map(|s| s.trim())
            .chain(kl.flags.iter().map(|s| s.trim()))
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let words: Vec<&str> = kubelet_extra_args.split_whitespace().collect();
        let max_pods_flag = flag_value(&words, "--max-pods")
            .map(|v| {
                v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    BootstrapError::invalid(
                        "--kubelet-extra-args",
                        kubelet_extra_args.clone(),
                        format!("--max-pods {v:?} is not a positive whole number"),
                        "write e.g. --max-pods=58",
                    )
                })
            })
            .transpose()?;
        let reserved_cpus_flag = words
            .iter()
            .any(|w| *w == "--reserved-cpus" || w.starts_with("--reserved-cpus="));

        let kubelet_config_overrides = kl.config.clone().unwrap_or_default();
        let max_pods_config = match kubelet_config_overrides.get("maxPods") {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|n| *n > 0 && *n <= u32::MAX as u64)
                    .map(|n| n as u32)
                    .ok_or_else(|| {
                        BootstrapError::invalid(
                            "spec.kubelet.config.maxPods",
                            v.to_string(),
                            "not a positive whole number",
                            "write e.g. maxPods: 58",
                        )
                    })?,
            ),
        };

        // Local cluster on Outposts.
        let outpost = args
            .enable_local_outpost
            .or(cl.enable_outpost)
            .unwrap_or(false);
        let outpost_cluster_id = if outpost {
            let id = args.cluster_id.clone().or_else(|| cl.id.clone()).ok_or_else(|| {
                BootstrapError::invalid(
                    "--enable-local-outpost",
                    "true",
                    "a local cluster's bootstrap kubeconfig authenticates with the cluster ID, and --cluster-id was not given",
                    "pass --cluster-id (aws eks describe-cluster --query cluster.id) or set spec.cluster.id",
                )
            })?;
            check_name("--cluster-id", &id)?;
            Some(id)
        } else {
            None
        };

        match args.container_runtime.as_deref() {
            None | Some("containerd") => {}
            Some(other) => {
                return Err(BootstrapError::invalid(
                    "--container-runtime",
                    other,
                    "containerd is the only runtime kubelet ≥ 1.24 supports",
                    "drop the flag or pass --container-runtime containerd",
                ))
            }
        }

        let kubelet_version = match &args.kubelet_version {
            None => None,
            Some(v) => Some(KubeletVersion::parse(v).ok_or_else(|| {
                BootstrapError::invalid("--kubelet-version", v, "not a version", "pass e.g. --kubelet-version 1.31.2, or leave it out to ask `kubelet --version`")
            })?),
        };

        Ok(Settings {
            cluster_name,
            apiserver_endpoint: endpoint,
            apiserver_host,
            ca_pem,
            ip_family,
            dns_cluster_ips,
            service_ipv4_cidr,
            service_ipv6_cidr,
            use_max_pods,
            max_pods,
            kubelet_extra_args,
            max_pods_flag,
            max_pods_config,
            reserved_cpus_flag,
            outpost_cluster_id,
            kubelet_version,
            kubelet_config_overrides,
            warnings,
        })
    }
}

/// Cluster names and IDs go into YAML and command lines: letters, digits, `-`, `_`, `.` only.
fn check_name(flag: &str, v: &str) -> Result<(), BootstrapError> {
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

/// Returns the host of an `https://host[:port]` endpoint.
fn endpoint_host(endpoint: &str) -> Result<String, BootstrapError> {
    let bad = |problem: &str| {
        BootstrapError::invalid(
            "--apiserver-endpoint",
            endpoint,
            problem,
            "pass the cluster endpoint as EKS shows it, e.g. https://0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com",
        )
    };
    let uri: http::Uri = endpoint.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad("the scheme must be https://"));
    }
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("no host name"))?;
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad("an endpoint has no path or query"));
    }
    if endpoint.contains('@') {
        return Err(bad("an endpoint carries no user name"));
    }
    Ok(host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string())
}

fn decode_ca(b64: &str) -> Result<String, BootstrapError> {
    let compact: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
    let fix = "pass the base64 of the PEM CA certificate: aws eks describe-cluster --query cluster.certificateAuthority.data";
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| {
            BootstrapError::invalid(
                "--b64-cluster-ca",
                abbreviate(b64),
                format!("not base64 ({e})"),
                fix,
            )
        })?;
    let pem = String::from_utf8(bytes)
        .ok()
        .filter(|p| p.contains("-----BEGIN CERTIFICATE-----"))
        .ok_or_else(|| {
            BootstrapError::invalid(
                "--b64-cluster-ca",
                abbreviate(b64),
                "does not decode to a PEM certificate",
                fix,
            )
        })?;
    Ok(if pem.ends_with('\n') { pem } else { pem + "\n" })
}

fn abbreviate(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}

fn parse_v4_cidr(flag: &str, s: &str) -> Result<Ipv4Net, BootstrapError> {
    let net: Ipv4Net = s.trim().parse().map_err(|_| {
        BootstrapError::invalid(flag, s, "not an IPv4 CIDR", "pass the cluster's service CIDR, e.g. 10.100.0.0/16 (aws eks describe-cluster --query cluster.kubernetesNetworkConfig.serviceIpv4Cidr)")
    })?;
    if net.trunc() != net {
        return Err(BootstrapError::invalid(
            flag,
            s,
            "host bits are set",
            format!("pass the network address, {}", net.trunc()),
        ));
    }
    if net.prefix_len() > 28 {
        return Err(BootstrapError::invalid(
            flag,
            s,
            "too small to hold the cluster DNS address .10",
            "service CIDRs are /12 to /24",
        ));
    }
    Ok(net)
}

fn parse_v6_cidr(flag: &str, s: &str) -> Result<Ipv6Net, BootstrapError> {
    let net: Ipv6Net = s.trim().parse().map_err(|_| {
        BootstrapError::invalid(flag, s, "not an IPv6 CIDR", "pass the cluster's IPv6 service CIDR, e.g. fd00:1234:5678::/108 (aws eks describe-cluster --query cluster.kubernetesNetworkConfig.serviceIpv6Cidr)")
    })?;
    if net.trunc() != net {
        return Err(BootstrapError::invalid(
            flag,
            s,
            "host bits are set",
            format!("pass the network address, {}", net.trunc()),
        ));
    }
    if net.prefix_len() > 124 {
        return Err(BootstrapError::invalid(
            flag,
            s,
            "too small to hold the cluster DNS address ::a",
            "EKS IPv6 service CIDRs are /108",
        ));
    }
    Ok(net)
}

fn parse_ip_list(list: &str) -> Result<Vec<IpAddr>, BootstrapError> {
    let ips: Result<Vec<IpAddr>, _> = list
        .split(',')
        .map(|p| p.trim().parse::<IpAddr>())
        .collect();
    match ips {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(BootstrapError::invalid(
            "--dns-cluster-ip",
            list,
            "not a comma-separated list of IP addresses",
            "pass e.g. --dns-cluster-ip 10.100.0.10 or fd00::a,10.100.0.10",
        )),
    }
}

/// Values go into `Environment='NAME=value'` lines: a `'` would end the value early and a
/// line break would end the directive.
fn check_unit_value(flag: &str, v: &str) -> Result<(), BootstrapError> {
    if v.contains('\'') {
        return Err(BootstrapError::invalid(
            flag,
            v,
            "a single quote (') would end the systemd Environment='...' value early and break the kubelet unit",
            "remove the single quotes; quote nothing inside the value (e.g. --node-labels=a=b,c=d)",
        ));
    }
    if v.contains(['\n', '\r']) {
        return Err(BootstrapError::invalid(
            flag,
            v,
            "a line break would end the systemd directive",
            "put every flag on one line, separated by spaces",
        ));
    }
    Ok(())
}

/// The value of the last `--name=V` or `--name V` among `words` (pflag semantics: last wins).
fn flag_value<'a>(words: &[&'a str], name: &str) -> Option<&'a str> {
    let mut found = None;
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if w == name {
            found = words.get(i + 1).copied().or(Some(""));
            i += 1;
        } else if let Some(v) = w.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            found = Some(v);
        }
        i += 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_value_forms() {
        assert_eq!(
            flag_value(&["--a", "--max-pods=5"], "--max-pods"),
            Some("5")
        );
        assert_eq!(
            flag_value(&["--max-pods", "7", "--x"], "--max-pods"),
            Some("7")
        );
        assert_eq!(
            flag_value(&["--max-pods=5", "--max-pods", "9"], "--max-pods"),
            Some("9")
        );
        assert_eq!(flag_value(&["--max-podsx=5"], "--max-pods"), None);
    }

    #[test]
    fn auto_cap_depends_on_mode() {
        let mut m = MaxPodsSettings {
            options: MaxPodsOptions::default(),
            cap: MaxPodsCap::Auto,
        };
        assert!(m.calculator_options().show_max_allowed);
        m.options.prefix_delegation = true;
        assert!(!m.calculator_options().show_max_allowed);
        m.cap = MaxPodsCap::None;
        assert!(m.calculator_options().show_max_allowed);
    }
}
