//! A rules change on trial (`changes.shadow_first`), as the region's agents
//! share it: the first agent to install a version over a running one records
//! the trial's plan ([`meshlimit_core::rules::trial`]) and its start, by the
//! store's clock, in the store; every agent serves what the store says, so
//! they agree on the set and on when it ends. An operator ends a trial early
//! or holds it (`meshlimit override end-trial|hold-trial`); each agent
//! reads that with the fleet override, every `--override-poll-ms`.

pub mod metrics;

use crate::rules_watch::CurrentRules;
use metrics::TrialMetrics;

/// Shows the trial running on `rules` (or that none runs) in `metrics`.
pub(crate) fn publish(rules: &CurrentRules, metrics: &TrialMetrics) {
    metrics.show(rules.trial().as_ref());
}
