//! `meshlimit-agent explain`: "why was this request limited?", answered offline
//! from a rules file: every rule in the order the filter evaluates them (strictest
//! first), with the key it would count the request under, its limit and mode, or
//! the condition that keeps it from applying. It runs core's own matching code,
//! so it says what the filter does.

use std::collections::BTreeMap;
use std::io::Write;

use meshlimit_core::metadata::{Field, MetadataPath, StructBuilder};

use meshlimit_core::rules::{parse_rules, Explained, RequestInfo};
use meshlimit_core::NANOS_PER_SEC;
use serde_json::{json, Value};

use crate::config::{CheckFormat, ExplainArgs};

/// Explains the request `args` describes against `args.rules`. Returns the exit
/// code: 0 explained, 1 the rules file is invalid or unreadable (its errors on
/// `err`, as `check-rules` prints them), 2 the request is ambiguous (a header a
/// rule keys on, given twice: the filter answers it 400).
pub fn explain(args: &ExplainArgs, out: &mut impl Write, err: &mut impl Write) -> u8 {
    let file = args.rules.display().to_string();
    let set = match crate::rules_watch::read_rules_file(&args.rules) {
        Ok(text) => match parse_rules(&file, &text) {
            Ok(set) => set,
            Err(e) => {
                let _ = writeln!(err, "{e}");
                return 1;
            }
        },
        Err(e) => {
            let _ = writeln!(err, "{file}: cannot read: {e}");
            return 1;
        }
    };
    let mut req = RequestInfo::new(&args.path, &args.method, args.headers.clone());
    req.client_ip = args.client_ip.clone();
    req.route = args.route.clone();
    req.cluster = args.cluster.clone();
    req.metadata = metadata(args);
    let explained = match set.explain(&req) {
        Ok(e) => e,
        Err(e) => {
            let _ = writeln!(err, "{file}: the filter refuses this request (400): {e}");
            return 2;
        }
    };
    let rows: Vec<Value> = explained
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let r = e.rule;
            let mut row = json!({
                "order": i + 1,
                "rule": r.name,
                "mode": r.mode,
                "scope": r.scope,
                "accuracy": r.accuracy,
                "on_failure": r.on_failure,
                "cost": r.cost.get(),
            });
            match &e.verdict {
                Explained::Applies { key, limit, plan } => {
                    row["applies"] = json!(true);
                    row["key"] = json!(key.as_str());
                    row["plan"] = json!(plan);
                    row["limit"] = json!({
                        "requests": limit.requests(),
                        "per": period(limit.per_ns()),
                        "per_seconds": limit.per_ns() as f64 / NANOS_PER_SEC as f64,
                        "burst": limit.burst(),
                        "algorithm": limit.algorithm().name(),
                    });
                }
                Explained::Skipped(why) => {
                    row["applies"] = json!(false);
                    row["reason"] = json!(why);
                }
            }
            row
        })
        .collect();
    match args.format {
        CheckFormat::Json => {
            let report = json!({
                "file": file,
                "version": set.version(),
                "request": {"method": req.method, "path": req.path},
                "rules": rows,
            });
            let _ = writeln!(out, "{report}");
        }
        CheckFormat::Text => {
            let _ = writeln!(
                out,
                "{file} (version {}): {} {}",
                set.version(),
                req.method,
                req.path
            );
            for row in &rows {
                let _ = writeln!(out, "{}", text_line(row));
            }
        }
    }
    0
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
        format!(
            "{head}  applies  key {}  limit {} per {} ({counted}){plan}  mode {}  scope {}  accuracy {}  on_failure {}",
            s("key"),
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
fn period(ns: u64) -> String {
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
