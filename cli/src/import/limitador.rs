//! Kuadrant Limitador's limits file: a YAML list of limits, each with a
//! `namespace`, `max_value` requests per `seconds`, `conditions` (CEL
//! expressions over the request's descriptors, all of which must hold) and
//! `variables` (descriptor entries that qualify the counter), and an optional
//! `name`. Conditions of the form `descriptors[0].KEY == 'VALUE'` (or
//! `descriptors[0]['KEY']`) are imported; any other expression is refused.

use serde::Deserialize;

use meshlimit_core::rules::config::LimitConfig;

use super::{Draft, Entry, Report};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Limit {
    namespace: String,
    max_value: u64,
    seconds: u64,
    #[serde(default)]
    conditions: Option<Vec<String>>,
    #[serde(default)]
    variables: Option<Vec<String>>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    id: Option<String>,
}

/// The longest period meshlimit counts, in seconds (366 days).
const MAX_SECONDS: u64 = 366 * 86_400;

pub(super) fn read(text: &str, report: &mut Report<'_>) -> Vec<Draft> {
    let limits: Vec<Limit> = match meshlimit_core::rules::read_yaml(text) {
        Ok(l) => l,
        Err(e) => {
            report.refuse(
                "",
                "",
                format!("not a Limitador limits file (a list of limits): {e}"),
            );
            return Vec::new();
        }
    };
    if limits.is_empty() {
        report.refuse("", "", "no limits: nothing to import");
        return Vec::new();
    }
    if limits.len() > super::MAX_LIMITS {
        report.refuse(
            "",
            "",
            format!(
                "{} limits, more than the {} one import reads: split the file",
                limits.len(),
                super::MAX_LIMITS
            ),
        );
        return Vec::new();
    }
    let namespaces: std::collections::BTreeSet<&str> =
        limits.iter().map(|l| l.namespace.as_str()).collect();
    report.note(format!(
        "namespaces {} are dropped: the rules apply to every request the filter sees, whichever \
         domain its Envoy would have named",
        namespaces
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    limits
        .iter()
        .enumerate()
        .filter_map(|(i, l)| draft(i, l, report))
        .collect()
}

/// The draft of limit `i`, or `None` with every reason on `report`.
fn draft(i: usize, l: &Limit, report: &mut Report<'_>) -> Option<Draft> {
    let at = match &l.name {
        Some(n) => format!("limits[{i}] ({n})"),
        None => format!("limits[{i}]"),
    };
    let before = report.errors.len();
    let requests = requests_of(l, &at, report);
    if l.seconds == 0 || l.seconds > MAX_SECONDS {
        report.refuse(
            &at,
            "seconds",
            format!("{} is not from 1 to {MAX_SECONDS} (366 days)", l.seconds),
        );
    }
    let entries = entries_of(l, &at, report);
    if l.id.is_some() {
        report.note("`id` is dropped: a meshlimit rule is known by its name");
    }
    if report.errors.len() != before {
        return None;
    }
    let name = l
        .name
        .clone()
        .unwrap_or_else(|| format!("{}.limit-{i}", l.namespace));
    Some(Draft {
        at,
        name,
        entries,
        limit: LimitConfig {
            requests,
            per: super::period(l.seconds),
            burst: None,
        },
        shadow: false,
    })
}

/// The limit's `max_value` as meshlimit's requests; 0 and a value above
/// meshlimit's largest limit are refused on `report` (and give 0).
fn requests_of(l: &Limit, at: &str, report: &mut Report<'_>) -> u32 {
    match u32::try_from(l.max_value) {
        Ok(0) => {
            report.refuse(
                at,
                "max_value",
                "0 refuses every request; meshlimit limits, it does not deny: block these \
                 requests in Envoy (an RBAC filter)",
            );
            0
        }
        Ok(n) => n,
        Err(_) => {
            report.refuse(
                at,
                "max_value",
                format!(
                    "{} is above meshlimit's largest limit, {}",
                    l.max_value,
                    u32::MAX
                ),
            );
            0
        }
    }
}

/// The descriptor entries of the limit's `variables` (keys) and `conditions`
/// (key and value); each one of no form meshlimit reads is refused on `report`.
fn entries_of(l: &Limit, at: &str, report: &mut Report<'_>) -> Vec<Entry> {
    let entry = |key, value, field| Entry {
        key,
        value,
        pattern: false,
        shared: false,
        at: at.to_string(),
        field,
    };
    let mut entries = Vec::new();
    for (j, v) in l.variables.iter().flatten().enumerate() {
        let field = format!("variables[{j}]");
        match descriptor_key(v.trim()) {
            Some((key, "")) => entries.push(entry(key, None, field)),
            _ => report.refuse(
                at,
                &field,
                format!("`{v}` is not `descriptors[0].KEY` (or `descriptors[0]['KEY']`)"),
            ),
        }
    }
    for (j, c) in l.conditions.iter().flatten().enumerate() {
        let field = format!("conditions[{j}]");
        match equality(c) {
            Ok((key, value)) => entries.push(entry(key, Some(value), field)),
            Err(why) => report.refuse(at, &field, format!("`{c}`: {why}")),
        }
    }
    entries
}

/// `descriptors[0].KEY` or `descriptors[0]['KEY']` (or `"KEY"`) at the start of
/// `text`: the key and the rest of the text.
fn descriptor_key(text: &str) -> Option<(String, &str)> {
    let rest = text.strip_prefix("descriptors")?.trim_start();
    let rest = rest.strip_prefix('[')?.trim_start();
    let rest = rest.strip_prefix('0')?.trim_start();
    let rest = rest.strip_prefix(']')?.trim_start();
    if let Some(rest) = rest.strip_prefix('.') {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (key, rest) = rest.split_at(end);
        let first_ok = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        return first_ok.then(|| (key.to_string(), rest.trim_start()));
    }
    let rest = rest.strip_prefix('[')?;
    let (key, rest) = string_literal(rest)?;
    let rest = rest.trim_start().strip_prefix(']')?;
    Some((key, rest.trim_start()))
}

/// A CEL string literal in single or double quotes at the start of `text`
/// (escapes `\\`, `\'`, `\"` only): its value and the rest.
fn string_literal(text: &str) -> Option<(String, &str)> {
    let text = text.trim_start();
    let quote = text.chars().next().filter(|q| *q == '\'' || *q == '"')?;
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e @ ('\\' | '\'' | '"'))) => value.push(e),
                _ => return None,
            },
            c if c == quote => return Some((value, text.get(i + 1..)?)),
            c => value.push(c),
        }
    }
    None
}

/// `descriptors[0].KEY == 'VALUE'`: the key and the value; else why not.
fn equality(text: &str) -> Result<(String, String), &'static str> {
    const FORM: &str =
        "meshlimit imports conditions of the form `descriptors[0].KEY == 'VALUE'` only";
    let (key, rest) = descriptor_key(text.trim()).ok_or(FORM)?;
    if rest.starts_with("!=") {
        return Err("meshlimit has no `!=` condition (a rule applies where conditions hold)");
    }
    let rest = rest.strip_prefix("==").ok_or(FORM)?;
    let (value, rest) = string_literal(rest).ok_or(FORM)?;
    if !rest.trim().is_empty() {
        return Err(FORM);
    }
    Ok((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_conditions_in_either_spelling_are_read() {
        for text in [
            "descriptors[0].req_method == 'GET'",
            "descriptors[0]['req_method'] == \"GET\"",
            "  descriptors[ 0 ] [ 'req_method' ]=='GET'  ",
        ] {
            assert_eq!(
                equality(text),
                Ok(("req_method".into(), "GET".into())),
                "{text}"
            );
        }
        assert_eq!(
            equality("descriptors[0]['req.path'] == 'it\\'s'"),
            Ok(("req.path".into(), "it's".into()))
        );
    }

    #[test]
    fn other_expressions_are_refused() {
        for text in [
            "descriptors[0].a == 'x' && descriptors[0].b == 'y'",
            "descriptors[1].a == 'x'",
            "descriptors[0].a == x",
            "descriptors[0].a.startsWith('x')",
            "'x' == descriptors[0].a",
            "descriptors[0]['a'] == 'x\\n'",
            "descriptors[0].a == 'x",
            "descriptors[0].1a == 'x'",
        ] {
            assert!(equality(text).is_err(), "{text}");
        }
        assert!(equality("descriptors[0].a != 'x'")
            .unwrap_err()
            .contains("!="));
    }
}
