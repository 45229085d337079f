//! The network configuration the runtime passes on stdin (one plugin entry of the conflist, with
//! `name`, `cniVersion`, and `prevResult` / `cni.dev/valid-attachments` when the verb has them).

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::error::{code, CniError};
use super::version;
use crate::conflist::{self, NumOrString, PluginConf};

/// One attachment of `cni.dev/valid-attachments` (GC).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// stdin: the runtime's fields around our conflist entry.
#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "cniVersion")]
    cni_version: Option<String>,
    name: Option<String>,
    #[serde(flatten)]
    plugin: PluginConf,
    #[serde(rename = "prevResult")]
    prev_result: Option<Value>,
    #[serde(rename = "cni.dev/valid-attachments")]
    valid_attachments: Option<Vec<Attachment>>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: RuntimeConfig,
}

/// `runtimeConfig`: what the runtime fills in for the capabilities the conflist asks for.
#[derive(Deserialize, Default)]
struct RuntimeConfig {
    #[serde(rename = "io.kubernetes.cri.pod-annotations", default)]
    pod_annotations: std::collections::BTreeMap<String, String>,
}

/// The parsed configuration with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    /// Host veth prefix (`vethPrefix`, default "eni").
    pub veth_prefix: String,
    /// Pod MTU in bytes from `mtu`; `None` = take the agent's (default 9001).
    pub mtu: Option<u32>,
    /// Agent socket path (`agentSocket`).
    pub agent_socket: String,
    /// Deadline for each agent call (`agentTimeout`, "10s" / "500ms" / seconds as a number).
    pub agent_timeout: Duration,
    /// `pluginLogFile`: a path, "stderr", or "" for no log.
    pub plugin_log_file: String,
    /// The AWS node agent's socket (`nodeAgentSocket`, default `/var/run/aws-node/npa.sock`),
    /// called only when the agent's answer carries a network policy mode.
    pub node_agent_socket: String,
    /// `pluginLogLevel`: Debug, Info, Warn, Error.
    pub plugin_log_level: String,
    /// `prevResult` as sent (ADD in a chain, CHECK, DEL).
    pub prev_result: Option<Value>,
    /// `cni.dev/valid-attachments` (GC).
    pub valid_attachments: Option<Vec<Attachment>>,
    /// The pod is annotated `k8s.amazonaws.com/nicConfig: multi-nic-attachment` (from
    /// `runtimeConfig`'s pod annotations): one interface per network card the agent manages.
    pub multi_nic_attachment: bool,
}

fn invalid(msg: String, details: &str) -> CniError {
    CniError::new(code::INVALID_CONFIG, msg, details)
}

/// Parses a duration: "10s", "500ms", "1m", or a bare number of seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    (secs > 0.0 && secs <= 3600.0).then(|| Duration::from_secs_f64(secs))
}

/// Parses stdin for any verb but VERSION.
///
/// Errors: code 6 when `stdin` is not a JSON object; code 1 for an unsupported `cniVersion`;
/// code 7 for a missing `cniVersion`/`name`, a bad `vethPrefix`, `mtu` or `agentTimeout`.
pub fn parse(stdin: &[u8]) -> Result<NetConf, CniError> {
    let raw: Raw = serde_json::from_slice(stdin).map_err(|e| {
        CniError::new(
            code::DECODE,
            "cannot decode the network configuration on stdin",
            format!("stdin must be the JSON network configuration ({e})"),
        )
    })?;
    let cni_version = raw.cni_version.ok_or_else(|| {
        invalid(
            "cniVersion is missing".into(),
            "set cniVersion, e.g. \"1.0.0\"",
        )
    })?;
    if !version::is_supported(&cni_version) {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            format!("cniVersion {cni_version:?} is not supported"),
            format!("use one of {}", version::SUPPORTED.join(", ")),
        ));
    }
    let name = raw.name.filter(|n| !n.is_empty()).ok_or_else(|| {
        invalid(
            "name is missing".into(),
            "set the network name, e.g. \"aws-cni\"",
        )
    })?;
    let plugin = raw.plugin;
    let veth_prefix = plugin
        .veth_prefix
        .unwrap_or_else(|| conflist::DEFAULT_VETH_PREFIX.into());
    vpcnet_datapath::names::validate_prefix(&veth_prefix)
        .map_err(|e| invalid(e.to_string(), "fix vethPrefix (AWS_VPC_K8S_CNI_VETHPREFIX)"))?;
    let mtu = match plugin.mtu {
        None => None,
        Some(NumOrString::Num(n)) => Some(n),
        Some(NumOrString::Str(s)) if s.is_empty() => None,
        Some(NumOrString::Str(s)) => Some(s.trim().parse().map_err(|_| {
            invalid(
                format!("mtu {s:?} is not a number"),
                "set mtu to bytes, e.g. 9001",
            )
        })?),
    };
    let mtu = match mtu {
        None => None,
        Some(m) if (576..=9001).contains(&m) => Some(m as u32),
        Some(m) => {
            return Err(invalid(
                format!("mtu {m} is out of range"),
                "AWS_VPC_ENI_MTU must be between 576 and 9001",
            ))
        }
    };
    let agent_timeout = match plugin.agent_timeout {
        None => parse_duration(conflist::DEFAULT_AGENT_TIMEOUT),
        Some(NumOrString::Num(n)) => parse_duration(&n.to_string()),
        Some(NumOrString::Str(s)) => parse_duration(&s),
    }
    .ok_or_else(|| {
        invalid(
            "agentTimeout is invalid".into(),
            "use a duration such as \"10s\" or \"500ms\" (at most 1h)",
        )
    })?;
    Ok(NetConf {
        cni_version,
        name,
        veth_prefix,
        mtu,
        agent_socket: plugin
            .agent_socket
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| conflist::DEFAULT_AGENT_SOCKET.into()),
        agent_timeout,
        plugin_log_file: plugin.plugin_log_file.unwrap_or_default(),
        node_agent_socket: plugin
            .node_agent_socket
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| conflist::DEFAULT_NODE_AGENT_SOCKET.into()),
        plugin_log_level: plugin.plugin_log_level.unwrap_or_else(|| "Info".into()),
        prev_result: raw.prev_result,
        valid_attachments: raw.valid_attachments,
        multi_nic_attachment: raw
            .runtime_config
            .pod_annotations
            .get(conflist::MULTI_NIC_ANNOTATION.0)
            .is_some_and(|v| v == conflist::MULTI_NIC_ANNOTATION.1),
    })
}

/// The `cniVersion` of stdin if it can be read at all (for error JSON), else the newest.
pub fn sniff_version(stdin: &[u8]) -> String {
    serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|v| v.get("cniVersion")?.as_str().map(String::from))
        .filter(|v| version::is_supported(v))
        .unwrap_or_else(|| version::CURRENT.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conflist::{render, ConflistSettings};

    #[test]
    fn rendered_conflist_entries_parse_back() {
        let list: Value = serde_json::from_str(&render(&ConflistSettings::default())).unwrap();
        let mut entry = list["plugins"][0].clone();
        entry["cniVersion"] = list["cniVersion"].clone();
        entry["name"] = list["name"].clone();
        let c = parse(entry.to_string().as_bytes()).unwrap();
        assert_eq!(c.cni_version, "1.0.0");
        assert_eq!(c.veth_prefix, "eni");
        assert_eq!(c.mtu, Some(9001));
        assert_eq!(c.agent_socket, "/var/run/vpcnet/agent.sock");
        assert_eq!(c.agent_timeout, Duration::from_secs(10));
    }

    #[test]
    fn bad_configs_get_spec_codes() {
        let cases: &[(&str, u32)] = &[
            ("not json", code::DECODE),
            ("[1]", code::DECODE),
            (r#"{"name":"n","type":"vpcnet-cni"}"#, code::INVALID_CONFIG),
            (
                r#"{"cniVersion":"9.9.9","name":"n"}"#,
                code::INCOMPATIBLE_VERSION,
            ),
            (r#"{"cniVersion":"1.0.0"}"#, code::INVALID_CONFIG),
            (
                r#"{"cniVersion":"1.0.0","name":"n","vethPrefix":"toolong"}"#,
                code::INVALID_CONFIG,
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"n","mtu":"lots"}"#,
                code::INVALID_CONFIG,
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"n","mtu":100000}"#,
                code::INVALID_CONFIG,
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"n","agentTimeout":"forever"}"#,
                code::INVALID_CONFIG,
            ),
        ];
        for (input, want) in cases {
            let e = parse(input.as_bytes()).unwrap_err();
            assert_eq!(e.code, *want, "{input}: {e}");
        }
    }

    #[test]
    fn numbers_strings_and_gc_fields() {
        let c = parse(
            br#"{"cniVersion":"1.1.0","name":"n","mtu":1500,"agentTimeout":"250ms",
                "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}"#,
        )
        .unwrap();
        assert_eq!(c.mtu, Some(1500));
        assert_eq!(c.agent_timeout, Duration::from_millis(250));
        assert_eq!(c.valid_attachments.unwrap()[0].container_id, "c1");
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("0s"), None);
        assert_eq!(sniff_version(br#"{"cniVersion":"0.4.0"}"#), "0.4.0");
        assert_eq!(sniff_version(b"junk"), "1.1.0");
    }
}
