//! The rule set in force: the file's, or its shadowed copy while the fleet
//! override is on, with the lines filters load, and the last problem.

use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwapOption;
use meshlimit_core::RuleSet;

use crate::fleet_override::{shadowed, Override};

/// The rule set in force (if any valid file was ever read) and the last problem.
#[derive(Debug, Default)]
pub struct CurrentRules {
    /// The set served and used: the file's, or its shadowed copy while the
    /// fleet override is on.
    set: ArcSwapOption<RuleSet>,
    /// The file's own set, kept to serve again when the override is cleared.
    file: ArcSwapOption<RuleSet>,
    /// The fleet override in force; held while the served set is replaced, so
    /// a reload and an override change never interleave.
    fleet_override: Mutex<Option<Override>>,
    /// The set as filters load it (one rule a line), encoded once per version
    /// rather than once per filter VM that asks.
    lines: ArcSwapOption<ServedLines>,
    last_error: Mutex<Option<String>>,
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

    /// The file's own set (whatever the fleet override).
    pub(crate) fn file_set(&self) -> Option<Arc<RuleSet>> {
        self.file.load_full()
    }

    /// Puts `set` (the file's) in force, shadowed while the fleet override is
    /// on, and forgets the last error. Answers the version served.
    pub fn install(&self, set: Arc<RuleSet>) -> String {
        let state = self
            .fleet_override
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.file.store(Some(set.clone()));
        let version = self.serve(set, state.is_some());
        drop(state);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        version
    }

    /// The fleet override in force.
    pub(crate) fn fleet_override(&self) -> Option<Override> {
        self.fleet_override
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts the fleet override `next` in force: the file's set shadowed, or the
    /// file's set again. Answers the version now served, if a set was replaced.
    pub(crate) fn set_fleet_override(&self, next: Option<Override>) -> Option<String> {
        let mut state = self
            .fleet_override
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let was_on = state.is_some();
        *state = next;
        if was_on == state.is_some() {
            return None;
        }
        let file = self.file.load_full()?;
        Some(self.serve(file, state.is_some()))
    }

    /// Serves `file`, or its shadowed copy when `shadow`: compiled once per
    /// (version, override), installed as a reload is.
    fn serve(&self, file: Arc<RuleSet>, shadow: bool) -> String {
        let set = match file.config().filter(|_| shadow).map(shadowed) {
            Some(Ok(s)) => Arc::new(s),
            Some(Err(e)) => {
                // Cannot happen for a set that compiled; if it did, enforcing
                // the file is the state an operator can see and act on.
                tracing::error!("cannot shadow rules version {}: {e}", file.version());
                file
            }
            None => file,
        };
        let version = set.version().to_string();
        self.lines.store(ServedLines::of(&set).map(Arc::new));
        self.set.store(Some(set));
        version
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

impl ServedLines {
    fn of(set: &RuleSet) -> Option<Self> {
        Some(Self {
            version: set.version().to_string(),
            body: meshlimit_core::rules::lines::encode(set)?.into(),
        })
    }
}
