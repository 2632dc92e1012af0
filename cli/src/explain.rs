//! `meshlimit explain`: "why was this request limited?", answered offline
//! from a rules file: every rule in the order the filter evaluates them (strictest
//! first), with the key it would count the request under, its limit and mode, or
//! the condition that keeps it from applying, and for a rule with a schedule
//! its windows and the one in force at the request's time (`--at`, default
//! now). It runs core's own matching code, so it says what the filter does.

use std::collections::BTreeMap;
use std::io::Write;

use meshlimit_core::limit::Limit;
use meshlimit_core::metadata::{Field, MetadataPath, StructBuilder};
use meshlimit_core::rules::expiry::format_instant;
use meshlimit_core::rules::{parse_rules, Explained, Explanation, RequestInfo, Rule, RuleSet};
use meshlimit_core::NANOS_PER_SEC;
use serde_json::{json, Value};

use crate::args::{CheckFormat, ExplainArgs};
use crate::{CliError, Reported};

/// Explains the request `args` describes against `args.rules`: the rules
/// file invalid or unreadable is [`Reported::Refused`] (its errors on `err`,
/// as `check-rules` prints them), the request ambiguous (a header a rule keys
/// on, given twice: the filter answers it 400) [`Reported::Ambiguous`].
pub fn explain(
    args: &ExplainArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), CliError> {
    let file = args.rules.display().to_string();
    let set = read_rules(args, &file, err)?;
    let at = args
        .at
        .unwrap_or_else(meshlimit_agent::regions::clock::now_secs);
    let req = request(args, at);
    let explained = set.explain(&req).map_err(|e| {
        let _ = writeln!(err, "{file}: the filter refuses this request (400): {e}");
        Reported::Ambiguous
    })?;
    let rows: Vec<Value> = explained
        .iter()
        .enumerate()
        .map(|(i, e)| row(i + 1, e, req.now_ns))
        .collect();
    match args.format {
        CheckFormat::Json => {
            let report = json!({
                "file": file,
                "version": set.version(),
                "at": format_instant(at),
                "request": {"method": req.method, "path": req.path},
                "rules": rows,
            });
            let _ = writeln!(out, "{report}");
        }
        CheckFormat::Text => {
            let _ = writeln!(
                out,
                "{file} (version {}): {} {} at {}",
                set.version(),
                req.method,
                req.path,
                format_instant(at)
            );
            for row in &rows {
                let _ = writeln!(out, "{}", text_line(row));
                for line in schedule_lines(row) {
                    let _ = writeln!(out, "{line}");
                }
            }
        }
    }
    Ok(())
}

/// The rules `args` names, compiled; when they are refused, why on `err`.
fn read_rules(args: &ExplainArgs, file: &str, err: &mut impl Write) -> Result<RuleSet, Reported> {
    let text = meshlimit_agent::rules_watch::read_rules_file(&args.rules).map_err(|e| {
        let _ = writeln!(err, "{file}: cannot read: {e}");
        Reported::Refused
    })?;
    parse_rules(file, &text).map_err(|e| {
        let _ = writeln!(err, "{e}");
        Reported::Refused
    })
}

/// The request `args` describes, at `at` (Unix seconds).
fn request(args: &ExplainArgs, at: u64) -> RequestInfo {
    let mut req = RequestInfo::new(&args.path, &args.method, args.headers.clone());
    req.client_ip = args.client_ip.clone();
    req.route = args.route.clone();
    req.now_ns = at.saturating_mul(NANOS_PER_SEC);
    req.cluster = args.cluster.clone();
    req.metadata = metadata(args);
    req
}

/// The rule `e` explains, `order`th in the filter's order, as JSON: how it
/// counts, its schedule and window at `now_ns`, and whether it applies.
fn row(order: usize, e: &Explanation, now_ns: u64) -> Value {
    let r = e.rule;
    let mut row = json!({
        "order": order,
        "rule": r.name,
        "mode": r.mode,
        "scope": r.scope,
        "accuracy": r.accuracy,
        "on_failure": r.on_failure,
        "cold_start": r.cold_start,
        "cost": r.cost.get(),
    });
    if !r.schedule.is_empty() {
        row["schedule"] = schedule(r);
        // The window in force whether or not the rule applies.
        row["window"] = json!(r.schedule.window_at(now_ns));
    }
    match &e.verdict {
        Explained::Applies {
            key, limit, plan, ..
        } => {
            row["applies"] = json!(true);
            row["key"] = json!(key.as_str());
            row["aggregate"] = json!(r.is_aggregate());
            row["plan"] = json!(plan);
            row["limit"] = limit_json(limit);
        }
        Explained::Skipped(why) => {
            row["applies"] = json!(false);
            row["reason"] = json!(why);
        }
    }
    row
}

fn limit_json(limit: &Limit) -> Value {
    json!({
        "requests": limit.requests(),
        "per": period(limit.per_ns()),
        "per_seconds": limit.per_ns() as f64 / NANOS_PER_SEC as f64,
        "burst": limit.burst(),
        "algorithm": limit.algorithm().name(),
    })
}

/// A rule's windows as JSON: name, span (`minutes` or `hours`), days, limit.
fn schedule(rule: &Rule) -> Value {
    rule.schedule
        .windows()
        .iter()
        .map(|w| {
            let mut v = json!({
                "name": w.name,
                "days": w.days(),
                "limit": limit_json(&w.limit),
            });
            v[w.span().field()] = json!(w.span().text());
            v
        })
        .collect()
}

/// The schedule of a row, one line a window, the one in force marked.
fn schedule_lines(row: &Value) -> Vec<String> {
    let Some(windows) = row["schedule"].as_array() else {
        return Vec::new();
    };
    let now = row["window"].as_u64();
    let mut lines = vec![match now {
        Some(i) => format!("     schedule: window {i} in force"),
        None => "     schedule: no window in force, the rule's own limit applies".to_string(),
    }];
    for (i, w) in windows.iter().enumerate() {
        let (field, span) = if w["minutes"].is_string() {
            ("minutes", &w["minutes"])
        } else {
            ("hours", &w["hours"])
        };
        let name = w["name"]
            .as_str()
            .map(|n| format!(" {n}"))
            .unwrap_or_default();
        let days = w["days"]
            .as_array()
            .map(|d| {
                let d: Vec<&str> = d.iter().filter_map(Value::as_str).collect();
                format!(" on {}", d.join(", "))
            })
            .unwrap_or_default();
        let l = &w["limit"];
        let mark = if now == Some(i as u64) {
            "  (in force)"
        } else {
            ""
        };
        lines.push(format!(
            "     [{i}]{name}  {field} {} UTC{days}  limit {} per {} (burst {}){mark}",
            span.as_str().unwrap_or_default(),
            l["requests"],
            l["per"].as_str().unwrap_or_default(),
            l["burst"],
        ));
    }
    lines
}

/// The dynamic metadata `--claim` and `--metadata` give, as Envoy hands it to
/// the filter: each filter's namespace a serialized Struct.
fn metadata(args: &ExplainArgs) -> Vec<(String, Vec<u8>)> {
    let claims = args
        .claims
        .iter()
        .map(|(name, value)| (MetadataPath::claim(name), value.clone()));
    let mut by_filter: BTreeMap<String, StructBuilder> = BTreeMap::new();
    for (path, value) in claims.chain(args.metadata.iter().cloned()) {
        by_filter
            .entry(path.filter.clone())
            .or_default()
            .set_path(&path.path, Field::String(value));
    }
    by_filter
        .into_iter()
        .map(|(filter, s)| (filter, s.encode()))
        .collect()
}

/// One rule as a line: `1. name  applies  key K  limit 5 per 60s (burst 5) …`
/// (a window says `(fixed_window)` or `(sliding_window)` in place of its burst).
fn text_line(row: &Value) -> String {
    let s = |k: &str| row[k].as_str().unwrap_or_default().to_string();
    let head = format!("{}. {}", row["order"], s("rule"));
    if row["applies"] == json!(true) {
        let l = &row["limit"];
        let plan = row["plan"]
            .as_str()
            .map(|p| format!(" plan {p}"))
            .unwrap_or_default();
        let counted = match l["algorithm"].as_str() {
            Some(window @ ("fixed_window" | "sliding_window")) => window.to_string(),
            _ => format!("burst {}", l["burst"]),
        };
        // Said only when it is not the default.
        let cold = if row["cold_start"] == json!("admit") {
            "  cold_start admit"
        } else {
            ""
        };
        let key = if row["aggregate"] == json!(true) {
            format!("{} (one bucket for every matching request)", s("key"))
        } else {
            s("key")
        };
        format!(
            "{head}  applies  key {key}  limit {} per {} ({counted}){plan}  mode {}  scope {}  accuracy {}  on_failure {}{cold}",
            l["requests"],
            l["per"].as_str().unwrap_or_default(),
            s("mode"),
            s("scope"),
            s("accuracy"),
            s("on_failure"),
        )
    } else {
        format!("{head}  skipped: {}", s("reason"))
    }
}

/// A period as the rules file writes it: the largest unit that divides it
/// (`1m`, `250ms`, `1d`).
pub(crate) fn period(ns: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("d", 86_400 * NANOS_PER_SEC),
        ("h", 3_600 * NANOS_PER_SEC),
        ("m", 60 * NANOS_PER_SEC),
        ("s", NANOS_PER_SEC),
        ("ms", 1_000_000),
    ];
    UNITS
        .iter()
        .find(|(_, unit)| ns >= *unit && ns.is_multiple_of(*unit))
        .map_or_else(
            || format!("{ns}ns"),
            |(name, unit)| format!("{}{name}", ns / unit),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_read_as_the_rules_file_writes_them() {
        let s = NANOS_PER_SEC;
        assert_eq!(period(60 * s), "1m");
        assert_eq!(period(250_000_000), "250ms");
        assert_eq!(period(90 * s), "90s");
        assert_eq!(period(86_400 * s), "1d");
    }
}
