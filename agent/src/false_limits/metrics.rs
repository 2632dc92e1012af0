//! The false-limit SLI's metrics (see `crate::false_limits` for what a false
//! limit is): per rule, the 429s checked and those found false, and their ratio
//! over a sliding window, each checked 429 weighing for the suspects of its rule
//! skipped since the last check, so that a check budget does not bias the
//! ratio towards the rejections the store confirmed.

use std::collections::{HashMap, HashSet};

use prometheus::{GaugeVec, IntCounterVec};
use tokio::time::Instant;

use crate::metrics::{inc, lock, show_ratios, Factory, MetricsError, Registry};
use crate::window::RuleWindows;

/// Why a suspect 429 was not checked (`reason` of
/// `meshlimit_false_limit_checks_skipped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// Over the node's checks per second.
    Budget,
    /// The checker's queue was full.
    Queue,
    /// Too long after the rejection to judge it.
    Stale,
    /// A `global` rule: the region's share of its limit is not known by key id.
    GlobalRule,
    /// A `fixed_window` or `sliding_window` rule: the check reads buckets only.
    WindowRule,
    /// The rule is not in the rules in force.
    UnknownRule,
    /// The store did not answer the peek.
    StoreError,
}

impl Skipped {
    fn as_str(self) -> &'static str {
        match self {
            Skipped::Budget => "budget",
            Skipped::Queue => "queue",
            Skipped::Stale => "stale",
            Skipped::GlobalRule => "global_rule",
            Skipped::WindowRule => "window_rule",
            Skipped::UnknownRule => "unknown_rule",
            Skipped::StoreError => "store_error",
        }
    }

    /// Skips that say nothing about the rule's 429s (the rule is only too busy
    /// for the budget): the next check of the rule weighs for them.
    fn is_sampling(self) -> bool {
        matches!(self, Skipped::Budget | Skipped::Queue)
    }
}

/// Rules whose skipped suspects are remembered at once (a bound on names a
/// filter sends).
const MAX_OWED_RULES: usize = 4_096;

/// The false-limit SLI's metrics.
pub struct FalseLimitMetrics {
    /// Zero of the windows' clock (tokio's, so tests can pause it).
    epoch: Instant,
    false_limits: IntCounterVec,
    checks: IntCounterVec,
    skipped: IntCounterVec,
    weighed: IntCounterVec,
    weighed_false: IntCounterVec,
    ratio: GaugeVec,
    state: std::sync::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Per rule: (false, checked), weighted, over the window.
    windows: RuleWindows,
    /// Per rule: suspects skipped for the budget since its last check.
    owed: HashMap<String, u64>,
    /// Rule labels currently set on the ratio.
    shown: HashSet<String>,
}

impl FalseLimitMetrics {
    /// Registers the SLI's metrics in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, MetricsError> {
        let f = Factory(registry);
        Ok(Self {
            epoch: Instant::now(),
            false_limits: f.counters(
                "meshlimit_false_limits_total",
                "429s checked and found false: the key's bucket in the store held the \
                 request's cost at that moment.",
                &["rule"],
            )?,
            checks: f.counters(
                "meshlimit_false_limit_checks_total",
                "429s checked for the false-limit SLI (confirmed by the store, or peeked).",
                &["rule"],
            )?,
            skipped: f.counters(
                "meshlimit_false_limit_checks_skipped_total",
                "Suspect 429s (cached denials, pool holds) not checked, by reason.",
                &["reason"],
            )?,
            weighed: f.counters(
                "meshlimit_false_limit_weighed_total",
                "429s the checks stand for: each check weighs for itself and the suspects \
                 of its rule skipped for the budget since the previous one (the ratio's \
                 denominator, summable over nodes).",
                &["rule"],
            )?,
            weighed_false: f.counters(
                "meshlimit_false_limit_weighed_false_total",
                "The weight of the checks found false (the ratio's numerator, summable \
                 over nodes): an estimate of the rule's false 429s.",
                &["rule"],
            )?,
            ratio: f.ratios(
                "meshlimit_false_limit_ratio",
                "Share of a rule's 429s that were false over the last 60 s (suspects \
                 skipped for the check budget weighed by the next check of the rule).",
                &["rule"],
            )?,
            state: std::sync::Mutex::new(State::default()),
        })
    }

    fn now_secs(&self) -> u64 {
        self.epoch.elapsed().as_secs()
    }

    /// One 429 of `rule` checked: false or not.
    pub(crate) fn false_limit_checked(&self, rule: &str, is_false: bool) {
        let now = self.now_secs();
        let mut state = lock(&self.state);
        let weight = 1 + state.owed.remove(rule).unwrap_or(0);
        let wrong = if is_false { weight } else { 0 };
        state.windows.add(rule, now, wrong, weight);
        inc(&self.checks, &[rule], 1);
        inc(&self.weighed, &[rule], weight);
        if is_false {
            inc(&self.false_limits, &[rule], 1);
            inc(&self.weighed_false, &[rule], weight);
        }
    }

    /// One suspect 429 of `rule` not checked.
    pub(crate) fn false_limit_skipped(&self, rule: &str, why: Skipped) {
        inc(&self.skipped, &[why.as_str()], 1);
        if why.is_sampling() {
            let mut state = lock(&self.state);
            if let Some(owed) = state.owed.get_mut(rule) {
                *owed = owed.saturating_add(1);
            } else if state.owed.len() < MAX_OWED_RULES {
                state.owed.insert(rule.to_string(), 1);
            }
        }
    }

    /// Sets the ratio of every rule with checks in the window (others removed).
    pub(crate) fn refresh(&self) {
        let now = self.now_secs();
        let mut state = lock(&self.state);
        state.windows.prune(now);
        let wanted: HashSet<String> = state.windows.rules().map(str::to_string).collect();
        let state = &mut *state;
        show_ratios(&self.ratio, &mut state.shown, wanted, |rule| {
            state.windows.ratio(rule, now)
        });
    }
}
