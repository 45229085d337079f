//! The AWS node agent's contract (`VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent`), tested with
//! the real `vpcnet-cni` binary in network namespaces against `npa-contract serve`: an
//! `rpc.NPBackend` server built from the VPC CNI's generated Go code (lab/npa-contract; the
//! `rpc` package aws-network-policy-agent imports), not from vpcnet's own .proto. The agent's
//! side is the fake agent answering with a network policy mode, as vpcnet-agent does in that
//! mode (crates/vpcnet-agent/tests/node_agent.rs tests the real agent's answers).
//!
//! Needs root and npa-contract (scripts/build-npa-contract.sh; scripts/test.sh builds it):
//! fails, never skips, without either.

// std's clocks (banned by the workspace clippy.toml): the real plugin binary and kernel: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use common::Lab;
use serde_json::json;
use vpcnet_cni_harness::fake_agent::FakeConfig;
use vpcnet_cni_harness::npa_contract::NodeAgent;

/// A lab whose agent answers with `mode`, and whose plugin calls the node agent on a socket of
/// its own temporary directory.
fn lab(mode: &str) -> (Lab, tempfile::TempDir) {
    let npa = tempfile::tempdir().unwrap();
    let socket = npa.path().join("npa.sock").display().to_string();
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 0,
            network_policy_mode: mode.into(),
            ..Default::default()
        },
        |s| s.node_agent_socket = Some(socket),
    );
    (lab, npa)
}

fn start_node_agent(dir: &tempfile::TempDir, fail: bool) -> NodeAgent {
    NodeAgent::start(
        &dir.path().join("npa.sock"),
        &dir.path().join("calls.jsonl"),
        fail,
    )
    .unwrap()
}

#[test]
fn add_and_del_call_the_node_agent_with_the_pod_and_mode() {
    let (lab, dir) = lab("strict");
    let npa = start_node_agent(&dir, false);
    let (_pod, att) = lab.pod("web-1");
    lab.rt.add(&att).unwrap();
    assert_eq!(
        npa.calls(),
        vec![json!({
            "call": "EnforceNpToPod",
            "K8S_POD_NAME": "web-1",
            "K8S_POD_NAMESPACE": "default",
            "NETWORK_POLICY_MODE": "strict",
            "InterfaceCount": 1,
        })]
    );
    lab.rt.del(&att).unwrap();
    assert_eq!(
        npa.calls()[1..],
        [json!({
            "call": "DeletePodNp",
            "K8S_POD_NAME": "web-1",
            "K8S_POD_NAMESPACE": "default",
        })]
    );
    lab.assert_clean();
    assert!(lab.agent.state().assigned.is_empty());
}

/// After a failed ADD: the node namespace exactly as before (no veth, route or rule) and the
/// address given back to the agent.
fn assert_nothing_kept(lab: &Lab) {
    lab.assert_clean_after_teardown();
    let st = lab.agent.state();
    assert!(st.assigned.is_empty(), "address not given back: {st:?}");
    assert_eq!(st.released.len(), 1, "{st:?}");
}

#[test]
fn node_agent_answering_failure_fails_the_add_and_keeps_nothing() {
    let (lab, dir) = lab("standard");
    let npa = start_node_agent(&dir, true);
    let (_pod, att) = lab.pod("denied");
    let e = lab.rt.add(&att).unwrap_err();
    assert_eq!(e.code(), 107, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("aws-eks-nodeagent") && text.contains("Success=false"),
        "{text}"
    );
    assert!(text.contains(&npa.socket.display().to_string()), "{text}");
    assert_nothing_kept(&lab);
    assert_eq!(npa.calls().len(), 1);
    // DEL never fails for the node agent.
    lab.rt.del(&att).unwrap();
    assert_eq!(npa.calls()[1]["call"], "DeletePodNp");
}

#[test]
fn absent_node_agent_fails_the_add_naming_its_socket_and_keeps_nothing() {
    let (lab, dir) = lab("standard");
    let (_pod, att) = lab.pod("alone");
    let e = lab.rt.add(&att).unwrap_err();
    assert_eq!(e.code(), 107, "{e}");
    let text = e.to_string();
    let socket = dir.path().join("npa.sock").display().to_string();
    assert!(
        text.contains("aws-eks-nodeagent") && text.contains(&socket),
        "{text}"
    );
    assert!(text.contains("VPCNET_NETWORK_POLICY_AGENT"), "{text}");
    assert_nothing_kept(&lab);
    // DEL with the node agent absent succeeds.
    lab.rt.del(&att).unwrap();
}

#[test]
fn without_a_mode_the_node_agent_is_never_called() {
    let (lab, dir) = lab("");
    let npa = start_node_agent(&dir, true);
    let (_pod, att) = lab.pod("plain");
    lab.rt.add(&att).unwrap();
    lab.rt.del(&att).unwrap();
    assert_eq!(npa.calls(), Vec::<serde_json::Value>::new());
    lab.assert_clean();
}
