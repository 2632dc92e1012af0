//! Metrics of the rules watcher: reloads, the version in force, the last result,
//! and each rule's configured limit (so dashboards can show use against it).

use std::collections::HashSet;
use std::sync::Mutex;

use meshlimit_core::rules::{Limits, Rule, RuleSet};
use prometheus::{GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use meshlimit_store::fleet::OverrideMode;

use super::{inc, lock, Factory, Metrics, MetricsError};

pub(super) struct RulesMetrics {
    reloads: IntCounterVec,
    version: IntGaugeVec,
    last_reload_success: IntGauge,
    /// The version label currently set on `meshlimit_rules_version_info`.
    shown_version: Mutex<Option<String>>,
    limit: GaugeVec,
    fleet_override: IntGaugeVec,
    fleet_override_errors: IntCounter,
    pin_missing: IntGauge,
    control_refused: IntCounterVec,
    /// The (rule, plan) pairs currently set on `meshlimit_rule_limit`.
    shown_limits: Mutex<HashSet<(String, String)>>,
}

impl RulesMetrics {
    pub(super) fn new(f: &Factory<'_>) -> Result<Self, MetricsError> {
        let m = Self {
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
            limit: f.ratios(
                "meshlimit_rule_limit",
                "Each rule's configured limit, per plan (plan \"\" for a rule without plans): \
                 what=\"rate_per_second\" (requests per second one key may sustain) or \
                 what=\"burst\" (requests one key may send at once).",
                &["rule", "plan", "what"],
            )?,
            shown_limits: Mutex::new(HashSet::new()),
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
        // At 0 from the start, so the alert on it (and deploy-metrics) find it.
        for record in meshlimit_store::control::Record::ALL {
            for why in meshlimit_store::control::Refusal::ALL {
                inc(&m.control_refused, &[record.as_str(), why.as_str()], 0);
            }
        }
        // Off until an agent reads otherwise: the series exist from the start.
        for mode in OverrideMode::ALL {
            if let Ok(g) = m
                .fleet_override
                .get_metric_with_label_values(&[mode.as_str()])
            {
                g.set(0);
            }
        }
        Ok(m)
    }
}

impl Metrics {
    /// A valid rules file was applied: its version becomes the only one shown.
    pub(crate) fn rules_applied(&self, version: &str) {
        let m = &self.rules;
        inc(&m.reloads, &["ok"], 1);
        m.last_reload_success.set(1);
        self.rules_served(version);
    }

    /// `version` is the one served (a reload, or the fleet override shadowing
    /// the file's set or giving it back): the only one shown.
    pub(crate) fn rules_served(&self, version: &str) {
        let m = &self.rules;
        let mut shown = lock(&m.shown_version);
        if let Some(old) = shown.as_deref().filter(|old| *old != version) {
            let _ = m.version.remove_label_values(&[old]);
        }
        if let Ok(g) = m.version.get_metric_with_label_values(&[version]) {
            g.set(1);
        }
        *shown = Some(version.to_string());
        drop(shown);
        self.version_installed(version);
    }

    /// Shows `set`'s limits on `meshlimit_rule_limit` (for the rules shown, see
    /// [`super::reports::MAX_RULE_SERIES`]), and only them.
    pub(crate) fn rule_limits(&self, set: &RuleSet) {
        self.refresh(Some(set));
    }

    /// Shows `rules`' limits on `meshlimit_rule_limit`, and only them: the labels
    /// of rules or plans not among them are removed.
    pub(super) fn show_limits(&self, rules: &[&Rule]) {
        let m = &self.rules;
        let mut wanted = HashSet::new();
        for rule in rules {
            let limits: Vec<(&str, meshlimit_core::limit::Limit)> = match &rule.limits {
                Limits::Single(l) => vec![("", *l)],
                Limits::Plans { limits, .. } => {
                    limits.iter().map(|(p, l)| (p.as_str(), *l)).collect()
                }
            };
            for (plan, limit) in limits {
                for (what, value) in [
                    ("rate_per_second", limit.rate_per_sec()),
                    ("burst", f64::from(limit.burst())),
                ] {
                    if let Ok(g) = m
                        .limit
                        .get_metric_with_label_values(&[&rule.name, plan, what])
                    {
                        g.set(value);
                    }
                }
                wanted.insert((rule.name.clone(), plan.to_string()));
            }
        }
        let mut shown = lock(&m.shown_limits);
        for (rule, plan) in shown.difference(&wanted) {
            for what in ["rate_per_second", "burst"] {
                let _ = m.limit.remove_label_values(&[rule, plan, what]);
            }
        }
        *shown = wanted;
    }

    /// The fleet override in force: `mode`'s series 1, the others 0.
    pub(crate) fn fleet_override(&self, mode: Option<OverrideMode>) {
        for m in OverrideMode::ALL {
            if let Ok(g) = self
                .rules
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
        self.rules.pin_missing.set(i64::from(missing));
    }

    /// A control record read back was ignored.
    pub(crate) fn control_refused(
        &self,
        record: meshlimit_store::control::Record,
        why: meshlimit_store::control::Refusal,
    ) {
        inc(
            &self.rules.control_refused,
            &[record.as_str(), why.as_str()],
            1,
        );
    }

    /// A read of the fleet override failed.
    pub(crate) fn fleet_override_error(&self) {
        self.rules.fleet_override_errors.inc();
    }

    /// A rules file was refused (or could not be read); the last good set stays.
    pub(crate) fn rules_refused(&self) {
        inc(&self.rules.reloads, &["error"], 1);
        self.rules.last_reload_success.set(0);
    }
}
