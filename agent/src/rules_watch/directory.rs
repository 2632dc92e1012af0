//! `--rules DIR`: one rules file per team (each a ConfigMap key, say), merged
//! into the set the agent serves. Each file is read and validated on its own and
//! keeps its last good version when a new one is broken, so one team's mistake
//! never holds back another team's change. A rule name defined in two files is
//! a conflict: the later file (by name) is refused as a whole until it is fixed.

use std::collections::BTreeMap;
use std::path::Path;

use meshlimit_core::rules::{parse_rules, ChangesConfig, RuleError, RulesConfig};

use super::read_rules_file;

/// Per file: its last text, and its last good rules (defaults applied).
#[derive(Debug, Default)]
pub(super) struct Directory {
    files: BTreeMap<String, FileState>,
}

#[derive(Debug, Default)]
struct FileState {
    text: String,
    good: Option<RulesConfig>,
}

/// What a poll of the directory found.
pub(super) struct Merged {
    /// The merged rules of every file's last good version, without conflicts.
    pub(crate) config: RulesConfig,
    /// Problems of this poll: broken files (which kept their last good
    /// version) and conflicting ones (left out).
    pub(crate) errors: Vec<RuleError>,
    /// Whether any file's text changed since the last poll.
    pub(crate) changed: bool,
}

impl Directory {
    /// Reads every `*.yaml`, `*.yml` and `*.json` of `dir` (names starting with
    /// `.` are the ConfigMap's own bookkeeping) and merges them.
    pub(super) fn poll(&mut self, dir: &Path) -> std::io::Result<Merged> {
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
                Ok(set) => state.good = set.config().map(with_defaults_applied),
                Err(e) => errors.extend(e.errors),
            }
        }
        let mut config = RulesConfig {
            version: 1,
            defaults: Default::default(),
            rules: Vec::new(),
            changes: ChangesConfig::default(),
        };
        let mut owner: BTreeMap<String, String> = BTreeMap::new();
        let mut longest_trial: Option<u64> = None;
        for (name, state) in &self.files {
            let Some(good) = &state.good else { continue };
            let clash = good
                .rules
                .iter()
                .find_map(|r| owner.get(&r.name).map(|f| (r, f)));
            if let Some((rule, first)) = clash {
                let file = dir.join(name).display().to_string();
                errors.push(file_error(
                    &file,
                    format!("rule `{}` is also defined in {first}: this file is left out until one of them renames it", rule.name),
                ));
                continue;
            }
            for r in &good.rules {
                owner.insert(r.name.clone(), name.clone());
            }
            config.rules.extend(good.rules.iter().cloned());
            config.changes.max_tightening = config
                .changes
                .max_tightening
                .min(good.changes.max_tightening);
            config
                .changes
                .approve
                .extend(good.changes.approve.iter().cloned());
            // The longest trial any file asks for (its own, or the default).
            let trial = good.changes.shadow_first_ms().unwrap_or(0);
            longest_trial = longest_trial.max(Some(trial));
        }
        config.changes.shadow_first = longest_trial.map(|ms| format!("{ms}ms"));
        Ok(Merged {
            config,
            errors,
            changed,
        })
    }
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
        message,
    }
}
