//! The rule set in force and the set served. The file's set, composed with a
//! trial while one runs (new and tightened rules in shadow, see
//! [`meshlimit_core::rules::trial`]), is the set in force; the fleet override
//! then serves it with every rule in shadow, or serves the previous version
//! (pin). The lines filters load, and the last problem, are kept beside it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arc_swap::ArcSwapOption;
use meshlimit_core::rules::trial::{compose, TrialPlan};
use meshlimit_core::RuleSet;
use tokio::time::{Duration, Instant};

use crate::fleet_override::shadowed;
use meshlimit_store::fleet::{Override, OverrideMode};
use meshlimit_store::trial::{StoredTrial, TrialClock};

/// The rule set in force (if any valid file was ever read) and the last problem.
#[derive(Debug, Default)]
pub struct CurrentRules {
    /// The set served and used: see the module's docs.
    set: ArcSwapOption<RuleSet>,
    /// The file's own set, kept to serve again when a trial or override ends.
    file: ArcSwapOption<RuleSet>,
    /// Held while the served set is replaced, so a reload, a trial's end and
    /// an override change never interleave.
    state: Mutex<State>,
    /// The set as filters load it (one rule a line), encoded once per version
    /// rather than once per filter VM that asks.
    lines: ArcSwapOption<ServedLines>,
    last_error: Mutex<Option<String>>,
}

#[derive(Debug, Default)]
struct State {
    fleet_override: Option<Override>,
    /// The file's set, composed with the trial while one runs.
    in_force: Option<Arc<RuleSet>>,
    trial: Option<Trial>,
    /// The file's set before the current one (what a pin goes back to).
    previous: Option<Arc<RuleSet>>,
    /// The set a pin serves, once found (kept while pinned, whatever reloads).
    pinned: Option<Arc<RuleSet>>,
    /// Pinned to a version this agent does not have: every rule in shadow.
    pin_missing: bool,
}

/// A trial running on this agent.
#[derive(Debug, Clone)]
struct Trial {
    plan: TrialPlan,
    clock: TrialClock,
    /// When it ends by this agent's clock (`None` while held).
    ends_at: Option<Instant>,
}

/// What a trial running looks like from outside.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TrialView {
    /// The file's version on trial.
    pub version: String,
    pub clock: TrialClock,
    /// The rules whose `shadow_limited` decisions are its would-be rejections.
    pub rules: Vec<String>,
}

/// A version's rules as lines (`meshlimit_core::rules::lines`).
#[derive(Debug)]
pub(crate) struct ServedLines {
    pub version: String,
    pub body: bytes::Bytes,
}

impl CurrentRules {
    pub fn empty() -> Self {
        Self::default()
    }

    /// The set in force. Readers hold their `Arc` for one request, so a swap never
    /// changes the rules under a request half-way.
    pub(crate) fn get(&self) -> Option<Arc<RuleSet>> {
        self.set.load_full()
    }

    /// The rules in force as lines, for filters.
    pub(crate) fn lines(&self) -> Option<Arc<ServedLines>> {
        let set = self.get()?;
        match self.lines.load_full() {
            Some(lines) if lines.version == set.version() => Some(lines),
            // Installed between the two loads: encode this once more.
            _ => Some(Arc::new(ServedLines::of(&set)?)),
        }
    }

    /// The file's own set (whatever the fleet override or a trial).
    pub(crate) fn file_set(&self) -> Option<Arc<RuleSet>> {
        self.file.load_full()
    }

    /// The file's set as in force (composed with its trial while one runs),
    /// whatever the fleet override: what a new version is tried against.
    pub(crate) fn in_force(&self) -> Option<Arc<RuleSet>> {
        self.state().in_force.clone()
    }

    /// Puts `set` (the file's) in force at once, and forgets the last error.
    /// Answers the version served.
    pub fn install(&self, set: Arc<RuleSet>) -> String {
        self.install_trial(set, None)
    }

    /// Puts `set` in force, composed with `trial` (its plan, read from the
    /// store) while it runs; a new version of the file ends a running trial,
    /// the same version keeps it. Shadowed or pinned under the fleet override.
    /// Forgets the last error; answers the version served.
    pub(crate) fn install_trial(&self, set: Arc<RuleSet>, trial: Option<StoredTrial>) -> String {
        let mut state = self.state();
        let old = self.file.load_full();
        let same_file = old.as_ref().is_some_and(|o| o.version() == set.version());
        if let Some(old) = old.filter(|_| !same_file) {
            state.previous = Some(old);
        }
        self.file.store(Some(set.clone()));
        let running = match trial.and_then(|t| running_trial(&set, t)) {
            Some(started) => Some(started),
            // The same file again (a rule expired, say): its trial goes on.
            None if same_file => state.trial.take().zip(state.in_force.clone()),
            None => None,
        };
        state.in_force = Some(match &running {
            Some((_, composed)) => composed.clone(),
            None => set,
        });
        state.trial = running.map(|(t, _)| t);
        let version = self.serve(&mut state);
        drop(state);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        version
    }

    /// The trial running, if any.
    pub(crate) fn trial(&self) -> Option<TrialView> {
        let state = self.state();
        let t = state.trial.as_ref()?;
        Some(TrialView {
            version: t.plan.version.clone(),
            clock: t.clock,
            rules: t.plan.trial_rules(),
        })
    }

    /// When the trial running ends by this agent's clock (`None`: none, or held).
    pub(crate) fn trial_deadline(&self) -> Option<Instant> {
        self.state().trial.as_ref().and_then(|t| t.ends_at)
    }

    /// The trial's clock as the store read it at `now_ms` (an operator may
    /// have ended or held it): ends the trial when it is over. Answers the
    /// version now served when the trial ended.
    pub(crate) fn update_trial(
        &self,
        version: &str,
        clock: TrialClock,
        now_ms: u64,
    ) -> Option<String> {
        let mut state = self.state();
        let trial = state.trial.as_mut().filter(|t| t.plan.version == version)?;
        trial.clock = clock;
        match clock.left_ms(now_ms) {
            Some(left) => {
                trial.ends_at = deadline(left);
                None
            }
            None => Some(self.end_trial(&mut state)),
        }
    }

    /// Ends the trial if its deadline passed by `now`; answers the version now
    /// served when it did.
    pub(crate) fn end_trial_if_due(&self, now: Instant) -> Option<String> {
        let mut state = self.state();
        let due = state.trial.as_ref()?.ends_at.is_some_and(|at| at <= now);
        due.then(|| self.end_trial(&mut state))
    }

    fn end_trial(&self, state: &mut State) -> String {
        state.trial = None;
        state.in_force = self.file.load_full();
        self.serve(state)
    }

    /// The fleet override in force.
    pub(crate) fn fleet_override(&self) -> Option<Override> {
        self.state().fleet_override.clone()
    }

    /// Whether a pin names a version this agent does not have (every rule is
    /// then served in shadow).
    pub(crate) fn pin_missing(&self) -> bool {
        self.state().pin_missing
    }

    /// Puts the fleet override `next` in force. Answers the version now served,
    /// if the served set was replaced.
    pub(crate) fn set_fleet_override(&self, next: Option<Override>) -> Option<String> {
        let mut state = self.state();
        let what = |o: &Option<Override>| o.as_ref().map(|o| (o.mode, o.version.clone()));
        let changed = what(&state.fleet_override) != what(&next);
        state.fleet_override = next;
        if !changed {
            return None;
        }
        state.pinned = None;
        state.in_force.as_ref()?;
        Some(self.serve(&mut state))
    }

    /// Serves the set in force, or what the fleet override makes of it:
    /// compiled once per change, installed as a reload is.
    fn serve(&self, state: &mut State) -> String {
        let Some(in_force) = state.in_force.clone() else {
            return String::new();
        };
        state.pin_missing = false;
        let shadow = |set: Arc<RuleSet>| match set.config().map(shadowed) {
            Some(Ok(s)) => Arc::new(s),
            Some(Err(e)) => {
                // Cannot happen for a set that compiled; if it did, enforcing
                // the file is the state an operator can see and act on.
                tracing::error!("cannot shadow rules version {}: {e}", set.version());
                set
            }
            None => set,
        };
        let set = match state
            .fleet_override
            .as_ref()
            .map(|o| (o.mode, o.version.clone()))
        {
            None => in_force,
            Some((OverrideMode::Shadow, _)) => shadow(in_force),
            Some((OverrideMode::Pin, wanted)) => {
                let have = [&state.pinned, &state.previous]
                    .into_iter()
                    .flatten()
                    .chain(self.file.load_full().as_ref())
                    .find(|s| Some(s.version()) == wanted.as_deref())
                    .cloned();
                match have {
                    Some(pinned) => {
                        state.pinned = Some(pinned.clone());
                        pinned
                    }
                    None => {
                        tracing::warn!(
                            pinned = wanted.as_deref().unwrap_or("none"),
                            "fleet override pins a rules version this agent does not have \
                             (restarted since?): every rule in shadow instead"
                        );
                        state.pin_missing = true;
                        shadow(in_force)
                    }
                }
            }
        };
        let version = set.version().to_string();
        self.lines.store(ServedLines::of(&set).map(Arc::new));
        self.set.store(Some(set));
        version
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The problems of the last refused or unreadable file, one per line, until a
    /// valid file is installed.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn set_error(&self, text: String) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(text);
    }
}

/// `trial` of `set` composed, if it is for this version, has a plan and still
/// runs; a composition that does not compile (it cannot, for sets that did)
/// leaves the file's set in force, logged.
fn running_trial(set: &RuleSet, trial: StoredTrial) -> Option<(Trial, Arc<RuleSet>)> {
    let plan = trial.plan.filter(|p| p.version == set.version())?;
    let left = trial.clock.left_ms(trial.now_ms)?;
    let composed = match RuleSet::compile_shared(Arc::new(compose(set.config()?, &plan))) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(
                "cannot compose the trial of rules version {}: {e}",
                set.version()
            );
            return None;
        }
    };
    let t = Trial {
        plan,
        clock: trial.clock,
        ends_at: deadline(left),
    };
    Some((t, Arc::new(composed)))
}

/// The instant `left_ms` from now; `None` for "held" (`u64::MAX`).
fn deadline(left_ms: u64) -> Option<Instant> {
    (left_ms != u64::MAX).then(|| Instant::now() + Duration::from_millis(left_ms))
}

impl ServedLines {
    fn of(set: &RuleSet) -> Option<Self> {
        Some(Self {
            version: set.version().to_string(),
            body: meshlimit_core::rules::lines::encode(set)?.into(),
        })
    }
}

#[cfg(test)]
mod tests;
