//! `meshlimit check-rules PATH`: validates a rules file, or a directory of
//! them, the way the agent would load it, for CI and for people editing a
//! ConfigMap. A directory goes through the agent's own loader, so it reports
//! what the agent would: each broken file, each rule name two files define. Every problem of the
//! file is reported in one run, each with its line; `--format json` gives the same
//! as one JSON object for CI annotations and admission checks.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use meshlimit_agent::rules_watch::{first_load, FirstLoad};

use meshlimit_core::rules::expiry::parse_instant;
use meshlimit_core::rules::review::{review, Change, RuleChange};
use meshlimit_core::rules::{parse_rules, RuleError, RuleSet};
use serde_json::json;

use crate::args::CheckFormat;

mod profile;
pub use profile::Profile;

/// Checks `path`. Text: prints `PATH: ok (N rules, version V)` on `out` when valid,
/// else every problem as `PATH:LINE:COLUMN: rule NAME: field FIELD-PATH: what is
/// wrong` on `err`. JSON: one object on `out` either way:
/// `{"file", "valid", "rules", "version", "errors": [{"file", "line", "column",
/// "rule", "field", "path", "message"}]}` (`rules` and `version` null when
/// invalid). Returns the exit code: 0 valid, 1 invalid or
/// unreadable.
pub fn check_rules(
    path: &Path,
    format: CheckFormat,
    out: &mut impl Write,
    err: &mut impl Write,
) -> u8 {
    check_rules_against(path, None, None, format, out, err)
}

/// [`check_rules`], and with `against` (the rules running now) every rule's
/// change as well: added, removed, limit ×factor, mode, match. An enforced
/// limit cut beyond the running file's `changes.max_tightening` (the guard in
/// force, not the new file's) without an approval in the new file makes the
/// exit code 1, as the agent refuses such a file at reload. With `profile`,
/// what cannot work where the file runs is an error too ([`Profile`]).
pub fn check_rules_against(
    path: &Path,
    against: Option<&Path>,
    profile: Option<Profile>,
    format: CheckFormat,
    out: &mut impl Write,
    err: &mut impl Write,
) -> u8 {
    let file = path.display().to_string();
    let result = read(path).and_then(|set| profile::fits(set, profile, &file));
    let mut code = u8::from(result.is_err());
    let review = match (&result, against) {
        (Ok(set), Some(old_path)) => match read(old_path) {
            Ok(old) => {
                let changes = review(&old, set);
                code = u8::from(changes.iter().any(|c| c.refused));
                Some((
                    old_path.display().to_string(),
                    old.version().to_string(),
                    changes,
                ))
            }
            Err(errors) => {
                let _ = writeln!(
                    err,
                    "{}: cannot compare against it: {}",
                    old_path.display(),
                    summary(&errors)
                );
                return 1;
            }
        },
        _ => None,
    };
    let warnings = match &result {
        Ok(set) => expiry_warnings(set, meshlimit_agent::regions::clock::now_secs()),
        Err(_) => Vec::new(),
    };
    match (format, result) {
        (CheckFormat::Text, Ok(set)) => {
            let _ = writeln!(out, "{}", verdict(&file, &set, review.as_ref()));
            for line in aggregate_notes(&set) {
                let _ = writeln!(out, "{file}: {line}");
            }
            for w in &warnings {
                let _ = writeln!(err, "{file}: warning: {w}");
            }
            if let Some((old, version, changes)) = &review {
                let _ = writeln!(
                    out,
                    "against {old} (version {version}): {} change(s)",
                    changes.len()
                );
                for c in changes {
                    let _ = writeln!(out, "{c}");
                }
                for c in changes.iter().filter(|c| c.refused) {
                    let _ = writeln!(
                        out,
                        "to approve rule {}'s cut: changes: {{ approve: [{{ rule: {}, against: \"{version}\" }}] }}",
                        c.rule, c.rule
                    );
                }
            }
        }
        (CheckFormat::Text, Err(errors)) => {
            for e in &errors {
                // An unreadable PATH is one line, `PATH: cannot read: why`
                // (as the agent logs it); a file of a directory is reported
                // as the agent reports it.
                if e.file == file && e.field == "-" && e.message.starts_with("cannot read: ") {
                    let _ = writeln!(err, "{}: {}", e.file, e.message);
                } else {
                    let _ = writeln!(err, "{e}");
                }
            }
        }
        (CheckFormat::Json, Ok(set)) => {
            let mut report = json!({
                "file": file,
                "valid": true,
                "rules": set.rules().len(),
                "version": set.version(),
                "errors": [],
                "warnings": warnings,
                "aggregate": set.rules().iter().filter(|r| r.is_aggregate()).map(|r| &r.name).collect::<Vec<_>>(),
            });
            if let Some((old, version, changes)) = &review {
                report["against"] = json!({"file": old, "version": version});
                report["changes"] = changes
                    .iter()
                    .map(|c| {
                        json!({
                            "rule": c.rule,
                            "change": change_kind(&c.change),
                            "factor": match &c.change {
                                Change::Limit { factor, .. } | Change::Schedule { factor, .. } => {
                                    json!(factor)
                                }
                                _ => json!(null),
                            },
                            "refused": c.refused,
                            "text": c.to_string(),
                        })
                    })
                    .collect();
            }
            let _ = writeln!(out, "{report}");
        }
        (CheckFormat::Json, Err(errors)) => {
            let report = json!({
                "file": file,
                "valid": false,
                "rules": null,
                "version": null,
                "errors": errors,
            });
            let _ = writeln!(out, "{report}");
        }
    }
    code
}

/// The text report's first line: `ok`, or `refused` when a change against
/// the running rules is (the file itself being valid).
fn verdict(
    file: &str,
    set: &RuleSet,
    review: Option<&(String, String, Vec<RuleChange>)>,
) -> String {
    let (n, version) = (set.rules().len(), set.version());
    match review {
        Some((old, _, changes)) if changes.iter().any(|c| c.refused) => {
            let refused = changes.iter().filter(|c| c.refused).count();
            format!(
                "{file}: refused: valid ({n} rules, version {version}), but {refused} change(s) \
                 against {old} cut an enforced limit beyond its `changes.max_tightening` \
                 without an approval (marked `refused` below); the agent keeps the running rules"
            )
        }
        _ => format!("{file}: ok ({n} rules, version {version})"),
    }
}

/// One line per rule with `key: []`, saying what it counts: every request it
/// matches in one bucket, whoever sends it.
fn aggregate_notes(set: &RuleSet) -> Vec<String> {
    set.rules()
        .iter()
        .filter(|r| r.is_aggregate())
        .map(|r| {
            let l = r.limits.strictest();
            format!(
                "rule {}: `key: []`: every request it matches counts in one bucket, whoever \
                 sends it ({} per {} in total)",
                r.name,
                l.requests(),
                crate::explain::period(l.per_ns())
            )
        })
        .collect()
}

/// How far ahead `check-rules` warns of a rule's `expires`.
const EXPIRY_WARNING_SECS: u64 = 7 * 86_400;

/// A warning for every rule that has expired (the agent already leaves it out)
/// or expires within a week.
fn expiry_warnings(set: &RuleSet, now: u64) -> Vec<String> {
    let Some(config) = set.config() else {
        return Vec::new();
    };
    config
        .rules
        .iter()
        .filter_map(|r| {
            let text = r.expires.as_deref()?;
            let at = parse_instant(text)?;
            let owner = r
                .owner
                .as_deref()
                .map(|o| format!(" (owner {o})"))
                .unwrap_or_default();
            if at <= now {
                Some(format!(
                    "rule {}{owner} expired at {text} and no longer applies",
                    r.name
                ))
            } else if at - now <= EXPIRY_WARNING_SECS {
                Some(format!(
                    "rule {}{owner} expires at {text}, in {:.1} days",
                    r.name,
                    (at - now) as f64 / 86_400.0
                ))
            } else {
                None
            }
        })
        .collect()
}

/// The rules at `path` as [`check_rules`] reads them, for a command that
/// needs them (`key-id`); when they are refused, their errors are written to
/// `err` as `check-rules` writes them.
pub(crate) fn read_set(path: &Path, err: &mut impl Write) -> Result<Arc<RuleSet>, crate::CliError> {
    read(path).map_err(|errors| {
        for e in &errors {
            let _ = writeln!(err, "{e}");
        }
        crate::CliError::Reported { code: 1 }
    })
}

/// A rules file read and compiled, or a directory loaded as the agent loads
/// it ([`first_load`]: every file on its own, then merged); or every problem.
/// A directory is valid when the agent would report nothing of it.
fn read(path: &Path) -> Result<Arc<RuleSet>, Vec<RuleError>> {
    let file = path.display().to_string();
    if !path.is_dir() {
        return match meshlimit_agent::rules_watch::read_rules_file(path) {
            Ok(text) => parse_rules(&file, &text)
                .map(Arc::new)
                .map_err(|e| e.errors),
            Err(e) => Err(vec![path_error(&file, format!("cannot read: {e}"))]),
        };
    }
    match first_load(path) {
        Ok(FirstLoad {
            set: Some(set),
            errors,
        }) if errors.is_empty() => Ok(set),
        Ok(FirstLoad { errors, .. }) if !errors.is_empty() => Err(errors),
        Ok(_) => Err(vec![path_error(
            &file,
            "no rules file with a rule in it: an agent would serve none".into(),
        )]),
        Err(e) => Err(vec![path_error(&file, format!("cannot check: {e}"))]),
    }
}

/// A problem of the path as a whole, not of a line.
fn path_error(file: &str, message: String) -> RuleError {
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

/// Why OLD cannot be compared against, in one line.
fn summary(errors: &[RuleError]) -> String {
    let n = errors.len();
    match errors.first() {
        Some(e) if n == 1 && e.message.starts_with("cannot read: ") => e.message.clone(),
        first => format!(
            "{n} error(s), the first: {}",
            first.map(ToString::to_string).unwrap_or_default()
        ),
    }
}

fn change_kind(c: &Change) -> &'static str {
    match c {
        Change::Added { .. } => "added",
        Change::Removed => "removed",
        Change::Limit { .. } => "limit",
        Change::Mode { .. } => "mode",
        Change::Schedule { .. } => "schedule",
        Change::MatchWidened => "match_widened",
        Change::MatchNarrowed => "match_narrowed",
        Change::MatchChanged => "match_changed",
    }
}

#[cfg(test)]
mod tests;
