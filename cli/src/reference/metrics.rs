//! The metrics reference page: every metric the agent registers, in the one
//! registry `/metrics` renders, as `meshlimit_agent::run` wires them.

use meshlimit_agent::metrics::{MetricInfo, MetricKind};
use meshlimit_agent::run::metric_catalogue;

use super::markdown::{cell, code, table};
use super::{generated_by, ReferenceError};

/// docs/reference/metrics.md.
pub fn page() -> Result<String, ReferenceError> {
    let metrics = metric_catalogue()?;
    let mut out =
        generated_by("the agent's metric registry (agent/src/run.rs, `metric_catalogue`)");
    out.push_str(
        "# Metrics\n\n\
         Every metric `meshlimit-agent` serves on `GET /metrics`, in the Prometheus text \
         format, on its `--listen` address. A labelled metric shows in a scrape once it \
         has a first sample: a counter of a reason that never happened is absent, not 0. \
         A `key` label holds a key id, never the key itself (`meshlimit key-id` maps a \
         key to its id).\n\n\
         The filter's own counters are Envoy stats, not listed here: see \
         [Filter configuration](filter-config.md).\n\n",
    );
    let rows: Vec<Vec<String>> = metrics.iter().map(row).collect();
    out.push_str(&table(&["Metric", "Type", "Labels", "Description"], &rows));
    Ok(out)
}

/// One metric's row; a histogram's buckets follow its help.
fn row(metric: &MetricInfo) -> Vec<String> {
    let labels = metric
        .labels
        .iter()
        .map(|l| code(l))
        .collect::<Vec<_>>()
        .join(", ");
    let mut help = cell(&metric.help);
    if metric.kind == MetricKind::Histogram && !metric.buckets.is_empty() {
        let buckets = metric
            .buckets
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        help.push_str(&format!(" Buckets: {buckets}."));
    }
    vec![
        code(&metric.name),
        metric.kind.as_str().to_string(),
        labels,
        help,
    ]
}
