//! Agent configuration from environment variables, with the VPC CNI's names, defaults and
//! semantics (amazon-vpc-cni-k8s README, "CNI Configuration Variables"), plus vpcnet's own
//! `VPCNET_*` settings.
//!
//! Parsing is a pure function of a key → value lookup ([`Config::from_lookup`]), so tests never
//! touch the process environment. An empty value counts as unset (Kubernetes manifests often
//! carry `value: ""`). Unlike the VPC CNI, which logs and falls back to the default, an invalid
//! value is an error naming the variable, the value and what is accepted: the agent refuses to
//! start on a typo instead of silently running with a setting the operator did not choose.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use ipnet::Ipv4Net;
use serde::Serialize;

/// A configuration variable with an invalid value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {var}={value:?}: {problem}; accepted: {accepted}")]
pub struct ConfigError {
    /// The environment variable, e.g. `AWS_VPC_ENI_MTU`.
    pub var: &'static str,
    /// The value found.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
    /// What the variable accepts.
    pub accepted: String,
}

/// Port randomisation of the SNAT rule (`AWS_VPC_K8S_CNI_RANDOMIZESNAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RandomizeSnat {
    /// Sequential source ports.
    None,
    /// `--random`: hash-based port randomisation.
    Hashrandom,
    /// `--random-fully`: fully random ports (the default).
    Prng,
}

impl fmt::Display for RandomizeSnat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RandomizeSnat::None => "none",
            RandomizeSnat::Hashrandom => "hashrandom",
            RandomizeSnat::Prng => "prng",
        })
    }
}

/// Where an HTTP endpoint listens: a TCP address or a Unix socket (`unix:/path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindAddress {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for BindAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindAddress::Tcp(a) => write!(f, "{a}"),
            BindAddress::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl Serialize for BindAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Client-side EC2 limits and endpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ec2Settings {
    /// `VPCNET_EC2_DESCRIBE_BUCKET_SIZE`: burst of Describe calls (default 100).
    pub describe_bucket_size: u32,
    /// `VPCNET_EC2_DESCRIBE_REFILL_RATE`: Describe calls per second (default 20).
    pub describe_refill_per_sec: f64,
    /// `VPCNET_EC2_MUTATING_BUCKET_SIZE`: burst of mutating calls (default 20).
    pub mutating_bucket_size: u32,
    /// `VPCNET_EC2_MUTATING_REFILL_RATE`: mutating calls per second (default 5).
    pub mutating_refill_per_sec: f64,
    /// `VPCNET_EC2_CALL_TIMEOUT`: deadline of one EC2 call, retries included, in seconds
    /// (default 30).
    pub call_timeout_secs: u64,
    /// `AWS_EC2_ENDPOINT` (the VPC CNI's name): EC2 endpoint URL. When unset the SDK honours
    /// `AWS_ENDPOINT_URL_EC2` / `AWS_ENDPOINT_URL`, then the regional endpoint.
    pub endpoint: Option<String>,
}

/// The agent's configuration. Serializes (for `/v1/env-settings`) with field names; see
/// [`Config::env_settings`] for the variable-name view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// `WARM_ENI_TARGET` (default 1): free ENIs (with all their addresses) to keep attached.
    /// Ignored when `WARM_IP_TARGET` or `MINIMUM_IP_TARGET` is set.
    pub warm_eni_target: u32,
    /// `WARM_IP_TARGET`: free IPs to keep; unset, 0 or negative = not used.
    pub warm_ip_target: Option<u32>,
    /// `MINIMUM_IP_TARGET`: floor of total IPs on the node; unset, 0 or negative = not used.
    pub minimum_ip_target: Option<u32>,
    /// `WARM_PREFIX_TARGET`: free /28 prefixes to keep in prefix mode; unset, 0 or negative =
    /// not used. Overridden by `WARM_IP_TARGET` / `MINIMUM_IP_TARGET`.
    pub warm_prefix_target: Option<u32>,
    /// `ENABLE_PREFIX_DELEGATION` (default false): assign /28 prefixes instead of secondary IPs.
    pub enable_prefix_delegation: bool,
    /// `MAX_ENI`: cap on attached ENIs; unset, 0 or negative = the instance type's limit.
    pub max_eni: Option<u32>,
    /// `AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG` (default false): take subnet and security groups
    /// for new ENIs from the node's ENIConfig.
    pub custom_network_cfg: bool,
    /// `ENI_CONFIG_LABEL_DEF` (default `k8s.amazonaws.com/eniConfig`): node label whose value
    /// names the ENIConfig.
    pub eni_config_label_def: String,
    /// `ENI_CONFIG_ANNOTATION_DEF` (default `k8s.amazonaws.com/eniConfig`): node annotation whose
    /// value names the ENIConfig; beats the label.
    pub eni_config_annotation_def: String,
    /// `AWS_VPC_K8S_CNI_EXTERNALSNAT` (default false): an external NAT device does SNAT; the
    /// agent installs no SNAT rule.
    pub external_snat: bool,
    /// `AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS`: comma-separated IPv4 CIDRs exempt from SNAT.
    pub exclude_snat_cidrs: Vec<Ipv4Net>,
    /// `AWS_VPC_K8S_CNI_RANDOMIZESNAT` (default `prng`).
    pub randomize_snat: RandomizeSnat,
    /// `AWS_VPC_ENI_MTU` (default 9001, range 576..=9001): MTU of ENIs and pod interfaces.
    pub eni_mtu: u32,
    /// `AWS_VPC_K8S_CNI_VETHPREFIX` (default `eni`): host-side veth name prefix, ≤ 4 characters,
    /// not `eth`, `vlan` or `lo`.
    pub veth_prefix: String,
    /// `AWS_VPC_K8S_PLUGIN_LOG_FILE` (default `/var/log/aws-routed-eni/plugin.log`): where the
    /// CNI plugin logs, written into the conflist; an absolute path, `stderr`, or empty for none.
    pub plugin_log_file: String,
    /// `AWS_VPC_K8S_PLUGIN_LOG_LEVEL` (default `Debug`): the plugin's log level, one of
    /// `Debug`, `Info`, `Warn`, `Error`, written into the conflist.
    pub plugin_log_level: String,
    /// `AWS_VPC_CNI_NODE_PORT_SUPPORT` (default true): mark traffic arriving on the primary ENI
    /// so replies leave through it (NodePort services).
    pub node_port_support: bool,
    /// `CLUSTER_ENDPOINT`: API server URL used directly, without kube-proxy.
    pub cluster_endpoint: Option<String>,
    /// `CLUSTER_NAME` (default empty): value of the cluster-name tag on created ENIs.
    pub cluster_name: String,
    /// `ADDITIONAL_ENI_TAGS` (default `{}`): JSON object of extra tags for created ENIs. Keys
    /// containing `k8s.amazonaws.com` are reserved and rejected.
    pub additional_eni_tags: BTreeMap<String, String>,
    /// `DISABLE_LEAKED_ENI_CLEANUP` (default false): skip the periodic sweep of leaked ENIs.
    pub disable_leaked_eni_cleanup: bool,
    /// `DISABLE_INTROSPECTION` (default false).
    pub disable_introspection: bool,
    /// `DISABLE_METRICS` (default false).
    pub disable_metrics: bool,
    /// `INTROSPECTION_BIND_ADDRESS` (default `127.0.0.1:61679`; `unix:/path` for a socket).
    pub introspection_bind_address: BindAddress,
    /// `VPCNET_METRICS_BIND_ADDRESS` (default `:61678`, all addresses, as the VPC CNI's fixed
    /// metrics port).
    pub metrics_bind_address: BindAddress,
    /// `IP_COOLDOWN_PERIOD` (default 30): seconds a released IP stays unavailable.
    pub ip_cooldown_period_secs: u64,
    /// `AWS_VPC_K8S_CNI_LOGLEVEL` (default `DEBUG`, as the VPC CNI): one of DEBUG, INFO, WARN,
    /// ERROR, FATAL (any case), stored upper-case.
    pub log_level: String,
    /// `VPCNET_AGENT_SOCKET` (default `/var/run/vpcnet/agent.sock`): gRPC socket for the plugin.
    pub agent_socket: PathBuf,
    /// `VPCNET_CHECKPOINT_PATH` (default `/var/run/vpcnet/ipam.json`).
    pub checkpoint_path: PathBuf,
    /// `VPCNET_CNI_CONFLIST` (default `/etc/cni/net.d/10-vpcnet.conflist`).
    pub cni_conflist: PathBuf,
    /// `VPCNET_RECONCILE_INTERVAL` (default 30, ≥ 1): seconds between periodic pool passes.
    pub reconcile_interval_secs: u64,
    /// `VPCNET_NODE_DATAPATH` (default true): program node routes, rules and SNAT.
    pub node_datapath: bool,
    /// EC2 rate limits, deadline and endpoint.
    pub ec2: Ec2Settings,
}

/// Default ENIConfig label/annotation key.
pub const DEFAULT_ENI_CONFIG_KEY: &str = "k8s.amazonaws.com/eniConfig";

const BOOL_ACCEPTED: &str = "true, false (also 1, t, T, TRUE, True, 0, f, F, FALSE, False)";

struct Env<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
}

impl Env<'_> {
    /// The value, `None` when unset or empty.
    fn raw(&self, var: &str) -> Option<String> {
        (self.get)(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    fn err(
        var: &'static str,
        value: &str,
        problem: impl Into<String>,
        accepted: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            var,
            value: value.to_string(),
            problem: problem.into(),
            accepted: accepted.into(),
        }
    }

    fn string(&self, var: &'static str, default: &str) -> String {
        self.raw(var).unwrap_or_else(|| default.to_string())
    }

    fn bool(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.raw(var) {
            None => Ok(default),
            Some(v) => {
                parse_bool(&v).ok_or_else(|| Self::err(var, &v, "not a boolean", BOOL_ACCEPTED))
            }
        }
    }

    fn int(&self, var: &'static str) -> Result<Option<i64>, ConfigError> {
        self.raw(var)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| Self::err(var, &v, "not an integer", "a decimal integer"))
            })
            .transpose()
    }

    /// Unset, zero or negative → `None` (the VPC CNI's "non-positive means unset").
    fn positive_or_unset(&self, var: &'static str) -> Result<Option<u32>, ConfigError> {
        match self.int(var)? {
            Some(n) if n > 0 => u32::try_from(n).map(Some).map_err(|_| {
                Self::err(
                    var,
                    &n.to_string(),
                    "too large",
                    format!("an integer up to {}", u32::MAX),
                )
            }),
            _ => Ok(None),
        }
    }

    fn ranged(
        &self,
        var: &'static str,
        default: u64,
        min: u64,
        max: u64,
    ) -> Result<u64, ConfigError> {
        match self.int(var)? {
            None => Ok(default),
            Some(n) if n >= min as i64 && (n as u64) <= max => Ok(n as u64),
            Some(n) => Err(Self::err(
                var,
                &n.to_string(),
                "out of range",
                format!("an integer from {min} to {max}"),
            )),
        }
    }

    fn rate(&self, var: &'static str, default: f64) -> Result<f64, ConfigError> {
        match self.raw(var) {
            None => Ok(default),
            Some(v) => match v.parse::<f64>() {
                Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
                _ => Err(Self::err(
                    var,
                    &v,
                    "not a positive number",
                    "a number of requests per second > 0, e.g. 5 or 0.5",
                )),
            },
        }
    }

    fn bind(&self, var: &'static str, default: &str) -> Result<BindAddress, ConfigError> {
        let v = self.string(var, default);
        parse_bind(&v).ok_or_else(|| {
            Self::err(
                var,
                &v,
                "not a bind address",
                "host:port (e.g. 127.0.0.1:61679), :port, or unix:/path/to/socket",
            )
        })
    }

    fn path(&self, var: &'static str, default: &str) -> Result<PathBuf, ConfigError> {
        let v = self.string(var, default);
        if v.starts_with('/') {
            Ok(PathBuf::from(v))
        } else {
            Err(Self::err(
                var,
                &v,
                "not an absolute path",
                "an absolute path such as /var/run/vpcnet/agent.sock",
            ))
        }
    }
}

/// Booleans as the VPC CNI reads them (Go's `strconv.ParseBool`).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn parse_bind(v: &str) -> Option<BindAddress> {
    if let Some(path) = v.strip_prefix("unix:") {
        return path
            .starts_with('/')
            .then(|| BindAddress::Unix(PathBuf::from(path)));
    }
    let full = if v.starts_with(':') {
        format!("0.0.0.0{v}")
    } else {
        v.to_string()
    };
    SocketAddr::from_str(&full).ok().map(BindAddress::Tcp)
}

impl Config {
    /// The configuration from the process environment.
    pub fn from_process_env() -> Result<Config, ConfigError> {
        Config::from_lookup(&|k| std::env::var(k).ok())
    }

    /// The configuration from a map of variables (tests, `/v1/env-settings` round trips).
    pub fn from_map(vars: &HashMap<String, String>) -> Result<Config, ConfigError> {
        Config::from_lookup(&|k| vars.get(k).cloned())
    }

    /// The configuration from any variable lookup. Pure apart from calling `get`.
    ///
    /// Errors: the first invalid variable, as a [`ConfigError`] naming it, its value and the
    /// accepted values.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let env = Env { get };

        let warm_eni_target = match env.int("WARM_ENI_TARGET")? {
            None => 1,
            Some(n) if (0..=i64::from(u32::MAX)).contains(&n) => n as u32,
            Some(n) => {
                return Err(Env::err(
                    "WARM_ENI_TARGET",
                    &n.to_string(),
                    "negative",
                    "an integer ≥ 0",
                ))
            }
        };

        let exclude_snat_cidrs = match env.raw("AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS") {
            None => Vec::new(),
            Some(v) => v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse::<Ipv4Net>().map_err(|_| {
                        Env::err(
                            "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
                            &v,
                            format!("{s:?} is not an IPv4 CIDR"),
                            "comma-separated IPv4 CIDRs, e.g. 10.1.0.0/16,192.168.0.0/24",
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };

        let randomize_snat = match env.raw("AWS_VPC_K8S_CNI_RANDOMIZESNAT") {
            None => RandomizeSnat::Prng,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "none" => RandomizeSnat::None,
                "hashrandom" => RandomizeSnat::Hashrandom,
                "prng" => RandomizeSnat::Prng,
                _ => {
                    return Err(Env::err(
                        "AWS_VPC_K8S_CNI_RANDOMIZESNAT",
                        &v,
                        "unknown mode",
                        "none, hashrandom, prng",
                    ))
                }
            },
        };

        let veth_prefix = env.string("AWS_VPC_K8S_CNI_VETHPREFIX", "eni");
        let veth_ok = veth_prefix.len() <= 4
            && veth_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !matches!(veth_prefix.as_str(), "eth" | "vlan" | "lo");
        if !veth_ok {
            return Err(Env::err(
                "AWS_VPC_K8S_CNI_VETHPREFIX",
                &veth_prefix,
                "not a usable interface name prefix",
                "1 to 4 characters from [A-Za-z0-9_-], other than the reserved eth, vlan and lo",
            ));
        }

        let plugin_log_file = env.string(
            "AWS_VPC_K8S_PLUGIN_LOG_FILE",
            "/var/log/aws-routed-eni/plugin.log",
        );
        if !(plugin_log_file.is_empty()
            || plugin_log_file == "stderr"
            || plugin_log_file.starts_with('/'))
        {
            return Err(Env::err(
                "AWS_VPC_K8S_PLUGIN_LOG_FILE",
                &plugin_log_file,
                "not an absolute path",
                "an absolute file path, `stderr`, or empty to disable plugin logging",
            ));
        }
        let plugin_log_level = {
            let v = env.string("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "Debug");
            match v.to_ascii_lowercase().as_str() {
                "debug" => "Debug",
                "info" => "Info",
                "warn" | "warning" => "Warn",
                "error" => "Error",
                _ => {
                    return Err(Env::err(
                        "AWS_VPC_K8S_PLUGIN_LOG_LEVEL",
                        &v,
                        "unknown log level",
                        "Debug, Info, Warn, Error",
                    ))
                }
            }
            .to_string()
        };

        let cluster_endpoint = env.raw("CLUSTER_ENDPOINT");
        if let Some(url) = &cluster_endpoint {
            if !(url.starts_with("https://") || url.starts_with("http://"))
                || url.len() <= "https://".len()
            {
                return Err(Env::err(
                    "CLUSTER_ENDPOINT",
                    url,
                    "not a URL",
                    "the API server URL, e.g. https://ABCD.gr7.us-east-1.eks.amazonaws.com",
                ));
            }
        }

        let additional_eni_tags = match env.raw("ADDITIONAL_ENI_TAGS") {
            None => BTreeMap::new(),
            Some(v) => {
                let tags: BTreeMap<String, String> = serde_json::from_str(&v).map_err(|e| {
                    Env::err(
                        "ADDITIONAL_ENI_TAGS",
                        &v,
                        format!("not a JSON object of strings ({e})"),
                        r#"a JSON object such as {"team": "net"}"#,
                    )
                })?;
                if let Some(k) = tags.keys().find(|k| k.contains("k8s.amazonaws.com")) {
                    return Err(Env::err(
                        "ADDITIONAL_ENI_TAGS",
                        &v,
                        format!("tag key {k:?} uses the reserved k8s.amazonaws.com prefix"),
                        "tag keys without k8s.amazonaws.com",
                    ));
                }
                if let Some((k, _)) = tags
                    .iter()
                    .find(|(k, val)| k.is_empty() || k.len() > 128 || val.len() > 256)
                {
                    return Err(Env::err(
                        "ADDITIONAL_ENI_TAGS",
                        &v,
                        format!("tag {k:?} has an empty or too long key, or a value over 256 characters"),
                        "keys of 1 to 128 characters, values up to 256 characters",
                    ));
                }
                tags
            }
        };

        let log_level = env
            .string("AWS_VPC_K8S_CNI_LOGLEVEL", "DEBUG")
            .to_ascii_uppercase();
        if !matches!(
            log_level.as_str(),
            "DEBUG" | "INFO" | "WARN" | "ERROR" | "FATAL"
        ) {
            return Err(Env::err(
                "AWS_VPC_K8S_CNI_LOGLEVEL",
                &log_level,
                "unknown level",
                "DEBUG, INFO, WARN, ERROR, FATAL (any case)",
            ));
        }

        let endpoint = env.raw("AWS_EC2_ENDPOINT");
        if let Some(url) = &endpoint {
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(Env::err(
                    "AWS_EC2_ENDPOINT",
                    url,
                    "not an http(s) URL",
                    "a URL such as https://ec2.us-west-2.amazonaws.com",
                ));
            }
        }

        Ok(Config {
            warm_eni_target,
            warm_ip_target: env.positive_or_unset("WARM_IP_TARGET")?,
            minimum_ip_target: env.positive_or_unset("MINIMUM_IP_TARGET")?,
            warm_prefix_target: env.positive_or_unset("WARM_PREFIX_TARGET")?,
            enable_prefix_delegation: env.bool("ENABLE_PREFIX_DELEGATION", false)?,
            max_eni: env.positive_or_unset("MAX_ENI")?,
            custom_network_cfg: env.bool("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", false)?,
            eni_config_label_def: env.string("ENI_CONFIG_LABEL_DEF", DEFAULT_ENI_CONFIG_KEY),
            eni_config_annotation_def: env
                .string("ENI_CONFIG_ANNOTATION_DEF", DEFAULT_ENI_CONFIG_KEY),
            external_snat: env.bool("AWS_VPC_K8S_CNI_EXTERNALSNAT", false)?,
            exclude_snat_cidrs,
            randomize_snat,
            eni_mtu: env.ranged("AWS_VPC_ENI_MTU", 9001, 576, 9001)? as u32,
            veth_prefix,
            plugin_log_file,
            plugin_log_level,
            node_port_support: env.bool("AWS_VPC_CNI_NODE_PORT_SUPPORT", true)?,
            cluster_endpoint,
            cluster_name: env.string("CLUSTER_NAME", ""),
            additional_eni_tags,
            disable_leaked_eni_cleanup: env.bool("DISABLE_LEAKED_ENI_CLEANUP", false)?,
            disable_introspection: env.bool("DISABLE_INTROSPECTION", false)?,
            disable_metrics: env.bool("DISABLE_METRICS", false)?,
            introspection_bind_address: env
                .bind("INTROSPECTION_BIND_ADDRESS", "127.0.0.1:61679")?,
            metrics_bind_address: env.bind("VPCNET_METRICS_BIND_ADDRESS", ":61678")?,
            ip_cooldown_period_secs: env.ranged("IP_COOLDOWN_PERIOD", 30, 0, 86_400)?,
            log_level,
            agent_socket: env.path("VPCNET_AGENT_SOCKET", "/var/run/vpcnet/agent.sock")?,
            checkpoint_path: env.path("VPCNET_CHECKPOINT_PATH", "/var/run/vpcnet/ipam.json")?,
            cni_conflist: env.path("VPCNET_CNI_CONFLIST", "/etc/cni/net.d/10-vpcnet.conflist")?,
            reconcile_interval_secs: env.ranged("VPCNET_RECONCILE_INTERVAL", 30, 1, 86_400)?,
            node_datapath: env.bool("VPCNET_NODE_DATAPATH", true)?,
            ec2: Ec2Settings {
                describe_bucket_size: env.ranged(
                    "VPCNET_EC2_DESCRIBE_BUCKET_SIZE",
                    100,
                    1,
                    10_000,
                )? as u32,
                describe_refill_per_sec: env.rate("VPCNET_EC2_DESCRIBE_REFILL_RATE", 20.0)?,
                mutating_bucket_size: env.ranged(
                    "VPCNET_EC2_MUTATING_BUCKET_SIZE",
                    20,
                    1,
                    10_000,
                )? as u32,
                mutating_refill_per_sec: env.rate("VPCNET_EC2_MUTATING_REFILL_RATE", 5.0)?,
                call_timeout_secs: env.ranged("VPCNET_EC2_CALL_TIMEOUT", 30, 1, 3_600)?,
                endpoint,
            },
        })
    }

    /// `IP_COOLDOWN_PERIOD` as a duration.
    pub fn ip_cooldown(&self) -> Duration {
        Duration::from_secs(self.ip_cooldown_period_secs)
    }

    /// `VPCNET_RECONCILE_INTERVAL` as a duration.
    pub fn reconcile_interval(&self) -> Duration {
        Duration::from_secs(self.reconcile_interval_secs)
    }

    /// Whether the warm pool is driven by IP targets (`WARM_IP_TARGET` or `MINIMUM_IP_TARGET`
    /// set), which override `WARM_ENI_TARGET` and `WARM_PREFIX_TARGET`.
    pub fn uses_ip_targets(&self) -> bool {
        self.warm_ip_target.is_some() || self.minimum_ip_target.is_some()
    }

    /// The EC2 client's call settings: token buckets and deadline from [`Ec2Settings`],
    /// retry policy and attempt timeout at their defaults (attempt timeout capped by the call
    /// deadline).
    pub fn ec2_call_settings(&self) -> vpcnet_ec2::CallSettings {
        let defaults = vpcnet_ec2::CallSettings::default();
        let operation_timeout = Duration::from_secs(self.ec2.call_timeout_secs);
        vpcnet_ec2::CallSettings {
            operation_timeout,
            attempt_timeout: defaults.attempt_timeout.min(operation_timeout),
            retry: defaults.retry,
            describe_page_size: defaults.describe_page_size,
            describe_bucket: vpcnet_ec2::BucketConfig {
                capacity: self.ec2.describe_bucket_size,
                refill_per_sec: self.ec2.describe_refill_per_sec,
            },
            mutating_bucket: vpcnet_ec2::BucketConfig {
                capacity: self.ec2.mutating_bucket_size,
                refill_per_sec: self.ec2.mutating_refill_per_sec,
            },
        }
    }

    /// Effective value of every variable, keyed by variable name, as the VPC CNI's
    /// `/v1/env-settings` reports them (unset optional values are empty strings).
    pub fn env_settings(&self) -> BTreeMap<&'static str, String> {
        let opt = |v: Option<u32>| v.map(|n| n.to_string()).unwrap_or_default();
        let cidrs = self
            .exclude_snat_cidrs
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let tags = serde_json::to_string(&self.additional_eni_tags).unwrap_or_default();
        BTreeMap::from([
            ("WARM_ENI_TARGET", self.warm_eni_target.to_string()),
            ("WARM_IP_TARGET", opt(self.warm_ip_target)),
            ("MINIMUM_IP_TARGET", opt(self.minimum_ip_target)),
            ("WARM_PREFIX_TARGET", opt(self.warm_prefix_target)),
            (
                "ENABLE_PREFIX_DELEGATION",
                self.enable_prefix_delegation.to_string(),
            ),
            ("MAX_ENI", opt(self.max_eni)),
            (
                "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG",
                self.custom_network_cfg.to_string(),
            ),
            ("ENI_CONFIG_LABEL_DEF", self.eni_config_label_def.clone()),
            (
                "ENI_CONFIG_ANNOTATION_DEF",
                self.eni_config_annotation_def.clone(),
            ),
            (
                "AWS_VPC_K8S_CNI_EXTERNALSNAT",
                self.external_snat.to_string(),
            ),
            ("AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", cidrs),
            (
                "AWS_VPC_K8S_CNI_RANDOMIZESNAT",
                self.randomize_snat.to_string(),
            ),
            ("AWS_VPC_ENI_MTU", self.eni_mtu.to_string()),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", self.veth_prefix.clone()),
            ("AWS_VPC_K8S_PLUGIN_LOG_FILE", self.plugin_log_file.clone()),
            (
                "AWS_VPC_K8S_PLUGIN_LOG_LEVEL",
                self.plugin_log_level.clone(),
            ),
            (
                "AWS_VPC_CNI_NODE_PORT_SUPPORT",
                self.node_port_support.to_string(),
            ),
            (
                "CLUSTER_ENDPOINT",
                self.cluster_endpoint.clone().unwrap_or_default(),
            ),
            ("CLUSTER_NAME", self.cluster_name.clone()),
            ("ADDITIONAL_ENI_TAGS", tags),
            (
                "DISABLE_LEAKED_ENI_CLEANUP",
                self.disable_leaked_eni_cleanup.to_string(),
            ),
            (
                "DISABLE_INTROSPECTION",
                self.disable_introspection.to_string(),
            ),
            ("DISABLE_METRICS", self.disable_metrics.to_string()),
            (
                "INTROSPECTION_BIND_ADDRESS",
                self.introspection_bind_address.to_string(),
            ),
            (
                "VPCNET_METRICS_BIND_ADDRESS",
                self.metrics_bind_address.to_string(),
            ),
            (
                "IP_COOLDOWN_PERIOD",
                self.ip_cooldown_period_secs.to_string(),
            ),
            ("AWS_VPC_K8S_CNI_LOGLEVEL", self.log_level.clone()),
            (
                "VPCNET_AGENT_SOCKET",
                self.agent_socket.display().to_string(),
            ),
            (
                "VPCNET_CHECKPOINT_PATH",
                self.checkpoint_path.display().to_string(),
            ),
            (
                "VPCNET_CNI_CONFLIST",
                self.cni_conflist.display().to_string(),
            ),
            (
                "VPCNET_RECONCILE_INTERVAL",
                self.reconcile_interval_secs.to_string(),
            ),
            ("VPCNET_NODE_DATAPATH", self.node_datapath.to_string()),
            (
                "VPCNET_EC2_DESCRIBE_BUCKET_SIZE",
                self.ec2.describe_bucket_size.to_string(),
            ),
            (
                "VPCNET_EC2_DESCRIBE_REFILL_RATE",
                self.ec2.describe_refill_per_sec.to_string(),
            ),
            (
                "VPCNET_EC2_MUTATING_BUCKET_SIZE",
                self.ec2.mutating_bucket_size.to_string(),
            ),
            (
                "VPCNET_EC2_MUTATING_REFILL_RATE",
                self.ec2.mutating_refill_per_sec.to_string(),
            ),
            (
                "VPCNET_EC2_CALL_TIMEOUT",
                self.ec2.call_timeout_secs.to_string(),
            ),
            (
                "AWS_EC2_ENDPOINT",
                self.ec2.endpoint.clone().unwrap_or_default(),
            ),
        ])
    }
}

impl Default for Config {
    /// The configuration with no variable set.
    fn default() -> Self {
        Config::from_lookup(&|_| None).expect("defaults are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_map(&m)
    }

    fn err(pairs: &[(&str, &str)]) -> ConfigError {
        cfg(pairs).expect_err("should be rejected")
    }

    #[test]
    fn defaults_match_the_vpc_cni() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.warm_eni_target, 1);
        assert_eq!(
            (
                c.warm_ip_target,
                c.minimum_ip_target,
                c.warm_prefix_target,
                c.max_eni
            ),
            (None, None, None, None)
        );
        assert!(!c.enable_prefix_delegation && !c.custom_network_cfg && !c.external_snat);
        assert_eq!(c.eni_config_label_def, "k8s.amazonaws.com/eniConfig");
        assert_eq!(c.eni_config_annotation_def, "k8s.amazonaws.com/eniConfig");
        assert!(c.exclude_snat_cidrs.is_empty());
        assert_eq!(c.randomize_snat, RandomizeSnat::Prng);
        assert_eq!(c.eni_mtu, 9001);
        assert_eq!(c.veth_prefix, "eni");
        assert_eq!(c.plugin_log_file, "/var/log/aws-routed-eni/plugin.log");
        assert_eq!(c.plugin_log_level, "Debug");
        assert_eq!(
            cfg(&[("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "warning")])
                .unwrap()
                .plugin_log_level,
            "Warn"
        );
        assert!(c.node_port_support);
        assert_eq!(c.cluster_endpoint, None);
        assert_eq!(c.cluster_name, "");
        assert!(c.additional_eni_tags.is_empty());
        assert!(!c.disable_introspection && !c.disable_metrics && !c.disable_leaked_eni_cleanup);
        assert_eq!(
            c.introspection_bind_address,
            BindAddress::Tcp("127.0.0.1:61679".parse().unwrap())
        );
        assert_eq!(
            c.metrics_bind_address,
            BindAddress::Tcp("0.0.0.0:61678".parse().unwrap())
        );
        assert_eq!(c.ip_cooldown(), Duration::from_secs(30));
        assert_eq!(c.log_level, "DEBUG");
        assert_eq!(c.agent_socket, PathBuf::from("/var/run/vpcnet/agent.sock"));
        assert_eq!(
            c.checkpoint_path,
            PathBuf::from("/var/run/vpcnet/ipam.json")
        );
        assert_eq!(
            c.cni_conflist,
            PathBuf::from("/etc/cni/net.d/10-vpcnet.conflist")
        );
        assert_eq!(c.reconcile_interval(), Duration::from_secs(30));
        assert!(c.node_datapath);
        assert_eq!(
            (c.ec2.describe_bucket_size, c.ec2.mutating_bucket_size),
            (100, 20)
        );
        assert_eq!(
            (c.ec2.describe_refill_per_sec, c.ec2.mutating_refill_per_sec),
            (20.0, 5.0)
        );
        assert_eq!(c.ec2.call_timeout_secs, 30);
        assert!(!c.uses_ip_targets());
        assert_eq!(Config::default(), c);
    }

    #[test]
    fn values_are_read() {
        let c = cfg(&[
            ("WARM_ENI_TARGET", "0"),
            ("WARM_IP_TARGET", "5"),
            ("MINIMUM_IP_TARGET", "10"),
            ("WARM_PREFIX_TARGET", "2"),
            ("ENABLE_PREFIX_DELEGATION", "true"),
            ("MAX_ENI", "3"),
            ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "1"),
            ("ENI_CONFIG_LABEL_DEF", "topology.kubernetes.io/zone"),
            ("AWS_VPC_K8S_CNI_EXTERNALSNAT", "True"),
            (
                "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
                "10.1.0.0/16, 192.168.0.0/24",
            ),
            ("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "hashrandom"),
            ("AWS_VPC_ENI_MTU", "1500"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "vpc"),
            ("CLUSTER_ENDPOINT", "https://api.example:443"),
            ("CLUSTER_NAME", "prod"),
            ("ADDITIONAL_ENI_TAGS", r#"{"team":"net"}"#),
            (
                "INTROSPECTION_BIND_ADDRESS",
                "unix:/run/vpcnet/introspect.sock",
            ),
            ("VPCNET_METRICS_BIND_ADDRESS", "127.0.0.1:9000"),
            ("IP_COOLDOWN_PERIOD", "0"),
            ("AWS_VPC_K8S_CNI_LOGLEVEL", "info"),
            ("VPCNET_AGENT_SOCKET", "/tmp/a.sock"),
            ("VPCNET_RECONCILE_INTERVAL", "5"),
            ("VPCNET_NODE_DATAPATH", "false"),
            ("VPCNET_EC2_MUTATING_BUCKET_SIZE", "7"),
            ("VPCNET_EC2_MUTATING_REFILL_RATE", "0.5"),
            ("AWS_EC2_ENDPOINT", "http://127.0.0.1:5000"),
        ])
        .unwrap();
        assert_eq!(c.warm_eni_target, 0);
        assert_eq!(
            (
                c.warm_ip_target,
                c.minimum_ip_target,
                c.warm_prefix_target,
                c.max_eni
            ),
            (Some(5), Some(10), Some(2), Some(3))
        );
        assert!(
            c.enable_prefix_delegation
                && c.custom_network_cfg
                && c.external_snat
                && c.uses_ip_targets()
        );
        assert_eq!(c.eni_config_label_def, "topology.kubernetes.io/zone");
        assert_eq!(c.exclude_snat_cidrs.len(), 2);
        assert_eq!(c.randomize_snat, RandomizeSnat::Hashrandom);
        assert_eq!((c.eni_mtu, c.veth_prefix.as_str()), (1500, "vpc"));
        assert_eq!(
            c.additional_eni_tags.get("team").map(String::as_str),
            Some("net")
        );
        assert_eq!(
            c.introspection_bind_address,
            BindAddress::Unix("/run/vpcnet/introspect.sock".into())
        );
        assert_eq!(c.ip_cooldown(), Duration::ZERO);
        assert_eq!(c.log_level, "INFO");
        assert!(!c.node_datapath);
        let s = c.ec2_call_settings();
        assert_eq!(
            s.mutating_bucket,
            vpcnet_ec2::BucketConfig {
                capacity: 7,
                refill_per_sec: 0.5
            }
        );
        assert_eq!(s.describe_bucket, vpcnet_ec2::BucketConfig::DESCRIBE);
        assert_eq!(c.ec2.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
    }

    #[test]
    fn non_positive_targets_mean_unset() {
        for v in ["0", "-1", "-100"] {
            let c = cfg(&[
                ("WARM_IP_TARGET", v),
                ("MINIMUM_IP_TARGET", v),
                ("WARM_PREFIX_TARGET", v),
                ("MAX_ENI", v),
            ])
            .unwrap();
            assert_eq!(
                (
                    c.warm_ip_target,
                    c.minimum_ip_target,
                    c.warm_prefix_target,
                    c.max_eni
                ),
                (None, None, None, None)
            );
        }
    }

    #[test]
    fn empty_values_mean_unset() {
        let c = cfg(&[
            ("WARM_ENI_TARGET", ""),
            ("AWS_VPC_ENI_MTU", " "),
            ("DISABLE_METRICS", ""),
        ])
        .unwrap();
        assert_eq!(
            (c.warm_eni_target, c.eni_mtu, c.disable_metrics),
            (1, 9001, false)
        );
    }

    #[test]
    fn boolean_spellings_of_go_parsebool() {
        for v in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(
                cfg(&[("DISABLE_METRICS", v)]).unwrap().disable_metrics,
                "{v}"
            );
        }
        for v in ["0", "f", "F", "FALSE", "false", "False"] {
            assert!(
                !cfg(&[("AWS_VPC_CNI_NODE_PORT_SUPPORT", v)])
                    .unwrap()
                    .node_port_support,
                "{v}"
            );
        }
        for v in ["yes", "no", "on", "tRuE", "2"] {
            let e = err(&[("ENABLE_PREFIX_DELEGATION", v)]);
            assert_eq!(e.var, "ENABLE_PREFIX_DELEGATION");
            assert_eq!(e.value, v);
            assert!(e.accepted.contains("true, false"), "{e}");
        }
    }

    #[test]
    fn every_invalid_value_names_variable_value_and_accepted_values() {
        let cases: &[(&str, &str, &str)] = &[
            ("WARM_ENI_TARGET", "one", "integer"),
            ("WARM_ENI_TARGET", "-1", "≥ 0"),
            ("WARM_IP_TARGET", "5.5", "integer"),
            ("MINIMUM_IP_TARGET", "x", "integer"),
            ("WARM_PREFIX_TARGET", "1e3", "integer"),
            ("MAX_ENI", "99999999999", "up to"),
            ("AWS_VPC_ENI_MTU", "575", "576 to 9001"),
            ("AWS_VPC_ENI_MTU", "9002", "576 to 9001"),
            ("AWS_VPC_ENI_MTU", "jumbo", "integer"),
            (
                "AWS_VPC_K8S_CNI_RANDOMIZESNAT",
                "random",
                "none, hashrandom, prng",
            ),
            (
                "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
                "10.0.0.0/8,bogus",
                "IPv4 CIDRs",
            ),
            (
                "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
                "10.0.0.1",
                "IPv4 CIDRs",
            ),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "toolong", "1 to 4 characters"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "eth", "reserved"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "lo", "reserved"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "a/b", "1 to 4 characters"),
            (
                "AWS_VPC_K8S_PLUGIN_LOG_FILE",
                "plugin.log",
                "absolute file path",
            ),
            (
                "AWS_VPC_K8S_PLUGIN_LOG_LEVEL",
                "verbose",
                "Debug, Info, Warn, Error",
            ),
            ("CLUSTER_ENDPOINT", "api.example.com", "API server URL"),
            ("ADDITIONAL_ENI_TAGS", "team=net", "JSON object"),
            (
                "ADDITIONAL_ENI_TAGS",
                r#"{"k8s.amazonaws.com/x":"y"}"#,
                "without k8s.amazonaws.com",
            ),
            ("ADDITIONAL_ENI_TAGS", r#"{"a": 1}"#, "JSON object"),
            ("INTROSPECTION_BIND_ADDRESS", "localhost", "host:port"),
            (
                "INTROSPECTION_BIND_ADDRESS",
                "unix:relative.sock",
                "unix:/path",
            ),
            ("VPCNET_METRICS_BIND_ADDRESS", ":99999", "host:port"),
            ("IP_COOLDOWN_PERIOD", "-5", "0 to 86400"),
            ("IP_COOLDOWN_PERIOD", "30s", "integer"),
            ("AWS_VPC_K8S_CNI_LOGLEVEL", "TRACE", "DEBUG, INFO"),
            ("VPCNET_AGENT_SOCKET", "agent.sock", "absolute path"),
            ("VPCNET_CHECKPOINT_PATH", "ipam.json", "absolute path"),
            ("VPCNET_CNI_CONFLIST", "net.d/x", "absolute path"),
            ("VPCNET_RECONCILE_INTERVAL", "0", "1 to 86400"),
            ("VPCNET_NODE_DATAPATH", "maybe", "true, false"),
            ("VPCNET_EC2_MUTATING_BUCKET_SIZE", "0", "1 to 10000"),
            ("VPCNET_EC2_DESCRIBE_REFILL_RATE", "0", "> 0"),
            ("VPCNET_EC2_MUTATING_REFILL_RATE", "fast", "> 0"),
            ("VPCNET_EC2_CALL_TIMEOUT", "0", "1 to 3600"),
            ("AWS_EC2_ENDPOINT", "ec2.local", "URL"),
        ];
        for (var, value, accepted) in cases {
            let e = err(&[(var, value)]);
            assert_eq!(e.var, *var, "{e}");
            let msg = e.to_string();
            assert!(msg.contains(var), "{msg}");
            assert_eq!(e.value, value.trim(), "{msg}");
            assert!(
                msg.contains(&format!("{:?}", value.trim())),
                "message must quote the value: {msg}"
            );
            assert!(
                e.accepted.contains(accepted),
                "{var}={value}: accepted {:?} lacks {accepted:?}",
                e.accepted
            );
        }
    }

    #[test]
    fn env_settings_round_trip() {
        let c = cfg(&[
            ("WARM_IP_TARGET", "5"),
            (
                "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
                "10.1.0.0/16,192.168.0.0/24",
            ),
            ("ADDITIONAL_ENI_TAGS", r#"{"a":"b"}"#),
            ("INTROSPECTION_BIND_ADDRESS", "unix:/run/x.sock"),
            ("CLUSTER_ENDPOINT", "https://k8s:6443"),
        ])
        .unwrap();
        let settings = c.env_settings();
        assert_eq!(settings["WARM_IP_TARGET"], "5");
        assert_eq!(settings["MINIMUM_IP_TARGET"], "");
        let again: HashMap<String, String> = settings
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(Config::from_map(&again).unwrap(), c);
    }

    #[test]
    fn serializes_for_env_settings() {
        let json = serde_json::to_value(Config::default()).unwrap();
        assert_eq!(json["warm_eni_target"], 1);
        assert_eq!(json["randomize_snat"], "prng");
        assert_eq!(json["metrics_bind_address"], "0.0.0.0:61678");
        assert_eq!(json["ec2"]["mutating_bucket_size"], 20);
    }
}
