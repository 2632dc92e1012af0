//! What the filters' sync reports feed: decision counts, the fail-open ratio per rule
//! over a sliding window, each filter's rules version, and (for the rules whose
//! series are shown) each rule's configured limit, so dashboards can show use
//! against it. Decisions are counted
//! here only, never from lease answers: a filter reports every decision it makes,
//! local or agent-answered, so counting leases too would count requests twice.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use meshlimit_core::fingerprint::fingerprint;
use meshlimit_core::rules::{Limits, Rule};
use meshlimit_core::wire::{SyncRequest, MAX_VERSION_LABEL};
use meshlimit_core::{Outcome, RuleSet};
use tokio::time::Instant;

use prometheus::{GaugeVec, Histogram, IntCounter, IntCounterVec, IntGaugeVec};

use crate::metrics::{inc, lock, show_ratios, Factory, MetricsError, Registry};
use crate::window::RuleWindows;

/// The most one report may add for one rule and outcome: more than a VM decides
/// between two syncs an hour apart at 25,000 requests a second. A report can
/// therefore never wrap a counter (u64 counters would take 10^11 such reports),
/// nor, with u64::MAX `allowed`, bury a rule's fail-open ratio.
pub const MAX_REPORTED_COUNT: u64 = 100_000_000;

/// The rule label for decisions about rules not in the current rules file (a filter
/// on older rules, or a forged name): folded so that cardinality stays bounded.
pub const OTHER_RULE: &str = "other";
/// A filter not heard from for this long leaves `meshlimit_filter_rules_version_info`.
pub const FILTER_TTL: Duration = Duration::from_secs(60);
/// At most this many filters are shown at once (a node runs a few Envoys with a few
/// VMs each; the cap only matters if something floods the agent with ids).
pub const MAX_FILTERS: usize = 1024;
/// Per-rule series (`meshlimit_fail_open_ratio`, `meshlimit_rule_limit`) are
/// shown for every rule of a set of at most this many rules; of a larger set,
/// for the rules that took decisions in the fail-open window, those failing
/// open first, then the busiest, at most this many: every rule's series of a
/// set of tens of thousands of rules would make each scrape megabytes long and
/// cost the agent a good part of a second.
pub const MAX_RULE_SERIES: usize = 1_000;
/// The version label of a sync whose `rules_version` is too long or not printable.
pub(crate) const INVALID_VERSION: &str = "invalid";
/// The longest filter id shown verbatim as a label.
const MAX_FILTER_LABEL: usize = 160;

/// The metrics the filters' reports feed.
pub struct ReportMetrics {
    /// Zero of the fail-open windows' clock (tokio's, so tests can pause it).
    epoch: Instant,
    decisions: IntCounterVec,
    fail_open_ratio: GaugeVec,
    filter_syncs: IntCounter,
    filter_rules_version: IntGaugeVec,
    filters_on_version: IntGaugeVec,
    propagation: Histogram,
    limit: GaugeVec,
    /// The (rule, plan) pairs currently set on `meshlimit_rule_limit`.
    shown_limits: std::sync::Mutex<HashSet<(String, String)>>,
    state: std::sync::Mutex<ReportState>,
}

/// Propagation buckets: a filter syncs once a second, so most land under 2 s.
const PROPAGATION_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0];

#[derive(Debug, Default)]
struct ReportState {
    windows: RuleWindows,
    /// Rule labels currently set on `meshlimit_fail_open_ratio`.
    shown_ratios: HashSet<String>,
    filters: HashMap<String, FilterSeen>,
    /// The version the agent put in force last, and when.
    installed: Option<(String, Instant)>,
    /// Version labels currently set on `meshlimit_filters_on_version`.
    shown_versions: HashSet<String>,
}

#[derive(Debug)]
struct FilterSeen {
    version: String,
    last_seen: Instant,
}

impl ReportMetrics {
    /// Registers the reports' metrics in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, MetricsError> {
        let f = Factory(registry);
        Ok(Self {
            epoch: Instant::now(),
            decisions: f.counters(
                "meshlimit_decisions_total",
                "Decisions reported by the filters, by rule and outcome.",
                &["rule", "outcome"],
            )?,
            fail_open_ratio: f.ratios(
                "meshlimit_fail_open_ratio",
                "Share of a rule's decisions that failed open over the last 60 s.",
                &["rule"],
            )?,
            filter_syncs: f.counter(
                "meshlimit_filter_syncs_total",
                "Sync reports received from filters.",
            )?,
            filter_rules_version: f.gauges(
                "meshlimit_filter_rules_version_info",
                "The rules version each filter last reported (1).",
                &["filter", "version"],
            )?,
            filters_on_version: f.gauges(
                "meshlimit_filters_on_version",
                "Filter VMs (heard from in the last minute) that report each rules version.",
                &["version"],
            )?,
            propagation: f.histogram(
                "meshlimit_rules_propagation_seconds",
                "From the agent putting a rules version in force to each filter VM \
                 reporting it.",
                &PROPAGATION_BUCKETS,
            )?,
            limit: f.ratios(
                "meshlimit_rule_limit",
                "Each rule's configured limit, per plan (plan \"\" for a rule without plans): \
                 what=\"rate_per_second\" (requests per second one key may sustain) or \
                 what=\"burst\" (requests one key may send at once).",
                &["rule", "plan", "what"],
            )?,
            shown_limits: std::sync::Mutex::new(HashSet::new()),
            state: std::sync::Mutex::new(ReportState::default()),
        })
    }

    fn now_secs(&self) -> u64 {
        self.epoch.elapsed().as_secs()
    }

    /// Adds one filter's sync report: its decision counts (into
    /// `meshlimit_decisions_total` and the fail-open windows) and its rules version.
    pub(crate) fn record_sync(&self, rules: Option<&RuleSet>, report: &SyncRequest) {
        self.filter_syncs.inc();
        let now = self.now_secs();
        let mut state = lock(&self.state);
        for d in report.decisions.iter().filter(|d| d.count > 0) {
            let rule = rule_label(rules, &d.rule);
            let count = d.count.min(MAX_REPORTED_COUNT);
            inc(&self.decisions, &[rule, d.outcome.as_str()], count);
            let failed_open = if d.outcome == Outcome::FailedOpen {
                count
            } else {
                0
            };
            state.windows.add(rule, now, failed_open, count);
        }
        let version = version_label(rules, report.rules_version.as_deref());
        self.record_filter(&mut state, &filter_label(&report.filter_id), version);
    }

    /// Brings the time-dependent gauges up to date: the fail-open ratios and
    /// limits of the rules shown (see [`MAX_RULE_SERIES`]; 0 without decisions)
    /// and the filters' versions (filters silent for [`FILTER_TTL`] are
    /// dropped). Called at every scrape and every second.
    pub(crate) fn refresh(&self, rules: Option<&RuleSet>) {
        let now = self.now_secs();
        let mut state = lock(&self.state);
        state.windows.prune(now);
        let shown = rules.map_or_else(Vec::new, |set| shown_rules(set, &state.windows, now));
        let mut wanted: HashSet<String> = shown.iter().map(|r| r.name.clone()).collect();
        // Decisions about rules not in the set (a filter on older rules; other
        // names are folded into one label): shown while in the window.
        let unknown = |r: &&str| rules.is_none_or(|set| set.position(r).is_none());
        wanted.extend(state.windows.rules().filter(unknown).map(str::to_string));
        let state = &mut *state;
        show_ratios(
            &self.fail_open_ratio,
            &mut state.shown_ratios,
            wanted,
            |rule| state.windows.ratio(rule, now),
        );
        self.show_limits(&shown);
        let instant = Instant::now();
        let gauge = &self.filter_rules_version;
        state.filters.retain(|id, seen| {
            let alive = instant.duration_since(seen.last_seen) < FILTER_TTL;
            if !alive {
                let _ = gauge.remove_label_values(&[id, &seen.version]);
            }
            alive
        });
        let mut counts: HashMap<String, i64> = HashMap::new();
        for seen in state.filters.values() {
            *counts.entry(seen.version.clone()).or_default() += 1;
        }
        let on_version = &self.filters_on_version;
        for (version, n) in &counts {
            if let Ok(g) = on_version.get_metric_with_label_values(&[version]) {
                g.set(*n);
            }
        }
        let shown: HashSet<String> = counts.into_keys().collect();
        for gone in state.shown_versions.difference(&shown) {
            let _ = on_version.remove_label_values(&[gone]);
        }
        state.shown_versions = shown;
    }

    /// The agent put `version` in force now: filters reporting it from here on
    /// are timed against this moment.
    pub(crate) fn version_installed(&self, version: &str) {
        lock(&self.state).installed = Some((version.to_string(), Instant::now()));
    }

    /// Shows `rules`' limits on `meshlimit_rule_limit`, and only them: the labels
    /// of rules or plans not among them are removed.
    fn show_limits(&self, rules: &[&Rule]) {
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
                    if let Ok(g) = self
                        .limit
                        .get_metric_with_label_values(&[&rule.name, plan, what])
                    {
                        g.set(value);
                    }
                }
                wanted.insert((rule.name.clone(), plan.to_string()));
            }
        }
        let mut shown = lock(&self.shown_limits);
        for (rule, plan) in shown.difference(&wanted) {
            for what in ["rate_per_second", "burst"] {
                let _ = self.limit.remove_label_values(&[rule, plan, what]);
            }
        }
        *shown = wanted;
    }

    fn record_filter(&self, state: &mut ReportState, filter: &str, version: &str) {
        let now = Instant::now();
        let full = state.filters.len() >= MAX_FILTERS;
        let arrived = state
            .filters
            .get(filter)
            .is_none_or(|seen| seen.version != version);
        if let Some((current, at)) = &state.installed {
            if arrived && current == version {
                self.propagation
                    .observe(now.duration_since(*at).as_secs_f64());
            }
        }
        match state.filters.get_mut(filter) {
            Some(seen) => {
                if seen.version != version {
                    let _ = self
                        .filter_rules_version
                        .remove_label_values(&[filter, &seen.version]);
                    seen.version = version.to_string();
                }
                seen.last_seen = now;
            }
            None if full => {
                tracing::debug!(filter, "too many filters to show; not adding one more");
                return;
            }
            None => {
                state.filters.insert(
                    filter.to_string(),
                    FilterSeen {
                        version: version.to_string(),
                        last_seen: now,
                    },
                );
            }
        }
        if let Ok(g) = self
            .filter_rules_version
            .get_metric_with_label_values(&[filter, version])
        {
            g.set(1);
        }
    }
}

/// The filter id as a label: kept when short and printable, else a readable prefix
/// and a fingerprint of the whole (still one label per filter, of bounded size).
fn filter_label(id: &str) -> Cow<'_, str> {
    if id.is_empty() {
        return Cow::Borrowed("unknown");
    }
    if id.len() <= MAX_FILTER_LABEL && !id.chars().any(char::is_control) {
        return Cow::Borrowed(id);
    }
    let prefix: String = id
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_FILTER_LABEL / 2)
        .collect();
    Cow::Owned(format!("{prefix}#{:016x}", fingerprint(id.as_bytes())))
}

/// The rules version as a label: `none` when absent; kept when it is the agent's
/// own or short and printable (an older set's hash); else `invalid`, so a forged
/// version cannot make a label (and /metrics) grow past [`MAX_VERSION_LABEL`].
fn version_label<'a>(rules: Option<&RuleSet>, version: Option<&'a str>) -> &'a str {
    match version {
        None | Some("") => "none",
        Some(v) if rules.is_some_and(|set| set.version() == v) => v,
        Some(v) if v.len() <= MAX_VERSION_LABEL && v.chars().all(|c| c.is_ascii_graphic()) => v,
        Some(_) => INVALID_VERSION,
    }
}

/// The rule's own name when the current set has it, else [`OTHER_RULE`].
fn rule_label<'a>(rules: Option<&RuleSet>, rule: &'a str) -> &'a str {
    match rules {
        Some(set) if set.rule(rule).is_some() => rule,
        _ => OTHER_RULE,
    }
}

/// The rules whose per-rule series are shown (see [`MAX_RULE_SERIES`]).
fn shown_rules<'s>(set: &'s RuleSet, windows: &RuleWindows, now: u64) -> Vec<&'s Rule> {
    if set.rules().len() <= MAX_RULE_SERIES {
        return set.rules().iter().collect();
    }
    let mut active: Vec<(&Rule, (u64, u64))> = windows
        .rules()
        .filter_map(|name| set.rule(name))
        .map(|rule| (rule, windows.totals(&rule.name, now)))
        .filter(|(_, (_, total))| *total > 0)
        .collect();
    // Failing open first (what an alert is about), then the busiest; by name
    // between equals, so the choice does not flap between scrapes.
    active.sort_by(|(ra, (fa, ta)), (rb, (fb, tb))| {
        (*fb > 0)
            .cmp(&(*fa > 0))
            .then(tb.cmp(ta))
            .then(ra.name.cmp(&rb.name))
    });
    active.truncate(MAX_RULE_SERIES);
    active.into_iter().map(|(rule, _)| rule).collect()
}
