//! The agent's external shapes, pinned by golden files in `tests/golden/`: the introspection
//! documents (`/v1/enis`, `/v1/pods`, `/v1/env-settings`, `/healthz`) of a known pool, the
//! `/v1/env-settings` map of a known environment, and the metrics exposition. Refactors must
//! keep them; a deliberate change regenerates them with `UPDATE_GOLDEN=1 cargo test -p
//! vpcnet-agent --test pinned` and shows up in review as a diff of the golden files.
//!
//! JSON documents are compared as JSON values (object key order is not part of the contract);
//! the metrics exposition line for line (family order, HELP and TYPE lines, samples), with the
//! samples of each family sorted, since a family keeps its series in a hash map.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;
use vpcnet_agent::config::Config;
use vpcnet_agent::metrics::Metrics;
use vpcnet_agent::state::{NodeFacts, Shared};
use vpcnet_agent::AgentOptions;
use vpcnet_ec2::{Action, Ec2Error, Ec2Observer};
use vpcnet_ipam::{EniInfo, EniObservation, PodKey, PodRef, Pool, UnknownIpPolicy, WarmConfig};

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Compares `got` with the golden file `name` (or rewrites it with `UPDATE_GOLDEN=1`).
fn check_text(name: &str, got: &str) {
    let path = golden_path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 creates it)", path.display()));
    assert_eq!(got, want, "{name} differs from its golden file");
}

fn check_json(name: &str, got: &serde_json::Value) {
    let path = golden_path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(got).unwrap() + "\n").unwrap();
        return;
    }
    let want: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 creates it)", path.display())),
    )
    .unwrap();
    assert_eq!(
        got,
        &want,
        "{name} differs from its golden file; got:\n{}",
        serde_json::to_string_pretty(got).unwrap()
    );
}

fn eni(id: &str, device: u32, host: u8, secondary: &[u8]) -> EniObservation {
    let ip = |h: u8| std::net::Ipv4Addr::new(10, 0, 0, h);
    EniObservation {
        info: EniInfo {
            id: id.into(),
            mac: format!("02:00:00:00:00:{host:02x}"),
            device_number: device,
            network_card: 0,
            subnet_id: "subnet-1".into(),
            subnet_cidr: "10.0.0.0/24".parse().unwrap(),
            primary: device == 0,
            primary_ip: ip(host),
        },
        secondary_ips: secondary.iter().map(|h| ip(*h)).collect(),
        prefixes: Vec::new(),
    }
}

/// A pool whose every time is fixed: ENIs added long ago, one address released long ago
/// (cooled), one released in 2096 (cooling whatever the clock says), one assignment orphaned.
fn known_shared() -> Shared {
    const LONG_AGO: u64 = 1_000_000;
    const FUTURE: u64 = 4_000_000_000_000;
    let limits = vpcnet_limits::lookup("m5.large").unwrap();
    let mut pool = Pool::new(WarmConfig::for_limits(limits));
    let mut view = vec![
        eni("eni-a", 0, 10, &[11, 12, 13]),
        eni("eni-b", 1, 20, &[21, 22]),
    ];
    pool.reconcile(&view, UnknownIpPolicy::Free, LONG_AGO);
    let pod = |ns: &str, name: &str| PodRef {
        namespace: ns.into(),
        name: name.into(),
    };
    let mut granted = Vec::new();
    for (i, (ns, name)) in [
        ("default", "web"),
        ("", ""),
        ("kube-system", "dns"),
        ("default", "gone-soon"),
        ("default", "gone-long-ago"),
    ]
    .iter()
    .enumerate()
    {
        let key = PodKey::new(format!("{:064x}", i + 1), "eth0");
        granted.push(
            pool.assign(key.clone(), pod(ns, name), LONG_AGO + 1000 * i as u64)
                .unwrap(),
        );
    }
    pool.release(&PodKey::new(format!("{:064x}", 4), "eth0"), FUTURE);
    pool.release(
        &PodKey::new(format!("{:064x}", 5), "eth0"),
        LONG_AGO + 10_000,
    );
    // EC2 stops listing the address of the third pod: an orphan.
    let orphan = granted[2].ip;
    for o in &mut view {
        o.secondary_ips.retain(|ip| *ip != orphan);
    }
    pool.reconcile(&view, UnknownIpPolicy::Free, LONG_AGO + 20_000);

    let facts = NodeFacts {
        instance_id: "i-0123456789abcdef0".into(),
        instance_type: "m5.large".into(),
        region: "us-east-1".into(),
        availability_zone: "us-east-1a".into(),
        primary_mac: "02:00:00:00:00:0a".into(),
        primary_ip: "10.0.0.10".parse().unwrap(),
        subnet_id: "subnet-1".into(),
        subnet_cidr: "10.0.0.0/24".parse().unwrap(),
        vpc_id: "vpc-1".into(),
        vpc_cidrs: vec!["10.0.0.0/16".parse().unwrap()],
        security_groups: vec!["sg-1".into()],
    };
    let opts = AgentOptions {
        env_settings: vec![
            ("WARM_ENI_TARGET".into(), "1".into()),
            ("MINIMUM_IP_TARGET".into(), "".into()),
            ("CLUSTER_NAME".into(), "pinned".into()),
        ],
        ..AgentOptions::default()
    };
    let store = vpcnet_agent::AgentDeps::default().store(&opts);
    let shared = Shared::new(opts, facts, pool, Arc::new(Metrics::new()), store, None);
    shared.set_error(Some("RequestLimitExceeded: Request limit exceeded.".into()));
    shared
}

/// A datapath audit pass that repaired one pod's route and found another pod's veth gone.
fn known_datapath() -> vpcnet_introspection::DatapathDoc {
    use vpcnet_introspection::{DatapathDoc, Finding, PodCheck, Repair};
    let pod = |id: &str, ip: &str, findings| PodCheck {
        container_id: id.into(),
        namespace: "default".into(),
        name: format!("pod-{id}"),
        ip: ip.into(),
        host_veth: vpcnet_datapath::names::host_veth_name("eni", "default", &format!("pod-{id}")),
        route_table: 0,
        findings,
    };
    DatapathDoc {
        passes: 4,
        checked_at_ms: Some(1_700_000_030_000),
        last_error: None,
        node: vec![],
        pods: vec![
            pod(
                "c1",
                "10.0.0.11",
                vec![Finding {
                    kind: "pod_route".into(),
                    object: "10.0.0.11/32".into(),
                    problem: "host route 10.0.0.11/32 dev eni0a1b2c3d4e5 is missing".into(),
                    repaired: true,
                    error: None,
                }],
            ),
            pod(
                "c2",
                "10.0.0.21",
                vec![Finding {
                    kind: "host_veth".into(),
                    object: "eni9f8e7d6c5b4".into(),
                    problem: "host veth eni9f8e7d6c5b4 of 10.0.0.21 is missing".into(),
                    repaired: false,
                    error: Some(
                        "the veth pair goes with the pod's network namespace: recreate the pod"
                            .into(),
                    ),
                }],
            ),
        ],
        unrepaired: 1,
        not_ready: None,
        repairs: [("pod_route".to_string(), 1)].into(),
        last_repair: Some(Repair {
            at_ms: 1_700_000_030_000,
            kind: "pod_route".into(),
            object: "10.0.0.11/32".into(),
            problem: "host route 10.0.0.11/32 dev eni0a1b2c3d4e5 is missing".into(),
        }),
    }
}

async fn get(shared: &Arc<Shared>, path: &str) -> (u16, String) {
    let resp = vpcnet_agent::introspection::router(shared.clone())
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn introspection_documents_of_a_known_pool() {
    let shared = Arc::new(known_shared());
    shared.health().update_datapath(|d| *d = known_datapath());
    for (path, golden) in [
        ("/v1/enis", "introspection-enis.json"),
        ("/v1/pods", "introspection-pods.json"),
        ("/v1/env-settings", "introspection-env-settings.json"),
        ("/v1/datapath", "introspection-datapath.json"),
    ] {
        let (status, body) = get(&shared, path).await;
        assert_eq!(status, 200, "{path}: {body}");
        check_json(golden, &serde_json::from_str(&body).unwrap());
    }
    assert_eq!(get(&shared, "/healthz").await, (503, "starting\n".into()));
    shared.pool_state().set_ready();
    assert_eq!(get(&shared, "/healthz").await, (200, "ok\n".into()));
}

#[test]
fn env_settings_of_known_environments() {
    let cfg = |pairs: &[(&str, &str)]| {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_map(&m).unwrap()
    };
    let defaults = serde_json::to_value(cfg(&[]).env_settings()).unwrap();
    check_json("env-settings-defaults.json", &defaults);
    let set = cfg(&[
        ("WARM_ENI_TARGET", "0"),
        ("WARM_IP_TARGET", "5"),
        ("MINIMUM_IP_TARGET", "-1"),
        ("MAX_ENI", "2"),
        (
            "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
            " 10.1.0.0/16, 192.168.0.0/24 ",
        ),
        ("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "HashRandom"),
        ("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "warning"),
        ("AWS_VPC_K8S_CNI_LOGLEVEL", "info"),
        ("AWS_VPC_K8S_CNI_LOG_FILE", "/var/log/vpcnet/agent.log"),
        ("ADDITIONAL_ENI_TAGS", r#"{"team":"net","env":"prod"}"#),
        (
            "INTROSPECTION_BIND_ADDRESS",
            "unix:/run/vpcnet/introspection.sock",
        ),
        ("VPCNET_METRICS_BIND_ADDRESS", ":9100"),
        ("VPCNET_EC2_DESCRIBE_REFILL_RATE", "2.5"),
        ("AWS_EC2_ENDPOINT", "http://127.0.0.1:5000"),
        ("CLUSTER_ENDPOINT", "https://k8s.example:6443"),
        ("ENABLE_PREFIX_DELEGATION", "T"),
    ]);
    check_json(
        "env-settings-set.json",
        &serde_json::to_value(set.env_settings()).unwrap(),
    );
}

#[test]
fn metrics_exposition() {
    let m = Arc::new(Metrics::new());
    m.set_total_ip_addresses(28);
    m.set_assigned_ip_addresses(3);
    m.set_cooldown_ip_addresses(1);
    m.set_eni_allocated(2);
    m.set_eni_max(3);
    m.set_ip_max(27);
    m.set_total_ipv4_prefixes(0);
    m.set_assigned_ip_per_eni([("eni-a", 2), ("eni-b", 1)]);
    m.set_assigned_ip_per_cidr([("10.0.0.11/32", 1), ("10.0.0.21/32", 1)]);
    m.inc_add_ip_req();
    m.inc_del_ip_req("PodDeleted");
    m.inc_del_ip_req("PodDatapathGone");
    m.inc_no_available_ip();
    m.inc_ipamd_error("increaseIPPool");
    m.inc_reconcile("periodic");
    m.inc_force_removed_enis(1);
    m.inc_force_removed_ips(2);
    m.inc_datapath_audit();
    m.inc_datapath_repair("pod_route");
    m.set_datapath_unrepaired([("host_veth", 1)]);
    m.inc_eni_interface_gone();
    let obs: Arc<dyn Ec2Observer> = m.clone();
    let throttled = Ec2Error::api(
        Action::AssignPrivateIpAddresses,
        "RequestLimitExceeded",
        "",
        Some(503),
    );
    obs.on_attempt(
        Action::AssignPrivateIpAddresses,
        std::time::Duration::from_millis(12),
        Some(&throttled),
    );
    obs.on_attempt(
        Action::AssignPrivateIpAddresses,
        std::time::Duration::from_millis(30),
        None,
    );
    obs.on_call(
        Action::AssignPrivateIpAddresses,
        std::time::Duration::from_millis(42),
        Some(&throttled),
    );
    obs.on_rate_limited(
        Action::CreateNetworkInterface,
        std::time::Duration::from_millis(200),
    );
    check_text("metrics.txt", &canonical(&m.encode()));
}

/// The exposition with the sample lines of each family sorted (series order is a hash map's).
fn canonical(text: &str) -> String {
    let mut out = Vec::new();
    let mut samples: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            samples.sort();
            out.append(&mut samples);
            out.push(line);
        } else {
            samples.push(line);
        }
    }
    samples.sort();
    out.append(&mut samples);
    out.join("\n") + "\n"
}
