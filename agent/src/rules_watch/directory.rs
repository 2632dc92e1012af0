//! `--rules DIR`: one rules file per team (each a ConfigMap key, say), merged
//! into the set the agent serves. Each file is read and validated on its own and
//! keeps its last good version when a new one is broken, so one team's mistake
//! never holds back another team's change.
//!
//! Each file owns its rule names: the file whose version in force defines a
//! rule keeps it. Another file that defines the same name (whatever it sorts
//! as) is refused, naming both files: it keeps its own version in force, or is
//! left out when it has none, and the owner's rules stay. Two files claiming a
//! name neither held: the first by name takes it.
//!
//! Each file guards its own rules ([`Guards`]): a rule's change is held to the
//! `max_tightening` of its file's version in force, and only that file's
//! approvals count for it, and a file whose change the guards refuse keeps its
//! version in force ([`Directory::merge_holding`]), so it holds back no other
//! file's change. The trial (`shadow_first`) is one for the whole set: the
//! longest any merged file asks for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use meshlimit_core::rules::review::Guard;
use meshlimit_core::rules::{parse_rules, ApprovalConfig, ChangesConfig, RuleError, RulesConfig};

use super::read_rules_file;

/// Per file: its last text, its last good rules (defaults applied), and the
/// versions of it merged last and in force.
#[derive(Debug, Default)]
pub(super) struct Directory {
    files: BTreeMap<String, FileState>,
    /// The last merge refused a file for a name another file held: merge
    /// again once that merge is in force (the holder may have let it go).
    retry_after_commit: bool,
    retry: bool,
}

#[derive(Debug, Default)]
struct FileState {
    text: String,
    good: Option<Arc<RulesConfig>>,
    /// What the last merge took of this file.
    merged: Option<Arc<RulesConfig>>,
    /// This file's part of the set in force (the last merge applied).
    in_force: Option<Arc<RulesConfig>>,
}

/// Per rule, the guard of the file that owns it: its version in force's
/// `max_tightening` (the default for a file with none in force) and the
/// approvals of its version being merged.
#[derive(Debug, Default, Clone)]
pub(crate) struct Guards(BTreeMap<String, (f64, Arc<[ApprovalConfig]>)>);

impl Guards {
    pub(crate) fn of(&self, rule: &str) -> Guard<'_> {
        match self.0.get(rule) {
            Some((max, approve)) => Guard {
                max_tightening: *max,
                approve,
            },
            None => Guard {
                max_tightening: ChangesConfig::default().max_tightening,
                approve: &[],
            },
        }
    }
}

/// What a poll of the directory found.
pub(super) struct Merged {
    /// The merged rules of every file's last good version, without conflicts.
    pub(crate) config: RulesConfig,
    /// Each rule's guard.
    pub(crate) guards: Guards,
    /// Problems of this poll: broken files (which kept their last good
    /// version) and conflicting ones (refused).
    pub(crate) errors: Vec<RuleError>,
    /// Whether any file's text changed since the last poll.
    pub(crate) changed: bool,
}

impl Directory {
    /// Reads every `*.yaml`, `*.yml` and `*.json` of `dir` (names starting with
    /// `.` are the ConfigMap's own bookkeeping) and merges them.
    pub(super) fn poll(&mut self, dir: &Path) -> std::io::Result<Merged> {
        let (mut errors, changed) = self.read(dir)?;
        let changed = changed || std::mem::take(&mut self.retry);
        let (config, guards, conflicts) = self.merge(dir, &BTreeSet::new());
        errors.extend(conflicts);
        Ok(Merged {
            config,
            guards,
            errors,
            changed,
        })
    }

    /// The file whose last merged version defines `rule`.
    pub(super) fn owner(&self, rule: &str) -> Option<&str> {
        self.files.iter().find_map(|(name, state)| {
            let merged = state.merged.as_ref()?;
            merged
                .rules
                .iter()
                .any(|r| r.name == rule)
                .then_some(name.as_str())
        })
    }

    /// Merges again, the files `held` at their versions in force (their
    /// changes refused): the set, its guards and the conflicts.
    pub(super) fn merge_holding(
        &mut self,
        dir: &Path,
        held: &BTreeSet<String>,
    ) -> (RulesConfig, Guards, Vec<RuleError>) {
        self.merge(dir, held)
    }

    /// The last merge is the set in force now.
    pub(super) fn commit(&mut self) {
        for state in self.files.values_mut() {
            state.in_force = state.merged.clone();
        }
        self.retry = std::mem::take(&mut self.retry_after_commit);
    }

    /// Reads and validates each file whose text changed: the problems, and
    /// whether any file changed, appeared or went.
    fn read(&mut self, dir: &Path) -> std::io::Result<(Vec<RuleError>, bool)> {
        let mut names: Vec<String> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| {
                !n.starts_with('.')
                    && [".yaml", ".yml", ".json"]
                        .iter()
                        .any(|ext| n.ends_with(ext))
            })
            .collect();
        names.sort();
        let mut changed = self.files.keys().any(|k| !names.contains(k));
        self.files.retain(|k, _| names.contains(k));
        let mut errors = Vec::new();
        for name in &names {
            let path = dir.join(name);
            let file = path.display().to_string();
            let text = match read_rules_file(&path) {
                Ok(t) => t,
                Err(e) => {
                    errors.push(file_error(&file, format!("cannot read: {e}")));
                    continue;
                }
            };
            let state = self.files.entry(name.clone()).or_default();
            if state.text == text && state.good.is_some() {
                continue;
            }
            changed |= state.text != text;
            state.text = text;
            match parse_rules(&file, &state.text) {
                Ok(set) => state.good = set.config().map(|c| Arc::new(with_defaults_applied(c))),
                Err(e) => errors.extend(e.errors),
            }
        }
        Ok((errors, changed))
    }

    /// Merges each file's last good version, or, for a file that claims a
    /// name another file holds, its version in force: the set, each rule's
    /// guard, and the conflicts.
    fn merge(
        &mut self,
        dir: &Path,
        held_back: &BTreeSet<String>,
    ) -> (RulesConfig, Guards, Vec<RuleError>) {
        let held = self.held();
        let mut config = RulesConfig {
            version: 1,
            defaults: Default::default(),
            rules: Vec::new(),
            changes: ChangesConfig::default(),
        };
        let mut guards = Guards::default();
        let mut claimed: BTreeMap<String, String> = BTreeMap::new();
        let mut conflicts = Vec::new();
        let mut longest_trial: Option<u64> = None;
        for (name, state) in &mut self.files {
            let owners = [&held, &claimed];
            let (chosen, conflict) = choose(dir, name, state, held_back.contains(name), owners);
            conflicts.extend(conflict);
            state.merged = chosen.clone();
            let Some(good) = chosen else { continue };
            let max = state
                .in_force
                .as_ref()
                .map_or(ChangesConfig::default().max_tightening, |c| {
                    c.changes.max_tightening
                });
            let approve: Arc<[ApprovalConfig]> = good.changes.approve.clone().into();
            for r in &good.rules {
                claimed.insert(r.name.clone(), name.clone());
                guards.0.insert(r.name.clone(), (max, approve.clone()));
            }
            config.rules.extend(good.rules.iter().cloned());
            // The longest trial any file asks for (its own, or the default).
            let trial = good.changes.shadow_first_ms().unwrap_or(0);
            longest_trial = longest_trial.max(Some(trial));
        }
        config.changes.shadow_first = longest_trial.map(|ms| format!("{ms}ms"));
        self.retry_after_commit = !conflicts.is_empty();
        (config, guards, conflicts)
    }

    /// Each name a file's version in force defines and its latest good
    /// version still does (or it has none): that file's.
    fn held(&self) -> BTreeMap<String, String> {
        let mut held = BTreeMap::new();
        for (name, state) in &self.files {
            let Some(in_force) = &state.in_force else {
                continue;
            };
            for r in &in_force.rules {
                let kept = state
                    .good
                    .as_ref()
                    .is_none_or(|g| g.rules.iter().any(|n| n.name == r.name));
                if kept {
                    held.insert(r.name.clone(), name.clone());
                }
            }
        }
        held
    }
}

/// The version of file `name` to merge: its last good one (its version in
/// force when `held_back`), unless that defines a name `owners` give another
/// file; then its version in force if that defines none, else nothing, and
/// the conflict naming both files.
fn choose(
    dir: &Path,
    name: &str,
    state: &FileState,
    held_back: bool,
    owners: [&BTreeMap<String, String>; 2],
) -> (Option<Arc<RulesConfig>>, Option<RuleError>) {
    let taken = |c: &RulesConfig| {
        c.rules.iter().find_map(|r| {
            let owner = owners.iter().find_map(|o| o.get(&r.name))?;
            (owner != name).then(|| (r.name.clone(), owner.clone()))
        })
    };
    let chosen = if held_back {
        state.in_force.clone()
    } else {
        state.good.clone()
    };
    let Some((rule, owner)) = chosen.as_deref().and_then(taken) else {
        return (chosen, None);
    };
    let kept = state.in_force.clone().filter(|c| taken(c).is_none());
    let conflict = file_error(
        &dir.join(name).display().to_string(),
        format!(
            "rule `{rule}` is also defined in {owner}, which owns it: this file {} until one of them renames it",
            if kept.is_some() { "keeps its version in force" } else { "is left out" }
        ),
    );
    (kept, Some(conflict))
}

/// The file's `defaults` written into each rule that omits the field, so rules
/// from files with different defaults can share one set.
fn with_defaults_applied(config: &RulesConfig) -> RulesConfig {
    RulesConfig {
        rules: config
            .rules
            .iter()
            .map(|r| r.clone().with_defaults(&config.defaults))
            .collect(),
        defaults: Default::default(),
        ..config.clone()
    }
}

fn file_error(file: &str, message: String) -> RuleError {
    RuleError {
        file: file.to_string(),
        line: None,
        column: None,
        rule: None,
        field: "-".into(),
        path: String::new(),
        message,
    }
}
