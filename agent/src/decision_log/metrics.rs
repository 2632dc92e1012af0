//! Metrics of the decision log: lines written, records lost and where.

use prometheus::{IntCounter, IntCounterVec};

use crate::metrics::{inc, Factory, MetricsError, Registry};

/// The decision log's metrics.
pub struct DecisionLogMetrics {
    records: IntCounter,
    dropped: IntCounterVec,
}

impl DecisionLogMetrics {
    /// Registers the decision log's metrics in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, MetricsError> {
        let f = Factory(registry);
        Ok(Self {
            records: f.counter(
                "meshlimit_decision_log_records_total",
                "Decision log records written (stdout or the log files).",
            )?,
            dropped: f.counters(
                "meshlimit_decision_log_dropped_total",
                "Decision log records lost, by where: `filter` (a VM's buffer full, or its batch refused), `agent` (the writer's queue full, or a write failed), `refused` (a record of a rule not in force).",
                &["at"],
            )?,
        })
    }

    /// `n` decision log records written.
    pub(crate) fn decision_log_written(&self, n: u64) {
        self.records.inc_by(n);
    }

    /// `n` decision log records lost `at` the filter or the agent.
    pub(crate) fn decision_log_dropped(&self, at: &'static str, n: u64) {
        inc(&self.dropped, &[at], n);
    }
}
