//! Metrics of the rules watcher and the fleet override: reloads, the version in
//! force, the last result, the override and the control records refused. A
//! version put in force starts the filters' propagation clock (`reports`), and
//! a trial shows in `trial`'s metrics.

use std::sync::{Arc, Mutex};

use meshlimit_core::rules::RuleSet;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use meshlimit_store::fleet::OverrideMode;

use crate::metrics::{inc, lock, Factory, MetricsError, Registry};
use crate::reports::ReportMetrics;
use crate::trial::metrics::TrialMetrics;

/// The rules' metrics.
pub struct RulesMetrics {
    reloads: IntCounterVec,
    version: IntGaugeVec,
    last_reload_success: IntGauge,
    /// The version label currently set on `meshlimit_rules_version_info`.
    shown_version: Mutex<Option<String>>,
    fleet_override: IntGaugeVec,
    fleet_override_errors: IntCounter,
    pin_missing: IntGauge,
    control_refused: IntCounterVec,
    reports: Arc<ReportMetrics>,
    trial: Arc<TrialMetrics>,
}

impl std::fmt::Debug for RulesMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RulesMetrics").finish_non_exhaustive()
    }
}

impl RulesMetrics {
    /// Registers the rules' metrics in `registry`; versions put in force are
    /// told to `reports`, trials shown in `trial`.
    pub fn new(
        registry: &Registry,
        reports: Arc<ReportMetrics>,
        trial: Arc<TrialMetrics>,
    ) -> Result<Self, MetricsError> {
        let f = Factory(registry);
        let m = Self {
            reports,
            trial,
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
            fleet_override: f.gauges(
                "meshlimit_fleet_override",
                "1 while the fleet override puts every rule in this mode (shadow: \
                 counted, never refused), else 0.",
                &["mode"],
            )?,
            pin_missing: f.gauge(
                "meshlimit_fleet_pin_missing",
                "1 while the fleet override pins a rules version this agent does not \
                 have (restarted since): it serves every rule in shadow instead.",
            )?,
            control_refused: f.counters(
                "meshlimit_control_refused_total",
                "Control records read back from the store and ignored (the fleet \
                 override, a trial, the versions served, the audit history), by \
                 record and reason: mac (missing or does not verify under the \
                 deployment secret), size (over its cap), parse.",
                &["record", "reason"],
            )?,
            fleet_override_errors: f.counter(
                "meshlimit_fleet_override_errors_total",
                "Reads of the fleet override the store could not answer (the last \
                 known state stays).",
            )?,
        };
        m.show_zeros();
        Ok(m)
    }

    /// Every control refusal and override mode at 0, so their series exist
    /// from the start.
    fn show_zeros(&self) {
        // So the alert on refusals (and deploy-metrics) find them.
        for record in meshlimit_store::control::Record::ALL {
            for why in meshlimit_store::control::Refusal::ALL {
                inc(&self.control_refused, &[record.as_str(), why.as_str()], 0);
            }
        }
        // Off until an agent reads otherwise.
        for mode in OverrideMode::ALL {
            if let Ok(g) = self
                .fleet_override
                .get_metric_with_label_values(&[mode.as_str()])
            {
                g.set(0);
            }
        }
    }

    /// The rules' metrics with reports' and trial metrics of their own, all in
    /// `registry`: for a watcher whose versions no filter reports on (a
    /// check, a test).
    pub fn standalone(registry: &Registry) -> Result<Self, MetricsError> {
        let reports = Arc::new(ReportMetrics::new(registry)?);
        let trial = Arc::new(TrialMetrics::new(registry)?);
        Self::new(registry, reports, trial)
    }

    /// The trial's metrics.
    pub(crate) fn trial(&self) -> &TrialMetrics {
        &self.trial
    }

    /// A valid rules file was applied: its version becomes the only one shown.
    pub(crate) fn rules_applied(&self, version: &str) {
        let m = self;
        inc(&m.reloads, &["ok"], 1);
        m.last_reload_success.set(1);
        self.rules_served(version);
    }

    /// `version` is the one served (a reload, or the fleet override shadowing
    /// the file's set or giving it back): the only one shown.
    pub(crate) fn rules_served(&self, version: &str) {
        let m = self;
        let mut shown = lock(&m.shown_version);
        if let Some(old) = shown.as_deref().filter(|old| *old != version) {
            let _ = m.version.remove_label_values(&[old]);
        }
        if let Ok(g) = m.version.get_metric_with_label_values(&[version]) {
            g.set(1);
        }
        *shown = Some(version.to_string());
        drop(shown);
        self.reports.version_installed(version);
    }

    /// Shows `set`'s limits on `meshlimit_rule_limit` (for the rules shown, see
    /// [`crate::reports::MAX_RULE_SERIES`]), and only them.
    pub(crate) fn rule_limits(&self, set: &RuleSet) {
        self.reports.refresh(Some(set));
    }

    /// The fleet override in force: `mode`'s series 1, the others 0.
    pub(crate) fn fleet_override(&self, mode: Option<OverrideMode>) {
        for m in OverrideMode::ALL {
            if let Ok(g) = self
                .fleet_override
                .get_metric_with_label_values(&[m.as_str()])
            {
                g.set(i64::from(mode == Some(m)));
            }
        }
    }

    /// Whether this agent lacks the version the fleet override pins (and so
    /// serves every rule in shadow).
    pub(crate) fn pin_missing(&self, missing: bool) {
        self.pin_missing.set(i64::from(missing));
    }

    /// A control record read back was ignored.
    pub(crate) fn control_refused(
        &self,
        record: meshlimit_store::control::Record,
        why: meshlimit_store::control::Refusal,
    ) {
        inc(&self.control_refused, &[record.as_str(), why.as_str()], 1);
    }

    /// A read of the fleet override failed.
    pub(crate) fn fleet_override_error(&self) {
        self.fleet_override_errors.inc();
    }

    /// A rules file was refused (or could not be read); the last good set stays.
    pub(crate) fn rules_refused(&self) {
        inc(&self.reloads, &["error"], 1);
        self.last_reload_success.set(0);
    }
}
