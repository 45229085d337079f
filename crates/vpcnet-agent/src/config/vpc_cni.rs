//! What vpcnet does with each setting of the pinned VPC CNI that `config.rs` does not
//! implement: refused at start when its value asks for behaviour vpcnet lacks (with why, and
//! what to use instead), or accepted as a no-op where that is harmless (with why). Together
//! with the settings declared in `config.rs` (implemented: same meaning and default) this
//! covers every name of `vpc_cni_names.txt`; tests check both directions.
//!
//! An unset or empty variable is never refused: it means the VPC CNI's default, and each
//! refusal below accepts the value that is vpcnet's behaviour, the VPC CNI's default included.

use super::kinds::BOOL_ACCEPTED;
use super::{parse_bool, InvalidSetting};

/// The values a setting accepts; any other valid value is refused ([`Status::Refused`]) or,
/// for a no-op, invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepts {
    /// A boolean as Go's `strconv.ParseBool` reads it: `Some(b)` accepts only `b` (the other
    /// boolean is refused), `None` either. A non-boolean is invalid.
    Bool(Option<bool>),
    /// One of `valid` (compared as the VPC CNI compares, exactly); those in `ok` are accepted.
    Words {
        valid: &'static [&'static str],
        ok: &'static [&'static str],
    },
    /// Exactly one of these texts.
    Only(&'static [&'static str]),
    /// No value at all: any set value is refused.
    Unset,
    /// An integer as Go's `strconv.ParseInt(s, 0, 64)` reads it (`0x80`, `128`), equal to this.
    Int(i64),
    /// Anything.
    Any,
}

/// What vpcnet does with a VPC CNI setting it does not implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Values other than the accepted ones stop the agent at start.
    Refused {
        /// Why vpcnet does not do what the refused values ask.
        why: &'static str,
        /// What to use instead.
        instead: &'static str,
    },
    /// Read and validated, without effect.
    NoOp {
        /// Why having no effect is harmless.
        why: &'static str,
    },
}

/// A VPC CNI setting vpcnet does not implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VpcCniSetting {
    pub var: &'static str,
    /// The VPC CNI's default (README, else its code); empty: unset.
    pub default: &'static str,
    pub accepts: Accepts,
    pub status: Status,
}

const fn refused(
    var: &'static str,
    default: &'static str,
    accepts: Accepts,
    why: &'static str,
    instead: &'static str,
) -> VpcCniSetting {
    VpcCniSetting {
        var,
        default,
        accepts,
        status: Status::Refused { why, instead },
    }
}

const fn no_op(
    var: &'static str,
    default: &'static str,
    accepts: Accepts,
    why: &'static str,
) -> VpcCniSetting {
    VpcCniSetting {
        var,
        default,
        accepts,
        status: Status::NoOp { why },
    }
}

const ONLY_FALSE: Accepts = Accepts::Bool(Some(false));
const ONLY_TRUE: Accepts = Accepts::Bool(Some(true));
const REMOVE_OR_FALSE: &str = "remove it or set it to false";

/// Every VPC CNI setting `config.rs` does not implement, by name.
pub const SETTINGS: &[VpcCniSetting] = &[
    refused(
        "AWS_EXTERNAL_SERVICE_CIDRS",
        "",
        Accepts::Unset,
        "vpcnet adds no rules that send these destinations through the main route table",
        "remove it; vpcnet already routes a pod's connections to addresses outside the VPC \
         CIDRs and AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS through the primary ENI (main table), \
         unless AWS_VPC_K8S_CNI_EXTERNALSNAT is true",
    ),
    refused(
        "AWS_VPC_K8S_CNI_BACKING_STORE",
        "/var/run/aws-node/ipam.json",
        Accepts::Only(&["/var/run/aws-node/ipam.json"]),
        "vpcnet keeps its own checkpoint (VPCNET_CHECKPOINT_PATH) and imports the VPC CNI's \
         from VPCNET_VPC_CNI_CHECKPOINT",
        "set VPCNET_VPC_CNI_CHECKPOINT to this path and remove this variable",
    ),
    no_op(
        "AWS_VPC_K8S_CNI_CONFIGURE_RPFILTER",
        "true",
        Accepts::Any,
        "the VPC CNI ignores it since v1.12.1 (deprecated); vpcnet sets rp_filter on the \
         primary interface itself (AWS_VPC_CNI_NODE_PORT_SUPPORT)",
    ),
    refused(
        "AWS_VPC_K8S_CNI_CONNMARK",
        "0x80",
        Accepts::Int(0x80),
        "vpcnet's connection mark is the fixed bit 0x80",
        "remove it or set it to 0x80",
    ),
    no_op(
        "AWS_VPC_K8S_EGRESS_V4_PLUGIN_LOG_FILE",
        "/var/log/aws-routed-eni/egress-v4-plugin.log",
        Accepts::Any,
        "the log of the VPC CNI's egress-cni plugin, chained only in IPv6 clusters \
         (ENABLE_IPv6=true, which vpcnet refuses); vpcnet chains no egress plugin",
    ),
    no_op(
        "AWS_VPC_K8S_EGRESS_V6_PLUGIN_LOG_FILE",
        "/var/log/aws-routed-eni/egress-v6-plugin.log",
        Accepts::Any,
        "the log of the VPC CNI's egress-cni plugin, chained only with ENABLE_V6_EGRESS=true \
         (which vpcnet refuses); vpcnet chains no egress plugin",
    ),
    refused(
        "DISABLE_TCP_EARLY_DEMUX",
        "false",
        ONLY_FALSE,
        "the agent does not change the node's net.ipv4.tcp_early_demux: the init container \
         (vpcnet-init) does, as the VPC CNI's does, so set it there (the chart's init.env), \
         not on the agent",
        REMOVE_OR_FALSE,
    ),
    refused(
        "ENABLE_IPv4",
        "true",
        ONLY_TRUE,
        "vpcnet gives pods IPv4 addresses only; false asks for the VPC CNI's IPv6-only mode, \
         which vpcnet does not have yet",
        "remove it or set it to true; IPv6 clusters still need the VPC CNI",
    ),
    refused(
        "ENABLE_IPv6",
        "false",
        ONLY_FALSE,
        "vpcnet has no IPv6 mode yet: pods would get IPv4 addresses only",
        "remove it or set it to false; IPv6 clusters still need the VPC CNI",
    ),
    no_op(
        "ENABLE_NFTABLES",
        "false",
        Accepts::Any,
        "the VPC CNI ignores it since v1.13.2 (deprecated: it follows the node's iptables \
         mode); vpcnet programs its own nftables table",
    ),
    refused(
        "ENABLE_POD_ENI",
        "false",
        ONLY_FALSE,
        "vpcnet does not label its Node for a trunk ENI, so the VPC resource controller \
         attaches none and no pod gets security groups of its own",
        "remove it or set it to false; pods that need their own security groups still need \
         the VPC CNI",
    ),
    no_op(
        "ENABLE_V4_EGRESS",
        "true",
        Accepts::Bool(None),
        "IPv4 egress of IPv6 pods: the VPC CNI reads it only with ENABLE_IPv6=true, which \
         vpcnet refuses",
    ),
    refused(
        "ENABLE_V6_EGRESS",
        "false",
        ONLY_FALSE,
        "vpcnet gives pods no IPv6 egress interface (the VPC CNI's egress-cni plugin)",
        REMOVE_OR_FALSE,
    ),
    refused(
        "HOST_CNI_BIN_PATH",
        "/host/opt/cni/bin",
        Accepts::Only(&["/host/opt/cni/bin"]),
        "vpcnet-agent installs no CNI plugin binaries (the VPC CNI's entrypoint and init \
         container copy theirs to this directory)",
        "remove it, and install vpcnet-cni and portmap (and bandwidth with \
         ENABLE_BANDWIDTH_PLUGIN, tuning with DISABLE_POD_V6) in the container runtime's CNI \
         binary directory (/opt/cni/bin by default)",
    ),
    refused(
        "HOST_CNI_CONFDIR_PATH",
        "/host/etc/cni/net.d",
        Accepts::Only(&["/host/etc/cni/net.d"]),
        "vpcnet-agent writes its conflist to the file VPCNET_CNI_CONFLIST names, not into this \
         directory",
        "set VPCNET_CNI_CONFLIST to DIRECTORY/10-vpcnet.conflist and remove this variable",
    ),
    refused(
        "MANAGE_UNTAGGED_ENI",
        "true",
        ONLY_TRUE,
        "vpcnet manages every attached ENI not tagged node.k8s.amazonaws.com/no_manage=true; \
         it cannot leave ENIs alone for lacking its instance tag",
        "remove it or set it to true, and tag the ENIs to leave alone with \
         node.k8s.amazonaws.com/no_manage=true",
    ),
    no_op(
        "MY_POD_NAME",
        "",
        Accepts::Any,
        "the VPC CNI finds its own pod with it to attach Kubernetes events; vpcnet sends its \
         events to the Node",
    ),
    no_op(
        "POD_SECURITY_GROUP_ENFORCING_MODE",
        "strict",
        Accepts::Words {
            valid: &["strict", "standard"],
            ok: &["strict", "standard"],
        },
        "it applies only to pods with their own security groups (ENABLE_POD_ENI=true), which \
         vpcnet refuses",
    ),
    no_op(
        "VPC_CNI_VERSION",
        "",
        Accepts::Any,
        "the VPC CNI image's version, sent in its EC2 user agent; vpcnet's calls carry \
         vpcnet's own",
    ),
];

/// The setting `var`, when [`SETTINGS`] declares it.
pub fn setting(var: &str) -> Option<&'static VpcCniSetting> {
    SETTINGS.iter().find(|s| s.var == var)
}

/// Go's `strconv.ParseInt(s, 0, 64)`: optional sign, then `0x`/`0o`/`0b`/leading-`0` octal or
/// decimal (underscores between digits allowed only with a prefix; not supported here).
fn parse_go_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(b) = lower.strip_prefix("0x") {
        (16, b.to_string())
    } else if let Some(b) = lower.strip_prefix("0o") {
        (8, b.to_string())
    } else if let Some(b) = lower.strip_prefix("0b") {
        (2, b.to_string())
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string())
    } else {
        (10, lower)
    };
    if body.is_empty() || body.starts_with(['+', '-']) {
        return None;
    }
    let n = i64::from_str_radix(&body, radix).ok()?;
    Some(if neg { -n } else { n })
}

impl VpcCniSetting {
    /// What the setting accepts, as text.
    pub fn accepted(&self) -> String {
        let quote = |ws: &[&str]| {
            ws.iter()
                .map(|w| format!("`{w}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.accepts {
            Accepts::Bool(Some(b)) => format!("`{b}`"),
            Accepts::Bool(None) => "`true` or `false`".into(),
            Accepts::Words { ok, .. } | Accepts::Only(ok) => quote(ok),
            Accepts::Unset => "no value".into(),
            Accepts::Int(n) => format!("`{n:#x}`"),
            Accepts::Any => "any value".into(),
        }
    }

    /// Checks a set value (trimmed, not empty): `Ok` when accepted.
    pub fn check(&self, value: &str) -> Result<(), InvalidSetting> {
        let invalid = |problem: &str, accepted: String| InvalidSetting {
            var: self.var,
            value: value.to_string(),
            problem: problem.into(),
            accepted,
            refused: false,
        };
        let ok = match self.accepts {
            Accepts::Bool(want) => {
                let b = parse_bool(value)
                    .ok_or_else(|| invalid("not a boolean", BOOL_ACCEPTED.into()))?;
                want.is_none_or(|w| w == b)
            }
            Accepts::Words { valid, ok } => {
                if !valid.contains(&value) {
                    return Err(invalid("unknown value", valid.join(", ")));
                }
                ok.contains(&value)
            }
            Accepts::Only(ok) => ok.contains(&value),
            Accepts::Unset => false,
            Accepts::Int(n) => parse_go_int(value) == Some(n),
            Accepts::Any => true,
        };
        match (ok, self.status) {
            (true, _) => Ok(()),
            (false, Status::Refused { why, instead }) => Err(InvalidSetting {
                var: self.var,
                value: value.to_string(),
                problem: why.into(),
                accepted: instead.into(),
                refused: true,
            }),
            (false, Status::NoOp { .. }) => Err(invalid("unknown value", self.accepted())),
        }
    }
}

/// Every set variable of [`SETTINGS`] whose value is refused or invalid, in [`SETTINGS`] order.
pub fn check_all(get: &dyn Fn(&str) -> Option<String>) -> Vec<InvalidSetting> {
    SETTINGS
        .iter()
        .filter_map(|s| {
            let v = get(s.var)?;
            let v = v.trim();
            (!v.is_empty()).then(|| s.check(v).err()).flatten()
        })
        .collect()
}

/// Prefixes of variables that are probably meant for the VPC CNI or vpcnet: one with such a
/// prefix that neither knows is worth a warning (a typo, or a setting of a newer VPC CNI).
pub const WATCHED_PREFIXES: &[&str] = &["AWS_VPC_", "ENABLE_", "WARM_", "VPCNET_"];

/// The names among `names` with a [`WATCHED_PREFIXES`] prefix that are neither declared by
/// `config.rs` (`declared`) nor a VPC CNI setting ([`super::vpc_cni_names`]), sorted.
pub fn unknown_variables<'a>(
    names: impl IntoIterator<Item = &'a str>,
    declared: &[&str],
) -> Vec<&'a str> {
    let mut out: Vec<&str> = names
        .into_iter()
        .filter(|n| WATCHED_PREFIXES.iter().any(|p| n.starts_with(p)))
        .filter(|n| !n.starts_with("VPCNET_TEST_"))
        .filter(|n| !declared.contains(n))
        .filter(|n| !super::vpc_cni_names::names().any(|k| k == *n))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The table of every VPC CNI setting and what vpcnet does with it, for docs/configuration.md: the
/// names of [`super::vpc_cni_names`], each with its status from [`SETTINGS`] or,
/// implemented, its declaration in `config.rs` (`declared`).
pub fn status_table(declared: &[super::Declaration]) -> String {
    let code = |t: &str| {
        if t.is_empty() {
            "unset".to_string()
        } else {
            format!("`{t}`")
        }
    };
    let rows = super::vpc_cni_names::names().map(|name| {
        let (default, status) = match (setting(name), declared.iter().find(|d| d.var == name)) {
            (Some(s), _) => (
                s.default,
                match s.status {
                    Status::Refused { why, instead } => format!(
                        "**refused** unless {}: {why}. Instead: {instead}.",
                        s.accepted()
                    ),
                    Status::NoOp { why } => {
                        format!("**no effect** (accepts {}): {why}.", s.accepted())
                    }
                },
            ),
            (None, Some(d)) => (
                d.default,
                format!("implemented (table `{}` above)", d.section),
            ),
            (None, None) => ("", "**no status**".to_string()),
        };
        vec![format!("`{name}`"), code(default), status]
    });
    crate::docs::table(&["variable", "default", "in vpcnet"], rows)
}

#[cfg(test)]
mod list_tests {
    use super::super::{vpc_cni_names, Config};
    use super::*;

    /// Walks the list of the pinned VPC CNI's names (extracted from its source, see
    /// `vpc_cni_names.rs`): each has exactly one status, and each status names a real name.
    #[test]
    fn every_vpc_cni_name_has_exactly_one_status() {
        let declared = Config::declarations();
        let names: Vec<&str> = vpc_cni_names::names().collect();
        let mut implemented = 0;
        for name in &names {
            let in_config = declared.iter().any(|d| d.var == *name);
            let in_settings = setting(name).is_some();
            assert!(
                in_config != in_settings,
                "{name}: declare it either in config.rs (implemented) or in                  config/vpc_cni.rs SETTINGS (refused or no-op), exactly once                  (config.rs: {in_config}, SETTINGS: {in_settings})"
            );
            implemented += usize::from(in_config);
        }
        for s in SETTINGS {
            assert!(names.contains(&s.var), "{} is not a VPC CNI setting", s.var);
        }
        for d in &declared {
            assert!(
                d.var.starts_with("VPCNET_") || names.contains(&d.var),
                "{} is declared as a VPC CNI setting but the pinned VPC CNI has no such name                  (vpcnet's own settings are VPCNET_*)",
                d.var
            );
        }
        assert_eq!(implemented + SETTINGS.len(), names.len());
        assert!(
            implemented > 25 && SETTINGS.len() >= 15,
            "{implemented} {}",
            SETTINGS.len()
        );
        let table = status_table(&declared);
        assert!(!table.contains("no status"), "{table}");
        for name in &names {
            assert!(
                table.contains(&format!("| `{name}` |")),
                "{name} missing:\n{table}"
            );
        }
    }

    #[test]
    fn the_manifest_and_chart_defaults_start() {
        // The env the VPC CNI v1.23 manifest and chart set on aws-node and its init container:
        // an operator carrying it over gets an agent that starts.
        let env: std::collections::HashMap<String, String> = [
            ("ADDITIONAL_ENI_TAGS", "{}"),
            ("AWS_VPC_CNI_NODE_PORT_SUPPORT", "true"),
            ("AWS_VPC_ENI_MTU", "9001"),
            ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "false"),
            ("AWS_VPC_K8S_CNI_EXTERNALSNAT", "false"),
            ("AWS_VPC_K8S_CNI_LOGLEVEL", "DEBUG"),
            ("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "prng"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "eni"),
            (
                "AWS_VPC_K8S_PLUGIN_LOG_FILE",
                "/var/log/aws-routed-eni/plugin.log",
            ),
            ("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "DEBUG"),
            ("DISABLE_INTROSPECTION", "false"),
            ("DISABLE_METRICS", "false"),
            ("DISABLE_NETWORK_RESOURCE_PROVISIONING", "false"),
            ("DISABLE_TCP_EARLY_DEMUX", "false"),
            ("ENABLE_IMDS_ONLY_MODE", "false"),
            ("ENABLE_IPv4", "true"),
            ("ENABLE_IPv6", "false"),
            ("ENABLE_MULTI_NIC", "false"),
            ("ENABLE_POD_ENI", "false"),
            ("ENABLE_PREFIX_DELEGATION", "false"),
            ("ENABLE_SUBNET_DISCOVERY", "true"),
            ("NETWORK_POLICY_ENFORCING_MODE", "standard"),
            ("VPC_CNI_VERSION", "v1.23.2"),
            ("WARM_ENI_TARGET", "1"),
            ("WARM_PREFIX_TARGET", "1"),
            ("MY_NODE_NAME", "ip-10-0-0-1.ec2.internal"),
            ("MY_POD_NAME", "aws-node-abcde"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let c = Config::from_map(&env).unwrap();
        assert!(c.enable_subnet_discovery);
        assert!(Config::unknown_variables(env.keys().map(String::as_str)).is_empty());
        // The manifest's log file is the default, and means the same (the agent writes it).
        let mut with_log = env.clone();
        with_log.insert(
            "AWS_VPC_K8S_CNI_LOG_FILE".into(),
            "/host/var/log/aws-routed-eni/ipamd.log".into(),
        );
        assert_eq!(Config::from_map(&with_log).unwrap(), c);
        assert_eq!(c.log_file, "/host/var/log/aws-routed-eni/ipamd.log");
    }
}

#[cfg(test)]
mod tests;
