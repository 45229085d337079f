//! Validated settings: the command line merged with the NodeConfig (flags win).
//!
//! Pure: every check runs here, before anything is read from IMDS or written, so bad input
//! fails with an error naming the flag and the fix and leaves the node untouched. What
//! bootstrap.sh accepts is accepted (with a warning when it is probably wrong); only input
//! bootstrap.sh refuses too, or that cannot work at all, is an error.

use std::net::IpAddr;

use vpcnet_limits::MaxPodsOptions;

use crate::args::{BootstrapArgs, MaxPodsCap};
use crate::cluster::{check_name, ClusterInput, FromConfig, IpFamily};
use crate::error::BootstrapError;
use crate::max_pods_expr::MaxPodsExpression;
use crate::node_config::NodeConfig;
use crate::version::KubeletVersion;

/// How max pods is computed for the instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct MaxPodsSettings {
    /// Custom networking, prefix delegation and max ENI; `show_max_allowed` is derived from `cap`.
    pub options: MaxPodsOptions,
    pub cap: MaxPodsCap,
    /// nodeadm's `maxPodsExpression`, which replaces the computation when set.
    pub expression: Option<MaxPodsExpression>,
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

/// The pause (sandbox) image, before the region is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseImage {
    /// `--pause-container-image`.
    pub image: Option<String>,
    /// `--pause-container-account`.
    pub account: Option<String>,
    /// `--pause-container-version`.
    pub version: String,
}

/// An operator's containerd configuration (`--containerd-config-file`), read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerdFile {
    pub path: String,
    pub text: String,
}

/// Everything a bootstrap run needs from its user, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub cluster_name: String,
    /// The cluster as given; resolved (with DescribeCluster if needed) into a
    /// [`crate::cluster::Cluster`].
    pub cluster: ClusterInput,
    /// `--dns-cluster-ip`, when given.
    pub dns_cluster_ips: Option<Vec<IpAddr>>,
    /// Whether kubelet `maxPods` is written (bootstrap.sh `--use-max-pods`).
    pub use_max_pods: bool,
    pub max_pods: MaxPodsSettings,
    /// Extra kubelet flags (`--kubelet-extra-args` then NodeConfig `kubelet.flags`), one string,
    /// split by systemd as a shell would.
    pub kubelet_extra_args: String,
    /// `--max-pods N` found in the extra flags (the value kubelet will use).
    pub max_pods_flag: Option<u32>,
    /// `maxPods` set in NodeConfig `kubelet.config`.
    pub max_pods_config: Option<u32>,
    /// `--reserved-cpus` is among the extra flags (then no reserved cgroups are configured).
    pub reserved_cpus_flag: bool,
    pub kubelet_version: Option<KubeletVersion>,
    /// NodeConfig `kubelet.config`, merged over the generated kubelet config.
    pub kubelet_config_overrides: serde_json::Map<String, serde_json::Value>,
    /// nodeadm feature gate `InstanceIdNodeName`: the node is named by its instance ID.
    pub instance_id_node_name: bool,
    pub pause: PauseImage,
    pub containerd_file: Option<ContainerdFile>,
    /// Mount bpffs unless mounted (`--mount-bpf-fs`).
    pub mount_bpf_fs: bool,
    /// Non-fatal notes for the operator (ignored flags, probably wrong values).
    pub warnings: Vec<String>,
}

impl Settings {
    /// Merges and validates. `config` is the NodeConfig (file or user data), if any;
    /// `containerd_file` the text of `--containerd-config-file`, if given.
    ///
    /// Errors: [`BootstrapError::Invalid`] / [`BootstrapError::Missing`] naming the flag.
    pub fn new(
        args: &BootstrapArgs,
        config: Option<&NodeConfig>,
        containerd_file: Option<ContainerdFile>,
    ) -> Result<Self, BootstrapError> {
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
        for (section, given) in [
            ("containerd", nc.spec.containerd.is_some()),
            ("instance", nc.spec.instance.is_some()),
        ] {
            if given {
                warnings.push(format!(
                    "NodeConfig spec.{section} is accepted for nodeadm compatibility and ignored"
                ));
            }
        }

        let cluster_name = args.cluster_name.clone().or_else(|| cl.name.clone()).ok_or_else(|| {
            BootstrapError::missing(
                "cluster name",
                "pass it as the first argument (vpcnet-bootstrap [options] <cluster-name>) or set spec.cluster.name",
            )
        })?;
        check_name("<cluster-name>", &cluster_name)?;

        let ip_family = match args.ip_family.as_deref() {
            Some(f) => Some(IpFamily::parse("--ip-family", f)?),
            None => None,
        };
        let (mut v4, mut v6) = (
            args.service_ipv4_cidr.clone(),
            args.service_ipv6_cidr.clone(),
        );
        let cidr_from_config = v4.is_none() && v6.is_none() && cl.cidr.is_some();
        if let Some(cidr) = cl.cidr.as_ref().filter(|_| cidr_from_config) {
            if cidr.contains(':') {
                v6 = Some(cidr.clone());
            } else {
                v4 = Some(cidr.clone());
            }
        }
        let dns_cluster_ips = match &args.dns_cluster_ip {
            None => None,
            Some(list) => Some(parse_ip_list(list)?),
        };
        let outpost = match &args.enable_local_outpost {
            Some(v) => Some(sh_bool("--enable-local-outpost", v, &mut warnings)),
            None => cl.enable_outpost,
        };
        let cluster = ClusterInput {
            name: cluster_name.clone(),
            endpoint: args
                .apiserver_endpoint
                .clone()
                .or_else(|| cl.api_server_endpoint.clone()),
            ca_b64: args
                .b64_cluster_ca
                .clone()
                .or_else(|| cl.certificate_authority.clone()),
            ip_family,
            service_ipv4_cidr: v4,
            service_ipv6_cidr: v6,
            cidr_from_config,
            outpost,
            cluster_id: args.cluster_id.clone().or_else(|| cl.id.clone()),
            dns_ip_given: dns_cluster_ips.is_some(),
            from_config: FromConfig {
                endpoint: args.apiserver_endpoint.is_none() && cl.api_server_endpoint.is_some(),
                ca: args.b64_cluster_ca.is_none() && cl.certificate_authority.is_some(),
                outpost: args.enable_local_outpost.is_none() && cl.enable_outpost.is_some(),
                cluster_id: args.cluster_id.is_none() && cl.id.is_some(),
            },
        };
        if let Some(id) = &cluster.cluster_id {
            check_name(cluster.from_config.label("--cluster-id"), id)?;
        }
        cluster.check()?;

        // Max pods.
        let policy = &kl.max_pods_policy;
        let use_max_pods = match &args.use_max_pods {
            Some(v) => sh_bool("--use-max-pods", v, &mut warnings),
            None => policy.use_max_pods.unwrap_or(true),
        };
        let max_eni = args.cni_max_eni.or(policy.max_eni);
        if max_eni == Some(0) {
            return Err(BootstrapError::invalid(
                "--cni-max-eni",
                "0",
                "pods need at least one ENI",
                "pass --cni-max-eni 1 or more, or leave it out to use every ENI",
            ));
        }
        let expression = match &kl.max_pods_expression {
            None => None,
            Some(text) => Some(MaxPodsExpression::parse(text).map_err(|problem| {
                BootstrapError::invalid(
                    "spec.kubelet.maxPodsExpression",
                    text,
                    problem,
                    "write a CEL expression over default_enis, ips_per_eni and max_pods, e.g. max_pods + 2",
                )
            })?),
        };
        let options = MaxPodsOptions {
            custom_networking: args.cni_custom_networking_enabled || policy.custom_networking,
            prefix_delegation: args.cni_prefix_delegation_enabled || policy.prefix_delegation,
            max_eni,
            show_max_allowed: false,
        };
        if expression.is_some() && options != MaxPodsOptions::default() {
            return Err(BootstrapError::invalid(
                "spec.kubelet.maxPodsExpression",
                kl.max_pods_expression.clone().unwrap_or_default(),
                "it replaces the max pods computation, and custom networking, prefix delegation or max ENI were also set",
                "use either maxPodsExpression or maxPodsPolicy / --cni-* flags",
            ));
        }
        let max_pods = MaxPodsSettings {
            options,
            cap: args.max_pods_cap.or(policy.cap).unwrap_or_default(),
            expression,
        };

        // Extra kubelet flags: systemd splits them as a shell would, so quotes are fine; a line
        // break would end the drop-in's directive, and is read as the space it stands for.
        let parts: Vec<String> = args
            .kubelet_extra_args
            .iter()
            .map(|s| ("--kubelet-extra-args", s))
            .chain(kl.flags.iter().map(|s| ("spec.kubelet.flags", s)))
            .map(|(flag, s)| {
                if s.contains(['\n', '\r']) {
                    warnings.push(format!(
                        "{flag} contains line breaks; they are read as spaces"
                    ));
                }
                s.replace(['\n', '\r'], " ").trim().to_string()
            })
            .filter(|s| !s.is_empty())
            .collect();
        let kubelet_extra_args = parts.join(" ");
        let words = crate::systemd::split_args(&kubelet_extra_args);
        let max_pods_flag = flag_value(&words, "--max-pods")
            .map(|v| {
                v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    BootstrapError::invalid(
                        "--kubelet-extra-args",
                        kubelet_extra_args.clone(),
                        format!("--max-pods {v:?} is not a positive whole number (kubelet would refuse to start)"),
                        "write e.g. --max-pods=58",
                    )
                })
            })
            .transpose()?;
        let reserved_cpus_flag = words
            .iter()
            .any(|w| w == "--reserved-cpus" || w.starts_with("--reserved-cpus="));

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

        let mut instance_id_node_name = false;
        for (gate, on) in &nc.spec.feature_gates {
            match gate.as_str() {
                "InstanceIdNodeName" => instance_id_node_name = *on,
                other => warnings.push(format!(
                    "NodeConfig spec.featureGates.{other} is not a feature gate vpcnet-bootstrap knows (InstanceIdNodeName); ignored"
                )),
            }
        }

        match args.container_runtime.as_deref() {
            None | Some("containerd") => {}
            Some(other) => {
                return Err(BootstrapError::invalid(
                    "--container-runtime",
                    other,
                    if other == "dockerd" {
                        "kubelet's Docker support (dockershim) was removed in Kubernetes 1.24, and vpcnet-bootstrap configures containerd only, whatever the kubelet version"
                    } else {
                        "vpcnet-bootstrap configures containerd only (bootstrap.sh's other value, dockerd, needs dockershim, removed in Kubernetes 1.24)"
                    },
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

        if let Some(f) = &containerd_file {
            warnings.extend(crate::containerd::check_config(&f.path, &f.text)?);
        }
        let mount_bpf_fs = match &args.mount_bpf_fs {
            Some(v) => sh_bool("--mount-bpf-fs", v, &mut warnings),
            None => true,
        };

        Ok(Settings {
            cluster_name,
            cluster,
            dns_cluster_ips,
            use_max_pods,
            max_pods,
            kubelet_extra_args,
            max_pods_flag,
            max_pods_config,
            reserved_cpus_flag,
            kubelet_version,
            kubelet_config_overrides,
            instance_id_node_name,
            pause: PauseImage {
                image: args
                    .pause_container_image
                    .clone()
                    .filter(|s| !s.trim().is_empty()),
                account: args
                    .pause_container_account
                    .clone()
                    .filter(|s| !s.trim().is_empty()),
                version: args.pause_container_version.clone(),
            },
            containerd_file,
            mount_bpf_fs,
            warnings,
        })
    }
}

/// A bootstrap.sh boolean: bootstrap.sh tests `[ "$X" = "true" ]`, so anything but `true` is
/// false. `True`/`TRUE` are read as true (what was meant); anything but true/false warns.
pub fn sh_bool(flag: &str, v: &str, warnings: &mut Vec<String>) -> bool {
    match v {
        "true" => true,
        "false" => false,
        other if other.eq_ignore_ascii_case("true") => {
            warnings.push(format!(
                "{flag} {other:?} is read as true (bootstrap.sh compares case-sensitively and would read it as false)"
            ));
            true
        }
        other => {
            if !other.eq_ignore_ascii_case("false") {
                warnings.push(format!(
                    "{flag} {other:?} is neither true nor false; like bootstrap.sh, vpcnet-bootstrap reads anything but true as false"
                ));
            }
            false
        }
    }
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
            "not a comma-separated list of IP addresses (kubelet would refuse its clusterDNS)",
            "pass e.g. --dns-cluster-ip 10.100.0.10 or fd00::a,10.100.0.10",
        )),
    }
}

/// The value of the last `--name=V` or `--name V` among `words` (pflag semantics: last wins).
fn flag_value<'a>(words: &'a [String], name: &str) -> Option<&'a str> {
    let mut found = None;
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        if w == name {
            found = words.get(i + 1).map(String::as_str).or(Some(""));
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

    fn words(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flag_value_forms() {
        assert_eq!(
            flag_value(&words(&["--a", "--max-pods=5"]), "--max-pods"),
            Some("5")
        );
        assert_eq!(
            flag_value(&words(&["--max-pods", "7", "--x"]), "--max-pods"),
            Some("7")
        );
        assert_eq!(
            flag_value(&words(&["--max-pods=5", "--max-pods", "9"]), "--max-pods"),
            Some("9")
        );
        assert_eq!(flag_value(&words(&["--max-podsx=5"]), "--max-pods"), None);
    }

    #[test]
    fn auto_cap_depends_on_mode() {
        let mut m = MaxPodsSettings {
            options: MaxPodsOptions::default(),
            cap: MaxPodsCap::Auto,
            expression: None,
        };
        assert!(m.calculator_options().show_max_allowed);
        m.options.prefix_delegation = true;
        assert!(!m.calculator_options().show_max_allowed);
        m.cap = MaxPodsCap::None;
        assert!(m.calculator_options().show_max_allowed);
    }

    #[test]
    fn sh_bool_like_bootstrap_sh() {
        let mut w = Vec::new();
        assert!(sh_bool("--f", "true", &mut w) && w.is_empty());
        assert!(!sh_bool("--f", "false", &mut w) && w.is_empty());
        assert!(!sh_bool("--f", "False", &mut w) && w.is_empty());
        assert!(sh_bool("--f", "True", &mut w));
        assert!(w.pop().unwrap().contains("read as true"));
        assert!(!sh_bool("--f", "yes", &mut w));
        assert!(w.pop().unwrap().contains("anything but true as false"));
    }
}
