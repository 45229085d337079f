//! The init container's environment, as the chart renders it, is accepted by vpcnet-init's own
//! parsers, and installs the plugins the agent's conflist chains: `ENABLE_BANDWIDTH_PLUGIN` and
//! `DISABLE_POD_V6` of the agent's `env` reach the init container.

use std::collections::HashMap;

use vpcnet_charts::{find, Chart, Render};
use vpcnet_init::plugins::Chain;
use vpcnet_init::sysctl;

fn init_env(r: Render) -> HashMap<String, String> {
    let docs = r.documents().unwrap_or_else(|e| panic!("{e}"));
    let ds = find(&docs, "DaemonSet", "aws-node").unwrap();
    let init = &ds["spec"]["template"]["spec"]["initContainers"][0];
    assert_eq!(init["name"], "vpcnet-init");
    init["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn plugins(env: &HashMap<String, String>) -> Vec<&'static str> {
    let lookup = |k: &str| env.get(k).cloned();
    sysctl::plan("ens5", &lookup).unwrap_or_else(|e| panic!("vpcnet-init refuses {env:?}: {e}"));
    Chain::from_env(&lookup)
        .unwrap_or_else(|e| panic!("vpcnet-init refuses {env:?}: {e}"))
        .binaries()
}

#[test]
fn the_default_init_env_is_accepted_and_installs_the_default_chain() {
    let env = init_env(Render::new(Chart::Vpcnet));
    assert_eq!(plugins(&env), ["vpcnet-cni", "portmap"]);
}

#[test]
fn the_agents_chain_settings_reach_the_init_container() {
    let env = init_env(
        Render::new(Chart::Vpcnet)
            .set("env.ENABLE_BANDWIDTH_PLUGIN=true")
            .set("env.DISABLE_POD_V6=true"),
    );
    assert_eq!(
        plugins(&env),
        ["vpcnet-cni", "portmap", "bandwidth", "tuning"]
    );
    // The same value set in both places is fine.
    let env = init_env(
        Render::new(Chart::Vpcnet)
            .set("env.ENABLE_BANDWIDTH_PLUGIN=true")
            .set("init.env.ENABLE_BANDWIDTH_PLUGIN=True"),
    );
    assert_eq!(plugins(&env), ["vpcnet-cni", "portmap", "bandwidth"]);
}
