//! Unit tests of the agent's metrics: the helpers they share, and one module per concept.

use std::time::Duration;

use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::{DecisionCount, SyncRequest, WIRE_VERSION};
use meshlimit_core::{DescriptorKey, Outcome};

use std::sync::Arc;

use meshlimit_core::secret::KeyIds;
use meshlimit_core::RuleSet;

use super::*;
use crate::decision_log::DecisionLogMetrics;
use crate::leases::LeaseMetrics;
use crate::regions::metrics::RegionMetrics;
use crate::reports::ReportMetrics;
use crate::reports::{FILTER_TTL, MAX_FILTERS};
use crate::rules_watch::RulesMetrics;
use crate::trial::metrics::TrialMetrics;
use meshlimit_tests::sample;

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

/// The services' metrics in one registry, as the agent registers them.
struct Fixture {
    registry: Registry,
    leases: LeaseMetrics,
    rules: RulesMetrics,
    reports: Arc<ReportMetrics>,
    trial: Arc<TrialMetrics>,
    regions: RegionMetrics,
    declog: DecisionLogMetrics,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with_key_ids(KeyIds::placeholder())
    }

    fn with_key_ids(ids: KeyIds) -> Fixture {
        let registry = Registry::new();
        let trial = Arc::new(TrialMetrics::new(&registry).unwrap());
        let reports = Arc::new(ReportMetrics::new(&registry).unwrap());
        Fixture {
            leases: LeaseMetrics::new(&registry, ids, trial.clone()).unwrap(),
            rules: RulesMetrics::new(&registry, reports.clone(), trial.clone()).unwrap(),
            regions: RegionMetrics::new(&registry).unwrap(),
            declog: DecisionLogMetrics::new(&registry).unwrap(),
            reports,
            trial,
            registry,
        }
    }

    /// What a scrape refreshes first.
    fn refresh(&self, rules: Option<&RuleSet>) {
        self.leases.refresh_top_keys();
        self.reports.refresh(rules);
    }

    fn render(&self) -> Result<String, MetricsError> {
        render(&self.registry)
    }
}

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
