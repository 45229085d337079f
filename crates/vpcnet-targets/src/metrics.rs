//! The controller's Prometheus metrics (OpenMetrics text on `/metrics`). Their table, with
//! types, labels and meaning, is in `docs/metrics.md` at the repository's root, section
//! "vpcnet-targets"; the test `docs_list_every_metric` fails when a metric registered here is
//! missing from it.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// HTTP `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels1 = [(&'static str, String); 1];
type Labels2 = [(&'static str, String); 2];

/// Every metric of the controller; clones share the values.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub registrations: Counter,
    pub deregistrations: Counter,
    pub calls: Family<Labels1, Counter>,
    pub errors: Family<Labels2, Counter>,
    pub gates_opened: Counter,
    pub gates_opened_not_in_use: Counter,
    pub not_in_use: Family<Labels1, Gauge>,
    pub reconcile: Histogram,
    pub target_groups: Gauge,
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::default();
        let registrations = Counter::default();
        let deregistrations = Counter::default();
        let calls = Family::<Labels1, Counter>::default();
        let errors = Family::<Labels2, Counter>::default();
        let gates_opened = Counter::default();
        let gates_opened_not_in_use = Counter::default();
        let not_in_use = Family::<Labels1, Gauge>::default();
        let reconcile = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let target_groups = Gauge::default();
        let leader = Gauge::default();
        r.register(
            "vpcnet_targets_registrations",
            "Targets registered",
            registrations.clone(),
        );
        r.register(
            "vpcnet_targets_deregistrations",
            "Targets deregistered",
            deregistrations.clone(),
        );
        r.register(
            "vpcnet_targets_elbv2_calls",
            "ELBv2 calls by action",
            calls.clone(),
        );
        r.register(
            "vpcnet_targets_elbv2_errors",
            "Failed ELBv2 calls by action and error code",
            errors.clone(),
        );
        r.register(
            "vpcnet_targets_gates_opened",
            "Readiness gates set True",
            gates_opened.clone(),
        );
        r.register(
            "vpcnet_targets_gates_opened_not_in_use",
            "Readiness gates set True without a health check: no load balancer uses the target group",
            gates_opened_not_in_use.clone(),
        );
        r.register(
            "vpcnet_targets_target_group_not_in_use",
            "1 while no load balancer uses the target group (targets unused, Target.NotInUse)",
            not_in_use.clone(),
        );
        r.register(
            "vpcnet_targets_reconcile_seconds",
            "Duration of one target group's reconcile",
            reconcile.clone(),
        );
        r.register(
            "vpcnet_targets_target_groups",
            "Target groups managed",
            target_groups.clone(),
        );
        r.register(
            "vpcnet_targets_leader",
            "1 while this replica holds the lease and may write",
            leader.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            registrations,
            deregistrations,
            calls,
            errors,
            gates_opened,
            gates_opened_not_in_use,
            not_in_use,
            reconcile,
            target_groups,
            leader,
        }
    }

    /// Counts one ELBv2 call and, if it failed, its error code.
    pub fn call(&self, action: &str, error: Option<&str>) {
        self.calls.get_or_create(&[("action", action.into())]).inc();
        if let Some(code) = error {
            self.errors
                .get_or_create(&[("action", action.into()), ("code", code.into())])
                .inc();
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_errors_are_labelled() {
        let m = Metrics::new();
        m.call("RegisterTargets", None);
        m.call("RegisterTargets", Some("Throttling"));
        m.registrations.inc_by(3);
        let text = m.encode();
        assert!(
            text.contains("vpcnet_targets_elbv2_calls_total{action=\"RegisterTargets\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "vpcnet_targets_elbv2_errors_total{action=\"RegisterTargets\",code=\"Throttling\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("vpcnet_targets_registrations_total 3"),
            "{text}"
        );
    }

    /// docs/metrics.md lists every metric registered here (its "vpcnet-targets" section).
    #[test]
    fn docs_list_every_metric() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
        let page = std::fs::read_to_string(path).unwrap();
        let section = page
            .split_once("\n## vpcnet-targets\n")
            .map(|(_, s)| s)
            .unwrap_or_else(|| panic!("{path} has no \"## vpcnet-targets\" section"));
        // A labelled family is exposed once it has a series.
        let m = Metrics::new();
        m.call("RegisterTargets", Some("Throttling"));
        m.not_in_use
            .get_or_create(&[("target_group", "tg".into())])
            .set(0);
        let text = m.encode();
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(names.len(), 10, "{text}");
        for name in names {
            assert!(
                section.contains(&format!("| `{name}` |"))
                    || section.contains(&format!("| `{name}_total` |")),
                "{path}: the vpcnet-targets table has no row for {name}"
            );
        }
    }
}
