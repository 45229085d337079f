//! End-to-end tests of the real `vpcnet-cni` binary when things go wrong, and the spec's other
//! commands: DEL with the agent stopped or an empty netns, a failed ADD rolled back, agent
//! errors and bad input mapped to the spec's codes, VERSION, STATUS and GC. Each test creates
//! (and removes) its own namespaces; needs root; never touches the root namespace.

// std's clocks (banned by the workspace clippy.toml): the real plugin binary and kernel: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{lines_with, Lab};
use serde_json::{json, Value};
use tonic::Code;
use vpcnet_cni_harness::fake_agent::FakeConfig;
use vpcnet_cni_harness::runtime::Attachment;

#[test]
fn del_with_agent_stopped_still_removes_the_datapath() {
    let mut lab = Lab::new(
        FakeConfig {
            secondary_from: 0,
            ..Default::default()
        },
        |_| {},
    );
    let (_pod, att) = lab.pod("a");
    let (_pod2, att2) = lab.pod("b");
    lab.rt.add(&att).unwrap();
    lab.rt.add(&att2).unwrap();
    lab.agent.stop();
    lab.rt.del(&att).unwrap();
    // Without prevResult either: the IP comes from the host veth's /32 route.
    lab.rt.set_cached(&att2, None);
    lab.rt.del(&att2).unwrap();
    lab.assert_clean();
}

#[test]
fn del_with_empty_netns_succeeds_and_releases() {
    let lab = Lab::new(FakeConfig::default(), |_| {});
    let (pod, att) = lab.pod("gone");
    lab.rt.add(&att).unwrap();
    drop(pod); // the pod namespace is gone, as after the task exited
    let mut del = att.clone();
    del.netns = String::new();
    lab.rt.del(&del).unwrap();
    lab.assert_clean();
    assert_eq!(lab.agent.state().released.len(), 1);
    assert!(lab.agent.state().assigned.is_empty());
}

#[test]
fn failed_add_rolls_back_and_releases_the_ip() {
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 0,
            ..Default::default()
        },
        |_| {},
    );
    let (pod, att) = lab.pod("clash");
    pod.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "other",
    ])
    .unwrap();
    let e = lab.rt.add(&att).unwrap_err();
    assert_eq!(e.code(), 104, "{e}");
    lab.assert_clean();
    assert!(lab.agent.state().assigned.is_empty(), "IP not released");
    assert_eq!(lab.agent.state().released.len(), 1);
}

#[test]
fn agent_errors_map_to_cni_codes() {
    let mut lab = Lab::new(FakeConfig::default(), |_| {});
    let (_pod, att) = lab.pod("p");
    for (code, want) in [
        (Code::Unavailable, 11),
        (Code::ResourceExhausted, 101),
        (Code::InvalidArgument, 103),
    ] {
        lab.agent.state().add_error = Some(code);
        let e = lab.rt.add(&att).unwrap_err();
        assert_eq!(e.code(), want, "{code:?}: {e}");
        assert!(!e.exec.json()["details"].as_str().unwrap().is_empty());
        lab.assert_clean();
    }
    lab.agent.state().add_error = None;
    lab.agent.state().not_ready = true;
    assert_eq!(lab.rt.add(&att).unwrap_err().code(), 102);
    lab.agent.stop();
    let e = lab.rt.add(&att).unwrap_err();
    assert_eq!(e.code(), 100, "{e}");
    assert!(e.exec.json()["msg"]
        .as_str()
        .unwrap()
        .contains("cannot reach vpcnet-agent"));
    lab.assert_clean();
}

#[test]
fn bad_input_gets_spec_codes_and_leaves_nothing() {
    let lab = Lab::new(FakeConfig::default(), |_| {});
    let (pod, att) = lab.pod("bad");
    let pod_before = pod.snapshot().unwrap();
    let conf = lab.plugin_conf();
    let raw = |cmd: &str, att: &Attachment, stdin: &Value| {
        lab.rt.exec("vpcnet-cni", cmd, Some(att), stdin).unwrap()
    };

    // Malformed stdin → 6.
    let e = raw("ADD", &att, &json!("this is not a config"));
    assert_eq!(
        (e.status, e.json()["code"].as_u64()),
        (1, Some(6)),
        "{}",
        e.stdout
    );
    // Unsupported cniVersion → 1.
    let mut c = conf.clone();
    c["cniVersion"] = json!("0.2.0");
    assert_eq!(raw("ADD", &att, &c).json()["code"], 1);
    // Missing CNI_NETNS on ADD → 4.
    let mut no_ns = att.clone();
    no_ns.netns = String::new();
    let e = raw("ADD", &no_ns, &conf);
    assert_eq!(e.json()["code"], 4, "{}", e.stdout);
    assert_eq!(e.json()["msg"], "CNI_NETNS is not set");
    // A netns path that does not exist → 4.
    let mut bad_ns = att.clone();
    bad_ns.netns = "/var/run/netns/vpcnet-does-not-exist".into();
    assert_eq!(raw("ADD", &bad_ns, &conf).json()["code"], 4);
    // A path that is not a namespace file → 4.
    let file = lab.dir.path().join("not-a-netns");
    std::fs::write(&file, "x").unwrap();
    bad_ns.netns = file.display().to_string();
    let e = raw("ADD", &bad_ns, &conf);
    assert_eq!(e.json()["code"], 4, "{}", e.stdout);
    // Missing CNI_COMMAND → 4.
    let e = raw("", &att, &conf);
    assert_eq!(e.json()["code"], 4, "{}", e.stdout);
    // CHECK of an unknown container → 3.
    let prev = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eniffffffffff"}, {"name": "eth0", "sandbox": att.netns}],
        "ips": [{"address": "10.0.1.99/32", "interface": 1}]});
    let mut c = conf.clone();
    c["prevResult"] = prev;
    let e = raw("CHECK", &att, &c);
    assert_eq!(e.json()["code"], 3, "{}", e.stdout);

    lab.assert_clean();
    assert_eq!(pod.snapshot().unwrap(), pod_before);
    assert_eq!(
        lab.agent.state().calls.get("AddNetwork"),
        None,
        "agent was asked for an IP"
    );
}

#[test]
fn version_reports_supported_versions() {
    let lab = Lab::new(FakeConfig::default(), |_| {});
    let e = lab
        .rt
        .exec(
            "vpcnet-cni",
            "VERSION",
            None,
            &json!({"cniVersion": "1.0.0"}),
        )
        .unwrap();
    assert_eq!(e.status, 0);
    let v = e.json();
    assert_eq!(v["cniVersion"], "1.0.0");
    let s: Vec<&str> = v["supportedVersions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    for want in ["0.4.0", "1.0.0", "1.1.0"] {
        assert!(s.contains(&want), "{s:?}");
    }
}

#[test]
fn status_and_gc() {
    let lab = Lab::new(FakeConfig::default(), |s| s.cni_version = "1.1.0".into());
    lab.rt.status().unwrap();
    let (_a, keep) = lab.pod("keep");
    let (_b, stale) = lab.pod("stale");
    lab.rt.add(&keep).unwrap();
    let stale_result = lab.rt.add(&stale).unwrap();
    let stale_veth = stale_result["interfaces"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    lab.rt.gc(std::slice::from_ref(&keep)).unwrap();
    let links = lab.node.ip(&["-o", "link"]).unwrap();
    assert!(
        !links.contains(&stale_veth),
        "stale veth still there: {links}"
    );
    assert_eq!(lab.agent.state().assigned.len(), 1);
    let rules = lab.node.ip(&["-4", "rule", "show"]).unwrap();
    assert_eq!(lines_with(&rules, "512:").len(), 1, "{rules}");
    lab.rt.check(&keep).unwrap();

    lab.agent.state().not_ready = true;
    let e = lab.rt.status().unwrap_err();
    assert_eq!(e.code(), 50, "{e}");
    lab.agent.state().not_ready = false;
    lab.rt.del(&keep).unwrap();
    lab.assert_clean();
}
