//! What the agent's metrics share: one Prometheus registry, into which each
//! service registers its own metrics (defined beside it: `leases::metrics`,
//! `rules_watch::metrics`, `reports`, ...), and the helpers they use. Every
//! label value comes from a bounded set: rule names of the current rules file
//! (others fold into `other`), fixed outcome, result and reason words, and
//! filter ids capped in number. No metric carries a customer key, except the
//! region shares of the few keys with the most demand (`regions::TOP_KEYS`), a
//! bounded top-N. docs/reference/metrics.md lists them all, made from
//! [`Registry::described`] (`crate::run::metric_catalogue`).

pub(crate) mod top_keys;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus::core::Collector;
use prometheus::proto::{MetricFamily, MetricType};
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, TextEncoder,
};

/// A metric could not be registered: a programming error (a duplicate or
/// malformed name), reported at startup rather than hidden.
pub type MetricsError = prometheus::Error;

/// A Prometheus registry that also keeps a description of every metric
/// registered in it. A scrape shows only the metrics that hold a sample (a
/// labelled family before its first label values shows nothing);
/// [`Registry::described`] lists them all, for the reference documentation.
/// Cheap to clone: clones share the metrics and the descriptions.
#[derive(Clone, Default)]
pub struct Registry {
    inner: prometheus::Registry,
    described: Arc<Mutex<Vec<MetricInfo>>>,
}

/// One registered metric: what `/metrics` would say of it in `# HELP` and
/// `# TYPE`, its label names and, for a histogram, its buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricInfo {
    pub name: String,
    pub kind: MetricKind,
    pub labels: Vec<String>,
    pub help: String,
    /// A histogram's bucket upper bounds (`+Inf` left out); empty otherwise.
    pub buckets: Vec<f64>,
}

/// A metric's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

impl MetricKind {
    /// The word `# TYPE` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
            Self::Summary => "summary",
            Self::Untyped => "untyped",
        }
    }

    fn of(kind: MetricType) -> Self {
        match kind {
            MetricType::COUNTER => Self::Counter,
            MetricType::GAUGE => Self::Gauge,
            MetricType::HISTOGRAM => Self::Histogram,
            MetricType::SUMMARY => Self::Summary,
            MetricType::UNTYPED => Self::Untyped,
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("described", &lock(&self.described).len())
            .finish()
    }
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers `collector`, and describes each metric it holds.
    pub fn register(&self, collector: Box<dyn Collector>) -> Result<(), MetricsError> {
        let infos = describe(collector.as_ref());
        self.inner.register(collector)?;
        lock(&self.described).extend(infos);
        Ok(())
    }

    /// The samples of every metric that holds one, as `/metrics` renders them.
    pub fn gather(&self) -> Vec<MetricFamily> {
        self.inner.gather()
    }

    /// Every metric registered, with or without samples, sorted by name.
    pub fn described(&self) -> Vec<MetricInfo> {
        let mut all = lock(&self.described).clone();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }
}

/// The metrics `collector` holds, from its descriptors and what it collects now.
fn describe(collector: &dyn Collector) -> Vec<MetricInfo> {
    let families = collector.collect();
    collector
        .desc()
        .into_iter()
        .map(|desc| {
            let family = families.iter().find(|f| f.get_name() == desc.fq_name);
            let buckets = family
                .and_then(|f| f.get_metric().first())
                .map(|m| m.get_histogram().get_bucket())
                .unwrap_or_default()
                .iter()
                .map(|b| b.get_upper_bound())
                .filter(|b| b.is_finite())
                .collect();
            MetricInfo {
                name: desc.fq_name.clone(),
                kind: family.map_or(MetricKind::Untyped, |f| MetricKind::of(f.get_field_type())),
                labels: desc.variable_labels.clone(),
                help: desc.help.clone(),
                buckets,
            }
        })
        .collect()
}

/// Creates metrics and registers them in one go.
pub struct Factory<'a>(pub &'a Registry);

/// The Prometheus text exposition of every metric in `registry`.
pub fn render(registry: &Registry) -> Result<String, MetricsError> {
    TextEncoder::new().encode_to_string(&registry.gather())
}

impl Factory<'_> {
    fn register<C: prometheus::core::Collector + Clone + 'static>(
        &self,
        collector: C,
    ) -> Result<C, MetricsError> {
        self.0.register(Box::new(collector.clone()))?;
        Ok(collector)
    }

    pub fn counter(&self, name: &str, help: &str) -> Result<IntCounter, MetricsError> {
        self.register(IntCounter::with_opts(Opts::new(name, help))?)
    }

    pub fn counters(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntCounterVec, MetricsError> {
        self.register(IntCounterVec::new(Opts::new(name, help), labels)?)
    }

    pub fn gauge(&self, name: &str, help: &str) -> Result<IntGauge, MetricsError> {
        self.register(IntGauge::with_opts(Opts::new(name, help))?)
    }

    pub fn gauges(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntGaugeVec, MetricsError> {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels)?)
    }

    pub fn ratios(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<prometheus::GaugeVec, MetricsError> {
        self.register(prometheus::GaugeVec::new(Opts::new(name, help), labels)?)
    }

    pub fn histogram(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
    ) -> Result<Histogram, MetricsError> {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.register(Histogram::with_opts(opts)?)
    }
}

/// `with_label_values` panics on a label count mismatch; a metric is never worth a
/// crash, so a mismatch (a bug) only loses the increment.
pub(crate) fn inc(vec: &IntCounterVec, labels: &[&str], n: u64) {
    if let Ok(c) = vec.get_metric_with_label_values(labels) {
        c.inc_by(n);
    }
}

/// Sets `vec`'s gauge of every label in `wanted` to `ratio` of it and removes
/// the labels of `shown` no longer wanted (removed, not reset, so a concurrent
/// scrape never sees a gap); `wanted` becomes `shown`.
pub(crate) fn show_ratios(
    vec: &prometheus::GaugeVec,
    shown: &mut std::collections::HashSet<String>,
    wanted: std::collections::HashSet<String>,
    ratio: impl Fn(&str) -> f64,
) {
    for label in &wanted {
        if let Ok(g) = vec.get_metric_with_label_values(&[label]) {
            g.set(ratio(label));
        }
    }
    for gone in shown.difference(&wanted) {
        let _ = vec.remove_label_values(&[gone]);
    }
    *shown = wanted;
}

/// The guarded state is counters and labels: consistent after any panic elsewhere.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sets the gauge of `labels` in `vec` (a label count mismatch, a bug, loses the value).
pub(crate) fn set(vec: &prometheus::GaugeVec, labels: &[&str], value: f64) {
    if let Ok(g) = vec.get_metric_with_label_values(labels) {
        g.set(value);
    }
}

#[cfg(test)]
mod tests;
