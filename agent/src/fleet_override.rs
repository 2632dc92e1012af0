//! The fleet-wide override: one switch, kept in the store the region's agents
//! share, that puts every rule in shadow (counted, never refused) until it is
//! cleared. Each agent polls it (`--override-poll-ms`) and, while it is on,
//! serves and uses the rules in force with every rule's mode set to `shadow`:
//! the filters see a new rules version at their next sync, and the agent's own
//! decisions (node pool, fail-local) read the same shadowed set. Cleared, the
//! file's set is back. `meshlimit-agent override shadow|clear` sets it.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use meshlimit_core::rules::{Mode, RulesConfig, RulesError};
use meshlimit_core::RuleSet;
use serde::{Deserialize, Serialize};

use crate::config::OverrideArgs;
use crate::metrics::Metrics;
use crate::rules_watch::CurrentRules;
use crate::shutdown::Shutdown;
use crate::store::Store;

/// What the override does to every rule. Only `shadow` exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverrideMode {
    Shadow,
}

impl OverrideMode {
    /// The `mode` label of `meshlimit_fleet_override`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OverrideMode::Shadow => "shadow",
        }
    }
}

/// The override as stored: `{"mode":"shadow","set_by":"...","at":unix_secs}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    pub mode: OverrideMode,
    /// Who set it and why (`--reason`), for the agents' logs.
    pub set_by: String,
    /// When it was set, Unix seconds.
    pub at: u64,
}

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
/// `meshlimit_fleet_override_errors_total`, logged once until it answers).
pub(crate) async fn poll(
    store: Arc<dyn Store>,
    rules: Arc<CurrentRules>,
    metrics: Arc<Metrics>,
    every: Duration,
    mut shutdown: Shutdown,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => return,
        }
        match store.fleet_override().await {
            Ok(state) => {
                failing = false;
                if state != rules.fleet_override() {
                    let rules = rules.clone();
                    let metrics = metrics.clone();
                    // Compiling a large set takes CPU: off the runtime's threads.
                    let _ =
                        tokio::task::spawn_blocking(move || apply(&rules, &metrics, state)).await;
                }
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
    }
}

/// Puts `state` in force in `rules`, logs the change and sets the metric.
pub(crate) fn apply(rules: &CurrentRules, metrics: &Metrics, state: Option<Override>) {
    match &state {
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
}

/// `meshlimit-agent override shadow|clear`: 0 done, 1 the store could not do
/// it, 64 a `--store` no command can reach (the embedded store).
pub fn override_command(args: &OverrideArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "meshlimit-agent: cannot start the runtime: {e}");
            return 1;
        }
    };
    let store = match args.store() {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "meshlimit-agent: {e}");
            return crate::config::EXIT_USAGE;
        }
    };
    let state = args.state(crate::regions::clock::now_secs());
    let on = state.is_some();
    match runtime.block_on(store.set_fleet_override(state)) {
        Ok(()) if on => {
            let _ = writeln!(
                out,
                "fleet override set on {}: every rule in shadow on every agent within their poll (1 s by default)",
                args.store
            );
            0
        }
        Ok(()) => {
            let _ = writeln!(
                out,
                "fleet override cleared on {}: the rules file's modes apply again within the agents' poll",
                args.store
            );
            0
        }
        Err(e) => {
            let _ = writeln!(
                err,
                "meshlimit-agent: cannot set the fleet override on {}: {e}",
                args.store
            );
            1
        }
    }
}

#[cfg(test)]
mod tests;
