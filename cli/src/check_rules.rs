//! `meshlimit check-rules PATH`: validates a rules file the way the agent
//! would load it, for CI and for people editing a ConfigMap. Every problem of the
//! file is reported in one run, each with its line; `--format json` gives the same
//! as one JSON object for CI annotations and admission checks.

use std::io::Write;
use std::path::Path;

use meshlimit_core::rules::expiry::parse_instant;
use meshlimit_core::rules::review::{review, Change};
use meshlimit_core::rules::{parse_rules, RuleError, RuleSet};
use serde_json::json;

use crate::args::CheckFormat;

/// Checks `path`. Text: prints `PATH: ok (N rules, version V)` on `out` when valid,
/// else every problem as `PATH:LINE: rule NAME: field FIELD: what is wrong` on
/// `err`. JSON: one object on `out` either way:
/// `{"file", "valid", "rules", "version", "errors": [{"file", "line", "rule",
/// "field", "message"}]}` (`column` too for YAML syntax errors; `rules` and
/// `version` null when invalid). Returns the exit code: 0 valid, 1 invalid or
/// unreadable.
pub fn check_rules(
    path: &Path,
    format: CheckFormat,
    out: &mut impl Write,
    err: &mut impl Write,
) -> u8 {
    check_rules_against(path, None, format, out, err)
}

/// [`check_rules`], and with `against` (the rules running now) every rule's
/// change as well: added, removed, limit ×factor, mode, match. An enforced
/// limit cut beyond the running file's `changes.max_tightening` (the guard in
/// force, not the new file's) without an approval in the new file makes the
/// exit code 1, as the agent refuses such a file at reload.
pub fn check_rules_against(
    path: &Path,
    against: Option<&Path>,
    format: CheckFormat,
    out: &mut impl Write,
    err: &mut impl Write,
) -> u8 {
    let file = path.display().to_string();
    let result = match meshlimit_agent::rules_watch::read_rules_file(path) {
        Ok(text) => parse_rules(&file, &text).map_err(|e| e.errors),
        Err(e) => Err(vec![RuleError {
            file: file.clone(),
            line: None,
            column: None,
            rule: None,
            field: "-".into(),
            message: format!("cannot read: {e}"),
        }]),
    };
    let mut code = u8::from(result.is_err());
    let review = match (&result, against) {
        (Ok(set), Some(old_path)) => match load(old_path) {
            Ok(old) => {
                let changes = review(&old, set);
                code = u8::from(changes.iter().any(|c| c.refused));
                Some((
                    old_path.display().to_string(),
                    old.version().to_string(),
                    changes,
                ))
            }
            Err(why) => {
                let _ = writeln!(
                    err,
                    "{}: cannot compare against it: {why}",
                    old_path.display()
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
            let _ = writeln!(
                out,
                "{file}: ok ({} rules, version {})",
                set.rules().len(),
                set.version()
            );
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
            }
        }
        (CheckFormat::Text, Err(errors)) => {
            for e in &errors {
                // An unreadable file is one line, `PATH: cannot read: why`.
                if e.field == "-" && e.message.starts_with("cannot read: ") {
                    let _ = writeln!(err, "{file}: {}", e.message);
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

/// A rules file read and compiled, or why not (one line).
fn load(path: &Path) -> Result<RuleSet, String> {
    let file = path.display().to_string();
    let text = meshlimit_agent::rules_watch::read_rules_file(path)
        .map_err(|e| format!("cannot read: {e}"))?;
    parse_rules(&file, &text).map_err(|e| {
        let n = e.errors.len();
        format!(
            "{n} error(s), the first: {}",
            e.errors
                .first()
                .map(ToString::to_string)
                .unwrap_or_default()
        )
    })
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
