//! The metrics reference page: every metric the agent registers, in the one
//! registry `/metrics` renders, as `meshlimit_agent::run` wires them.

use meshlimit_agent::metrics::{MetricInfo, MetricKind};
use meshlimit_agent::reports::{FILTER_TTL, MAX_FILTERS, MAX_RULE_SERIES, OTHER_RULE};
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
    out.push_str(&bounds());
    Ok(out)
}

/// How the agent bounds its label values, from the constants that do it.
fn bounds() -> String {
    format!(
        "\n## Label values\n\n\
         Every label value comes from a bounded set, so no caller can grow the \
         number of series:\n\n\
         - `rule`: a rule of the rules in force; a filter's report of any other rule \
         counts under `{OTHER_RULE}`.\n\
         - The per-rule series `meshlimit_fail_open_ratio` and `meshlimit_rule_limit` \
         cover every rule of a set of at most {MAX_RULE_SERIES} rules. Of a larger set \
         they cover the rules that took decisions in the last 60 s, those failing open \
         first, then the busiest, at most {MAX_RULE_SERIES}.\n\
         - `filter`: at most {MAX_FILTERS} filters at once; a filter not heard from for \
         {} s leaves `meshlimit_filter_rules_version_info`.\n",
        FILTER_TTL.as_secs()
    )
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
