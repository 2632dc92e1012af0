//! Unit tests of the agent's metrics: the helpers they share, and one module per concept.

use std::time::Duration;

use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::{DecisionCount, SyncRequest, WIRE_VERSION};
use meshlimit_core::{DescriptorKey, Outcome};

use super::*;

mod decisions;
mod filter_reports;
mod region_exchange;
mod rejected_keys;
mod rule_series;
mod store_and_leases;

const RULES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/rule-r-ten-per-second.yaml"
));

fn report(filter: &str, version: &str, decisions: &[(&str, Outcome, u64)]) -> SyncRequest {
    SyncRequest {
        v: WIRE_VERSION,
        fetches_rules: false,
        filter_id: filter.into(),
        rules_version: Some(version.into()),
        decisions: decisions
            .iter()
            .map(|(rule, outcome, count)| DecisionCount {
                rule: (*rule).into(),
                outcome: *outcome,
                count: *count,
            })
            .collect(),
    }
}

/// A sample that must be there: its value.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{text}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn sample_reads_labelled_and_bare_series() {
    let text = "# HELP x y\nm_total{a=\"1\",b=\"2\"} 3\nn 4.5\n";
    assert_eq!(sample(text, "m_total", &[("b", "2")]), Some(3.0));
    assert_eq!(sample(text, "n", &[]), Some(4.5));
    assert_eq!(sample(text, "m", &[]), None);
}
