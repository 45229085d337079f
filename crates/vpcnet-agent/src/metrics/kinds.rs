//! The kinds of metric the declarations use ([`PlainCounter`], [`Labelled`] families of
//! `prometheus_client` metrics), how each registers itself and describes itself to
//! docs/metrics.md ([`Declared`]), and one declaration as documented ([`MetricDeclaration`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Metric, Registry};

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

/// The labels of one series: (name, value) pairs in exposition order.
type LabelSet<const N: usize> = [(&'static str, String); N];

/// A family of metrics `M` with the label names `names`, one series per label values.
#[derive(Debug)]
pub struct Labelled<M, const N: usize> {
    names: [&'static str; N],
    family: Family<LabelSet<N>, M, fn() -> M>,
}

impl<M: Default, const N: usize> Labelled<M, N> {
    /// Series start at `M::default()`.
    pub fn new(names: [&'static str; N]) -> Self {
        Labelled::with(names, M::default)
    }
}

impl<M, const N: usize> Labelled<M, N> {
    /// Series start at `new()` (e.g. a histogram with its buckets).
    pub fn with(names: [&'static str; N], new: fn() -> M) -> Self {
        Labelled {
            names,
            family: Family::new_with_constructor(new),
        }
    }

    /// `f` applied to the series with label values `values` (created if new).
    pub fn with_series<R>(&self, values: [&str; N], f: impl FnOnce(&M) -> R) -> R {
        let labels = std::array::from_fn(|i| (self.names[i], values[i].to_string()));
        f(&self.family.get_or_create(&labels))
    }

    /// Removes every series.
    pub fn clear(&self) {
        self.family.clear();
    }
}

/// How a kind of metric registers itself and how docs/metrics.md describes it.
pub trait Declared {
    /// The type column of docs/metrics.md.
    fn doc_type(&self) -> &'static str;
    /// Label names, in exposition order.
    fn label_names(&self) -> &[&'static str] {
        &[]
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str);
}

/// The type column of docs/metrics.md for a metric type.
fn doc_type(t: MetricType) -> &'static str {
    match t {
        MetricType::Gauge => "gauge",
        MetricType::Histogram => "histogram",
        // The VPC CNI's counters, exposed without `_total` (see the module docs).
        MetricType::Unknown => "counter†",
        _ => "other",
    }
}

/// Unlabelled metrics register a clone (clones share the value).
fn register_clone<M: Metric + Clone>(m: &M, registry: &mut Registry, name: &str, help: &str) {
    registry.register(name, help, m.clone());
}

impl Declared for Gauge {
    fn doc_type(&self) -> &'static str {
        doc_type(Self::TYPE)
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        register_clone(self, registry, name, help);
    }
}

impl Declared for PlainCounter {
    fn doc_type(&self) -> &'static str {
        doc_type(Self::TYPE)
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        register_clone(self, registry, name, help);
    }
}

impl<M, const N: usize> Declared for Labelled<M, N>
where
    M: EncodeMetric + TypedMetric + std::fmt::Debug + Send + Sync + 'static,
{
    fn doc_type(&self) -> &'static str {
        doc_type(M::TYPE)
    }
    fn label_names(&self) -> &[&'static str] {
        &self.names
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        registry.register(name, help, self.family.clone());
    }
}

/// One declared metric, as documented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricDeclaration {
    /// Exposed name, e.g. `awscni_total_ip_addresses`.
    pub name: &'static str,
    /// HELP text.
    pub help: &'static str,
    /// Its table in docs/metrics.md (`<!-- metrics:SECTION -->`).
    pub section: &'static str,
    /// Meaning, from the doc comment.
    pub doc: &'static str,
    /// Type as docs/metrics.md names it.
    pub doc_type: &'static str,
    pub labels: Vec<&'static str>,
}
