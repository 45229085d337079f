//! The agent environment of the Helm chart's default render (`deploy/vpcnet.yaml`, which
//! `vpcnet-charts`' tests keep equal to `helm template charts/vpcnet`) is accepted by the
//! agent's settings parser: a default install never stops at start on its own settings.

use std::collections::HashMap;

use serde::Deserialize;
use vpcnet_agent::config::Config;

/// The `aws-node` container's environment: `value` entries as given, `valueFrom` ones (the
/// downward API) with a stand-in value.
fn chart_env() -> HashMap<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/vpcnet.yaml");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let ds = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_yaml::Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet in deploy/vpcnet.yaml");
    let containers = ds["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .unwrap();
    let agent = containers
        .iter()
        .find(|c| c["name"] == "aws-node")
        .expect("the aws-node container");
    agent["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            let value = match e["value"].as_str() {
                Some(v) => v.to_string(),
                None => format!("{name}-from-the-downward-api"),
            };
            (name, value)
        })
        .collect()
}

#[test]
fn the_charts_default_env_is_accepted_by_the_agent() {
    let env = chart_env();
    assert!(env.len() >= 20, "the chart's env: {env:?}");
    assert!(env.contains_key("MY_NODE_NAME"), "{env:?}");
    if let Err(e) = Config::from_map(&env) {
        panic!("the agent refuses the chart's default env (charts/vpcnet/values.yaml, env):\n{e}");
    }
    let unknown = Config::unknown_variables(env.keys().map(String::as_str));
    assert!(
        unknown.is_empty(),
        "variables the agent does not know in the chart's env: {unknown:?}"
    );
}
