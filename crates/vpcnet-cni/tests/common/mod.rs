//! The end-to-end tests' node: a "node" namespace with a secondary ENI's route table, a fake
//! agent on a temporary Unix socket, the in-repo CNI runtime running the real plugin binary in
//! it, and checks that the node namespace is left as found.
#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::{json, Value};
use vpcnet_cni::conflist::{render, ConflistSettings};
use vpcnet_cni_harness::fake_agent::{FakeAgent, FakeConfig};
use vpcnet_cni_harness::netns::TestNetns;
use vpcnet_cni_harness::runtime::{dir_of, Attachment, Runtime};

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_vpcnet-cni");

pub struct Lab {
    pub node: TestNetns,
    pub agent: FakeAgent,
    pub rt: Runtime,
    pub dir: tempfile::TempDir,
    pub baseline: String,
}

impl Lab {
    pub fn new(cfg: FakeConfig, settings: impl FnOnce(&mut ConflistSettings)) -> Lab {
        let node = TestNetns::create().unwrap();
        // ENI device 1 with table 2 (device number + 1), as the agent's node::setup_eni would
        // leave it.
        node.ip(&[
            "link", "add", "eth1", "type", "veth", "peer", "name", "vpc1",
        ])
        .unwrap();
        node.ip(&["link", "set", "eth1", "up"]).unwrap();
        node.ip(&["link", "set", "vpc1", "up"]).unwrap();
        // The pair's carrier comes up asynchronously: the baseline is taken once both ends
        // are, or a later snapshot differs from it in the link state alone.
        for link in ["eth1", "vpc1"] {
            let mut tries = 0;
            while !node
                .ip(&["-o", "link", "show", link])
                .unwrap()
                .contains("state UP")
            {
                tries += 1;
                assert!(tries < 500, "{link} not up after 5 s");
                // A real kernel link: wall time.
                #[allow(clippy::disallowed_methods)]
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
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

    pub fn pod(&self, name: &str) -> (TestNetns, Attachment) {
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
    pub fn assert_clean(&self) {
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
    pub fn assert_clean_after_teardown(&self) {
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

    pub fn plugin_conf(&self) -> Value {
        let list: Value =
            serde_json::from_str(&std::fs::read_to_string(self.conflist_path()).unwrap()).unwrap();
        let mut c = list["plugins"][0].clone();
        c["name"] = list["name"].clone();
        c["cniVersion"] = list["cniVersion"].clone();
        c
    }

    pub fn conflist_path(&self) -> PathBuf {
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

pub fn sha1_11(s: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("printf '%s' '{s}' | sha1sum")])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..11].to_string()
}

/// A line of `ip -o link show` for a host veth (prefix `eni`).
pub fn is_host_veth_line(l: &str) -> bool {
    l.split(": ").nth(1).is_some_and(|n| n.starts_with("eni"))
}

pub fn lines_with(text: &str, needle: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains(needle))
        .map(|l| l.trim().to_string())
        .collect()
}
