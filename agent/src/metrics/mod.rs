//! The agent's Prometheus metrics (listed in README.md, "Command line, ports, metrics";
//! docs/internals.md, "Metrics", for the region ones). Every label value comes
//! from a bounded set: rule names of the current rules file (others fold into
//! `other`), fixed outcome, result and reason words, and filter ids capped in number.
//! No metric carries a customer key, except the region shares of the few keys with
//! the most demand (`regions::TOP_KEYS`), a bounded top-N.
//!
//! Grouped by what feeds them: the filters' sync reports (`reports`), the lease path
//! and the store (`leases`), the rules watcher (`rules`), the region exchange
//! (`regions`), the decision log (`declog`), a rules change's trial (`trial`),
//! the false-limit SLI (`false_limits`).

mod declog;
mod false_limits;
mod leases;
mod regions;
mod reports;
mod rules;
mod top_keys;
mod trial;

use meshlimit_core::secret::{KeyId, KeyIds};
use std::sync::{Mutex, MutexGuard, PoisonError};

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use tokio::time::Instant;

pub(crate) use false_limits::Skipped;
pub use reports::{FILTER_TTL, MAX_FILTERS, MAX_REPORTED_COUNT, OTHER_RULE};

/// Every metric the agent exports, registered in one registry.
pub struct Metrics {
    registry: Registry,
    /// Zero of the fail-open windows' clock (tokio's, so tests can pause it).
    epoch: Instant,
    reports: reports::ReportMetrics,
    false_limits: false_limits::FalseLimitMetrics,
    leases: leases::LeaseMetrics,
    rules: rules::RulesMetrics,
    regions: regions::RegionMetrics,
    trial: trial::TrialMetrics,
    bad_requests: IntCounterVec,
    /// How labels name customer keys: by the deployment's keyed hash.
    key_ids: std::sync::OnceLock<KeyIds>,
    connections_refused: IntCounter,
    declog: declog::DecisionLogMetrics,
}

/// A metric could not be registered: a programming error (a duplicate or
/// malformed name), reported at startup rather than hidden.
pub type MetricsError = prometheus::Error;

/// Creates metrics and registers them in one go.
struct Factory<'a>(&'a Registry);

impl Metrics {
    /// Registers every metric; `region` goes into `meshlimit_agent_info`.
    pub fn new(region: &str) -> Result<Metrics, MetricsError> {
        let registry = Registry::new();
        let f = Factory(&registry);
        let info = f.gauges(
            "meshlimit_agent_info",
            "The agent's build and region (always 1).",
            &["version", "region"],
        )?;
        if let Ok(g) = info.get_metric_with_label_values(&[env!("CARGO_PKG_VERSION"), region]) {
            g.set(1);
        }
        Ok(Metrics {
            epoch: Instant::now(),
            reports: reports::ReportMetrics::new(&f)?,
            false_limits: false_limits::FalseLimitMetrics::new(&f)?,
            leases: leases::LeaseMetrics::new(&f)?,
            rules: rules::RulesMetrics::new(&f)?,
            regions: regions::RegionMetrics::new(&f)?,
            trial: trial::TrialMetrics::new(&f)?,
            bad_requests: f.counters(
                "meshlimit_bad_requests_total",
                "Requests refused with a 4xx, by reason.",
                &["reason"],
            )?,
            connections_refused: f.counter(
                "meshlimit_connections_refused_total",
                "Connections closed at once because --max-connections were open.",
            )?,
            declog: declog::DecisionLogMetrics::new(&f)?,
            registry,
            key_ids: std::sync::OnceLock::new(),
        })
    }

    /// Sets the keyed hash that names keys in labels (once, at start).
    pub(crate) fn set_key_ids(&self, ids: KeyIds) {
        let _ = self.key_ids.set(ids);
    }

    /// The id a label shows for `key`. Before [`Metrics::set_key_ids`] (tests
    /// only: `run` sets it first) ids are keyed by a fixed placeholder, still
    /// never the key in clear.
    pub(crate) fn key_id(&self, key: &meshlimit_core::DescriptorKey) -> KeyId {
        self.key_ids.get_or_init(KeyIds::placeholder).id(key)
    }

    /// The keyed hash that names keys (the placeholder before `set_key_ids`).
    pub(crate) fn key_ids(&self) -> &KeyIds {
        self.key_ids.get_or_init(KeyIds::placeholder)
    }

    /// The Prometheus text exposition of every metric.
    pub(crate) fn render(&self) -> Result<String, MetricsError> {
        TextEncoder::new().encode_to_string(&self.registry.gather())
    }

    /// A request refused for the caller's mistake; `reason` is a fixed word.
    pub(crate) fn bad_request(&self, reason: &str) {
        inc(&self.bad_requests, &[reason], 1);
    }

    /// A connection closed on accept: the agent had its maximum open.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    fn now_secs(&self) -> u64 {
        self.epoch.elapsed().as_secs()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Factory<'_> {
    fn register<C: prometheus::core::Collector + Clone + 'static>(
        &self,
        collector: C,
    ) -> Result<C, MetricsError> {
        self.0.register(Box::new(collector.clone()))?;
        Ok(collector)
    }

    fn counter(&self, name: &str, help: &str) -> Result<IntCounter, MetricsError> {
        self.register(IntCounter::with_opts(Opts::new(name, help))?)
    }

    fn counters(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntCounterVec, MetricsError> {
        self.register(IntCounterVec::new(Opts::new(name, help), labels)?)
    }

    fn gauge(&self, name: &str, help: &str) -> Result<IntGauge, MetricsError> {
        self.register(IntGauge::with_opts(Opts::new(name, help))?)
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec, MetricsError> {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels)?)
    }

    fn ratios(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<prometheus::GaugeVec, MetricsError> {
        self.register(prometheus::GaugeVec::new(Opts::new(name, help), labels)?)
    }

    fn histogram(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
    ) -> Result<Histogram, MetricsError> {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.register(Histogram::with_opts(opts)?)
    }
}

/// The value of the sample `name{labels…}` in Prometheus text, if present. Labels
/// not listed are ignored. For tests and debugging.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(series, _)| {
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|(_, value)| value.parse().ok())
}

/// `with_label_values` panics on a label count mismatch; a metric is never worth a
/// crash, so a mismatch (a bug) only loses the increment.
fn inc(vec: &IntCounterVec, labels: &[&str], n: u64) {
    if let Ok(c) = vec.get_metric_with_label_values(labels) {
        c.inc_by(n);
    }
}

/// Sets `vec`'s gauge of every label in `wanted` to `ratio` of it and removes
/// the labels of `shown` no longer wanted (removed, not reset, so a concurrent
/// scrape never sees a gap); `wanted` becomes `shown`.
fn show_ratios(
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
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
