//! Metrics of a rules change's trial in shadow: that one runs and when it ends,
//! and for each rule on trial the keys it would have rejected most (by key id,
//! never in clear; Space-Saving counts of the agent's denials, as
//! `meshlimit_top_rejected_keys`). Its would-be rejections in all are the
//! trial rules' `meshlimit_decisions_total{outcome="shadow_limited"}`.

use std::collections::HashMap;

use prometheus::{GaugeVec, IntGauge, IntGaugeVec};

use crate::metrics::top_keys::TopKeys;
use crate::metrics::{lock, Factory, MetricsError, Registry};
use crate::rules_watch::TrialView;

/// Trial rules whose keys are counted (the first ones of the plan): the
/// series stay bounded by this × ten whatever the change.
pub(crate) const MAX_TRIAL_RULES: usize = 20;

/// A trial's metrics: fed by the rules watcher and the override poll (which
/// trial runs) and by the lease path (the denials of the rules on trial).
pub struct TrialMetrics {
    on: IntGaugeVec,
    held: IntGauge,
    end: GaugeVec,
    top: IntGaugeVec,
    state: std::sync::Mutex<TrialState>,
}

#[derive(Default)]
struct TrialState {
    version: Option<String>,
    /// The counters of each rule on trial whose keys are counted.
    keys: HashMap<String, TopKeys>,
}

impl TrialMetrics {
    /// Registers a trial's metrics in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, MetricsError> {
        let f = Factory(registry);
        Ok(Self {
            on: f.gauges(
                "meshlimit_rules_trial",
                "1 while a rules version is on trial (its new and tightened rules in \
                 shadow, changes.shadow_first).",
                &["version"],
            )?,
            held: f.gauge(
                "meshlimit_rules_trial_held",
                "1 while an operator holds the trial running (override hold-trial): \
                 its new and tightened rules stay in shadow until it is ended.",
            )?,
            end: f.ratios(
                "meshlimit_rules_trial_end_seconds",
                "When the trial of the version ends, Unix seconds of the store's clock \
                 (+Inf while held).",
                &["version"],
            )?,
            top: f.gauges(
                "meshlimit_trial_top_keys",
                "While a trial runs: for each rule on trial, the keys the agent denied \
                 most (their would-be rejections), by key id, ten a rule.",
                &["rule", "rank", "key"],
            )?,
            state: std::sync::Mutex::default(),
        })
    }
}

impl TrialMetrics {
    /// Shows `trial` (or that none runs): the gauges, and which rules' denials
    /// are counted by key.
    pub(crate) fn show(&self, trial: Option<&TrialView>) {
        let m = self;
        let mut state = lock(&m.state);
        let version = trial.map(|t| t.version.clone());
        if state.version != version {
            m.on.reset();
            m.end.reset();
            m.top.reset();
            state.keys = trial
                .map(|t| {
                    t.rules
                        .iter()
                        .take(MAX_TRIAL_RULES)
                        .map(|r| (r.clone(), TopKeys::default()))
                        .collect()
                })
                .unwrap_or_default();
            state.version = version;
        }
        m.held.set(i64::from(trial.is_some_and(|t| t.clock.held)));
        let Some(t) = trial else { return };
        if let Ok(g) = m.on.get_metric_with_label_values(&[&t.version]) {
            g.set(1);
        }
        let end = if t.clock.held {
            f64::INFINITY
        } else {
            t.clock.planned_end_ms() as f64 / 1_000.0
        };
        if let Ok(g) = m.end.get_metric_with_label_values(&[&t.version]) {
            g.set(end);
        }
    }

    /// A denial of `rule` for the key named `id`, counted if `rule` is on trial.
    pub(crate) fn denied(&self, rule: &str, id: &str) {
        if let Some(top) = lock(&self.state).keys.get_mut(rule) {
            top.record(rule, id, 1);
        }
    }

    /// Re-exports the top keys of each rule on trial.
    pub(crate) fn refresh_keys(&self) {
        let m = self;
        let state = lock(&m.state);
        m.top.reset();
        for (rule, top) in &state.keys {
            for (rank, (_, key, count)) in top.top().iter().enumerate() {
                let rank = (rank + 1).to_string();
                if let Ok(g) = m.top.get_metric_with_label_values(&[rule, &rank, key]) {
                    g.set(i64::try_from(*count).unwrap_or(i64::MAX));
                }
            }
        }
    }
}
