//! `meshlimit override`: acts on every agent of a region through the store
//! they share (the agent's side, which polls it, is
//! `meshlimit_agent::fleet_override`).

use std::io::Write;

use meshlimit_store::fleet::{Override, OverrideMode};
use meshlimit_store::spec::StoreSpec;
use meshlimit_store::trial::TrialAction;
use meshlimit_store::{FleetState, StoreError};

use crate::args::{OverrideAction, OverrideArgs};
use crate::CliError;

/// Why `override` could not act.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot set the fleet override on {on}: {source}")]
    Set { on: String, source: StoreError },
    #[error("cannot read the previous rules version on {on}: {source}")]
    PreviousVersion { on: String, source: StoreError },
    #[error("{on} records no previous rules version (no agent has installed a version over another yet): give --rules-version")]
    NoPreviousVersion { on: String },
    #[error("cannot read the history on {on}: {source}")]
    History { on: String, source: StoreError },
    #[error("{on} records no trial to act on")]
    NoTrial { on: String },
    #[error("cannot reach the trial on {on}: {source}")]
    Trial { on: String, source: StoreError },
}

/// `meshlimit override shadow|pin|clear|end-trial|hold-trial|history`: what
/// was done on `out`; a `--store` no command can reach (the embedded store) or
/// a missing secret is a usage error.
pub fn override_command(args: &OverrideArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OverrideError::Runtime)?;
    let store = args.store()?;
    let said = runtime.block_on(act(args, store.as_ref()))?;
    let _ = writeln!(out, "{said}");
    Ok(())
}

/// Does `args.action` on `store`; answers what to tell the operator.
async fn act(args: &OverrideArgs, store: &dyn FleetState) -> Result<String, OverrideError> {
    let on = &args.store;
    let now = meshlimit_agent::regions::clock::now_secs();
    let by = args.by();
    match args.action {
        OverrideAction::Shadow => {
            let state = args.state(OverrideMode::Shadow, None, now);
            set(store, on, &by, Some(state)).await?;
            Ok(format!("fleet override set on {on}: every rule in shadow on every agent within their poll (1 s by default)"))
        }
        OverrideAction::Clear => {
            set(store, on, &by, None).await?;
            Ok(format!("fleet override cleared on {on}: the rules file's set applies again within the agents' poll"))
        }
        OverrideAction::Pin => {
            let version = pinned_version(args, store).await?;
            let state = args.state(OverrideMode::Pin, Some(version.clone()), now);
            set(store, on, &by, Some(state)).await?;
            Ok(format!("fleet override set on {on}: every agent serves rules version {version} within their poll (an agent without it: every rule in shadow)"))
        }
        OverrideAction::History => store
            .control_history(HISTORY_SHOWN)
            .await
            .map(|entries| history_text(&entries))
            .map_err(|source| OverrideError::History {
                on: on.to_string(),
                source,
            }),
        OverrideAction::EndTrial | OverrideAction::HoldTrial => {
            trial(args.action, store, on, &by).await
        }
    }
}

/// Sets (or with `None` clears) the fleet override on `store`, as `by`.
async fn set(
    store: &dyn FleetState,
    on: &StoreSpec,
    by: &str,
    state: Option<Override>,
) -> Result<(), OverrideError> {
    store
        .set_fleet_override(state, by)
        .await
        .map_err(|source| OverrideError::Set {
            on: on.to_string(),
            source,
        })
}

/// The version `pin` serves: `--rules-version`, else the one the region
/// served before the current one.
async fn pinned_version(
    args: &OverrideArgs,
    store: &dyn FleetState,
) -> Result<String, OverrideError> {
    let on = &args.store;
    if let Some(v) = &args.rules_version {
        return Ok(v.clone());
    }
    store
        .previous_version()
        .await
        .map_err(|source| OverrideError::PreviousVersion {
            on: on.to_string(),
            source,
        })?
        .ok_or_else(|| OverrideError::NoPreviousVersion { on: on.to_string() })
}

/// `end-trial` or `hold-trial` (`action`) on the region's last trial.
async fn trial(
    action: OverrideAction,
    store: &dyn FleetState,
    on: &StoreSpec,
    by: &str,
) -> Result<String, OverrideError> {
    let (action, done) = match action {
        OverrideAction::HoldTrial => (TrialAction::Hold, "held until end-trial"),
        _ => (TrialAction::End, "ended: its rules enforce as written"),
    };
    match store.control_trial(action, by).await {
        Ok(Some(version)) => Ok(format!(
            "trial of rules version {version} {done}, on every agent within their poll"
        )),
        Ok(None) => Err(OverrideError::NoTrial { on: on.to_string() }),
        Err(source) => Err(OverrideError::Trial {
            on: on.to_string(),
            source,
        }),
    }
}

/// Changes `override history` prints.
const HISTORY_SHOWN: usize = 20;

/// One line a change, newest first: `<Unix ms> <who>: <what>`, or why an
/// entry the store holds was refused.
fn history_text(entries: &[meshlimit_store::Audited]) -> String {
    if entries.is_empty() {
        return "no changes recorded".into();
    }
    entries
        .iter()
        .map(|e| match e {
            Ok(e) => format!("{} {}: {}", e.at_ms, e.by, e.what),
            Err(why) => format!("(an entry that does not verify, refused: {})", why.as_str()),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests;
