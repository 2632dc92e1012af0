//! Reading a rules file written by people: YAML (JSON is valid YAML), each rule
//! deserialised on its own so an error names the rule and the field path.
//!
//! Bounded input: a file longer than [`MAX_RULES_FILE_BYTES`] is refused, and so is
//! any YAML alias (`*name`). A YAML reader expands aliases as it builds values, so
//! a file of a few KB of nested aliases (a "billion laughs") grows to hundreds
//! of MB before any rule is looked at; rules files have no use for aliases. The aliases are found
//! by a pure event scan ([`granit_parser`], the parser `serde_saphyr` itself reads
//! with) before the text is read into values: the scan holds one event and the
//! nesting stack at a time, so refusing such a file costs about what reading it
//! does (the agent's test holds the `check-rules` process's peak RSS refusing it
//! within 2 MiB of reading the same file with its aliases spelled as plain
//! words, and a running agent's growth for a reload of it under 2 MiB). A text the scanner cannot read is left to `serde_saphyr`, whose error
//! (message, line and column) the fixtures pin.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_saphyr::granit_parser;

use super::compile::SCHEMA_VERSION;
use super::config::{ChangesConfig, DefaultsConfig, RuleConfig, RulesConfig};
use super::error::{child, RuleError, RulesError};
use super::RuleSet;

/// The largest rules file read: 4 MiB, above the largest rule sets meshlimit
/// is built for (20,000 rules) with room to spare. Parsing's peak memory grows
/// with the text, tens of bytes per byte (the text's value tree, then the
/// rules); a ConfigMap holds at most 1 MiB, which bounds what a file from one
/// costs, and an agent given larger files needs its memory limit raised in
/// proportion (the peaks `check-rules` reaches: docs/operations/capacity.md).
/// Readers stop at this size plus one byte (see the agent's rules watcher), so a
/// bigger file is never held.
pub const MAX_RULES_FILE_BYTES: usize = 4 * 1024 * 1024;

/// The top-level fields of a rules file, in the order serde's message names them.
const TOP_LEVEL: [&str; 4] = ["version", "defaults", "rules", "changes"];

/// Parses and compiles a rules file's text. `file` names it in every error.
///
/// Every problem of the file is reported in one pass: a rule that does not
/// deserialise (an unknown field, a wrong type) is reported and left out, and the
/// rules that did are still compiled and checked, so a parse error hides no
/// compile error of another rule. Errors carry the field's path in the file
/// and the line and column where it is written (its mapping's when it is
/// missing; where the YAML broke for a syntax error), and come in the file's
/// order.
pub fn parse_rules(file: &str, text: &str) -> Result<RuleSet, RulesError> {
    check_bounds(text)
        .and_then(|lines| parse_and_compile(text, &lines))
        .map_err(|e| e.in_file(file))
}

/// Refuses a YAML text a rules file would be refused for before it is parsed
/// (larger than [`MAX_RULES_FILE_BYTES`], or holding an alias), so that other
/// YAML the agent reads (a peer's configuration to import) gets the same guard.
pub fn check_yaml_text(file: &str, text: &str) -> Result<(), RulesError> {
    check_bounds(text).map(|_| ()).map_err(|e| e.in_file(file))
}

/// Where things start in the text, from the event scan: the top-level keys' lines
/// and each rule's first line (1-based), in order; an error's line when its
/// field's own place is not found.
#[derive(Debug, Default)]
struct Lines {
    top_level: BTreeMap<String, usize>,
    rules: Vec<usize>,
}

impl Lines {
    fn rule(&self, index: usize) -> Option<usize> {
        self.rules.get(index).copied()
    }

    /// The line of the top-level field `field` (`version`, `rules[3]`, `defaults.mode`).
    fn top_level(&self, field: &str) -> Option<usize> {
        let head = field.split(['.', '[']).next().unwrap_or(field);
        self.top_level.get(head).copied()
    }
}

/// One open collection during the scan.
enum Frame {
    /// A mapping; `key` is the key whose value comes next (`None`: a key comes next).
    Map { key: Option<String> },
    /// A sequence; `rules` when it is the top-level `rules:` value.
    Seq { rules: bool },
}

/// Refuses a text over [`MAX_RULES_FILE_BYTES`] or holding a YAML alias, before
/// anything expands it; the same scan notes where the rules start.
fn check_bounds(text: &str) -> Result<Lines, RulesError> {
    if text.len() > MAX_RULES_FILE_BYTES {
        return Err(RuleError::new(
            None,
            "-",
            format!(
                "larger than {MAX_RULES_FILE_BYTES} bytes ({} bytes); split the rules or raise the cap",
                text.len()
            ),
        )
        .into());
    }
    let mut lines = Lines::default();
    let mut stack: Vec<Frame> = Vec::new();
    for event in granit_parser::Parser::new_from_str(text) {
        let (event, span) = match event {
            Ok(e) => e,
            // serde_saphyr reports malformed YAML in its own words (the
            // fixtures' texts); the scan only looks for aliases and positions.
            Err(_) => break,
        };
        let line = span.start.line();
        use granit_parser::Event;
        let starts_node = matches!(
            event,
            Event::Alias(_)
                | Event::Scalar(..)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
        );
        let mut is_rules_value = false;
        if starts_node {
            let depth = stack.len();
            match stack.last_mut() {
                Some(Frame::Map { key }) => match key.take() {
                    None => {
                        // A key: the next node is its value.
                        let name = match &event {
                            Event::Scalar(v, ..) => v.to_string(),
                            _ => String::new(),
                        };
                        if depth == 1 {
                            lines.top_level.entry(name.clone()).or_insert(line);
                        }
                        *key = Some(name);
                    }
                    Some(k) => is_rules_value = depth == 1 && k == "rules",
                },
                Some(Frame::Seq { rules: true }) => lines.rules.push(line),
                _ => {}
            }
        }
        match event {
            Event::Alias(_) => {
                return Err(RuleError::new(
                    None,
                    "-",
                    "YAML aliases (`*name`) are not allowed in rules files: each alias is \
                     expanded in full, so a few KB of nested aliases can take gigabytes; \
                     write the value out",
                )
                .at(line, span.start.col() + 1)
                .into());
            }
            Event::MappingStart(..) => stack.push(Frame::Map { key: None }),
            Event::SequenceStart(..) => stack.push(Frame::Seq {
                rules: is_rules_value,
            }),
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
            }
            Event::DocumentEnd | Event::StreamEnd => break,
            _ => {}
        }
    }
    Ok(lines)
}

/// Points each error at its field: the line and column where the field's
/// name is written (a list item's first character), or where the nearest
/// written field above it is (a missing field's mapping). A second scan of
/// the text, made only for a refused file, keeping only the places asked for.
fn place_fields(text: &str, errors: &mut [RuleError]) {
    let mut wanted = std::collections::HashSet::new();
    for e in errors.iter().filter(|e| !e.path.is_empty()) {
        wanted.extend(prefixes(&e.path));
    }
    if wanted.is_empty() {
        return;
    }
    let places = field_places(text, &wanted);
    for e in errors.iter_mut().filter(|e| !e.path.is_empty()) {
        let found = prefixes(&e.path)
            .into_iter()
            .rev()
            .find_map(|p| places.get(&p).copied());
        if let Some((line, column)) = found {
            e.line = Some(line);
            e.column = Some(column);
        }
    }
}

/// `rules[3].limit.per`, then each path above it: `rules`, `rules[3]`,
/// `rules[3].limit`, `rules[3].limit.per` (outermost first).
fn prefixes(path: &str) -> Vec<String> {
    let mut out: Vec<String> = path
        .char_indices()
        .filter(|(i, c)| *i > 0 && (*c == '.' || *c == '['))
        .map(|(i, _)| path[..i].to_string())
        .collect();
    out.push(path.to_string());
    out
}

/// One open collection during [`field_places`]' scan, with its path.
enum Open {
    /// A mapping; `key` is the key whose value comes next (`None`: a key comes next).
    Map { path: String, key: Option<String> },
    /// A sequence; `next` is the position of its next item.
    Seq { path: String, next: usize },
}

/// Where each of `wanted`'s paths is written in `text`: (line, column), 1-based.
fn field_places(
    text: &str,
    wanted: &std::collections::HashSet<String>,
) -> BTreeMap<String, (usize, usize)> {
    use granit_parser::Event;
    let mut places = BTreeMap::new();
    let mut stack: Vec<Open> = Vec::new();
    for event in granit_parser::Parser::new_from_str(text) {
        let Ok((event, span)) = event else { break };
        let at = (span.start.line(), span.start.col() + 1);
        let mut note = |path: String| {
            if wanted.contains(&path) {
                places.entry(path).or_insert(at);
            }
        };
        let node_path = match &event {
            Event::Scalar(..) | Event::SequenceStart(..) | Event::MappingStart(..) => {
                let key = match &event {
                    Event::Scalar(v, ..) => v.to_string(),
                    _ => String::new(),
                };
                step_into(&mut stack, key, &mut note)
            }
            _ => None,
        };
        match event {
            Event::MappingStart(..) => stack.push(Open::Map {
                path: node_path.unwrap_or_default(),
                key: None,
            }),
            Event::SequenceStart(..) => stack.push(Open::Seq {
                path: node_path.unwrap_or_default(),
                next: 0,
            }),
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
            }
            Event::DocumentEnd | Event::StreamEnd => break,
            _ => {}
        }
    }
    places
}

/// A node starts inside the innermost open collection: a mapping's key (its
/// text `key`; the field's place is noted, and `None` returned), or a value,
/// whose path is returned (a list item's place is noted too).
fn step_into(stack: &mut [Open], key: String, note: &mut impl FnMut(String)) -> Option<String> {
    match stack.last_mut() {
        Some(Open::Map { path, key: next }) => match next.take() {
            None => {
                note(child(path, &key));
                *next = Some(key);
                None
            }
            Some(k) => Some(child(path, &k)),
        },
        Some(Open::Seq { path, next }) => {
            let item = format!("{path}[{next}]");
            *next += 1;
            note(item.clone());
            Some(item)
        }
        None => Some(String::new()),
    }
}

/// Deserialises one part of the file; on error, the field's path in the file
/// (under `prefix`) and what is wrong, in the file's words.
fn part<T: DeserializeOwned>(value: Value, prefix: &str) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let field = match path.as_str() {
            "." => prefix.to_string(),
            _ => child(prefix, &path),
        };
        super::wording::reword(&field, &e.into_inner().to_string())
    })
}

/// The YAML reader's limits for a text already checked by [`check_bounds`]: no
/// alias, at most [`MAX_RULES_FILE_BYTES`]. Its default node and event budgets
/// (250,000 nodes) are below what a file at the cap holds (33,820 rules of about
/// ten nodes each); a node takes at least one byte of text, so the cap bounds them.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: MAX_RULES_FILE_BYTES,
            max_events: 2 * MAX_RULES_FILE_BYTES,
            max_aliases: 0,
        },
    }
}

/// Reads YAML (or JSON) text other than a rules file (a peer's configuration to
/// import) with the rules file's reader and limits; give it a text that passed
/// [`check_yaml_text`]. The error is one line: what is wrong, then where.
pub fn read_yaml<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, yaml_options()).map_err(YamlError)
}

/// A text [`read_yaml`] could not read as the type asked for; its `Display` is
/// one line, what is wrong then where, without the reader's source snippet.
#[derive(Debug, thiserror::Error)]
#[error("{}", plain_error(.0).0)]
pub struct YamlError(serde_saphyr::Error);

/// A YAML error as one line of text (no source snippet) and its line and column.
fn plain_error(e: &serde_saphyr::Error) -> (String, Option<(usize, usize)>) {
    let plain = e.without_snippet();
    let message = plain.render_with_options(serde_saphyr::render_options! {
        snippets: serde_saphyr::SnippetMode::Off,
    });
    let at = plain.location().map(|at| {
        (
            usize::try_from(at.line()).unwrap_or(usize::MAX),
            usize::try_from(at.column()).unwrap_or(usize::MAX),
        )
    });
    (message, at)
}

/// Reads the text into values, or says where and why it is not YAML.
fn read_value(text: &str) -> Result<Value, RulesError> {
    serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|e| {
        let (message, at) = plain_error(&e);
        let error = RuleError::new(None, "-", format!("not valid YAML or JSON: {message}"));
        match at {
            Some((line, column)) => error.at(line, column),
            None => error,
        }
        .into()
    })
}

fn parse_and_compile(text: &str, lines: &Lines) -> Result<RuleSet, RulesError> {
    let value = read_value(text)?;
    let mut errors = Vec::new();
    let top_error = |field: String, message: String| {
        let line = lines.top_level(&field);
        let mut error = RuleError::new(None, field.clone(), message);
        error.path = field;
        match line {
            Some(line) => error.at_line(line),
            None => error,
        }
    };
    let Value::Object(map) = value else {
        return Err(RuleError::new(
            None,
            "-",
            "a rules file is a mapping with `version` and `rules` (and optionally `defaults`)",
        )
        .into());
    };
    let (mut version, mut defaults, mut raw_rules, mut changes) = (None, None, None, None);
    for (key, value) in map {
        match key.as_str() {
            "version" => match part::<u32>(value, "version") {
                Ok(v) => version = Some(v),
                Err((f, m)) => errors.push(top_error(f, m)),
            },
            "defaults" => match part::<DefaultsConfig>(value, "defaults") {
                Ok(d) => defaults = Some(d),
                Err((f, m)) => errors.push(top_error(f, m)),
            },
            "rules" => match part::<Vec<Value>>(value, "rules") {
                Ok(r) => raw_rules = Some(r),
                Err((f, m)) => errors.push(top_error(f, m)),
            },
            "changes" => match part::<ChangesConfig>(value, "changes") {
                Ok(c) => changes = Some(c),
                Err((f, m)) => errors.push(top_error(f, m)),
            },
            other => {
                let expected = TOP_LEVEL.map(|f| format!("`{f}`")).join(", ");
                errors.push(top_error(
                    other.to_string(),
                    format!("unknown field `{other}`, expected one of {expected}"),
                ));
            }
        }
    }
    for (field, got) in [
        ("version", version.is_some()),
        ("rules", raw_rules.is_some()),
    ] {
        let refused = errors
            .iter()
            .any(|e| e.rule.is_none() && e.field.starts_with(field));
        if !got && !refused {
            let (path, message) = super::wording::reword("", &format!("missing field `{field}`"));
            let mut error = RuleError::new(None, field, message).at(1, 1);
            error.path = path;
            errors.push(error);
        }
    }
    let rules_given = raw_rules.is_some();
    let mut rules = Vec::new();
    // The place in the file (position in `rules`, line) of each rule that
    // deserialised.
    let mut origins = Vec::new();
    for (i, raw) in raw_rules.unwrap_or_default().into_iter().enumerate() {
        let name = raw
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("#{}", i + 1), str::to_string);
        let at = format!("rules[{i}]");
        let rule_error = |path: String, message: String| {
            let field = path.strip_prefix(at.as_str()).unwrap_or(&path);
            let field = field.strip_prefix('.').unwrap_or(field);
            let mut error = RuleError::new(
                Some(&name),
                if field.is_empty() { "-" } else { field },
                message,
            );
            error.path = path;
            match lines.rule(i) {
                Some(line) => error.at_line(line),
                None => error,
            }
        };
        match part::<RuleConfig>(raw, &at) {
            Ok(rule) if rule.name.ends_with(super::trial::TRIAL_SUFFIX) => {
                errors.push(rule_error(
                    child(&at, "name"),
                    super::trial::reserved_name(&name),
                ));
            }
            Ok(rule) => {
                rules.push(rule);
                origins.push((i, lines.rule(i)));
            }
            Err((path, message)) => errors.push(rule_error(path, message)),
        }
    }
    // "at least one rule" is no news when `rules` is missing or some did not parse.
    let rules_reported = !rules_given || errors.iter().any(|e| e.rule.is_some());
    let config = RulesConfig {
        // A missing or unreadable version is already reported; compile the rules
        // as this build's version so their own problems show too.
        version: version.unwrap_or(SCHEMA_VERSION),
        defaults: defaults.unwrap_or_default(),
        rules,
        changes: changes.unwrap_or_default(),
    };
    let mut compile_errors = match RuleSet::compile_at(config, &origins) {
        // Rules left out: the file is refused even if the rest compiles.
        Ok(set) if errors.is_empty() => return Ok(set),
        Ok(_) => Vec::new(),
        Err(e) => e.errors,
    };
    for e in &mut compile_errors {
        if e.rule.is_none() {
            e.path = e.field.clone();
            if e.line.is_none() {
                e.line = lines.top_level(&e.field);
            }
        }
    }
    if rules_reported {
        compile_errors.retain(|e| !(e.rule.is_none() && e.field == "rules"));
    }
    errors.append(&mut compile_errors);
    place_fields(text, &mut errors);
    // The file's order; errors without a line (none expected) last.
    errors.sort_by_key(|e| (e.line.unwrap_or(usize::MAX), e.column.unwrap_or(0)));
    Err(RulesError { errors })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/one-rule.yaml"
    ));

    /// A "billion laughs": each level holds ten aliases of the one above.
    pub(crate) fn laughs(levels: usize) -> String {
        let mut text = String::from("a0: &a0 [\"lol\"]\n");
        for i in 1..levels {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        text
    }

    #[test]
    fn aliases_are_refused_before_expansion() {
        // 10^9 strings once expanded: refused at once, naming where.
        let text = format!("{}version: 1\nrules: []\n", laughs(10));
        let err = parse_rules("r.yaml", &text).unwrap_err();
        assert_eq!(err.errors.len(), 1, "{err}");
        let msg = err.to_string();
        assert!(msg.starts_with("r.yaml:2:10: YAML aliases"), "{msg}");
        // An anchor alone is harmless and accepted; JSON stays accepted.
        let anchored = GOOD.replace("key: [method]", "key: &k [method]");
        assert!(parse_rules("r.yaml", &anchored).is_ok());
        let json = r#"{"version": 1, "rules": [{"name": "a*b", "key": ["method"],
            "limit": {"requests": 1, "per": "1s"}}]}"#;
        let err = parse_rules("r.json", json).unwrap_err().to_string();
        assert!(!err.contains("alias"), "{err}");
    }

    #[test]
    fn broken_yaml_is_one_line_saying_where_it_broke() {
        let err = parse_rules("r.yaml", "version: 1\nrules: [\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "r.yaml:2:8: not valid YAML or JSON: unclosed bracket '[' at line 2, column 8"
        );
        let err = read_yaml::<Vec<u32>>("[1, x]").unwrap_err();
        assert_eq!(err.to_string(), "invalid u32 at line 1, column 5");
    }

    #[test]
    fn one_broken_rule_refuses_the_file_naming_it_and_its_line() {
        let text = "version: 1\nrules:\n  - name: good\n    key: [method]\n    limit: { requests: 1, per: 1s }\n  - name: broken\n    key: [method]\n    limit: { requests: 1, per: 1s }\n    colour: blue\n";
        let err = parse_rules("r.yaml", text).unwrap_err();
        assert_eq!(err.errors.len(), 1, "{err}");
        let e = &err.errors[0];
        assert_eq!(
            (e.rule.as_deref(), e.line),
            // The line of the unknown field, not of the rule.
            (Some("broken"), Some(9)),
            "{err}"
        );
        assert!(err.to_string().contains("colour"), "{err}");
    }

    #[test]
    fn a_missing_version_is_reported_once_with_the_rules_own_errors() {
        let text = "rules:\n  - name: r\n    key: [method]\n    limit: { requests: 0, per: 1s }\n";
        let err = parse_rules("r.yaml", text).unwrap_err();
        let fields: Vec<(Option<&str>, &str)> = err
            .errors
            .iter()
            .map(|e| (e.rule.as_deref(), e.field.as_str()))
            .collect();
        assert_eq!(
            fields.iter().filter(|(_, f)| *f == "version").count(),
            1,
            "{err}"
        );
        assert!(fields.iter().any(|(r, _)| *r == Some("r")), "{err}");
        // No rule parsed is no news when `rules` itself is missing.
        let err = parse_rules("r.yaml", "version: 1\n").unwrap_err();
        assert_eq!(err.errors.len(), 1, "{err}");
        assert_eq!(err.errors[0].field, "rules", "{err}");
    }

    #[test]
    fn a_file_at_the_size_cap_is_read() {
        let mut text = String::from(GOOD);
        text.push_str(&"#".repeat(MAX_RULES_FILE_BYTES - GOOD.len()));
        assert_eq!(text.len(), MAX_RULES_FILE_BYTES);
        assert!(parse_rules("r.yaml", &text).is_ok());
    }

    #[test]
    fn oversized_text_is_refused() {
        let mut text = String::from(GOOD);
        text.push_str(&"#".repeat(MAX_RULES_FILE_BYTES));
        let err = parse_rules("r.yaml", &text).unwrap_err().to_string();
        assert!(err.contains("larger than 4194304 bytes"), "{err}");
    }
}
