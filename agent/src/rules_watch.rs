//! The rules in force, and the watcher that keeps them in step with the file.
//!
//! Kubernetes updates a ConfigMap volume by swapping a `..data` symlink atomically,
//! so the watcher re-reads the path (through the symlinks) on every poll and compares
//! content: an inode or mtime remembered from the last read would name a file that
//! no longer backs the path. A bad file never replaces a good set: it is refused as
//! a whole, every problem is logged (file, rule, field) and counted, and the agent
//! keeps enforcing what it had.

use meshlimit_core::rules::expiry::{expired_rules, live_rules};
use meshlimit_core::rules::review::{review, review_guarded};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::io::Read;

use meshlimit_core::rules::{
    parse_rules, RuleError, RulesConfig, RulesError, MAX_RULES_FILE_BYTES,
};
use meshlimit_core::RuleSet;

use crate::shutdown::Shutdown;
use meshlimit_core::rules::trial;
use meshlimit_store::trial::StoredTrial;
use meshlimit_store::{FleetState, StoreError};

/// A call on the shared store, run from the watcher's thread.
type StoreCall<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StoreError>> + Send>>;

/// What one poll found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reload {
    /// Same content as last time.
    Unchanged,
    /// A valid file, now in force.
    Applied { version: String },
    /// An invalid file; the previous set (if any) stays.
    Refused,
    /// The file could not be read; the previous set (if any) stays.
    Unreadable,
}

/// Polls the rules file and installs each new valid version.
#[derive(Debug)]
pub(crate) struct RulesWatcher {
    path: PathBuf,
    rules: Arc<CurrentRules>,
    metrics: Arc<RulesMetrics>,
    /// The content last parsed (valid or not), so an unchanged file costs a read
    /// and a comparison, and a bad file is reported once, not every poll.
    last_content: Option<String>,
    last_read_error: Option<String>,
    /// The last valid file as written (expired rules included), and the rules
    /// of it left out as expired: re-checked at every poll, so a rule's
    /// `expires` takes effect without anyone touching the file.
    last_good: Option<Arc<RulesConfig>>,
    expired: Vec<String>,
    /// Unix seconds now (the wall clock; tests set their own).
    clock: fn() -> u64,
    /// Per-file state when `--rules` names a directory.
    directory: directory::Directory,
    /// With a directory: each rule's guard, its own file's (else the
    /// running set's guard holds every rule).
    guards: Option<directory::Guards>,
    /// The store the region's agents share trials in, and the runtime its
    /// calls run on (the watcher's thread waits for them, with the store's
    /// deadline). Without it a trial is this agent's own.
    shared: Option<SharedStore>,
    /// Every problem the last poll reported ([`first_load`] hands them on).
    refused: Vec<RuleError>,
}

/// The store the region's agents share, and the runtime its calls run on.
struct SharedStore {
    store: Arc<dyn FleetState>,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

impl RulesWatcher {
    pub fn new(
        path: impl Into<PathBuf>,
        rules: Arc<CurrentRules>,
        metrics: Arc<RulesMetrics>,
    ) -> Self {
        Self {
            path: path.into(),
            rules,
            metrics,
            last_content: None,
            last_read_error: None,
            last_good: None,
            expired: Vec::new(),
            clock: crate::regions::clock::now_secs,
            directory: directory::Directory::default(),
            guards: None,
            shared: None,
            refused: Vec::new(),
        }
    }

    /// Shares trials through `store` (see [`crate::trial`]), whose calls run
    /// on `runtime` (the watcher never polls on one of its threads).
    pub(crate) fn with_store(
        mut self,
        store: Arc<dyn FleetState>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        self.shared = Some(SharedStore { store, runtime });
        self
    }

    /// Reads the file once and applies it if it changed (blocking: [`RulesWatcher::run`]
    /// calls it on a thread of its own).
    pub(crate) fn poll(&mut self) -> Reload {
        self.refused.clear();
        if self.path.is_dir() {
            return self.poll_directory();
        }
        let text = match read_rules_file(&self.path) {
            Ok(text) => text,
            Err(e) => return self.unreadable(&e),
        };
        self.last_read_error = None;
        if self.last_content.as_deref() == Some(text.as_str()) {
            return self.expire();
        }
        let file = self.path.display().to_string();
        let parsed = parse_rules(&file, &text);
        self.last_content = Some(text);
        match parsed {
            Ok(set) => {
                // The file as written, shared with the set (no copy of it).
                let Some(config) = set.shared_config() else {
                    return self.apply(set);
                };
                self.last_good = Some(config);
                self.expired.clear();
                match self.expire() {
                    // No rule has expired: the file's own set.
                    Reload::Unchanged => self.apply(set),
                    other => other,
                }
            }
            Err(errors) => self.refuse(&errors),
        }
    }

    /// `--rules DIR`: every file on its own, merged; a broken or conflicting file
    /// is reported (logged, counted) and keeps its last good version or is left
    /// out, while the other files' changes apply.
    fn poll_directory(&mut self) -> Reload {
        let mut merged = match self.directory.poll(&self.path) {
            Ok(m) => m,
            Err(e) => return self.unreadable(&e),
        };
        self.last_read_error = None;
        if !merged.changed {
            return self.expire();
        }
        self.guards = Some(merged.guards.clone());
        if let Some(running) = self.rules.file_set() {
            self.hold_back_refused(&running, &mut merged);
        }
        let reload = if merged.config.rules.is_empty() {
            Reload::Refused
        } else {
            self.last_good = Some(Arc::new(merged.config));
            self.expired.clear();
            match self.expire() {
                Reload::Unchanged => match self.last_good.clone().map(RuleSet::compile_shared) {
                    Some(Ok(set)) => self.apply(set),
                    Some(Err(errors)) => self.refuse(&errors),
                    None => Reload::Unchanged,
                },
                other => other,
            }
        };
        if matches!(reload, Reload::Applied { .. }) {
            self.directory.commit();
        }
        if !merged.errors.is_empty() {
            // After the apply, which clears the last error: the broken files stay visible.
            self.refuse(&RulesError {
                errors: merged.errors,
            });
        }
        reload
    }

    /// A file whose change the guards refuse keeps its version in force, so
    /// the other files' changes still apply; its refusal is reported with the
    /// merge's other problems.
    fn hold_back_refused(&mut self, running: &RuleSet, merged: &mut directory::Merged) {
        let Ok(set) = RuleSet::compile(&merged.config) else {
            return;
        };
        let mut refused = self.refused_changes(running, &set);
        let mut held = std::collections::BTreeSet::new();
        for e in &mut refused {
            if let Some(owner) = e.rule.as_deref().and_then(|r| self.directory.owner(r)) {
                e.file = self.path.join(owner).display().to_string();
                held.insert(owner.to_string());
            }
        }
        if held.is_empty() {
            return;
        }
        let (config, guards, conflicts) = self.directory.merge_holding(&self.path, &held);
        merged.config = config;
        merged.errors.extend(conflicts);
        merged.errors.extend(refused);
        self.guards = Some(guards);
    }

    /// Sets a clock (Unix seconds) other than the wall clock.
    #[cfg(test)]
    pub(crate) fn with_clock(mut self, clock: fn() -> u64) -> Self {
        self.clock = clock;
        self
    }

    /// Leaves out the last good file's rules whose `expires` has passed, when
    /// that set changed since the last poll.
    fn expire(&mut self) -> Reload {
        let Some(config) = &self.last_good else {
            return Reload::Unchanged;
        };
        // Checked every poll: names only, the file is copied only on a change.
        let now = (self.clock)();
        let expired = expired_rules(config, now);
        if expired == self.expired {
            return Reload::Unchanged;
        }
        for rule in expired.iter().filter(|r| !self.expired.contains(r)) {
            tracing::info!(rule = %rule, "rule expired: it no longer applies");
        }
        let compiled = if expired.is_empty() {
            RuleSet::compile_shared(Arc::clone(config))
        } else {
            RuleSet::compile(&live_rules(config, now).0)
        };
        self.expired = expired;
        match compiled {
            Ok(set) => self.apply(set),
            // Every rule expired: a set needs one, so the running one stays.
            Err(errors) => self.refuse(&errors),
        }
    }

    /// Polls every `every` until shutdown, on a thread of its own at the lowest
    /// CPU priority (nice 19): parsing and compiling a large file takes the better
    /// part of a second of CPU, which lease calls and the node's Envoys need more.
    /// A niced thread still gets its share of a busy CPU, so a file is never
    /// starved: it is only applied later on a saturated node.
    pub async fn run(mut self, every: Duration, mut shutdown: Shutdown) {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("meshlimit-rules".into())
            .spawn(move || {
                if let Err(e) = thread_priority::set_current_thread_priority(
                    thread_priority::ThreadPriority::Min,
                ) {
                    tracing::debug!("rules watcher keeps the normal priority: {e:?}");
                }
                loop {
                    self.poll();
                    match stopped.recv_timeout(every) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            });
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("cannot start the rules watcher: {e}");
                return;
            }
        };
        shutdown.wait().await;
        drop(stop);
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }

    fn apply(&mut self, set: RuleSet) -> Reload {
        // A change that cuts an enforced limit beyond the running maximum (its
        // own file's, in a directory) without an approval is refused like a
        // broken file: the running rules stay. Compared with the file's set,
        // not its shadowed copy under a fleet override.
        if let Some(running) = self.rules.file_set() {
            let refused = self.refused_changes(&running, &set);
            if !refused.is_empty() {
                return self.refuse(&RulesError { errors: refused });
            }
        }
        let file_version = set.version().to_string();
        let previous = self.rules.get().map(|s| s.version().to_string());
        tracing::info!(
            file = %self.path.display(),
            version = %file_version,
            rules = set.rules().len(),
            previous = previous.as_deref().unwrap_or("none"),
            "rules applied"
        );
        let trial = self.trial_of(&set);
        let previous_file = self.rules.file_set();
        // The version served: the file's, composed with its trial while one
        // runs, shadowed or pinned under a fleet override.
        let version = self.rules.install_trial(Arc::new(set), trial);
        if let Some(set) = self.rules.in_force() {
            self.metrics.rule_limits(&set);
        }
        self.metrics.rules_applied(&version);
        crate::trial::publish(&self.rules, self.metrics.trial());
        if let Some(t) = self.rules.trial() {
            tracing::info!(
                version = %t.version,
                rules = %t.rules.join(","),
                ends_unix_ms = t.clock.planned_end_ms(),
                "rules on trial: new and tightened rules in shadow until the trial ends (changes.shadow_first)"
            );
        }
        if let (Some(old), Some(new)) = (previous_file, self.rules.file_set()) {
            if old.version() != new.version() {
                self.on_store("record the rules versions", |s| {
                    let (new, old) = (new.version().to_string(), old.version().to_string());
                    Box::pin(async move { s.record_versions(&new, &old).await })
                });
            }
        }
        Reload::Applied { version }
    }

    /// The changes from `running` to `set` the guards refuse, one error each.
    fn refused_changes(&self, running: &RuleSet, set: &RuleSet) -> Vec<RuleError> {
        let file = self.path.display().to_string();
        let changes = match &self.guards {
            Some(g) => review_guarded(running, set, |rule| g.of(rule)),
            None => review(running, set),
        };
        changes
            .into_iter()
            .filter(|c| c.refused)
            .map(|c| RuleError {
                file: file.clone(),
                line: None,
                column: None,
                rule: Some(c.rule.clone()),
                field: "limit".into(),
                path: String::new(),
                message: format!("{c} (running version {})", running.version()),
            })
            .collect()
    }

    /// The trial `set` starts (or, on an agent's first load, the one it joins):
    /// the store's record, the first agent's plan and start; `None` when
    /// nothing is on trial. Without the store (or when it fails) a trial
    /// planned here runs on this agent's clock alone.
    /// The trial's period is the running set's `shadow_first` (the guard in
    /// force before the change, so a change cannot turn off its own trial);
    /// on a first load, the set's own.
    fn trial_of(&self, set: &RuleSet) -> Option<StoredTrial> {
        let guard = self.rules.file_set();
        let changes = guard.as_deref().map_or(set.changes(), RuleSet::changes);
        let period = changes.shadow_first_ms().unwrap_or(0);
        if period == 0 {
            return None;
        }
        let version = set.version().to_string();
        let Some(running) = self.rules.in_force() else {
            // A first load: only a trial the region already runs (this agent
            // restarted during it). A first deployment applies at once.
            return self
                .on_store("read the rules trial", |s| {
                    Box::pin(async move { s.trial(&version, None, true).await })
                })
                .flatten()
                .filter(|t| t.left_ms().is_some());
        };
        if self
            .rules
            .file_set()
            .is_some_and(|f| f.version() == version)
        {
            return None;
        }
        let plan = trial::plan(&running, set);
        if plan.is_empty() {
            return None;
        }
        let started = {
            let plan = plan.clone();
            self.on_store("start the rules trial", move |s| {
                Box::pin(async move { s.trial(&version, Some((&plan, period)), true).await })
            })
        };
        started.flatten().or_else(|| {
            Some(StoredTrial {
                plan: Some(plan),
                clock: meshlimit_store::trial::TrialClock {
                    start_ms: crate::regions::clock::now_ms(),
                    period_ms: period,
                    ended_ms: None,
                    held: false,
                },
                now_ms: crate::regions::clock::now_ms(),
            })
        })
    }

    /// Runs `call` on the shared store, waiting for it (the store's deadline);
    /// `None` without a store, or logged when it fails (`what` it was for).
    fn on_store<T>(
        &self,
        what: &str,
        call: impl FnOnce(Arc<dyn FleetState>) -> StoreCall<T>,
    ) -> Option<T> {
        let shared = self.shared.as_ref()?;
        match shared.runtime.block_on(call(shared.store.clone())) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!("cannot {what} in the store: {e}; this agent goes on alone");
                None
            }
        }
    }

    fn refuse(&mut self, errors: &RulesError) -> Reload {
        let kept = self.rules.get().map(|s| s.version().to_string());
        for e in &errors.errors {
            tracing::error!(
                kept_version = kept.as_deref().unwrap_or("none"),
                "rules refused: {e}"
            );
        }
        self.rules.set_error(errors.to_string());
        self.refused.extend(errors.errors.iter().cloned());
        self.metrics.rules_refused();
        Reload::Refused
    }

    fn unreadable(&mut self, e: &std::io::Error) -> Reload {
        let file = self.path.display().to_string();
        self.refused.push(RuleError {
            file: file.clone(),
            line: None,
            column: None,
            rule: None,
            field: "-".into(),
            path: String::new(),
            message: format!("cannot read: {e}"),
        });
        let text = format!("{file}: cannot read: {e}");
        // Logged and counted once per distinct problem, not every poll.
        if self.last_read_error.as_deref() != Some(text.as_str()) {
            tracing::error!("rules unreadable: {text}");
            self.metrics.rules_refused();
            self.rules.set_error(text.clone());
            self.last_read_error = Some(text);
        }
        // Forget the content, so the same file reappearing is applied again.
        self.last_content = None;
        Reload::Unreadable
    }
}

/// Reads a rules file of at most [`MAX_RULES_FILE_BYTES`]: reading stops one byte
/// past the cap, so a huge (or endless) file is refused without being held.
pub fn read_rules_file(path: &Path) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let cap = u64::try_from(MAX_RULES_FILE_BYTES).unwrap_or(u64::MAX);
    let mut text = String::new();
    file.take(cap.saturating_add(1)).read_to_string(&mut text)?;
    if text.len() > MAX_RULES_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_RULES_FILE_BYTES} bytes"),
        ));
    }
    // Kept until the next poll to compare: not with the read's spare capacity.
    text.shrink_to_fit();
    Ok(text)
}

mod current;
mod directory;
mod first_load;
pub mod metrics;

pub use current::CurrentRules;
pub(crate) use current::TrialView;
pub use first_load::{first_load, FirstLoad};
pub use metrics::RulesMetrics;

#[cfg(test)]
mod tests;
