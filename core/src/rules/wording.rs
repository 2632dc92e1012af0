//! serde's messages about a rules file, said in the file's own words: what
//! the field holds, with an example, and what was written instead. No Rust
//! type name (`u32`, `struct LimitConfig`, "variant") reaches a person.

use super::error::child;

/// `message` about `field` (a path in the file) as a person reads it; a
/// missing field's error is about that field (`rules[3].key`), not its parent.
pub(super) fn reword(field: &str, message: &str) -> (String, String) {
    if let Some(name) = quoted_after(message, "missing field ") {
        let path = child(field, &name);
        return (path, format!("required: {}", expected_here(&name, "")));
    }
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix) {
            let (got, wanted) = rest.split_once(", expected ").unwrap_or((rest, ""));
            let expected = expected_here(field, wanted);
            return (
                field.to_string(),
                format!("expected {expected}; got {}", got_words(got)),
            );
        }
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        return (field.to_string(), format!("unknown value {rest}"));
    }
    if let Some(rest) = message.strip_prefix("invalid length ") {
        return (field.to_string(), format!("wrong length {rest}"));
    }
    (field.to_string(), message.to_string())
}

/// The name in backquotes right after `prefix` at the start of `message`.
fn quoted_after(message: &str, prefix: &str) -> Option<String> {
    let rest = message.strip_prefix(prefix)?.strip_prefix('`')?;
    rest.split_once('`').map(|(name, _)| name.to_string())
}

/// What `path`'s field holds, with an example; serde's `wanted` in words when
/// the field is none this file knows.
fn expected_here(path: &str, wanted: &str) -> String {
    let segments: Vec<&str> = path
        .split('.')
        .map(|s| s.split('[').next().unwrap_or(s))
        .collect();
    let last = segments.last().copied().unwrap_or_default();
    let parent = segments.iter().rev().nth(1).copied().unwrap_or_default();
    let is_item = path.ends_with(']');
    let known = match (parent, last) {
        ("headers", _) => "a header condition, `{ equals: VALUE }` or `{ present: true }` (e.g. `x-env: { equals: prod }`)",
        ("limits", _) => "a plan's limit, e.g. `pro: { requests: 1000, per: 1m }`",
        (_, "per") => "a period: a whole number and one of ms, s, m, h, d (e.g. `per: 1m`)",
        (_, "shadow_first") => "a period: a whole number and one of ms, s, m, h, d (e.g. `shadow_first: 10m`)",
        (_, "requests") => "a whole number of requests from 1 to 4294967295 (e.g. `requests: 100`)",
        (_, "burst") => "a whole number from 1 to 4294967295 (e.g. `burst: 200`)",
        (_, "cost") => "a whole number of tokens from 1 to 4294967295 (e.g. `cost: 1`)",
        (_, "version") => "the schema version, `version: 1`",
        (_, "rules") if is_item => "a rule: a mapping with `name`, `key` and `limit` (or `plans`)",
        (_, "rules") => "a list of rules (e.g. `rules: [{ name: api, key: [client_ip], limit: { requests: 10, per: 1s } }]`)",
        (_, "name") => "a name: 1 to 64 characters of [a-z0-9._-] (e.g. `name: search-per-api-key`)",
        (_, "key") if is_item => "a key part: `method`, `client_ip`, `path`, `route`, `authority`, `header: NAME`, `query: NAME`, `claim: NAME` or `metadata: {filter, path}`",
        (_, "key") => "a list of key parts (e.g. `key: [client_ip]`), or `key: []` for one bucket shared by every request the rule matches",
        (_, "limit") => "a limit, e.g. `limit: { requests: 100, per: 1s }`",
        (_, "plans") => "plans, e.g. `plans: { header: x-plan, default: free, limits: { free: { requests: 10, per: 1m } } }`",
        (_, "match") => "conditions, e.g. `match: { path_prefix: /v1/, methods: [GET] }`",
        (_, "methods") if is_item => "a method, e.g. `GET`",
        (_, "methods") => "a list of methods, e.g. `methods: [GET, POST]`",
        (_, "headers") => "header conditions by name, e.g. `headers: { x-env: { equals: prod } }`",
        (_, "schedule") if is_item => "a window, e.g. `{ hours: \"09:00-17:00\", requests: 200 }`",
        (_, "schedule") => "a list of windows, e.g. `schedule: [{ hours: \"09:00-17:00\", requests: 200 }]`",
        (_, "days") if is_item => "a day: mon, tue, wed, thu, fri, sat or sun",
        (_, "days") => "a list of days, e.g. `days: [mon, tue, wed, thu, fri]`",
        (_, "minutes" | "seconds") => "a span within every hour in quotes, e.g. `minutes: \"00-30\"`",
        (_, "hours") => "a span within every day in quotes, e.g. `hours: \"09:00-17:00\"`",
        (_, "log_sample") => "a share from 0 to 1 (e.g. `log_sample: 0.01`)",
        (_, "max_tightening") => "a factor from 0 to 1 (e.g. `max_tightening: 0.5`)",
        (_, "present") => "`true` or `false`",
        (_, "expires") => "a UTC instant in quotes, e.g. `expires: \"2026-12-31\"`",
        (_, "path" | "path_prefix") if parent == "match" => "a path, e.g. `/v1/search`",
        (_, "defaults") => "defaults, e.g. `defaults: { mode: shadow }`",
        (_, "changes") => "the change guard, e.g. `changes: { max_tightening: 0.5 }`",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_string();
    }
    type_words(wanted)
}

/// serde's name for what it wanted, in words.
fn type_words(wanted: &str) -> String {
    let w = wanted.trim();
    if w.starts_with("struct ") || w == "a map" || w.starts_with("map") {
        return "a mapping (`name: value` pairs)".into();
    }
    match w {
        "a string" | "string" => "text".into(),
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" | "bool" => "`true` or `false`".into(),
        "a sequence" | "sequence" => "a list".into(),
        "" => "another value".into(),
        other if other.starts_with("enum ") => "one of the field's values".into(),
        other => other.to_string(),
    }
}

/// What serde says it got (`integer `60``, `string "x"`, `map`), in words.
fn got_words(got: &str) -> String {
    let (kind, value) = match got.split_once(' ') {
        Some((k, v)) => (k, v),
        None => (got, ""),
    };
    match kind {
        "integer" | "floating" => format!(
            "the number {}",
            value.trim_start_matches("point ").trim_matches('`')
        ),
        "string" => format!("the text {value}"),
        "boolean" => value.to_string(),
        "map" => "a mapping".into(),
        "sequence" => "a list".into(),
        "null" | "unit" => "nothing".into(),
        _ => got.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serdes_messages_read_in_the_files_words() {
        let cases = [
            (
                ("rules[0]", "missing field `key`"),
                ("rules[0].key", "required: a list of key parts (e.g. `key: [client_ip]`), or `key: []` for one bucket shared by every request the rule matches"),
            ),
            (
                ("rules[2].limit.per", "invalid type: integer `60`, expected a string"),
                ("rules[2].limit.per", "expected a period: a whole number and one of ms, s, m, h, d (e.g. `per: 1m`); got the number 60"),
            ),
            (
                ("rules[0].match.headers.x-env", "invalid type: string \"prod\", expected struct HeaderMatchConfig"),
                ("rules[0].match.headers.x-env", "expected a header condition, `{ equals: VALUE }` or `{ present: true }` (e.g. `x-env: { equals: prod }`); got the text \"prod\""),
            ),
            (
                ("rules[0].mode", "unknown variant `enforcing`, expected `enforce` or `shadow`"),
                ("rules[0].mode", "unknown value `enforcing`, expected `enforce` or `shadow`"),
            ),
            (
                ("rules[0].limit.burst", "invalid value: integer `9007199254740993`, expected u32"),
                ("rules[0].limit.burst", "expected a whole number from 1 to 4294967295 (e.g. `burst: 200`); got the number 9007199254740993"),
            ),
        ];
        for ((field, message), (want_field, want)) in cases {
            assert_eq!(
                reword(field, message),
                (want_field.to_string(), want.to_string())
            );
        }
    }
}
