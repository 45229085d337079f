//! What the fuzz targets `cni_netconf`, `cni_prev_result` and `cni_args` (fuzz/) check for one
//! input; shared by the targets (through `#[path]`) and by `fuzz_regressions.rs`, which feeds
//! the seeds and every kept reproducer in CI. Each panics on a broken property.
#![allow(dead_code)]

use std::net::Ipv4Addr;

use vpcnet_cni::cni::args::{self, Command};
use vpcnet_cni::cni::config;
use vpcnet_cni::cni::result::{read_prev, render, PodResult};

/// stdin (the network configuration) of any verb: `config::parse`, the error JSON, and the
/// VERSION verb's whole run (it needs no agent).
pub fn cni_netconf(data: &[u8]) {
    let version = config::sniff_version(data);
    match config::parse(data) {
        Ok(c) => {
            assert!(c.mtu.is_none_or(|m| (576..=9001).contains(&m)), "{c:?}");
            assert!(!c.agent_timeout.is_zero() && c.agent_timeout.as_secs() <= 3600);
            assert!(!c.name.is_empty() && !c.agent_socket.is_empty());
        }
        Err(e) => {
            let json: serde_json::Value = serde_json::from_str(&e.to_json(&version)).unwrap();
            assert_eq!(json["code"], e.code);
        }
    }
    let get = |k: &str| (k == "CNI_COMMAND").then(|| "VERSION".to_string());
    let (out, status) = vpcnet_cni::run_plugin(&get, data);
    assert_eq!(status, 0, "{out}");
}

/// A `prevResult` (any CNI version's shape): reading our address out of it (CHECK, DEL,
/// chained ADD), and rendering our result after it for every supported version.
pub fn cni_prev_result(data: &[u8]) {
    let Ok(prev) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = read_prev(&prev, "eth0");
    let ours = PodResult {
        host_veth: "eni0123456789a".into(),
        host_mac: "02:00:00:00:00:01".into(),
        pod_ifname: "eth0".into(),
        pod_mac: "06:00:00:00:00:02".into(),
        netns: "/var/run/netns/fuzz".into(),
        ip: Ipv4Addr::new(10, 0, 1, 5),
        mtu: 9001,
    };
    for v in vpcnet_cni::cni::version::SUPPORTED {
        let out = render(&ours, v, Some(&prev));
        let ips = out["ips"].as_array().expect("ips is a list");
        let last = ips.last().expect("our address is listed");
        assert_eq!(last["address"], "10.0.1.5/32");
        let n = out["interfaces"]
            .as_array()
            .expect("interfaces is a list")
            .len();
        assert_eq!(
            last["interface"],
            n - 1,
            "our IP points at our pod interface"
        );
    }
}

const VARS: [&str; 5] = [
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
];

/// The CNI environment: the input is the values of CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS,
/// CNI_IFNAME and CNI_ARGS separated by NUL bytes (a missing value is unset), read by
/// `args::command` and, for every verb, `args::env`.
pub fn cni_args(data: &[u8]) {
    let values: Vec<String> = data
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    let get = |k: &str| {
        let i = VARS.iter().position(|v| *v == k)?;
        values.get(i).cloned()
    };
    let _ = args::command(&get);
    for cmd in [
        Command::Add,
        Command::Del,
        Command::Check,
        Command::Version,
        Command::Status,
        Command::Gc,
    ] {
        if let Ok(e) = args::env(cmd, &get) {
            if matches!(cmd, Command::Add | Command::Del | Command::Check) {
                assert!(!e.container_id.is_empty() && e.ifname.len() <= 15, "{e:?}");
                assert!(!e.container_id.contains('/') && !e.ifname.contains('/'));
            }
        }
    }
}
