//! Helpers shared by the lab's end-to-end tests: root and binaries checks, a lab per test
//! (unique name, always torn down, root namespace checked unchanged), EC2's view of a node's
//! ENIs, the agent's checkpoint, a node's rules and routes.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use quick_xml::events::Event;
use vpcnet_ipam::Checkpoint;
use vpcnet_lab::lab::{Lab, LabGuard, UpOptions};
use vpcnet_lab::state::NodeRecord;

pub mod custom_networking;
pub mod targets;

pub static SEQ: AtomicU32 = AtomicU32::new(0);

/// target/debug, where the workspace binaries are (the test binary is in target/debug/deps).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    for b in ["vpcnet", "vpcnet-agent", "vpcnet-cni"] {
        assert!(
            dir.join(b).is_file(),
            "{} missing: run `cargo build --workspace --all-targets` first",
            dir.join(b).display()
        );
    }
    dir
}

pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The root namespace's links, routes (all tables) and rules.
pub fn root_snapshot() -> String {
    [
        sh("ip", &["-o", "link", "show"]),
        sh("ip", &["route", "show", "table", "all"]),
        sh("ip", &["rule", "show"]),
    ]
    .join("\n")
}

/// Tears down labs of earlier test runs whose process died (e.g. killed by a timeout): their
/// names carry the test process id.
pub fn remove_stale_test_labs() {
    for name in vpcnet_lab::state::list_labs() {
        let Some(rest) = name.strip_prefix("e2e-") else {
            continue;
        };
        let pid = rest.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                eprintln!("removing stale lab {name}");
                let _ = Lab::open(&name).map(|l| l.down());
            }
        }
    }
}

/// Builds a lab, runs `f`, always tears down, then checks nothing is left.
pub fn with_lab(tag: &str, tweak: impl FnOnce(&mut UpOptions), f: impl FnOnce(&Lab)) {
    run_lab(tag, false, tweak, f)
}

/// [`with_lab`] for a lab with Kubernetes (control plane, kubelet, kube-proxy). The Kubernetes
/// binaries must be built (`scripts/build-k8s.sh`, which scripts/test.sh runs): without them
/// the test fails, naming the fix.
pub fn with_kube_lab(tag: &str, tweak: impl FnOnce(&mut UpOptions), f: impl FnOnce(&Lab)) {
    run_lab(tag, true, tweak, f)
}

/// Before a test builds a lab: root is required, labs of dead test runs are removed, and
/// the name for this test's lab (`e2e-<tag>-<pid>-<n>`, so a later run can tell it is stale)
/// is returned with the root namespace's snapshot to compare with afterwards.
pub fn prepare_test_lab(tag: &str) -> (String, String) {
    vpcnet_cni_harness::netns::require_root();
    remove_stale_test_labs();
    let before = root_snapshot();
    let name = format!(
        "e2e-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    (name, before)
}

fn run_lab(tag: &str, kubernetes: bool, tweak: impl FnOnce(&mut UpOptions), f: impl FnOnce(&Lab)) {
    let (name, before) = prepare_test_lab(tag);
    let mut opts = if kubernetes {
        UpOptions::new(&name)
    } else {
        UpOptions::bare(&name)
    };
    opts.bin_dir = bin_dir();
    // Reconcile often so restarts are observed quickly.
    opts.agent_env
        .push(("VPCNET_RECONCILE_INTERVAL".into(), "2".into()));
    tweak(&mut opts);
    let lab = Lab::up(&opts).expect("lab up");
    let namespaces = lab.state().unwrap().namespaces;
    let guard = LabGuard::new(lab.clone());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&lab)));
    if result.is_err() {
        let mut logs = vec!["emulator.log", "agent-n1.log"];
        if kubernetes {
            logs.extend(["kubelet-n1.log", "containerd-n1.log", "kube-proxy-n1.log"]);
        }
        for log in logs {
            let p = lab.dir.join("logs").join(log);
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            eprintln!(
                "--- {log} (last 60 lines)\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
    let down = guard.down();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
    down.expect("lab down removes everything");
    let netns = sh("ip", &["netns", "list"]);
    for ns in &namespaces {
        assert!(!netns.contains(ns.as_str()), "namespace {ns} left behind");
    }
    assert!(!lab.dir.exists(), "lab directory left behind");
    // Other test binaries may run at the same time: allow a transient difference to settle.
    let t0 = Instant::now();
    while root_snapshot() != before && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(before, root_snapshot(), "root namespace changed");
}

pub fn node(lab: &Lab) -> NodeRecord {
    lab.state().unwrap().node("n1").unwrap().clone()
}

/// The ENIs attached to instance `instance_id`, per the emulator.
pub fn instance_enis(lab: &Lab, instance_id: &str) -> Vec<vpcnet_lab::cloud::EniInfo> {
    lab.cloud()
        .enis()
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.attachment
                .as_ref()
                .is_some_and(|a| a.instance_id == instance_id)
        })
        .collect()
}

/// One ping (busybox's) from network namespace `netns` to `ip`, 2 s at most.
pub fn ping_from(netns: &str, ip: Ipv4Addr) -> bool {
    std::process::Command::new("ip")
        .args([
            "netns", "exec", netns, "busybox", "ping", "-c", "1", "-W", "2",
        ])
        .arg(ip.to_string())
        .output()
        .unwrap()
        .status
        .success()
}

/// `ip -n <node> args`.
pub fn ipn(node: &NodeRecord, args: &[&str]) -> String {
    let mut v = vec!["-n", node.netns.as_str()];
    v.extend_from_slice(args);
    sh("ip", &v)
}

/// One ENI of DescribeNetworkInterfaces.
#[derive(Debug, Default, Clone)]
pub struct DescribedEni {
    pub eni_id: String,
    pub instance_id: String,
    pub device_index: Option<u32>,
    pub primary_ip: Option<Ipv4Addr>,
    pub secondary_ips: Vec<Ipv4Addr>,
}

/// Parses a DescribeNetworkInterfaces response.
pub fn parse_describe(xml: &str) -> Vec<DescribedEni> {
    let mut r = quick_xml::Reader::from_str(xml);
    let mut path: Vec<String> = Vec::new();
    let mut out: Vec<DescribedEni> = Vec::new();
    let mut addr: (Option<Ipv4Addr>, bool) = (None, false);
    loop {
        match r.read_event().unwrap() {
            Event::Start(e) => {
                let n = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                path.push(n);
                let p: Vec<&str> = path.iter().map(String::as_str).collect();
                if p.ends_with(&["networkInterfaceSet", "item"]) {
                    out.push(DescribedEni::default());
                }
                if p.ends_with(&["privateIpAddressesSet", "item"]) {
                    addr = (None, false);
                }
            }
            Event::End(_) => {
                let p: Vec<&str> = path.iter().map(String::as_str).collect();
                if p.ends_with(&["privateIpAddressesSet", "item"]) {
                    let e = out.last_mut().unwrap();
                    if let (Some(ip), primary) = addr {
                        if primary {
                            e.primary_ip = Some(ip);
                        } else {
                            e.secondary_ips.push(ip);
                        }
                    }
                }
                path.pop();
            }
            Event::Text(t) => {
                let text = t.xml_content().unwrap().trim().to_string();
                let p: Vec<&str> = path.iter().map(String::as_str).collect();
                let Some(e) = out.last_mut() else { continue };
                match p.as_slice() {
                    [.., "networkInterfaceSet", "item", "networkInterfaceId"] => e.eni_id = text,
                    [.., "networkInterfaceSet", "item", "attachment", "instanceId"] => {
                        e.instance_id = text
                    }
                    [.., "networkInterfaceSet", "item", "attachment", "deviceIndex"] => {
                        e.device_index = text.parse().ok()
                    }
                    [.., "privateIpAddressesSet", "item", "privateIpAddress"] => {
                        addr.0 = text.parse().ok()
                    }
                    [.., "privateIpAddressesSet", "item", "primary"] => addr.1 = text == "true",
                    _ => {}
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    out
}

/// The node's ENIs per EC2 (DescribeNetworkInterfaces filtered by attachment.instance-id).
pub fn describe_node_enis(lab: &Lab, node: &NodeRecord) -> Vec<DescribedEni> {
    let xml = lab
        .cloud()
        .ec2(
            "DescribeNetworkInterfaces",
            &[
                ("Filter.1.Name", "attachment.instance-id"),
                ("Filter.1.Value.1", &node.instance_id),
            ],
        )
        .unwrap();
    let enis = parse_describe(&xml);
    assert!(
        !enis.is_empty(),
        "no ENIs described for {}: {xml}",
        node.instance_id
    );
    enis
}

pub fn eni_of(enis: &[DescribedEni], ip: Ipv4Addr) -> Option<&DescribedEni> {
    enis.iter().find(|e| e.secondary_ips.contains(&ip))
}

pub fn checkpoint(node: &NodeRecord) -> Checkpoint {
    Checkpoint::from_json(&std::fs::read_to_string(node.checkpoint_path()).unwrap()).unwrap()
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < timeout,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The host-side veth of a pod: the device of the node's /32 route to it.
pub fn host_veth(node: &NodeRecord, ip: Ipv4Addr) -> Option<String> {
    let out = ipn(node, &["route", "show", &format!("{ip}/32")]);
    let f: Vec<&str> = out.split_whitespace().collect();
    f.iter()
        .position(|w| *w == "dev")
        .and_then(|i| f.get(i + 1))
        .map(|s| s.to_string())
}

pub fn rules_for(node: &NodeRecord, ip: Ipv4Addr) -> Vec<String> {
    let ip_s = ip.to_string();
    ipn(node, &["rule", "show"])
        .lines()
        .filter(|l| l.split_whitespace().any(|w| w == ip_s))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Every `<tag>` text of an EC2 XML answer, in order.
pub fn xml_all(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    xml.match_indices(&open)
        .map(|(i, _)| {
            let start = i + open.len();
            let end = start + xml[start..].find('<').unwrap();
            xml[start..end].to_string()
        })
        .collect()
}

pub fn xml_first(xml: &str, tag: &str) -> String {
    xml_all(xml, tag)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no {tag} in {xml}"))
}

/// (subnet ID, CIDR) of the lab subnet tagged `Name=name`.
pub fn subnet(lab: &Lab, name: &str) -> (String, Ipv4Net) {
    let xml = lab
        .cloud()
        .ec2(
            "DescribeSubnets",
            &[("Filter.1.Name", "tag:Name"), ("Filter.1.Value.1", name)],
        )
        .unwrap();
    (
        xml_first(&xml, "subnetId"),
        xml_first(&xml, "cidrBlock").parse().unwrap(),
    )
}

/// Applies the manifest of pod `default/name`, retrying for 60 s while the fresh cluster
/// refuses it (the namespace's `default` service account not created yet).
pub fn create_pod_retrying(k: &vpcnet_lab::kube::kubectl::Kubectl, name: &str, manifest: &str) {
    wait_until(
        &format!("pod {name} created"),
        Duration::from_secs(60),
        || k.apply(manifest).is_ok(),
    );
}

/// The address of pod `default/name` once it runs (waits up to `timeout`).
pub fn running_pod_ip(
    k: &vpcnet_lab::kube::kubectl::Kubectl,
    name: &str,
    timeout: Duration,
) -> String {
    let mut ip = String::new();
    wait_until(&format!("pod {name} Running"), timeout, || {
        let p = k.json(&["get", "pod", "-n", "default", name]).unwrap();
        ip = p["status"]["podIP"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        p["status"]["phase"] == "Running" && !ip.is_empty()
    });
    ip
}

/// The Node's condition `type_`: (status, reason, message).
pub fn node_condition(
    k: &vpcnet_lab::kube::kubectl::Kubectl,
    node: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let n = k.json(&["get", "node", node]).ok()?;
    n["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("reason"), s("message"))
        })
}

/// Whether an Event of `reason` and `type_` (`Warning`, `Normal`) names the Node `node`.
pub fn node_event(
    k: &vpcnet_lab::kube::kubectl::Kubectl,
    node: &str,
    reason: &str,
    type_: &str,
) -> bool {
    let selector = format!("reason={reason}");
    let ev = k
        .json(&["get", "events", "-A", "--field-selector", &selector])
        .unwrap();
    ev["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == type_ && e["involvedObject"]["name"] == node)
}

/// A busybox pod bound to `node` (no scheduler: a cordoned node still runs it), tolerating
/// the cordon taint, sleeping an hour.
pub fn sleep_pod(name: &str, node: &str) -> String {
    sleep_pod_json(name, node).to_string()
}

/// [`sleep_pod`] as JSON, to add to.
pub fn sleep_pod_json(name: &str, node: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "settings"}},
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "sleep",
                "image": vpcnet_lab::image::IMAGE_REF,
                "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
            }],
            "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                             "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
        },
    })
}

/// The sequence number of the emulator's newest request record (0 when none).
pub fn last_request_seq(lab: &Lab) -> u64 {
    lab.cloud()
        .requests()
        .unwrap()
        .records
        .iter()
        .map(|r| r.seq)
        .max()
        .unwrap_or(0)
}

/// The agent's metrics from its endpoint in the node namespace `netns`
/// ([`vpcnet_lab::nodes::agent_metrics_in`]); empty when they cannot be read.
pub fn agent_metrics(netns: &str) -> String {
    vpcnet_lab::nodes::agent_metrics_in(netns).unwrap_or_default()
}
