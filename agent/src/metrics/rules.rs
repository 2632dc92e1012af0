//! Metrics of the rules watcher: reloads, the version in force, the last result.

use std::sync::Mutex;

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec};

use super::{inc, lock, Factory, Metrics, MetricsError};

pub(super) struct RulesMetrics {
    reloads: IntCounterVec,
    version: IntGaugeVec,
    last_reload_success: IntGauge,
    /// The version label currently set on `meshlimit_rules_version_info`.
    shown_version: Mutex<Option<String>>,
}

impl RulesMetrics {
    pub(super) fn new(f: &Factory<'_>) -> Result<Self, MetricsError> {
        Ok(Self {
            reloads: f.counters(
                "meshlimit_rules_reloads_total",
                "Rules file loads, by result.",
                &["result"],
            )?,
            version: f.gauges(
                "meshlimit_rules_version_info",
                "The rules version in force (1).",
                &["version"],
            )?,
            last_reload_success: f.gauge(
                "meshlimit_rules_last_reload_success",
                "1 if the last rules file read was valid, else 0.",
            )?,
            shown_version: Mutex::new(None),
        })
    }
}

impl Metrics {
    /// A valid rules file was applied: its version becomes the only one shown.
    pub fn rules_applied(&self, version: &str) {
        let m = &self.rules;
        inc(&m.reloads, &["ok"], 1);
        m.last_reload_success.set(1);
        let mut shown = lock(&m.shown_version);
        if let Some(old) = shown.as_deref().filter(|old| *old != version) {
            let _ = m.version.remove_label_values(&[old]);
        }
        if let Ok(g) = m.version.get_metric_with_label_values(&[version]) {
            g.set(1);
        }
        *shown = Some(version.to_string());
    }

    /// A rules file was refused (or could not be read); the last good set stays.
    pub fn rules_refused(&self) {
        inc(&self.rules.reloads, &["error"], 1);
        self.rules.last_reload_success.set(0);
    }
}
