//! The tables of `vpcnet inspect`: the API server and ENIConfig views, the pool summary, the
//! ENIs with their addresses and prefixes, and the pods.

use std::collections::BTreeMap;

use serde_json::Value;
use vpcnet_introspection::text::table;
use vpcnet_introspection::{self as doc, Address, Eni, EnisDoc, Pod};

pub(super) fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// "instance ... ENIs x/max, IPs assigned/total ..." plus the pending plan and last error.
/// The API client as KEY VALUE lines; times as ages ("12s ago").
pub(super) fn api_text(d: &doc::ApiServerDoc, now_ms: u64) -> String {
    let ago = |ms: Option<u64>| {
        ms.map(|t| format!("{}s ago", now_ms.saturating_sub(t) / 1000))
            .unwrap_or_else(|| "-".into())
    };
    let state = serde_json::to_value(d.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut rows = vec![
        row(["STATE", &state]),
        row(["ENDPOINT", d.endpoint.as_deref().unwrap_or("-")]),
        row(["SOURCE", d.source.as_deref().unwrap_or("-")]),
        row(["CONNECTED SINCE", &ago(d.connected_since_ms)]),
        row([
            "FIRST CONNECTED",
            &d.first_connected_after_ms
                .map(|ms| format!("{ms} ms after the agent started"))
                .unwrap_or_else(|| "-".into()),
        ]),
        row(["ATTEMPTS", &d.attempts.to_string()]),
        row(["SERVER VERSION", d.server_version.as_deref().unwrap_or("-")]),
        row([
            "LAST ERROR",
            &d.last_error
                .as_ref()
                .map(|e| format!("{e} ({})", ago(d.last_error_ms)))
                .unwrap_or_else(|| "-".into()),
        ]),
    ];
    if let Some(n) = &d.node {
        rows.push(row([
            "NODE",
            &format!(
                "{}: capacity.pods {}, pod IPs for {} pods{}",
                n.name,
                n.capacity_pods,
                n.supported_pods,
                if n.exceeded {
                    " (EXCEEDED: pods beyond that stay ContainerCreating)"
                } else {
                    ""
                }
            ),
        ]));
    }
    table(&rows)
}

/// The node's ENIConfig as KEY VALUE lines; the state's age, and the last wait for it.
pub(super) fn eniconfig_text(d: &doc::EniConfigDoc, now_ms: u64) -> String {
    let state = serde_json::to_value(d.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    if d.state == doc::EniConfigState::Disabled {
        return "custom networking is off (AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG is not true): new ENIs use the node's subnet and security groups\n".into();
    }
    let dash = |v: Option<&String>| v.cloned().unwrap_or_else(|| "-".into());
    let rows = vec![
        row([
            "STATE",
            &match d.since_ms {
                Some(t) => format!("{state} (for {}s)", now_ms.saturating_sub(t) / 1000),
                None => state,
            },
        ]),
        row(["NODE", &dash(d.node.as_ref())]),
        row(["ENICONFIG", &dash(d.name.as_ref())]),
        row(["SELECTED BY", &dash(d.selected_by.as_ref())]),
        row(["SUBNET", &dash(d.subnet.as_ref())]),
        row([
            "SECURITY GROUPS",
            &if d.security_groups.is_empty() {
                "-".to_string()
            } else {
                d.security_groups.join(",")
            },
        ]),
        row(["REASON", &dash(d.reason.as_ref())]),
        row(["MESSAGE", &dash(d.message.as_ref())]),
        row([
            "LAST WAIT",
            &d.last_wait_ms
                .map(|ms| format!("{ms} ms without a valid ENIConfig before it resolved"))
                .unwrap_or_else(|| "-".into()),
        ]),
    ];
    table(&rows)
}

pub(super) fn summary_text(d: &EnisDoc) -> String {
    let s = &d.summary;
    let mut out = format!(
        "instance {} ({}): ENIs {}/{}, IPs {} assigned / {} total (max {}), {} available, \
         {} cooling, {} releasing, {} prefixes",
        d.instance_id,
        d.instance_type,
        s.enis,
        s.max_enis,
        s.assigned_ips,
        s.total_ips,
        s.max_ips,
        s.available_ips,
        s.cooling_ips,
        s.releasing_ips,
        s.prefixes
    );
    if !d.orphaned.is_empty() {
        out.push_str(&format!(
            ", {} orphaned (address no longer on EC2)",
            d.orphaned.len()
        ));
    }
    out.push('\n');
    // Only when the agent does not provision (older agents send no mode).
    match d.provisioning.as_str() {
        "disabled" => out.push_str(
            "provisioning: disabled (DISABLE_NETWORK_RESOURCE_PROVISIONING): only the addresses attached to the node's ENIs serve pods\n",
        ),
        "imds-only" => out.push_str(
            "provisioning: imds-only (ENABLE_IMDS_ONLY_MODE): only the addresses IMDS lists serve pods; no EC2 call\n",
        ),
        _ => {}
    }
    if let Some(f) = &s.prefix_fallback {
        out.push_str(&format!(
            "prefix delegation falls back to secondary IPs: no free /28 in the subnet \
             (InsufficientCidrBlocks {} time(s)); next prefix try at {}\n",
            f.failures,
            rfc3339(f.retry_at_ms)
        ));
    }
    if !d.plan.is_empty() {
        let steps: Vec<String> = d
            .plan
            .iter()
            .map(|action| {
                // `{"action": "assign_ips", "count": 2, ...}` → `assign_ips(count=2, ...)`.
                let a: BTreeMap<String, Value> = serde_json::to_value(action)
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok())
                    .unwrap_or_default();
                let name = a.get("action").and_then(Value::as_str).unwrap_or("?");
                let args: Vec<String> = a
                    .iter()
                    .filter(|(k, _)| *k != "action")
                    .map(|(k, v)| {
                        format!(
                            "{k}={}",
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string())
                        )
                    })
                    .collect();
                format!("{name}({})", args.join(", "))
            })
            .collect();
        out.push_str(&format!("pending EC2 actions: {}\n", steps.join("; ")));
    }
    if let Some(e) = &d.last_error {
        out.push_str(&format!("last EC2 error: {e}\n"));
    }
    out
}

/// A runtime's 64-hex container ID as its usual 12-character short form; other IDs whole.
pub(super) fn short(container_id: &str) -> String {
    if container_id.len() > 12 && container_id.chars().all(|c| c.is_ascii_hexdigit()) {
        container_id[..12].to_string()
    } else {
        container_id.to_string()
    }
}

/// `namespace/name`, or `-` when the runtime gave neither (e.g. `ctr run --cni`).
pub(super) fn pod_name(namespace: &str, name: &str) -> String {
    if namespace.is_empty() && name.is_empty() {
        "-".into()
    } else {
        format!("{namespace}/{name}")
    }
}

pub(super) fn enis_text(d: &EnisDoc, now_ms: u64) -> String {
    let mut out = summary_text(d);
    out.push('\n');
    let mut rows = vec![row([
        "ENI",
        "DEVICE",
        "MAC",
        "PRIMARY IP",
        "SUBNET",
        "CIDR",
        "TOTAL",
        "ASSIGNED",
        "COOLING",
        "FREE",
        "PREFIXES",
    ])];
    let mut enis: Vec<&Eni> = d.enis.iter().collect();
    enis.sort_by_key(|e| (e.network_card, e.device_number));
    for e in &enis {
        let total = e.addresses.len();
        let assigned = e.addresses.iter().filter(|a| a.assigned.is_some()).count();
        let cooling = e
            .addresses
            .iter()
            .filter(|a| a.assigned.is_none() && a.cooling)
            .count();
        let mut id = e.id.clone();
        if e.primary {
            id.push_str(" (primary)");
        }
        if e.deleting {
            id.push_str(" (deleting)");
        }
        rows.push(vec![
            id,
            // An ENI on a further network card (ENABLE_MULTI_NIC) as card/device.
            if e.network_card == 0 {
                e.device_number.to_string()
            } else {
                format!("{}/{}", e.network_card, e.device_number)
            },
            e.mac.clone(),
            e.primary_ip.clone(),
            e.subnet_id.clone(),
            e.subnet_cidr.clone(),
            total.to_string(),
            assigned.to_string(),
            cooling.to_string(),
            (total - assigned - cooling).to_string(),
            if e.prefixes.is_empty() {
                "-".into()
            } else {
                e.prefixes.join(",")
            },
        ]);
    }
    out.push_str(&table(&rows));
    out.push('\n');
    let mut rows = vec![row(["IP", "ENI", "STATE", "CONTAINER", "POD"])];
    for e in &enis {
        let mut addrs: Vec<&Address> = e.addresses.iter().collect();
        addrs.sort_by_key(|a| a.ip.parse::<std::net::Ipv4Addr>().ok());
        for a in addrs {
            let (state, container, pod) = match &a.assigned {
                Some(p) => (
                    "assigned".to_string(),
                    short(&p.container_id),
                    pod_name(&p.namespace, &p.name),
                ),
                None if a.cooling => {
                    let left = a
                        .cooldown_ends_at_ms
                        .map(|t| t.saturating_sub(now_ms).div_ceil(1000));
                    let state = match left {
                        Some(s) => format!("cooling ({s}s left)"),
                        None => "cooling".into(),
                    };
                    (state, "-".into(), "-".into())
                }
                None => ("free".into(), "-".into(), "-".into()),
            };
            rows.push(vec![a.ip.clone(), e.id.clone(), state, container, pod]);
        }
    }
    out.push_str(&table(&rows));
    out
}

pub(super) fn pods_text(pods: &[Pod], enis: &EnisDoc) -> String {
    let device: BTreeMap<&str, u32> = enis
        .enis
        .iter()
        .map(|e| (e.id.as_str(), e.device_number))
        .collect();
    let mut pods: Vec<&Pod> = pods.iter().collect();
    pods.sort_by(|a, b| {
        (&a.namespace, &a.name, &a.container_id).cmp(&(&b.namespace, &b.name, &b.container_id))
    });
    let mut rows = vec![row([
        "POD",
        "CONTAINER",
        "IF",
        "IP",
        "ENI",
        "DEVICE",
        "ASSIGNED AT",
    ])];
    for p in pods {
        rows.push(vec![
            pod_name(&p.namespace, &p.name),
            short(&p.container_id),
            p.if_name.clone(),
            p.ip.clone(),
            p.eni_id.clone(),
            device
                .get(p.eni_id.as_str())
                .map(u32::to_string)
                .unwrap_or_else(|| "-".into()),
            rfc3339(p.assigned_at_ms),
        ]);
    }
    table(&rows)
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_view_shows_endpoint_error_age_and_capacity() {
        let d = doc::ApiServerDoc {
            state: doc::ApiState::Connecting,
            endpoint: Some("https://10.100.0.1:443".into()),
            source: Some("kubernetes Service".into()),
            attempts: 7,
            last_error: Some("no answer".into()),
            last_error_ms: Some(10_000),
            node: Some(doc::NodeCapacity {
                name: "ip-1".into(),
                capacity_pods: 110,
                supported_pods: 29,
                exceeded: true,
            }),
            ..Default::default()
        };
        let t = api_text(&d, 25_000);
        assert!(t.contains("STATE            connecting"), "{t}");
        assert!(t.contains("no answer (15s ago)"), "{t}");
        assert!(
            t.contains("capacity.pods 110, pod IPs for 29 pods (EXCEEDED"),
            "{t}"
        );
        assert!(t.contains("ATTEMPTS         7"), "{t}");
    }

    #[test]
    fn an_eni_of_a_further_network_card_shows_as_card_slash_device() {
        let eni = |id: &str, card: u32, device: u32| doc::Eni {
            id: id.into(),
            network_card: card,
            device_number: device,
            ..Default::default()
        };
        let d = EnisDoc {
            enis: vec![eni("eni-c1", 1, 0), eni("eni-0", 0, 0), eni("eni-1", 0, 1)],
            ..Default::default()
        };
        let t = enis_text(&d, 0);
        let ids: Vec<String> = t
            .lines()
            .filter(|l| l.starts_with("eni-"))
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(ids, ["eni-0 0", "eni-1 1", "eni-c1 1/0"], "{t}");
    }

    #[test]
    fn eniconfig_view_shows_the_choice_or_the_reason() {
        let d = doc::EniConfigDoc {
            state: doc::EniConfigState::Unresolved,
            node: Some("ip-1".into()),
            name: Some("us-east-1b".into()),
            selected_by: Some("label topology.kubernetes.io/zone".into()),
            reason: Some("ENIConfigNotFound".into()),
            message: Some("ENIConfig \"us-east-1b\" does not exist: create it".into()),
            since_ms: Some(10_000),
            ..Default::default()
        };
        let t = eniconfig_text(&d, 25_000);
        assert!(t.contains("STATE            unresolved (for 15s)"), "{t}");
        assert!(t.contains("REASON           ENIConfigNotFound"), "{t}");
        assert!(
            t.contains("SELECTED BY      label topology.kubernetes.io/zone"),
            "{t}"
        );
        let d = doc::EniConfigDoc {
            state: doc::EniConfigState::Resolved,
            subnet: Some("subnet-9".into()),
            security_groups: vec!["sg-1".into(), "sg-2".into()],
            last_wait_ms: Some(1234),
            ..Default::default()
        };
        let t = eniconfig_text(&d, 0);
        assert!(t.contains("SUBNET           subnet-9"), "{t}");
        assert!(t.contains("SECURITY GROUPS  sg-1,sg-2"), "{t}");
        assert!(t.contains("1234 ms without a valid ENIConfig"), "{t}");
        let t = eniconfig_text(&doc::EniConfigDoc::default(), 0);
        assert!(t.contains("custom networking is off"), "{t}");
    }

    #[test]
    fn short_ids_and_pod_names() {
        let hex = "0123456789abcdef".repeat(4);
        assert_eq!(short(&hex), hex[..12]);
        assert_eq!(short("vlbd592-n1-c1"), "vlbd592-n1-c1");
        assert_eq!(pod_name("", ""), "-");
        assert_eq!(pod_name("default", "web"), "default/web");
    }

    #[test]
    fn cooling_shows_seconds_left() {
        let doc = EnisDoc {
            enis: vec![Eni {
                id: "eni-1".into(),
                addresses: vec![
                    Address {
                        ip: "10.0.0.5".into(),
                        cooling: true,
                        cooldown_ends_at_ms: Some(10_500),
                        ..Default::default()
                    },
                    Address {
                        ip: "10.0.0.6".into(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            last_error: Some("RequestLimitExceeded".into()),
            ..Default::default()
        };
        let t = enis_text(&doc, 3_000);
        assert!(!t.contains("provisioning:"), "{t}");
        let imds_only = EnisDoc {
            provisioning: "imds-only".into(),
            ..doc.clone()
        };
        assert!(
            enis_text(&imds_only, 3_000)
                .contains("provisioning: imds-only (ENABLE_IMDS_ONLY_MODE)"),
            "{t}"
        );
        assert!(t.contains("cooling (8s left)"), "{t}");
        assert!(t.contains("10.0.0.6  eni-1  free"), "{t}");
        assert!(t.contains("last EC2 error: RequestLimitExceeded"), "{t}");
    }

    #[test]
    fn a_prefix_fallback_is_said_with_its_next_try() {
        let mut d = EnisDoc::default();
        assert!(!enis_text(&d, 0).contains("falls back"));
        d.summary.prefix_fallback = Some(doc::PrefixFallback {
            since_ms: 0,
            failures: 2,
            retry_at_ms: 360_000,
        });
        let t = enis_text(&d, 0);
        assert!(
            t.contains("falls back to secondary IPs")
                && t.contains("InsufficientCidrBlocks 2 time(s)")
                && t.contains("1970-01-01T00:06:00"),
            "{t}"
        );
    }
}
