use std::sync::Arc;

use super::*;

/// A registry with a series in every family (a family without one is not encoded).
fn populated() -> Arc<Metrics> {
    let m = Arc::new(Metrics::new());
    m.set_assigned_ip_per_eni([("eni-1", 1)]);
    m.set_assigned_ip_per_cidr([("10.0.0.1/32", 1)]);
    m.inc_del_ip_req("PodDeleted");
    m.inc_ipamd_error("x");
    m.inc_reconcile("x");
    m.inc_ec2_describe("x");
    m.inc_datapath_repair("x");
    m.set_datapath_unrepaired([("x", 1)]);
    m.inc_k8s_watch_restart("x");
    m.set_eni_management_paused(0);
    m.set_provisioning_mode([("ec2", 1)]);
    m.set_prefix_fallback(0);
    m.observe_watch_apply("x", Duration::ZERO);
    m.observe_policy_program("x", Duration::ZERO);
    m.set_policy_allowed_packets([("x", 1)]);
    m.set_policy_denied_packets([("x", 1)]);
    m.set_policy_cluster_objects([("x", 1)]);
    m.inc_policy_events_written("x");
    m.inc_checkpoint_recovery("x");
    m.inc_evidence_hold("x");
    drop(m.action("x"));
    let e = Ec2Error::api(Action::AttachNetworkInterface, "Boom", "", Some(400));
    let obs: Arc<dyn Ec2Observer> = m.clone();
    obs.on_attempt(Action::AttachNetworkInterface, Duration::ZERO, Some(&e));
    obs.on_call(Action::AttachNetworkInterface, Duration::ZERO, Some(&e));
    obs.on_rate_limited(Action::AttachNetworkInterface, Duration::ZERO);
    m
}

/// Names, types, help texts and label names of the encoded registry are the declared
/// ones, in declaration order.
#[test]
fn declarations_match_the_registry() {
    let m = populated();
    let text = m.encode();
    let types: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    let declared: Vec<(&str, &str)> = m
        .declarations()
        .iter()
        .map(|d| {
            let t = match d.doc_type {
                "counter†" => "unknown",
                t => t,
            };
            (d.name, t)
        })
        .collect();
    assert_eq!(types, declared);
    for d in m.declarations() {
        assert!(
            text.contains(&format!("# HELP {} {}.\n", d.name, d.help)),
            "{}",
            d.name
        );
        assert!(!d.doc.trim().is_empty(), "{} has no meaning", d.name);
        let sum = format!("{}_sum", d.name);
        let sample = text
            .lines()
            .find(|l| {
                let series = l.split(['{', ' ']).next().unwrap_or_default();
                series == d.name || series == sum
            })
            .unwrap_or_else(|| panic!("no series of {}", d.name));
        let labels: Vec<&str> = sample
            .split_once('{')
            .map(|(_, rest)| {
                rest.split(',')
                    .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(labels, d.labels, "{sample}");
    }
}

#[test]
fn docs_are_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
    let page = std::fs::read_to_string(path).unwrap();
    let want = crate::docs::splice(&page, "metrics", &Metrics::new().doc_tables())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    crate::docs::check_page(path, &want);
}
