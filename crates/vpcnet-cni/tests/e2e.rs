//! End-to-end tests of the real `vpcnet-cni` binary: a "node" namespace and pod namespaces
//! created (and removed) by each test, a fake agent on a temporary Unix socket, the plugin run
//! inside the node namespace by the in-repo CNI runtime. Needs root; never touches the root
//! namespace.

// std's clocks (banned by the workspace clippy.toml): the real plugin binary and kernel: wall time.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;

use serde_json::{json, Value};
use tonic::Code;
use vpcnet_cni::conflist::{render, ConflistSettings};
use vpcnet_cni_harness::fake_agent::{FakeAgent, FakeConfig};
use vpcnet_cni_harness::netns::TestNetns;
use vpcnet_cni_harness::runtime::{dir_of, Attachment, Runtime};

const PLUGIN: &str = env!("CARGO_BIN_EXE_vpcnet-cni");

struct Lab {
    node: TestNetns,
    agent: FakeAgent,
    rt: Runtime,
    dir: tempfile::TempDir,
    baseline: String,
}

impl Lab {
    fn new(cfg: FakeConfig, settings: impl FnOnce(&mut ConflistSettings)) -> Lab {
        let node = TestNetns::create().unwrap();
        // ENI device 1 with table 2 (device number + 1), as the agent's node::setup_eni would
        // leave it.
        node.ip(&[
            "link", "add", "eth1", "type", "veth", "peer", "name", "vpc1",
        ])
        .unwrap();
        node.ip(&["link", "set", "eth1", "up"]).unwrap();
        node.ip(&["link", "set", "vpc1", "up"]).unwrap();
        node.ip(&["route", "add", "10.0.1.0/24", "dev", "eth1", "table", "2"])
            .unwrap();
        node.ip(&[
            "route", "add", "default", "via", "10.0.1.1", "dev", "eth1", "onlink", "table", "2",
        ])
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let agent = FakeAgent::start(&dir.path().join("agent.sock"), cfg).unwrap();
        let mut s = ConflistSettings {
            agent_socket: agent.socket.display().to_string(),
            agent_timeout: "2s".into(),
            plugin_log_file: dir.path().join("plugin.log").display().to_string(),
            portmap: false,
            ..Default::default()
        };
        settings(&mut s);
        let rt = Runtime::new(
            &render(&s),
            vec![dir_of(&PathBuf::from(PLUGIN)), "/usr/lib/cni".into()],
            Some(node.path()),
        )
        .unwrap();
        let baseline = node.snapshot().unwrap();
        Lab {
            node,
            agent,
            rt,
            dir,
            baseline,
        }
    }

    fn pod(&self, name: &str) -> (TestNetns, Attachment) {
        let ns = TestNetns::create().unwrap();
        let att = Attachment {
            container_id: format!("cid-{name}"),
            netns: ns.path().display().to_string(),
            ifname: "eth0".into(),
            args: vec![
                ("IgnoreUnknown".into(), "1".into()),
                ("K8S_POD_NAMESPACE".into(), "default".into()),
                ("K8S_POD_NAME".into(), name.into()),
            ],
            capability_args: json!({}),
        };
        (ns, att)
    }

    /// The node namespace is as before the test, except for host veths: DEL leaves those to the
    /// pod namespace's teardown, as the VPC CNI does (see [`Lab::assert_clean_after_teardown`]).
    fn assert_clean(&self) {
        let strip = |s: &str| {
            s.lines()
                .filter(|l| !is_host_veth_line(l))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            strip(&self.node.snapshot().unwrap()),
            strip(&self.baseline),
            "node namespace changed"
        );
    }

    /// After the pod namespaces are deleted, the node namespace is exactly as before the test
    /// (the kernel destroys the veth pairs asynchronously: waits up to 10 s).
    fn assert_clean_after_teardown(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let now = self.node.snapshot().unwrap();
            if now == self.baseline {
                return;
            }
            if std::time::Instant::now() > deadline {
                assert_eq!(now, self.baseline, "node namespace changed");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn plugin_conf(&self) -> Value {
        let list: Value =
            serde_json::from_str(&std::fs::read_to_string(self.conflist_path()).unwrap()).unwrap();
        let mut c = list["plugins"][0].clone();
        c["name"] = list["name"].clone();
        c["cniVersion"] = list["cniVersion"].clone();
        c
    }

    fn conflist_path(&self) -> PathBuf {
        let p = self.dir.path().join("10-vpcnet.conflist");
        if !p.exists() {
            let s = ConflistSettings {
                agent_socket: self.agent.socket.display().to_string(),
                portmap: false,
                plugin_log_file: String::new(),
                ..Default::default()
            };
            std::fs::write(&p, render(&s)).unwrap();
        }
        p
    }
}

fn sha1_11(s: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("printf '%s' '{s}' | sha1sum")])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..11].to_string()
}

/// A line of `ip -o link show` for a host veth (prefix `eni`).
fn is_host_veth_line(l: &str) -> bool {
    l.split(": ").nth(1).is_some_and(|n| n.starts_with("eni"))
}

fn lines_with(text: &str, needle: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains(needle))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn add_check_del_on_a_secondary_eni() {
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 0,
            ..Default::default()
        },
        |_| {},
    );
    let (pod, att) = lab.pod("nginx");
    let result = lab.rt.add(&att).unwrap();
    let veth = format!("eni{}", sha1_11("default.nginx"));

    // Result per spec 1.0.0.
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["interfaces"][0]["name"], veth.as_str());
    assert_eq!(result["interfaces"][1]["name"], "eth0");
    assert_eq!(result["interfaces"][1]["sandbox"], att.netns.as_str());
    assert_eq!(result["ips"][0]["address"], "10.0.1.10/32");
    assert_eq!(result["ips"][0]["interface"], 1);
    assert!(result["ips"][0].get("version").is_none());

    // Kernel state, exactly.
    let rules = lab.node.ip(&["-4", "rule", "show"]).unwrap();
    assert_eq!(
        lines_with(&rules, "10.0.1.10"),
        [
            "512:\tfrom all to 10.0.1.10 lookup main",
            "1536:\tfrom 10.0.1.10 lookup 2"
        ]
    );
    let routes = lab
        .node
        .ip(&["-4", "route", "show", "table", "all"])
        .unwrap();
    assert_eq!(
        lines_with(&routes, "10.0.1.10"),
        [format!("10.0.1.10 dev {veth} proto static scope link")]
    );
    let host_mac = result["interfaces"][0]["mac"].as_str().unwrap();
    assert_eq!(
        pod.ip(&["neigh", "show"]).unwrap().trim(),
        format!("169.254.1.1 dev eth0 lladdr {host_mac} PERMANENT")
    );
    assert_eq!(
        pod.ip(&["-4", "route", "show"])
            .unwrap()
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>(),
        [
            "default via 169.254.1.1 dev eth0 proto static",
            "169.254.1.1 dev eth0 proto static scope link"
        ]
    );
    assert!(pod
        .ip(&["-4", "addr", "show", "eth0"])
        .unwrap()
        .contains("inet 10.0.1.10/32"));
    let l = pod.ip(&["link", "show", "eth0"]).unwrap();
    assert!(l.contains("mtu 9001") && l.contains(",UP"), "{l}");
    let l = lab.node.ip(&["link", "show", &veth]).unwrap();
    assert!(l.contains("mtu 9001") && l.contains(",UP"), "{l}");

    lab.rt.check(&att).unwrap();

    // CHECK names what is wrong.
    lab.node.ip(&["rule", "del", "priority", "1536"]).unwrap();
    pod.ip(&["route", "del", "default"]).unwrap();
    let e = lab.rt.check(&att).unwrap_err();
    assert_eq!(e.code(), 105, "{e}");
    let details = e.exec.json()["details"].as_str().unwrap().to_string();
    assert!(
        details.contains("pod default route via 169.254.1.1 dev eth0 is missing"),
        "{details}"
    );
    lab.node
        .ip(&[
            "rule",
            "add",
            "from",
            "10.0.1.10",
            "lookup",
            "2",
            "priority",
            "1536",
        ])
        .unwrap();
    pod.ip(&[
        "route",
        "add",
        "default",
        "via",
        "169.254.1.1",
        "dev",
        "eth0",
    ])
    .unwrap();
    lab.rt.check(&att).unwrap();

    lab.rt.del(&att).unwrap();
    lab.assert_clean();
    // Like the VPC CNI's DEL: the veth pair is left to the runtime's namespace teardown.
    assert!(pod.ip(&["link"]).unwrap().contains("eth0"));
    assert!(lab.node.ip(&["-o", "link"]).unwrap().contains(&veth));
    assert_eq!(
        lab.agent.state().released,
        ["10.0.1.10".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    // DEL again: idempotent.
    lab.rt.del(&att).unwrap();
    lab.assert_clean();
    drop(pod);
    lab.assert_clean_after_teardown();
}

#[test]
fn add_replaces_the_veth_of_a_same_named_pod_whose_namespace_outlived_del() {
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 0,
            ..Default::default()
        },
        |_| {},
    );
    let veth = format!("eni{}", sha1_11("default.sts-0"));
    let (old_ns, old) = lab.pod("sts-0");
    lab.rt.add(&old).unwrap();
    lab.rt.del(&old).unwrap();
    // The runtime keeps the old sandbox's namespace (and so the veth pair) a while longer; the
    // pod comes back under the same name, so with the same host veth name.
    assert!(old_ns.ip(&["link"]).unwrap().contains("eth0"));
    let (_new_ns, mut new) = lab.pod("sts-0");
    new.container_id = "cid-sts-0-new".into();
    let r = lab.rt.add(&new).unwrap();
    assert_eq!(r["interfaces"][0]["name"], veth.as_str());
    lab.rt.check(&new).unwrap();
    assert!(
        !old_ns.ip(&["link"]).unwrap().contains("eth0"),
        "the stale pair was not replaced"
    );
    let links = lab.node.ip(&["-o", "link"]).unwrap();
    assert_eq!(lines_with(&links, &veth).len(), 1, "{links}");
    let ip = r["ips"][0]["address"]
        .as_str()
        .unwrap()
        .trim_end_matches("/32");
    let routes = lab
        .node
        .ip(&["-4", "route", "show", "table", "all"])
        .unwrap();
    assert_eq!(
        lines_with(&routes, &veth),
        [format!("{ip} dev {veth} proto static scope link")]
    );
    lab.rt.del(&new).unwrap();
    lab.assert_clean();
}

#[test]
fn primary_eni_pod_gets_only_the_512_rule_and_v040_result() {
    let lab = Lab::new(FakeConfig::default(), |s| s.cni_version = "0.4.0".into());
    let (_pod, att) = lab.pod("web");
    let result = lab.rt.add(&att).unwrap();
    assert_eq!(result["cniVersion"], "0.4.0");
    assert_eq!(result["ips"][0]["version"], "4");
    let rules = lab.node.ip(&["-4", "rule", "show"]).unwrap();
    assert_eq!(
        lines_with(&rules, "10.0.1.10"),
        ["512:\tfrom all to 10.0.1.10 lookup main"]
    );
    lab.rt.check(&att).unwrap();
    lab.rt.del(&att).unwrap();
    lab.assert_clean();
}

#[test]
fn bare_container_without_pod_args_uses_the_container_id() {
    let lab = Lab::new(FakeConfig::default(), |s| s.cni_version = "1.1.0".into());
    let (_pod, mut att) = lab.pod("x");
    att.args.clear();
    att.container_id = "abc123".into();
    let result = lab.rt.add(&att).unwrap();
    assert_eq!(
        result["interfaces"][0]["name"],
        format!("eni{}", sha1_11("abc123"))
    );
    assert_eq!(result["interfaces"][1]["mtu"], 9001);
    lab.rt.del(&att).unwrap();
    lab.assert_clean();
}

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
fn fifty_parallel_adds_get_distinct_ips_and_complete_datapaths() {
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 25,
            ..Default::default()
        },
        |_| {},
    );
    let pods: Vec<_> = (0..50).map(|i| lab.pod(&format!("par-{i}"))).collect();
    let results: Vec<Value> = std::thread::scope(|s| {
        let hs: Vec<_> = pods
            .iter()
            .map(|(_, att)| s.spawn(|| lab.rt.add(att).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ips: Vec<String> = results
        .iter()
        .map(|r| r["ips"][0]["address"].as_str().unwrap().to_string())
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 50);
    let rules = lab.node.ip(&["-4", "rule", "show"]).unwrap();
    assert_eq!(lines_with(&rules, "512:").len(), 50);
    assert_eq!(lines_with(&rules, "1536:").len(), 25);
    for (_, att) in &pods {
        lab.rt.check(att).unwrap();
    }
    std::thread::scope(|s| {
        for (_, att) in &pods {
            s.spawn(|| lab.rt.del(att).unwrap());
        }
    });
    lab.assert_clean();
    assert!(lab.agent.state().assigned.is_empty());
}

#[test]
fn chained_portmap_receives_our_result_and_returns_it() {
    let lab = Lab::new(FakeConfig::default(), |s| s.portmap = true);
    let (_pod, mut att) = lab.pod("ports");
    att.capability_args =
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]});
    let result = lab.rt.add(&att).unwrap();
    let trace = lab.rt.trace.lock().unwrap().clone();
    let ours = trace
        .iter()
        .find(|e| e.plugin == "vpcnet-cni" && e.command == "ADD")
        .unwrap();
    let pm = trace
        .iter()
        .find(|e| e.plugin == "portmap" && e.command == "ADD")
        .unwrap();
    assert_eq!(
        pm.stdin["prevResult"],
        ours.json(),
        "portmap got something else than our result"
    );
    assert_eq!(
        pm.stdin["runtimeConfig"]["portMappings"][0]["hostPort"],
        8080
    );
    assert_eq!(
        result,
        ours.json(),
        "portmap did not pass our result through"
    );
    // Debian's portmap 1.1.1 fails CHECK on IPv4-only pods looking for an IPv6 chain it never
    // created (containernetworking/plugins#819); our CHECK in the chain must pass regardless.
    match lab.rt.check(&att) {
        Ok(()) => {}
        Err(e) => {
            assert_eq!(e.exec.plugin, "portmap", "{e}");
            assert!(e.exec.stdout.contains("ipv6"), "{e}");
        }
    }
    let trace = lab.rt.trace.lock().unwrap().clone();
    let check = trace
        .iter()
        .find(|e| e.plugin == "vpcnet-cni" && e.command == "CHECK")
        .unwrap();
    assert_eq!((check.status, &check.stdin["prevResult"]), (0, &result));
    lab.rt.del(&att).unwrap();
    let trace = lab.rt.trace.lock().unwrap().clone();
    let dels: Vec<&str> = trace
        .iter()
        .filter(|e| e.command == "DEL")
        .map(|e| e.plugin.as_str())
        .collect();
    assert_eq!(dels, ["portmap", "vpcnet-cni"]);
    let del_ours = trace
        .iter()
        .find(|e| e.plugin == "vpcnet-cni" && e.command == "DEL")
        .unwrap();
    assert_eq!(del_ours.stdin["prevResult"], result);
    lab.assert_clean();
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

#[test]
fn late_del_of_an_old_sandbox_spares_the_new_pod_with_the_same_name() {
    let lab = Lab::new(
        FakeConfig {
            secondary_from: 0,
            ..Default::default()
        },
        |_| {},
    );
    let (_old_ns, old) = lab.pod("sts-0");
    lab.rt.add(&old).unwrap();
    // The old sandbox's DEL is lost; the pod comes back with a new sandbox, same name.
    let (_new_ns, mut new) = lab.pod("sts-0");
    new.container_id = "cid-sts-0-new".into();
    let r = lab.rt.add(&new).unwrap();
    assert_eq!(r["ips"][0]["address"], "10.0.1.11/32");
    // Now the late DEL of the old sandbox arrives.
    lab.rt.del(&old).unwrap();
    lab.rt.check(&new).unwrap();
    let rules = lab.node.ip(&["-4", "rule", "show"]).unwrap();
    assert!(lines_with(&rules, "10.0.1.10").is_empty(), "{rules}");
    assert_eq!(lines_with(&rules, "10.0.1.11").len(), 2, "{rules}");
    lab.rt.del(&new).unwrap();
    lab.assert_clean();
}

/// `tc qdisc show dev <dev>` in namespace `ns`.
fn qdiscs(ns: &TestNetns, dev: &str) -> String {
    vpcnet_cni_harness::netns::run(&[
        "ip", "netns", "exec", &ns.name, "tc", "qdisc", "show", "dev", dev,
    ])
    .unwrap()
}

/// A sysctl as the processes of namespace `ns` see it.
fn sysctl_in(ns: &TestNetns, path: &str) -> String {
    vpcnet_cni_harness::netns::run(&["ip", "netns", "exec", &ns.name, "cat", path])
        .unwrap()
        .trim()
        .to_string()
}

/// The `ifb` devices of namespace `ns` (the bandwidth plugin's egress shapers).
fn ifb_devices(ns: &TestNetns) -> Vec<String> {
    ns.ip(&["-o", "link", "show", "type", "ifb"])
        .unwrap()
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap().to_string())
        .collect()
}

/// Runs one pod with 1 Mbit/s of ingress and egress asked for (the runtime's `bandwidth`
/// capability, as containerd passes the pod annotations) through the chain `settings` gives,
/// and returns (host veth qdiscs, ifb qdiscs, the pod's all/default/lo disable_ipv6), then DELs.
fn shaped_pod(settings: impl FnOnce(&mut ConflistSettings)) -> (String, String, [String; 3]) {
    let lab = Lab::new(FakeConfig::default(), settings);
    let (pod, mut att) = lab.pod("shaped");
    att.capability_args = json!({"bandwidth": {
        "ingressRate": 1_000_000, "ingressBurst": u32::MAX,
        "egressRate": 1_000_000, "egressBurst": u32::MAX,
    }});
    let result = lab.rt.add(&att).unwrap();
    let veth = format!("eni{}", sha1_11("default.shaped"));
    assert_eq!(result["interfaces"][0]["name"], veth.as_str());
    let host = qdiscs(&lab.node, &veth);
    let ifb = ifb_devices(&lab.node)
        .iter()
        .map(|d| qdiscs(&lab.node, d))
        .collect::<Vec<_>>()
        .join("");
    let v6 = ["all", "default", "lo"]
        .map(|i| sysctl_in(&pod, &format!("/proc/sys/net/ipv6/conf/{i}/disable_ipv6")));
    lab.rt.del(&att).unwrap();
    assert!(ifb_devices(&lab.node).is_empty(), "DEL left an ifb device");
    lab.assert_clean();
    (host, ifb, v6)
}

#[test]
fn chained_bandwidth_and_tuning_shape_the_pod_and_turn_its_ipv6_off() {
    // ENABLE_BANDWIDTH_PLUGIN and DISABLE_POD_V6: Debian's reference plugins after ours find
    // the host veth in our result and act on the pod.
    let (host, ifb, v6) = shaped_pod(|s| {
        s.bandwidth = true;
        s.disable_pod_v6 = true;
    });
    assert!(
        host.lines()
            .any(|l| l.starts_with("qdisc tbf ") && l.contains("rate 1Mbit")),
        "no 1 Mbit/s token bucket on the host veth (pod ingress):\n{host}"
    );
    assert!(
        host.lines().any(|l| l.starts_with("qdisc ingress ")),
        "no ingress qdisc on the host veth (pod egress is redirected from it):\n{host}"
    );
    assert!(
        ifb.lines()
            .any(|l| l.starts_with("qdisc tbf ") && l.contains("rate 1Mbit")),
        "no 1 Mbit/s token bucket on an ifb device (pod egress):\n{ifb}"
    );
    assert_eq!(v6, ["1", "1", "1"], "disable_ipv6 of all, default, lo");

    // Negative control: the default chain, same capability arguments.
    let (host, ifb, v6) = shaped_pod(|_| {});
    assert!(!host.contains("tbf") && !host.contains("ingress"), "{host}");
    assert!(ifb.is_empty(), "{ifb}");
    assert_eq!(v6, ["0", "0", "0"], "disable_ipv6 of all, default, lo");
}
