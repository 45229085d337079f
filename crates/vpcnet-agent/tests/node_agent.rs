//! `VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent`: the real agent binary, against the emulator,
//! answers the AWS node agent's start-up call `GetNetworkPolicyConfigs` on `VPCNET_IPAMD_SOCKET`
//! as the node agent makes it: with the VPC CNI's generated Go client (`npa-contract config`,
//! lab/npa-contract; the `rpc` package aws-network-policy-agent imports), not vpcnet's .proto.
//! Its Add/Del answers carry the mode, which makes the plugin call the node agent
//! (crates/vpcnet-cni/tests/e2e_node_agent.rs); the default mode carries none and binds no
//! ipamd.sock; `VPCNET_ENABLE_NETWORK_POLICY=true` beside it is refused.
//!
//! Needs npa-contract (scripts/build-npa-contract.sh; scripts/test.sh builds it): fails,
//! never skips, without it.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{add_req, client, del_req, lab, while_agent_runs, Lab};
use serde_json::json;
use vpcnet_cni_harness::npa_contract;

/// Runs the agent with `extra` until it serves, then `f`.
async fn with_agent<F, Fut>(lab: &Lab, extra: &[(&str, &str)], f: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut cmd = lab.bare_agent_command();
    // Info, not the default debug: the pipes are read only if the agent exits.
    cmd.env("VPCNET_IPAMD_SOCKET", lab.dir.path().join("ipamd.sock"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let serving = while_agent_runs(&mut child, Duration::from_secs(30), || {
        lab.conflist().exists()
    })
    .await
    .unwrap_or_else(|out| panic!("{out}"));
    assert!(serving, "the agent did not serve within 30 s");
    f().await;
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_agent_gets_its_configuration_and_the_plugin_the_mode() {
    let lab = lab("m5.large").await;
    let ipamd = lab.dir.path().join("ipamd.sock");
    let env = [
        ("VPCNET_NETWORK_POLICY_AGENT", "aws-eks-nodeagent"),
        ("NETWORK_POLICY_ENFORCING_MODE", "strict"),
    ];
    with_agent(&lab, &env, || async {
        // The Go client is a blocking process: off the runtime's threads.
        let path = ipamd.clone();
        let reply =
            tokio::task::spawn_blocking(move || npa_contract::get_network_policy_configs(&path))
                .await
                .unwrap()
                .unwrap();
        assert_eq!(
            reply,
            json!({
                "NetworkPolicyMode": "strict",
                "MultiNICEnabled": false,
                "NodeIPv4": lab.instance.private_ip.to_string(),
                "NodeIPv6": "",
                "InstanceID": lab.instance.instance_id,
                "Region": "us-east-1",
            })
        );
        let mut c = client(&lab.socket()).await;
        let added = c.add_network(add_req("np-1")).await.unwrap().into_inner();
        assert_eq!(added.network_policy_mode, "strict");
        let deleted = c.del_network(del_req("np-1")).await.unwrap().into_inner();
        assert!(deleted.released);
        assert_eq!(deleted.network_policy_mode, "strict");
        // A DEL of an unknown container still tells the plugin to call the node agent.
        let unknown = c.del_network(del_req("never")).await.unwrap().into_inner();
        assert_eq!(unknown.network_policy_mode, "strict");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_none_is_sent_as_standard_which_the_node_agent_accepts() {
    let lab = lab("m5.large").await;
    let ipamd = lab.dir.path().join("ipamd.sock");
    let env = [
        ("VPCNET_NETWORK_POLICY_AGENT", "aws-eks-nodeagent"),
        ("NETWORK_POLICY_ENFORCING_MODE", "none"),
    ];
    with_agent(&lab, &env, || async {
        let path = ipamd.clone();
        let reply =
            tokio::task::spawn_blocking(move || npa_contract::get_network_policy_configs(&path))
                .await
                .unwrap()
                .unwrap();
        assert_eq!(reply["NetworkPolicyMode"], "standard");
        let mut c = client(&lab.socket()).await;
        let added = c.add_network(add_req("np-2")).await.unwrap().into_inner();
        assert_eq!(added.network_policy_mode, "standard");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_no_mode_and_no_ipamd_socket() {
    let lab = lab("m5.large").await;
    with_agent(&lab, &[], || async {
        let mut c = client(&lab.socket()).await;
        let added = c.add_network(add_req("np-3")).await.unwrap().into_inner();
        assert_eq!(added.network_policy_mode, "");
        let deleted = c.del_network(del_req("np-3")).await.unwrap().into_inner();
        assert_eq!(deleted.network_policy_mode, "");
        assert!(!lab.dir.path().join("ipamd.sock").exists());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vpcnet_enforcement_beside_the_node_agent_is_refused() {
    let lab = lab("m5.large").await;
    let mut cmd = lab.bare_agent_command();
    cmd.env("VPCNET_NETWORK_POLICY_AGENT", "aws-eks-nodeagent")
        .env("VPCNET_ENABLE_NETWORK_POLICY", "true");
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("a refused agent exits on its own")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("refused VPCNET_ENABLE_NETWORK_POLICY=\"true\"")
            && err.contains("aws-eks-nodeagent")
            && err.contains("set VPCNET_ENABLE_NETWORK_POLICY=false"),
        "{err}"
    );
    let mut cmd = lab.bare_agent_command();
    cmd.env("VPCNET_NETWORK_POLICY_AGENT", "calico");
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("an invalid value stops the agent")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("VPCNET_NETWORK_POLICY_AGENT") && err.contains("vpcnet, aws-eks-nodeagent"),
        "{err}"
    );
    assert!(!lab.conflist().exists());
}
