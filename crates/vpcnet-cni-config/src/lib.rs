//! The network configuration list (conflist) the agent writes for the container runtime, and
//! the wire shape of its `vpcnet-cni` entry, which the plugin reads back from stdin. Both
//! sides depend on this crate, so a field's name and default are declared once.
//!
//! Mirrors the VPC CNI's `10-aws.conflist`: our plugin first, then Debian's / the reference
//! `portmap` plugin (capabilities `portMappings`, `snat: true`) chained after it, then, as the
//! VPC CNI's entrypoint appends them, the reference `bandwidth` plugin (capability `bandwidth`,
//! `ENABLE_BANDWIDTH_PLUGIN`) and the reference `tuning` plugin turning IPv6 off in the pod
//! (`DISABLE_POD_V6`). CNI spec section "Network configuration lists". Plugins others chained
//! into the file are kept when the agent writes it again ([`user_plugins`]).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

mod kept;

pub use kept::{user_plugins, AGENT_PLUGIN_TYPES};

/// Default conflist file name in the runtime's CNI config directory (`/etc/cni/net.d`).
pub const DEFAULT_FILE_NAME: &str = "10-vpcnet.conflist";
/// Default network name (the VPC CNI's).
pub const DEFAULT_NETWORK_NAME: &str = "aws-cni";
/// Default `cniVersion` of the conflist: 1.0.0 is accepted by containerd 1.6's libcni.
pub const DEFAULT_CNI_VERSION: &str = "1.0.0";
/// Plugin binary name (`type` in the conflist).
pub const PLUGIN_TYPE: &str = "vpcnet-cni";
/// Default host-side veth prefix (`AWS_VPC_K8S_CNI_VETHPREFIX`).
pub const DEFAULT_VETH_PREFIX: &str = "eni";
/// Default pod MTU in bytes (`AWS_VPC_ENI_MTU`).
pub const DEFAULT_MTU: u32 = 9001;
/// Default agent socket path.
pub const DEFAULT_AGENT_SOCKET: &str = "/var/run/vpcnet/agent.sock";
/// Default path of the AWS node agent's socket (`nodeAgentSocket`), the VPC CNI plugin's fixed
/// path.
pub const DEFAULT_NODE_AGENT_SOCKET: &str = "/var/run/aws-node/npa.sock";
/// Default deadline for one agent call, rendered as `agentTimeout` (a duration string).
pub const DEFAULT_AGENT_TIMEOUT: &str = "10s";
/// Default plugin log file (`AWS_VPC_K8S_PLUGIN_LOG_FILE` in the VPC CNI).
pub const DEFAULT_PLUGIN_LOG_FILE: &str = "/var/log/aws-routed-eni/plugin.log";
/// Default plugin log level (`AWS_VPC_K8S_PLUGIN_LOG_LEVEL`).
pub const DEFAULT_PLUGIN_LOG_LEVEL: &str = "Debug";
/// The reference plugin that shapes a pod's traffic from its `kubernetes.io/ingress-bandwidth`
/// and `kubernetes.io/egress-bandwidth` annotations (the runtime passes them as the `bandwidth`
/// capability).
pub const BANDWIDTH_PLUGIN_TYPE: &str = "bandwidth";
/// The reference plugin that sets sysctls in the pod's network namespace.
pub const TUNING_PLUGIN_TYPE: &str = "tuning";
/// The sysctls the `tuning` entry sets to `1` in every pod with `DISABLE_POD_V6` (the VPC
/// CNI's: IPv6 off on every interface, on interfaces created later, and on loopback).
pub const POD_V6_OFF_SYSCTLS: [&str; 3] = [
    "net.ipv6.conf.all.disable_ipv6",
    "net.ipv6.conf.default.disable_ipv6",
    "net.ipv6.conf.lo.disable_ipv6",
];

/// A field the VPC CNI writes as a string and tools sometimes write as a number (`mtu`,
/// `agentTimeout`): both are accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NumOrString {
    Num(u64),
    Str(String),
}

/// The `vpcnet-cni` entry of the conflist as it is on the wire: every field optional, as a
/// runtime may pass an entry written by hand. The agent renders it ([`render`]); the plugin
/// parses it (with the runtime's `cniVersion`, `name`, `prevResult`, ... around it) and applies
/// the defaults above.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginConf {
    /// `type`: the plugin binary, [`PLUGIN_TYPE`].
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub plugin_type: Option<String>,
    /// `vethPrefix`: host veth name prefix, 1 to 4 characters (default [`DEFAULT_VETH_PREFIX`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub veth_prefix: Option<String>,
    /// `mtu`: pod interface MTU in bytes, a string as the VPC CNI writes it, or a number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<NumOrString>,
    /// `agentSocket`: path of the agent's gRPC Unix socket (default [`DEFAULT_AGENT_SOCKET`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_socket: Option<String>,
    /// `agentTimeout`: deadline of each agent call, "10s" / "500ms" or seconds as a number
    /// (default [`DEFAULT_AGENT_TIMEOUT`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_timeout: Option<NumOrString>,
    /// `pluginLogFile`: a path, "stderr", or "" for no log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin_log_file: Option<String>,
    /// `nodeAgentSocket`: path of the AWS node agent's socket, called when the agent's answer
    /// carries a network policy mode (default [`DEFAULT_NODE_AGENT_SOCKET`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_agent_socket: Option<String>,
    /// `pluginLogLevel`: Debug, Info, Warn or Error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin_log_level: Option<String>,
}

/// The capability by which the runtime passes a pod's annotations to the plugin
/// (`runtimeConfig`), containerd's and CRI-O's name for it.
pub const POD_ANNOTATIONS_CAPABILITY: &str = "io.kubernetes.cri.pod-annotations";

/// The pod annotation asking for one interface per managed network card (ENABLE_MULTI_NIC),
/// and the value that asks for it.
pub const MULTI_NIC_ANNOTATION: (&str, &str) =
    ("k8s.amazonaws.com/nicConfig", "multi-nic-attachment");

/// Name prefix of a multi-homed pod's further interfaces in the pod (`mNicIf1`, ...), the VPC
/// CNI's (`vpcnet_ipam` keys their addresses by the same names).
pub const FURTHER_INTERFACE_PREFIX: &str = "mNicIf";

/// What the agent puts in the conflist. `Default` gives the VPC CNI's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflistSettings {
    /// Network name (`name`), e.g. "aws-cni".
    pub name: String,
    /// `cniVersion` of the list, e.g. "1.0.0" (0.4.0, 1.0.0 and 1.1.0 are supported).
    pub cni_version: String,
    /// Host veth prefix, 1 to 4 characters (`AWS_VPC_K8S_CNI_VETHPREFIX`).
    pub veth_prefix: String,
    /// Pod interface MTU in bytes (`AWS_VPC_ENI_MTU`).
    pub mtu: u32,
    /// Path of the agent's gRPC Unix socket.
    pub agent_socket: String,
    /// Deadline for each agent call as a duration string ("10s", "500ms").
    pub agent_timeout: String,
    /// Plugin log file path; "stderr" logs to stderr, "" disables logging.
    pub plugin_log_file: String,
    /// Plugin log level: Debug, Info, Warn or Error.
    pub plugin_log_level: String,
    /// The AWS node agent's socket; `None` = not written (the plugin uses
    /// [`DEFAULT_NODE_AGENT_SOCKET`]).
    pub node_agent_socket: Option<String>,
    /// Chain the reference `portmap` plugin (hostPort support) after ours.
    pub portmap: bool,
    /// Chain the reference `bandwidth` plugin after portmap (`ENABLE_BANDWIDTH_PLUGIN`).
    pub bandwidth: bool,
    /// Chain the reference `tuning` plugin last, turning IPv6 off in the pod
    /// (`DISABLE_POD_V6`).
    pub disable_pod_v6: bool,
}

impl Default for ConflistSettings {
    fn default() -> Self {
        Self {
            name: DEFAULT_NETWORK_NAME.into(),
            cni_version: DEFAULT_CNI_VERSION.into(),
            veth_prefix: DEFAULT_VETH_PREFIX.into(),
            mtu: DEFAULT_MTU,
            agent_socket: DEFAULT_AGENT_SOCKET.into(),
            agent_timeout: DEFAULT_AGENT_TIMEOUT.into(),
            plugin_log_file: DEFAULT_PLUGIN_LOG_FILE.into(),
            plugin_log_level: DEFAULT_PLUGIN_LOG_LEVEL.into(),
            node_agent_socket: None,
            portmap: true,
            bandwidth: false,
            disable_pod_v6: false,
        }
    }
}

impl ConflistSettings {
    /// Our entry of the list, every field set.
    pub fn plugin_conf(&self) -> PluginConf {
        PluginConf {
            plugin_type: Some(PLUGIN_TYPE.into()),
            veth_prefix: Some(self.veth_prefix.clone()),
            mtu: Some(NumOrString::Str(self.mtu.to_string())),
            agent_socket: Some(self.agent_socket.clone()),
            agent_timeout: Some(NumOrString::Str(self.agent_timeout.clone())),
            plugin_log_file: Some(self.plugin_log_file.clone()),
            plugin_log_level: Some(self.plugin_log_level.clone()),
            node_agent_socket: self.node_agent_socket.clone(),
        }
    }
}

/// Renders the conflist as pretty JSON (ends with a newline), ready to be written atomically
/// (write a temp file in the same directory, then rename) to `/etc/cni/net.d/10-vpcnet.conflist`.
///
/// `mtu` is rendered as a string, as the VPC CNI does; the plugin accepts a string or a number.
pub fn render(settings: &ConflistSettings) -> String {
    render_with(settings, &[])
}

/// [`render`] with `kept` (plugins others chained into the conflist, [`user_plugins`])
/// after the agent's own.
pub fn render_with(settings: &ConflistSettings, kept: &[Value]) -> String {
    let mut ours = json!(settings.plugin_conf());
    // As the VPC CNI's entry: the runtime passes the pod's annotations (the multi-homed pods'
    // k8s.amazonaws.com/nicConfig) in runtimeConfig.
    ours["capabilities"] = json!({ POD_ANNOTATIONS_CAPABILITY: true });
    let mut plugins: Vec<Value> = vec![ours];
    if settings.portmap {
        plugins.push(json!({
            "type": "portmap",
            "capabilities": { "portMappings": true },
            "snat": true,
        }));
    }
    if settings.bandwidth {
        plugins.push(json!({
            "type": BANDWIDTH_PLUGIN_TYPE,
            "capabilities": { "bandwidth": true },
        }));
    }
    if settings.disable_pod_v6 {
        let sysctl: serde_json::Map<String, Value> = POD_V6_OFF_SYSCTLS
            .iter()
            .map(|k| (k.to_string(), json!("1")))
            .collect();
        plugins.push(json!({ "type": TUNING_PLUGIN_TYPE, "sysctl": sysctl }));
    }
    plugins.extend(kept.iter().cloned());
    let list = json!({
        "cniVersion": settings.cni_version,
        "name": settings.name,
        "disableCheck": false,
        "plugins": plugins,
    });
    let mut out = serde_json::to_string_pretty(&list).expect("a JSON value always serializes");
    out.push('\n');
    out
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_conflist_chains_portmap_after_us() {
        let v: Value = serde_json::from_str(&render(&ConflistSettings::default())).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["name"], "aws-cni");
        let plugins = v["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 2);
        assert_eq!(plugins[0]["type"], "vpcnet-cni");
        assert_eq!(plugins[0]["vethPrefix"], "eni");
        assert_eq!(plugins[0]["mtu"], "9001");
        assert_eq!(plugins[0]["agentSocket"], "/var/run/vpcnet/agent.sock");
        assert_eq!(plugins[1]["type"], "portmap");
        assert_eq!(plugins[1]["capabilities"]["portMappings"], true);
        assert_eq!(plugins[1]["snat"], true);
    }

    #[test]
    fn settings_are_rendered_and_portmap_can_be_left_out() {
        let s = ConflistSettings {
            veth_prefix: "pod".into(),
            mtu: 1500,
            agent_socket: "/run/x.sock".into(),
            portmap: false,
            ..Default::default()
        };
        let v: Value = serde_json::from_str(&render(&s)).unwrap();
        let plugins = v["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 1);
        assert_eq!(plugins[0]["vethPrefix"], "pod");
        assert_eq!(plugins[0]["mtu"], "1500");
        assert_eq!(plugins[0]["agentSocket"], "/run/x.sock");
    }

    fn types(s: &ConflistSettings) -> Vec<String> {
        plugin_types(&render(s))
    }

    /// The plugin types of the conflist `text`, in chain order.
    pub(crate) fn plugin_types(text: &str) -> Vec<String> {
        let v: Value = serde_json::from_str(text).unwrap();
        v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn bandwidth_and_tuning_are_chained_only_when_asked_in_the_vpc_cnis_order() {
        let off = ConflistSettings::default();
        assert_eq!(types(&off), ["vpcnet-cni", "portmap"]);
        let bw = ConflistSettings {
            bandwidth: true,
            ..Default::default()
        };
        assert_eq!(types(&bw), ["vpcnet-cni", "portmap", "bandwidth"]);
        let v6 = ConflistSettings {
            disable_pod_v6: true,
            ..Default::default()
        };
        assert_eq!(types(&v6), ["vpcnet-cni", "portmap", "tuning"]);
        let both = ConflistSettings {
            bandwidth: true,
            disable_pod_v6: true,
            ..Default::default()
        };
        assert_eq!(
            types(&both),
            ["vpcnet-cni", "portmap", "bandwidth", "tuning"]
        );
        let v: Value = serde_json::from_str(&render(&both)).unwrap();
        assert_eq!(
            v["plugins"][2],
            json!({"type": "bandwidth", "capabilities": {"bandwidth": true}})
        );
        assert_eq!(
            v["plugins"][3],
            json!({"type": "tuning", "sysctl": {
                "net.ipv6.conf.all.disable_ipv6": "1",
                "net.ipv6.conf.default.disable_ipv6": "1",
                "net.ipv6.conf.lo.disable_ipv6": "1",
            }})
        );
    }
}
