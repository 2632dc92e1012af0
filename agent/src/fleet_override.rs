//! The fleet-wide override: one switch, kept in the store the region's agents
//! share, that puts every rule in shadow (counted, never refused) until it is
//! cleared. Each agent polls it (`--override-poll-ms`) and, while it is on,
//! serves and uses the rules in force with every rule's mode set to `shadow`:
//! the filters see a new rules version at their next sync, and the agent's own
//! decisions (node pool, fail-local) read the same shadowed set. Cleared, the
//! file's set is back. Pinned (`override pin`), every agent serves the rules
//! version the region ran before the current one, named in the store, or, an
//! agent that does not have it (restarted since), every rule in shadow.
//! `meshlimit override shadow|pin|clear` (the operator's CLI) sets it; `end-trial|hold-trial`
//! act on a rules change's trial in shadow ([`crate::trial`]), read by the same
//! poll; `history` prints who changed which (`meshlimit_store::control`).

use std::sync::Arc;
use std::time::Duration;

use meshlimit_core::rules::{Mode, RulesConfig, RulesError};
use meshlimit_core::RuleSet;

use crate::rules_watch::CurrentRules;
use crate::rules_watch::RulesMetrics;
use crate::shutdown::Shutdown;
use meshlimit_store::fleet::{Override, OverrideMode};
use meshlimit_store::trial::StoredTrial;
use meshlimit_store::{FleetState, StoreError};

/// `config` with every rule in shadow (the defaults too), compiled as a set of
/// its own: its version differs from the file's, so filters load it.
pub(crate) fn shadowed(config: &RulesConfig) -> Result<RuleSet, RulesError> {
    let mut config = config.clone();
    config.defaults.mode = Some(Mode::Shadow);
    for rule in &mut config.rules {
        rule.mode = Some(Mode::Shadow);
    }
    RuleSet::compile_shared(Arc::new(config))
}

/// Reads the override every `every` and applies each change to `rules`; a
/// store error keeps the last known state (counted in
/// `meshlimit_fleet_override_errors_total`, logged once until it answers). A
/// trial running is read at the same poll (an operator may end or hold it)
/// and ended at its deadline.
pub(crate) async fn poll(
    store: Arc<dyn FleetState>,
    rules: Arc<CurrentRules>,
    metrics: Arc<RulesMetrics>,
    every: Duration,
    mut shutdown: Shutdown,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        let deadline = rules.trial_deadline();
        tokio::select! {
            _ = tick.tick() => {}
            _ = until(deadline) => {
                trial_ended(&rules, &metrics, rules.end_trial_if_due(tokio::time::Instant::now()));
                continue;
            }
            _ = shutdown.wait() => return,
        }
        match read(store.as_ref(), &rules).await {
            Ok(read) => {
                failing = false;
                put_in_force(&rules, &metrics, read).await;
            }
            Err(e) => {
                metrics.fleet_override_error();
                if !failing {
                    tracing::warn!(
                        "cannot read the fleet override: {e}; the last known state stays"
                    );
                }
                failing = true;
            }
        }
        trial_ended(
            &rules,
            &metrics,
            rules.end_trial_if_due(tokio::time::Instant::now()),
        );
    }
}

/// What one poll reads: the override, and the state in the store of the
/// trial running here (its version first).
type Read = (Option<Override>, Option<(String, StoredTrial)>);

/// One poll's read of `store`; the trial is read only while one runs here.
async fn read(store: &dyn FleetState, rules: &CurrentRules) -> Result<Read, StoreError> {
    let state = store.fleet_override().await?;
    let trial = match rules.trial() {
        Some(t) => store
            .trial(&t.version, None, false)
            .await?
            .map(|s| (t.version, s)),
        None => None,
    };
    Ok((state, trial))
}

/// Puts what a poll read in force: the override if it changed, the trial's
/// clock (which may end it).
async fn put_in_force(rules: &Arc<CurrentRules>, metrics: &Arc<RulesMetrics>, read: Read) {
    let (state, trial) = read;
    if state != rules.fleet_override() {
        let rules = rules.clone();
        let metrics = metrics.clone();
        // Compiling a large set takes CPU: off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || apply(&rules, &metrics, state)).await;
    }
    if let Some((version, stored)) = trial {
        let ended = rules.update_trial(&version, stored.clock, stored.now_ms);
        trial_ended(rules, metrics, ended);
        crate::trial::publish(rules, metrics.trial());
    }
}

/// Waits until `at`, or forever.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Logs a trial's end and shows the version now served.
fn trial_ended(rules: &CurrentRules, metrics: &RulesMetrics, served: Option<String>) {
    let Some(version) = served else { return };
    tracing::info!(
        version = %version,
        "rules trial over: the new and tightened rules enforce as written"
    );
    metrics.rules_served(&version);
    crate::trial::publish(rules, metrics.trial());
}

/// Puts `state` in force in `rules`, logs the change and sets the metric.
pub(crate) fn apply(rules: &CurrentRules, metrics: &RulesMetrics, state: Option<Override>) {
    match &state {
        Some(o) if o.mode == OverrideMode::Pin => tracing::warn!(
            mode = o.mode.as_str(),
            set_by = %o.set_by,
            at = o.at,
            pinned = o.version.as_deref().unwrap_or("none"),
            "fleet override on: the previous rules version is served until it is cleared"
        ),
        Some(o) => tracing::warn!(
            mode = o.mode.as_str(),
            set_by = %o.set_by,
            at = o.at,
            "fleet override on: every rule is in shadow (counted, never refused) until it is cleared"
        ),
        None => tracing::info!("fleet override cleared: the rules file's modes apply again"),
    }
    metrics.fleet_override(state.as_ref().map(|o| o.mode));
    if let Some(version) = rules.set_fleet_override(state) {
        metrics.rules_served(&version);
    }
    metrics.pin_missing(rules.pin_missing());
}

#[cfg(test)]
mod tests;
