//! Plugins others chained into the agent's conflist: istio-cni and Cilium in chaining mode
//! append their entry to the runtime's conflist, and an operator may write one into the file
//! (as the VPC CNI chart's `cniConfig.fileContents` does for `10-aws.conflist`). The agent
//! writes the conflist at every start; these entries are kept, after the agent's own, in their
//! order, so a restart never unchains them.

use serde_json::Value;

use crate::{BANDWIDTH_PLUGIN_TYPE, PLUGIN_TYPE, TUNING_PLUGIN_TYPE};

/// The plugin types the agent writes itself ([`crate::render`]): entries of these types in the
/// file on disk are the agent's and are written afresh; every other entry is kept.
pub const AGENT_PLUGIN_TYPES: [&str; 4] = [
    PLUGIN_TYPE,
    "portmap",
    BANDWIDTH_PLUGIN_TYPE,
    TUNING_PLUGIN_TYPE,
];

/// The entries of the conflist `existing` (a file's text) whose `type` the agent does not
/// write, in their order.
///
/// Errors (the caller writes its own conflist and says why the file's entries were not kept):
/// not JSON, no `plugins` array, an entry that is not an object with a string `type`.
pub fn user_plugins(existing: &str) -> Result<Vec<Value>, String> {
    let v: Value = serde_json::from_str(existing).map_err(|e| format!("not JSON: {e}"))?;
    let plugins = v
        .get("plugins")
        .and_then(Value::as_array)
        .ok_or("no \"plugins\" array")?;
    let mut kept = Vec::new();
    for (i, p) in plugins.iter().enumerate() {
        let ty = p
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("plugin {i} has no \"type\""))?;
        if !AGENT_PLUGIN_TYPES.contains(&ty) {
            kept.push(p.clone());
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::plugin_types as types;
    use crate::{render, render_with, ConflistSettings};

    #[test]
    fn chained_plugins_are_kept_after_the_agents_own_and_its_own_are_rewritten() {
        // An older conflist of the agent with bandwidth on, plus istio-cni appended.
        let old = ConflistSettings {
            bandwidth: true,
            mtu: 1500,
            ..Default::default()
        };
        let mut on_disk: Value = serde_json::from_str(&render(&old)).unwrap();
        let istio = serde_json::json!({"type": "istio-cni", "kubernetes": {"kubeconfig": "/x"}});
        on_disk["plugins"]
            .as_array_mut()
            .unwrap()
            .push(istio.clone());
        let kept = user_plugins(&on_disk.to_string()).unwrap();
        assert_eq!(kept, vec![istio.clone()]);

        // Bandwidth off now: the agent's entries follow the settings, istio-cni stays.
        let now = render_with(&ConflistSettings::default(), &kept);
        assert_eq!(types(&now), ["vpcnet-cni", "portmap", "istio-cni"]);
        let v: Value = serde_json::from_str(&now).unwrap();
        assert_eq!(v["plugins"][0]["mtu"], "9001");
        assert_eq!(v["plugins"][2], istio);
        // Written again, nothing doubles.
        let again = render_with(&ConflistSettings::default(), &user_plugins(&now).unwrap());
        assert_eq!(again, now);
    }

    #[test]
    fn a_file_that_is_no_conflist_says_why() {
        assert!(user_plugins("{").unwrap_err().starts_with("not JSON"));
        assert_eq!(user_plugins("{}").unwrap_err(), "no \"plugins\" array");
        assert_eq!(
            user_plugins(r#"{"plugins":[{"type":"vpcnet-cni"},{"name":"x"}]}"#).unwrap_err(),
            "plugin 1 has no \"type\""
        );
        assert!(user_plugins(r#"{"plugins":[]}"#).unwrap().is_empty());
    }
}
