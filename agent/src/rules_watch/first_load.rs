//! One load of `--rules PATH` as an agent starting on it makes, through the
//! same watcher: what `meshlimit check-rules` reports for a directory, so the
//! operator's check and the agent's refusal cannot drift apart.

use std::path::Path;
use std::sync::Arc;

use meshlimit_core::rules::RuleError;
use meshlimit_core::RuleSet;

use super::RulesMetrics;
use super::{CurrentRules, RulesWatcher};
use crate::metrics::{MetricsError, Registry};

/// What an agent starting on a rules path loads.
#[derive(Debug)]
pub struct FirstLoad {
    /// The set it serves; `None` when it serves none.
    pub set: Option<Arc<RuleSet>>,
    /// Every problem it reports (logs, counts and shows as its last error):
    /// a broken file, a rule name two files define, a path it cannot read.
    pub errors: Vec<RuleError>,
}

/// Loads `path` (a rules file or a directory) once, as an agent does at
/// start, with no store to share a trial through.
pub fn first_load(path: &Path) -> Result<FirstLoad, MetricsError> {
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Arc::new(RulesMetrics::standalone(&Registry::new())?);
    let mut watcher = RulesWatcher::new(path, Arc::clone(&rules), metrics);
    watcher.poll();
    Ok(FirstLoad {
        set: rules.get(),
        errors: std::mem::take(&mut watcher.refused),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The shared directory fixtures (`tests/fixtures/rules-dirs/`), which
    /// `meshlimit check-rules` is held to as well (cli/tests/it/check_rules_dirs.rs).
    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/rules-dirs")
            .join(name)
    }

    #[test]
    fn a_first_load_reports_what_a_starting_agent_reports() {
        for name in ["two-files-one-name", "one-broken-among-good", "good"] {
            let dir = fixture(name);
            let rules = Arc::new(CurrentRules::empty());
            let metrics = Arc::new(RulesMetrics::standalone(&Registry::new()).unwrap());
            RulesWatcher::new(&dir, Arc::clone(&rules), metrics).poll();
            let loaded = first_load(&dir).unwrap();
            let reported: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
            assert_eq!(
                rules.last_error(),
                (!reported.is_empty()).then(|| reported.join("\n")),
                "{name}"
            );
            assert_eq!(
                loaded.set.map(|s| s.version().to_string()),
                rules.get().map(|s| s.version().to_string()),
                "{name}"
            );
        }
    }
}
