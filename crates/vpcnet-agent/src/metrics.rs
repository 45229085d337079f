//! Prometheus metrics of the agent, under the VPC CNI's metric names where a counterpart
//! exists (`awscni_*`, as published by amazon-vpc-cni-k8s's ipamd on `:61678/metrics`), and
//! `vpcnet_*` names for additions. The list, with types and labels, is in `METRICS.md`.
//!
//! Encoding is OpenMetrics text ([`CONTENT_TYPE`]). Two deliberate deviations keep the VPC
//! CNI's series names intact for existing dashboards and alerts:
//! - its counters (`awscni_*_count`, `awscni_force_removed_*`,
//!   `awscni_no_available_ip_addresses`) are exposed with OpenMetrics type `unknown`, so the
//!   sample names carry no `_total` suffix;
//! - its summary `awscni_aws_api_latency_ms` is a histogram here: `_sum` and `_count` keep their
//!   names, `_bucket` replaces the quantiles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use vpcnet_ec2::{Action, Ec2Error, Ec2Observer};

/// HTTP `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A monotonically increasing count encoded under its plain name (no `_total`), as the VPC
/// CNI's Go client exposes its counters. Clones share the value.
#[derive(Debug, Clone, Default)]
pub struct PlainCounter(Arc<AtomicU64>);

impl PlainCounter {
    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub fn inc_by(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl TypedMetric for PlainCounter {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for PlainCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FnLabel {
    r#fn: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLatencyLabels {
    api: String,
    error: String,
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiErrorLabels {
    api: String,
    error: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EniLabel {
    eni: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CidrLabel {
    cidr: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn api_latency_histogram() -> Histogram {
    // 5 ms .. ~41 s
    Histogram::new(exponential_buckets(5.0, 2.0, 14))
}

fn action_latency_histogram() -> Histogram {
    // 0.25 ms .. ~33 s
    Histogram::new(exponential_buckets(0.25, 2.0, 18))
}

fn fn_label(name: &str) -> FnLabel {
    FnLabel {
        r#fn: name.to_string(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

/// The agent's metrics registry. Share it as `Arc<Metrics>`; pass the same `Arc` to
/// [`vpcnet_ec2::Ec2::connect`] as the [`Ec2Observer`].
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    ipamd_error_count: Family<FnLabel, PlainCounter>,
    ipamd_action_inprogress: Family<FnLabel, Gauge>,
    eni_max: Gauge,
    ip_max: Gauge,
    reconcile_count: Family<FnLabel, PlainCounter>,
    add_ip_req_count: PlainCounter,
    del_ip_req_count: Family<ReasonLabel, PlainCounter>,
    aws_api_latency_ms: HistogramFamily<ApiLatencyLabels>,
    aws_api_error_count: Family<ApiErrorLabels, PlainCounter>,
    ec2api_req_count: Family<FnLabel, PlainCounter>,
    ec2api_error_count: Family<FnLabel, PlainCounter>,
    eni_allocated: Gauge,
    total_ip_addresses: Gauge,
    assigned_ip_addresses: Gauge,
    force_removed_enis: PlainCounter,
    force_removed_ips: PlainCounter,
    total_ipv4_prefixes: Gauge,
    assigned_ip_per_cidr: Family<CidrLabel, Gauge>,
    no_available_ip_addresses: PlainCounter,
    assigned_ip_per_eni: Family<EniLabel, Gauge>,
    cooldown_ip_addresses: Gauge,
    ipamd_action_latency_ms: HistogramFamily<FnLabel>,
    ec2_ratelimited_count: Family<FnLabel, PlainCounter>,
    ec2_call_error_count: Family<ApiErrorLabels, PlainCounter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every metric registered (families appear once they have a series).
    pub fn new() -> Self {
        let m = Metrics {
            registry: Registry::default(),
            ipamd_error_count: Family::default(),
            ipamd_action_inprogress: Family::default(),
            eni_max: Gauge::default(),
            ip_max: Gauge::default(),
            reconcile_count: Family::default(),
            add_ip_req_count: PlainCounter::default(),
            del_ip_req_count: Family::default(),
            aws_api_latency_ms: Family::new_with_constructor(api_latency_histogram),
            aws_api_error_count: Family::default(),
            ec2api_req_count: Family::default(),
            ec2api_error_count: Family::default(),
            eni_allocated: Gauge::default(),
            total_ip_addresses: Gauge::default(),
            assigned_ip_addresses: Gauge::default(),
            force_removed_enis: PlainCounter::default(),
            force_removed_ips: PlainCounter::default(),
            total_ipv4_prefixes: Gauge::default(),
            assigned_ip_per_cidr: Family::default(),
            no_available_ip_addresses: PlainCounter::default(),
            assigned_ip_per_eni: Family::default(),
            cooldown_ip_addresses: Gauge::default(),
            ipamd_action_latency_ms: Family::new_with_constructor(action_latency_histogram),
            ec2_ratelimited_count: Family::default(),
            ec2_call_error_count: Family::default(),
        };
        let mut r = Registry::default();
        r.register(
            "awscni_ipamd_error_count",
            "The number of errors encountered in ipamd",
            m.ipamd_error_count.clone(),
        );
        r.register(
            "awscni_ipamd_action_inprogress",
            "The number of ipamd actions in progress",
            m.ipamd_action_inprogress.clone(),
        );
        r.register(
            "awscni_eni_max",
            "The maximum number of ENIs that can be attached to the instance",
            m.eni_max.clone(),
        );
        r.register(
            "awscni_ip_max",
            "The maximum number of IP addresses that can be allocated to the instance",
            m.ip_max.clone(),
        );
        r.register(
            "awscni_reconcile_count",
            "The number of times ipamd reconciled ENIs and IP addresses with EC2",
            m.reconcile_count.clone(),
        );
        r.register(
            "awscni_add_ip_req_count",
            "The number of add IP address requests",
            m.add_ip_req_count.clone(),
        );
        r.register(
            "awscni_del_ip_req_count",
            "The number of delete IP address requests",
            m.del_ip_req_count.clone(),
        );
        r.register(
            "awscni_aws_api_latency_ms",
            "AWS API request latency in ms",
            m.aws_api_latency_ms.clone(),
        );
        r.register(
            "awscni_aws_api_error_count",
            "The number of times an AWS API request returned an error",
            m.aws_api_error_count.clone(),
        );
        r.register(
            "awscni_ec2api_req_count",
            "The number of requests made to EC2 APIs",
            m.ec2api_req_count.clone(),
        );
        r.register(
            "awscni_ec2api_error_count",
            "The number of failed EC2 API requests",
            m.ec2api_error_count.clone(),
        );
        r.register(
            "awscni_eni_allocated",
            "The number of ENIs allocated",
            m.eni_allocated.clone(),
        );
        r.register(
            "awscni_total_ip_addresses",
            "The total number of IP addresses",
            m.total_ip_addresses.clone(),
        );
        r.register(
            "awscni_assigned_ip_addresses",
            "The number of IP addresses assigned to pods",
            m.assigned_ip_addresses.clone(),
        );
        r.register(
            "awscni_force_removed_enis",
            "The number of ENIs force removed while they had assigned pods",
            m.force_removed_enis.clone(),
        );
        r.register(
            "awscni_force_removed_ips",
            "The number of IPs force removed while they had assigned pods",
            m.force_removed_ips.clone(),
        );
        r.register(
            "awscni_total_ipv4_prefixes",
            "The total number of IPv4 prefixes",
            m.total_ipv4_prefixes.clone(),
        );
        r.register(
            "awscni_assigned_ip_per_cidr",
            "The number of IP addresses assigned per CIDR",
            m.assigned_ip_per_cidr.clone(),
        );
        r.register(
            "awscni_no_available_ip_addresses",
            "The number of pod IP assignments that failed for lack of a free IP address",
            m.no_available_ip_addresses.clone(),
        );
        r.register(
            "awscni_assigned_ip_per_eni",
            "The number of assigned IP addresses per ENI",
            m.assigned_ip_per_eni.clone(),
        );
        r.register(
            "vpcnet_cooldown_ip_addresses",
            "The number of released IP addresses still in their cooldown period",
            m.cooldown_ip_addresses.clone(),
        );
        r.register(
            "vpcnet_ipamd_action_latency_ms",
            "Latency of ipamd actions in ms",
            m.ipamd_action_latency_ms.clone(),
        );
        r.register(
            "vpcnet_ec2_ratelimited_count",
            "The number of EC2 calls delayed by the client-side token bucket",
            m.ec2_ratelimited_count.clone(),
        );
        r.register(
            "vpcnet_ec2_call_error_count",
            "The number of EC2 calls that failed after retries",
            m.ec2_call_error_count.clone(),
        );
        Metrics { registry: r, ..m }
    }

    /// The registry in OpenMetrics text format (serve with [`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    // --- pool gauges -------------------------------------------------------------------

    /// `awscni_total_ip_addresses`: IPs held on the node's ENIs (free, assigned, cooling down).
    pub fn set_total_ip_addresses(&self, n: u64) {
        self.total_ip_addresses.set(n as i64);
    }

    /// `awscni_assigned_ip_addresses`: IPs assigned to pods.
    pub fn set_assigned_ip_addresses(&self, n: u64) {
        self.assigned_ip_addresses.set(n as i64);
    }

    /// `vpcnet_cooldown_ip_addresses`: released IPs not yet reusable.
    pub fn set_cooldown_ip_addresses(&self, n: u64) {
        self.cooldown_ip_addresses.set(n as i64);
    }

    /// `awscni_eni_allocated`: ENIs attached and managed.
    pub fn set_eni_allocated(&self, n: u64) {
        self.eni_allocated.set(n as i64);
    }

    /// `awscni_eni_max`: ENIs the node may hold (instance limit, capped by `MAX_ENI`).
    pub fn set_eni_max(&self, n: u64) {
        self.eni_max.set(n as i64);
    }

    /// `awscni_ip_max`: IPs the node may hold.
    pub fn set_ip_max(&self, n: u64) {
        self.ip_max.set(n as i64);
    }

    /// `awscni_total_ipv4_prefixes`: /28 prefixes held.
    pub fn set_total_ipv4_prefixes(&self, n: u64) {
        self.total_ipv4_prefixes.set(n as i64);
    }

    /// `awscni_assigned_ip_per_eni{eni}`: replaces every series with `per_eni`
    /// (ENI ID, assigned IPs), so freed ENIs disappear.
    pub fn set_assigned_ip_per_eni<'a>(&self, per_eni: impl IntoIterator<Item = (&'a str, u64)>) {
        self.assigned_ip_per_eni.clear();
        for (eni, n) in per_eni {
            self.assigned_ip_per_eni
                .get_or_create(&EniLabel {
                    eni: eni.to_string(),
                })
                .set(n as i64);
        }
    }

    /// `awscni_assigned_ip_per_cidr{cidr}`: replaces every series with `per_cidr`
    /// (CIDR as text, e.g. a /32 or a /28 prefix, assigned IPs).
    pub fn set_assigned_ip_per_cidr<'a>(&self, per_cidr: impl IntoIterator<Item = (&'a str, u64)>) {
        self.assigned_ip_per_cidr.clear();
        for (cidr, n) in per_cidr {
            self.assigned_ip_per_cidr
                .get_or_create(&CidrLabel {
                    cidr: cidr.to_string(),
                })
                .set(n as i64);
        }
    }

    // --- request counters ----------------------------------------------------------------

    /// `awscni_add_ip_req_count`: one AddNetwork request.
    pub fn inc_add_ip_req(&self) {
        self.add_ip_req_count.inc();
    }

    /// `awscni_del_ip_req_count{reason}`: one DelNetwork request (`reason`, e.g. `PodDeleted`).
    pub fn inc_del_ip_req(&self, reason: &str) {
        self.del_ip_req_count
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// `awscni_no_available_ip_addresses`: an AddNetwork failed for lack of a free IP.
    pub fn inc_no_available_ip(&self) {
        self.no_available_ip_addresses.inc();
    }

    /// `awscni_ipamd_error_count{fn}`: an error in ipamd function `fn_`.
    pub fn inc_ipamd_error(&self, fn_: &str) {
        self.ipamd_error_count.get_or_create(&fn_label(fn_)).inc();
    }

    /// `awscni_reconcile_count{fn}`: one reconcile of kind `fn_` (e.g. `eniReconcile`).
    pub fn inc_reconcile(&self, fn_: &str) {
        self.reconcile_count.get_or_create(&fn_label(fn_)).inc();
    }

    /// `awscni_force_removed_enis`.
    pub fn inc_force_removed_enis(&self, n: u64) {
        self.force_removed_enis.inc_by(n);
    }

    /// `awscni_force_removed_ips`.
    pub fn inc_force_removed_ips(&self, n: u64) {
        self.force_removed_ips.inc_by(n);
    }

    /// Track ipamd action `fn_` (e.g. `increaseIPPool`): `awscni_ipamd_action_inprogress{fn}`
    /// is raised until the returned guard drops, and the duration lands in
    /// `vpcnet_ipamd_action_latency_ms{fn}`.
    pub fn action(&self, fn_: &str) -> ActionTimer<'_> {
        let label = fn_label(fn_);
        self.ipamd_action_inprogress.get_or_create(&label).inc();
        ActionTimer {
            metrics: self,
            label,
            started: Instant::now(),
        }
    }
}

/// Guard returned by [`Metrics::action`].
#[must_use = "the action is measured until the guard drops"]
pub struct ActionTimer<'a> {
    metrics: &'a Metrics,
    label: FnLabel,
    started: Instant,
}

impl Drop for ActionTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .ipamd_action_inprogress
            .get_or_create(&self.label)
            .dec();
        self.metrics
            .ipamd_action_latency_ms
            .get_or_create(&self.label)
            .observe(ms(self.started.elapsed()));
    }
}

impl Ec2Observer for Metrics {
    /// Per HTTP attempt: `awscni_ec2api_req_count{fn}`, `awscni_aws_api_latency_ms{api,error,
    /// status}` (status `200` on success, else the EC2 error code), and on error
    /// `awscni_ec2api_error_count{fn}` and `awscni_aws_api_error_count{api,error}`.
    fn on_attempt(&self, action: Action, latency: Duration, error: Option<&Ec2Error>) {
        let api = action.as_str();
        self.ec2api_req_count.get_or_create(&fn_label(api)).inc();
        let (error_flag, status) = match error {
            None => ("false", "200".to_string()),
            Some(e) => ("true", e.code().to_string()),
        };
        self.aws_api_latency_ms
            .get_or_create(&ApiLatencyLabels {
                api: api.to_string(),
                error: error_flag.to_string(),
                status,
            })
            .observe(ms(latency));
        if let Some(e) = error {
            self.ec2api_error_count.get_or_create(&fn_label(api)).inc();
            self.aws_api_error_count
                .get_or_create(&ApiErrorLabels {
                    api: api.to_string(),
                    error: e.code().to_string(),
                })
                .inc();
        }
    }

    /// Per logical call that failed after retries: `vpcnet_ec2_call_error_count{api,error}`.
    fn on_call(&self, action: Action, _latency: Duration, error: Option<&Ec2Error>) {
        if let Some(e) = error {
            self.ec2_call_error_count
                .get_or_create(&ApiErrorLabels {
                    api: action.as_str().to_string(),
                    error: e.code().to_string(),
                })
                .inc();
        }
    }

    /// `vpcnet_ec2_ratelimited_count{fn}`.
    fn on_rate_limited(&self, action: Action, _waited: Duration) {
        self.ec2_ratelimited_count
            .get_or_create(&fn_label(action.as_str()))
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line starting with `series` (name plus labels).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.trim().parse().ok())
        })
    }

    #[test]
    fn encoding_carries_the_vpc_cni_names_and_values() {
        let m = Metrics::new();
        m.set_total_ip_addresses(28);
        m.set_assigned_ip_addresses(3);
        m.set_eni_allocated(2);
        m.set_eni_max(3);
        m.set_ip_max(27);
        m.set_total_ipv4_prefixes(0);
        m.set_cooldown_ip_addresses(1);
        m.set_assigned_ip_per_eni([("eni-1", 2), ("eni-2", 1)]);
        m.set_assigned_ip_per_cidr([("10.0.0.5/32", 1)]);
        m.inc_add_ip_req();
        m.inc_add_ip_req();
        m.inc_del_ip_req("PodDeleted");
        m.inc_no_available_ip();
        m.inc_ipamd_error("increaseIPPool");
        m.inc_reconcile("eniReconcile");
        m.inc_force_removed_enis(1);
        m.inc_force_removed_ips(2);
        drop(m.action("increaseIPPool"));

        let t = m.encode();
        assert_eq!(sample(&t, "awscni_total_ip_addresses "), Some(28.0));
        assert_eq!(sample(&t, "awscni_assigned_ip_addresses "), Some(3.0));
        assert_eq!(sample(&t, "awscni_eni_allocated "), Some(2.0));
        assert_eq!(sample(&t, "awscni_eni_max "), Some(3.0));
        assert_eq!(sample(&t, "awscni_ip_max "), Some(27.0));
        assert_eq!(sample(&t, "awscni_total_ipv4_prefixes "), Some(0.0));
        assert_eq!(sample(&t, "vpcnet_cooldown_ip_addresses "), Some(1.0));
        assert_eq!(
            sample(&t, "awscni_assigned_ip_per_eni{eni=\"eni-1\"} "),
            Some(2.0)
        );
        assert_eq!(
            sample(&t, "awscni_assigned_ip_per_cidr{cidr=\"10.0.0.5/32\"} "),
            Some(1.0)
        );
        // Counters keep the VPC CNI's sample names (no `_total`).
        assert_eq!(sample(&t, "awscni_add_ip_req_count "), Some(2.0));
        assert_eq!(
            sample(&t, "awscni_del_ip_req_count{reason=\"PodDeleted\"} "),
            Some(1.0)
        );
        assert_eq!(sample(&t, "awscni_no_available_ip_addresses "), Some(1.0));
        assert_eq!(
            sample(&t, "awscni_ipamd_error_count{fn=\"increaseIPPool\"} "),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "awscni_reconcile_count{fn=\"eniReconcile\"} "),
            Some(1.0)
        );
        assert_eq!(sample(&t, "awscni_force_removed_enis "), Some(1.0));
        assert_eq!(sample(&t, "awscni_force_removed_ips "), Some(2.0));
        assert!(!t.contains("_count_total"), "{t}");
        assert_eq!(
            sample(&t, "awscni_ipamd_action_inprogress{fn=\"increaseIPPool\"} "),
            Some(0.0)
        );
        assert_eq!(
            sample(
                &t,
                "vpcnet_ipamd_action_latency_ms_count{fn=\"increaseIPPool\"} "
            ),
            Some(1.0)
        );
        assert!(t.ends_with("# EOF\n"));
    }

    #[test]
    fn action_timer_counts_in_progress() {
        let m = Metrics::new();
        let a = m.action("decreaseIPPool");
        let b = m.action("decreaseIPPool");
        assert_eq!(
            sample(
                &m.encode(),
                "awscni_ipamd_action_inprogress{fn=\"decreaseIPPool\"} "
            ),
            Some(2.0)
        );
        drop(a);
        assert_eq!(
            sample(
                &m.encode(),
                "awscni_ipamd_action_inprogress{fn=\"decreaseIPPool\"} "
            ),
            Some(1.0)
        );
        drop(b);
        assert_eq!(
            sample(
                &m.encode(),
                "vpcnet_ipamd_action_latency_ms_count{fn=\"decreaseIPPool\"} "
            ),
            Some(2.0)
        );
    }

    #[test]
    fn ec2_observer_counts_requests_errors_and_latency_by_action() {
        let m = Arc::new(Metrics::new());
        let obs: Arc<dyn Ec2Observer> = m.clone();
        let throttled = Ec2Error::api(
            Action::AssignPrivateIpAddresses,
            "RequestLimitExceeded",
            "",
            Some(503),
        );
        obs.on_attempt(
            Action::AssignPrivateIpAddresses,
            Duration::from_millis(12),
            Some(&throttled),
        );
        obs.on_attempt(
            Action::AssignPrivateIpAddresses,
            Duration::from_millis(30),
            None,
        );
        obs.on_attempt(
            Action::DescribeNetworkInterfaces,
            Duration::from_millis(7),
            None,
        );
        let limit = Ec2Error::api(
            Action::AttachNetworkInterface,
            "AttachmentLimitExceeded",
            "",
            Some(400),
        );
        obs.on_attempt(
            Action::AttachNetworkInterface,
            Duration::from_millis(3),
            Some(&limit),
        );
        obs.on_call(
            Action::AttachNetworkInterface,
            Duration::from_millis(3),
            Some(&limit),
        );
        obs.on_rate_limited(Action::CreateNetworkInterface, Duration::from_millis(200));

        let t = m.encode();
        assert_eq!(
            sample(
                &t,
                "awscni_ec2api_req_count{fn=\"AssignPrivateIpAddresses\"} "
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &t,
                "awscni_ec2api_req_count{fn=\"DescribeNetworkInterfaces\"} "
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &t,
                "awscni_ec2api_error_count{fn=\"AssignPrivateIpAddresses\"} "
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &t,
                "awscni_ec2api_error_count{fn=\"AttachNetworkInterface\"} "
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "awscni_aws_api_error_count{api=\"AssignPrivateIpAddresses\",error=\"RequestLimitExceeded\"} "),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "awscni_aws_api_latency_ms_count{api=\"AssignPrivateIpAddresses\",error=\"false\",status=\"200\"} "),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "awscni_aws_api_latency_ms_sum{api=\"AssignPrivateIpAddresses\",error=\"true\",status=\"RequestLimitExceeded\"} "),
            Some(12.0)
        );
        assert_eq!(
            sample(&t, "vpcnet_ec2_call_error_count{api=\"AttachNetworkInterface\",error=\"AttachmentLimitExceeded\"} "),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &t,
                "vpcnet_ec2_ratelimited_count{fn=\"CreateNetworkInterface\"} "
            ),
            Some(1.0)
        );
    }

    #[test]
    fn per_eni_series_are_replaced() {
        let m = Metrics::new();
        m.set_assigned_ip_per_eni([("eni-1", 2), ("eni-2", 1)]);
        m.set_assigned_ip_per_eni([("eni-2", 4)]);
        let t = m.encode();
        assert!(!t.contains("eni-1"), "{t}");
        assert_eq!(
            sample(&t, "awscni_assigned_ip_per_eni{eni=\"eni-2\"} "),
            Some(4.0)
        );
    }
}
