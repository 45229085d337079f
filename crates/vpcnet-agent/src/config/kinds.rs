//! Kinds of setting: how a variable's text becomes a typed value, what it accepts, and how the
//! value is shown again in `/v1/env-settings` (showing then parsing gives the same value).
//!
//! `parse` receives the variable's trimmed text, or the declared default when the variable is
//! unset or empty; an empty text reaches it only for settings whose default is empty (unset).

use std::collections::BTreeMap;
use std::fmt::Display;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::PathBuf;

use ipnet::Ipv4Net;

use super::{BindAddress, PolicyAgent, PolicyMode, RandomizeSnat};

/// How one setting's text becomes its value.
pub trait Kind {
    type Value;
    /// The value of `text`, or what is wrong with it.
    fn parse(&self, text: &str) -> Result<Self::Value, String>;
    /// `value` as text that [`Kind::parse`] reads back to it.
    fn show(&self, value: &Self::Value) -> String;
    /// What the setting accepts, for error messages.
    fn accepted(&self) -> String;
    /// What the setting accepts, for the docs/configuration.md table (defaults to
    /// [`Kind::accepted`]).
    fn summary(&self) -> String {
        self.accepted()
    }
}

/// Booleans as the VPC CNI reads them (Go's `strconv.ParseBool`).
pub struct Flag;

/// What [`Flag`] accepts.
pub const BOOL_ACCEPTED: &str = "true, false (also 1, t, T, TRUE, True, 0, f, F, FALSE, False)";

impl Kind for Flag {
    type Value = bool;
    fn parse(&self, text: &str) -> Result<bool, String> {
        super::parse_bool(text).ok_or_else(|| "not a boolean".into())
    }
    fn show(&self, value: &bool) -> String {
        value.to_string()
    }
    fn accepted(&self) -> String {
        BOOL_ACCEPTED.into()
    }
    fn summary(&self) -> String {
        "`true` or `false`".into()
    }
}

/// A decimal integer in `min..=max`, stored as `T`.
pub struct Int<T> {
    min: i64,
    max: i64,
    target: PhantomData<T>,
}

impl<T: TryFrom<i64>> Int<T> {
    /// An integer from `min` to `max`, both included.
    pub const fn range(min: i64, max: i64) -> Self {
        Int {
            min,
            max,
            target: PhantomData,
        }
    }
}

impl Int<u32> {
    /// An integer from `min` to `u32::MAX`.
    pub const fn at_least(min: i64) -> Self {
        Int::range(min, u32::MAX as i64)
    }
}

impl<T: TryFrom<i64> + Display> Kind for Int<T> {
    type Value = T;
    fn parse(&self, text: &str) -> Result<T, String> {
        let n: i64 = text.parse().map_err(|_| "not an integer".to_string())?;
        if !(self.min..=self.max).contains(&n) {
            return Err("out of range".into());
        }
        T::try_from(n).map_err(|_| "out of range".into())
    }
    fn show(&self, value: &T) -> String {
        value.to_string()
    }
    fn accepted(&self) -> String {
        if self.max == u32::MAX as i64 {
            format!("an integer ≥ {}", self.min)
        } else {
            format!("an integer from {} to {}", self.min, self.max)
        }
    }
}

/// The VPC CNI's optional counts (`WARM_IP_TARGET`, `MAX_ENI`, ...): unset, 0 or negative
/// means "not used".
pub struct Target;

impl Kind for Target {
    type Value = Option<u32>;
    fn parse(&self, text: &str) -> Result<Option<u32>, String> {
        if text.is_empty() {
            return Ok(None);
        }
        match text.parse::<i64>() {
            Err(_) => Err("not an integer".into()),
            Ok(n) if n <= 0 => Ok(None),
            Ok(n) => u32::try_from(n).map(Some).map_err(|_| "too large".into()),
        }
    }
    fn show(&self, value: &Option<u32>) -> String {
        value.map(|n| n.to_string()).unwrap_or_default()
    }
    fn accepted(&self) -> String {
        format!(
            "an integer up to {} (0, negative or unset: not used)",
            u32::MAX
        )
    }
}

/// `K`'s value, or `None` when the text is empty (unset).
pub struct Optional<K>(pub K);

impl<K: Kind> Kind for Optional<K> {
    type Value = Option<K::Value>;
    fn parse(&self, text: &str) -> Result<Option<K::Value>, String> {
        if text.is_empty() {
            return Ok(None);
        }
        self.0.parse(text).map(Some)
    }
    fn show(&self, value: &Option<K::Value>) -> String {
        value.as_ref().map(|v| self.0.show(v)).unwrap_or_default()
    }
    fn accepted(&self) -> String {
        format!("{}, or unset", self.0.accepted())
    }
}

/// A number of requests per second, > 0.
pub struct Rate;

impl Kind for Rate {
    type Value = f64;
    fn parse(&self, text: &str) -> Result<f64, String> {
        match text.parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
            _ => Err("not a positive number".into()),
        }
    }
    fn show(&self, value: &f64) -> String {
        value.to_string()
    }
    fn accepted(&self) -> String {
        "a number of requests per second > 0, e.g. 5 or 0.5".into()
    }
}

/// Text that `valid` accepts, kept as written.
pub struct Word {
    pub valid: fn(&str) -> bool,
    /// What is wrong with a text `valid` refuses.
    pub problem: &'static str,
    pub accepted: &'static str,
}

impl Kind for Word {
    type Value = String;
    fn parse(&self, text: &str) -> Result<String, String> {
        if (self.valid)(text) {
            Ok(text.to_string())
        } else {
            Err(self.problem.into())
        }
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
    fn accepted(&self) -> String {
        self.accepted.into()
    }
}

/// Any text (an empty default means empty).
pub const TEXT: Word = Word {
    valid: |_| true,
    problem: "",
    accepted: "any text",
};

/// A host-side veth name prefix.
pub const VETH_PREFIX: Word = Word {
    valid: |p| {
        p.len() <= 4
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !matches!(p, "eth" | "vlan" | "lo")
    },
    problem: "not a usable interface name prefix",
    accepted: "1 to 4 characters from [A-Za-z0-9_-], other than the reserved eth, vlan and lo",
};

/// Where the plugin logs: an absolute path, `stderr`, or empty for nowhere.
pub const PLUGIN_LOG_FILE: Word = Word {
    valid: |f| f.is_empty() || f == "stderr" || f.starts_with('/'),
    problem: "not an absolute path",
    accepted: "an absolute file path, `stderr`, or empty to disable plugin logging",
};

/// Where the agent logs (`AWS_VPC_K8S_CNI_LOG_FILE`): `stdout`, `stderr` (any case, as the VPC
/// CNI compares them) or an absolute file path.
pub const AGENT_LOG_FILE: Word = Word {
    valid: |f| {
        f.eq_ignore_ascii_case("stdout") || f.eq_ignore_ascii_case("stderr") || f.starts_with('/')
    },
    problem: "neither stdout, stderr nor an absolute path",
    accepted: "`stdout`, `stderr`, or an absolute file path",
};

/// A listening address: `host:port`, `:port` (all IPv4 addresses) or `unix:/path`.
pub struct Bind;

impl Kind for Bind {
    type Value = BindAddress;
    fn parse(&self, text: &str) -> Result<BindAddress, String> {
        let parsed = if let Some(path) = text.strip_prefix("unix:") {
            path.starts_with('/')
                .then(|| BindAddress::Unix(PathBuf::from(path)))
        } else if let Some(port) = text.strip_prefix(':') {
            format!("0.0.0.0:{port}")
                .parse::<SocketAddr>()
                .ok()
                .map(BindAddress::Tcp)
        } else {
            text.parse::<SocketAddr>().ok().map(BindAddress::Tcp)
        };
        parsed.ok_or_else(|| "not a bind address".into())
    }
    fn show(&self, value: &BindAddress) -> String {
        value.to_string()
    }
    fn accepted(&self) -> String {
        "host:port (e.g. 127.0.0.1:61679), :port, or unix:/path/to/socket".into()
    }
}

/// An absolute file path.
pub struct AbsPath;

impl Kind for AbsPath {
    type Value = PathBuf;
    fn parse(&self, text: &str) -> Result<PathBuf, String> {
        if text.starts_with('/') {
            Ok(PathBuf::from(text))
        } else {
            Err("not an absolute path".into())
        }
    }
    fn show(&self, value: &PathBuf) -> String {
        value.display().to_string()
    }
    fn accepted(&self) -> String {
        "an absolute path such as /var/run/vpcnet/agent.sock".into()
    }
}

/// Comma-separated IPv4 CIDRs (empty: none).
pub struct Cidrs;

impl Kind for Cidrs {
    type Value = Vec<Ipv4Net>;
    fn parse(&self, text: &str) -> Result<Vec<Ipv4Net>, String> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<Ipv4Net>()
                    .map_err(|_| format!("{s:?} is not an IPv4 CIDR"))
            })
            .collect()
    }
    fn show(&self, value: &Vec<Ipv4Net>) -> String {
        value
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
    fn accepted(&self) -> String {
        "comma-separated IPv4 CIDRs, e.g. 10.1.0.0/16,192.168.0.0/24".into()
    }
}

/// The value named by `text` in `words`, compared in any case.
fn lookup<'w, T>(words: &'w [(&'static str, T)], text: &str) -> Result<&'w T, String> {
    words
        .iter()
        .find(|(w, _)| w.eq_ignore_ascii_case(text))
        .map(|(_, v)| v)
        .ok_or_else(|| "unknown value".into())
}

/// One of a fixed set of words, any case, each naming a value of `T` (several words may name
/// the same value; the first is the one shown).
pub struct Choice<T: 'static> {
    pub words: &'static [(&'static str, T)],
    pub accepted: &'static str,
}

impl<T: Clone + PartialEq> Kind for Choice<T> {
    type Value = T;
    fn parse(&self, text: &str) -> Result<T, String> {
        lookup(self.words, text).cloned()
    }
    fn show(&self, value: &T) -> String {
        self.words
            .iter()
            .find(|(_, v)| v == value)
            .map(|(w, _)| w.to_string())
            .unwrap_or_default()
    }
    fn accepted(&self) -> String {
        self.accepted.into()
    }
}

/// One of a fixed set of words, any case, stored in its canonical spelling.
pub struct Spelling {
    /// (word, canonical spelling).
    pub words: &'static [(&'static str, &'static str)],
    pub accepted: &'static str,
}

impl Kind for Spelling {
    type Value = String;
    fn parse(&self, text: &str) -> Result<String, String> {
        lookup(self.words, text).map(|v| v.to_string())
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
    fn accepted(&self) -> String {
        self.accepted.into()
    }
}

/// `NETWORK_POLICY_ENFORCING_MODE` (the VPC CNI accepts `none`, `strict` and `standard`).
pub const POLICY_MODE: Choice<PolicyMode> = Choice {
    words: &[
        ("standard", PolicyMode::Standard),
        ("none", PolicyMode::Standard),
        ("strict", PolicyMode::Strict),
    ],
    accepted: "standard, strict, none (as standard)",
};

/// `VPCNET_NETWORK_POLICY_AGENT`.
pub const POLICY_AGENT: Choice<PolicyAgent> = Choice {
    words: &[
        ("vpcnet", PolicyAgent::Vpcnet),
        ("aws-eks-nodeagent", PolicyAgent::AwsEksNodeagent),
    ],
    accepted: "vpcnet, aws-eks-nodeagent",
};

/// `AWS_VPC_K8S_CNI_RANDOMIZESNAT`.
pub const RANDOMIZE_SNAT: Choice<RandomizeSnat> = Choice {
    words: &[
        ("none", RandomizeSnat::None),
        ("hashrandom", RandomizeSnat::Hashrandom),
        ("prng", RandomizeSnat::Prng),
    ],
    accepted: "none, hashrandom, prng",
};

/// `AWS_VPC_K8S_PLUGIN_LOG_LEVEL`, stored in the plugin's spelling.
pub const PLUGIN_LOG_LEVEL: Spelling = Spelling {
    words: &[
        ("Debug", "Debug"),
        ("Info", "Info"),
        ("Warn", "Warn"),
        ("warning", "Warn"),
        ("Error", "Error"),
    ],
    accepted: "Debug, Info, Warn, Error",
};

/// `AWS_VPC_K8S_CNI_LOGLEVEL`, stored upper-case.
pub const LOG_LEVEL: Spelling = Spelling {
    words: &[
        ("DEBUG", "DEBUG"),
        ("INFO", "INFO"),
        ("WARN", "WARN"),
        ("ERROR", "ERROR"),
        ("FATAL", "FATAL"),
    ],
    accepted: "DEBUG, INFO, WARN, ERROR, FATAL (any case)",
};

/// An optional `http://` or `https://` URL with a host (empty: unset).
pub struct Url {
    pub accepted: &'static str,
}

impl Kind for Url {
    type Value = Option<String>;
    fn parse(&self, text: &str) -> Result<Option<String>, String> {
        if text.is_empty() {
            return Ok(None);
        }
        let host = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("http://"));
        match host {
            Some(h) if !h.is_empty() => Ok(Some(text.to_string())),
            _ => Err("not an http(s) URL".into()),
        }
    }
    fn show(&self, value: &Option<String>) -> String {
        value.clone().unwrap_or_default()
    }
    fn accepted(&self) -> String {
        self.accepted.into()
    }
}

/// A JSON object of extra ENI tags (EC2 limits: keys 1 to 128 characters, values up to 256;
/// `k8s.amazonaws.com` keys are the VPC CNI's own and refused).
pub struct Tags;

impl Kind for Tags {
    type Value = BTreeMap<String, String>;
    fn parse(&self, text: &str) -> Result<BTreeMap<String, String>, String> {
        if text.is_empty() {
            return Ok(BTreeMap::new());
        }
        let tags: BTreeMap<String, String> = serde_json::from_str(text)
            .map_err(|e| format!("not a JSON object of strings ({e})"))?;
        if let Some(k) = tags.keys().find(|k| k.contains("k8s.amazonaws.com")) {
            return Err(format!(
                "tag key {k:?} uses the reserved k8s.amazonaws.com prefix"
            ));
        }
        if let Some((k, _)) = tags
            .iter()
            .find(|(k, v)| k.is_empty() || k.len() > 128 || v.len() > 256)
        {
            return Err(format!(
                "tag {k:?} has an empty or too long key, or a value over 256 characters"
            ));
        }
        Ok(tags)
    }
    fn show(&self, value: &BTreeMap<String, String>) -> String {
        serde_json::to_string(value).unwrap_or_default()
    }
    fn accepted(&self) -> String {
        r#"a JSON object such as {"team": "net"}, with tag keys without k8s.amazonaws.com (keys of 1 to 128 characters, values up to 256)"#.into()
    }
}
