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
use crate::{CliError, Reported};

mod profile;
pub use profile::Profile;

/// Checks `path`. Text: prints `PATH: ok (N rules, version V)` on `out` when valid,
/// else every problem as `PATH:LINE:COLUMN: rule NAME: field FIELD-PATH: what is
/// wrong` on `err`. JSON: one object on `out` either way:
/// `{"file", "valid", "rules", "version", "errors": [{"file", "line", "column",
/// "rule", "field", "path", "message"}]}` (`rules` and `version` null when
/// invalid). An invalid or unreadable file is [`Reported::Refused`].
pub fn check_rules(
    path: &Path,
    format: CheckFormat,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), CliError> {
    check_rules_against(path, None, None, format, out, err)
}

/// [`check_rules`], and with `against` (the rules running now) every rule's
/// change as well: added, removed, limit ×factor, mode, match. An enforced
/// limit cut beyond the running file's `changes.max_tightening` (the guard in
/// force, not the new file's) without an approval in the new file is
/// [`Reported::Refused`], as the agent refuses such a file at reload. With
/// `profile`, what cannot work where the file runs is an error too ([`Profile`]).
pub fn check_rules_against(
    path: &Path,
    against: Option<&Path>,
    profile: Option<Profile>,
    format: CheckFormat,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), CliError> {
    let file = path.display().to_string();
    let result = read(path).and_then(|set| profile::fits(set, profile, &file));
    let review = match (&result, against) {
        (Ok(set), Some(old_path)) => Some(Review::against(old_path, set, err)?),
        _ => None,
    };
    let refused = result.is_err() || review.as_ref().is_some_and(Review::refuses);
    match (format, result) {
        (CheckFormat::Text, Ok(set)) => write_text(&file, &set, review.as_ref(), out, err),
        (CheckFormat::Text, Err(errors)) => write_text_errors(&file, &errors, err),
        (CheckFormat::Json, Ok(set)) => {
            let _ = writeln!(out, "{}", json_report(&file, &set, review.as_ref()));
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
    if refused {
        return Err(Reported::Refused.into());
    }
    Ok(())
}

/// A file's changes against the rules running now (`--against`).
struct Review {
    /// The running rules' path, as shown.
    old: String,
    /// The running rules' version.
    version: String,
    changes: Vec<RuleChange>,
}

impl Review {
    /// `set` reviewed against the rules at `old_path`; when those cannot be
    /// read, one line on `err` saying why, and [`Reported::Refused`].
    fn against(old_path: &Path, set: &RuleSet, err: &mut impl Write) -> Result<Review, Reported> {
        match read(old_path) {
            Ok(old) => Ok(Review {
                old: old_path.display().to_string(),
                version: old.version().to_string(),
                changes: review(&old, set),
            }),
            Err(errors) => {
                let _ = writeln!(
                    err,
                    "{}: cannot compare against it: {}",
                    old_path.display(),
                    summary(&errors)
                );
                Err(Reported::Refused)
            }
        }
    }

    /// Whether a change is one the agent refuses at reload.
    fn refuses(&self) -> bool {
        self.changes.iter().any(|c| c.refused)
    }
}

/// The text report of a valid file: its verdict and notes on `out`, its
/// expiry warnings on `err`, then its changes against the running rules.
fn write_text(
    file: &str,
    set: &RuleSet,
    review: Option<&Review>,
    out: &mut impl Write,
    err: &mut impl Write,
) {
    let _ = writeln!(out, "{}", verdict(file, set, review));
    for line in aggregate_notes(set) {
        let _ = writeln!(out, "{file}: {line}");
    }
    for w in expiry_warnings(set, meshlimit_agent::regions::clock::now_secs()) {
        let _ = writeln!(err, "{file}: warning: {w}");
    }
    let Some(Review {
        old,
        version,
        changes,
    }) = review
    else {
        return;
    };
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

/// The text report of an invalid file: every error on `err`.
fn write_text_errors(file: &str, errors: &[RuleError], err: &mut impl Write) {
    for e in errors {
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

/// The JSON report of a valid file, with its changes against the running rules.
fn json_report(file: &str, set: &RuleSet, review: Option<&Review>) -> serde_json::Value {
    let warnings = expiry_warnings(set, meshlimit_agent::regions::clock::now_secs());
    let mut report = json!({
        "file": file,
        "valid": true,
        "rules": set.rules().len(),
        "version": set.version(),
        "errors": [],
        "warnings": warnings,
        "aggregate": set.rules().iter().filter(|r| r.is_aggregate()).map(|r| &r.name).collect::<Vec<_>>(),
    });
    if let Some(r) = review {
        report["against"] = json!({"file": r.old, "version": r.version});
        report["changes"] = r.changes.iter().map(change_json).collect();
    }
    report
}

/// One change of the JSON report's `changes`.
fn change_json(c: &RuleChange) -> serde_json::Value {
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
}

/// The text report's first line: `ok`, or `refused` when a change against
/// the running rules is (the file itself being valid).
fn verdict(file: &str, set: &RuleSet, review: Option<&Review>) -> String {
    let (n, version) = (set.rules().len(), set.version());
    match review {
        Some(review) if review.refuses() => {
            let refused = review.changes.iter().filter(|c| c.refused).count();
            let old = &review.old;
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
        CliError::from(Reported::Refused)
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
