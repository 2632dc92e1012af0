//! Reading a rules file written by people: YAML (JSON is valid YAML), each rule
//! deserialised on its own so an error names the rule and the field path.
//!
//! Bounded input: a file longer than [`MAX_RULES_FILE_BYTES`] is refused, and so is
//! any YAML alias (`*name`). serde_yaml expands aliases into its `Value` tree, so a
//! 14 KB file of nested aliases (a "billion laughs") grew to 400 MB before any rule
//! was looked at; rules files have no use for aliases. The aliases are found by a
//! pure event scan ([`saphyr_parser`]) before serde_yaml sees the text: the scan holds
//! one event and the nesting stack at a time, so refusing such a file costs about
//! what reading it did (the agent's test measures the `check-rules` process's peak
//! RSS at under 16 MiB). A text the scanner cannot read is left to serde_yaml, whose
//! error messages the fixtures pin.

use serde::Deserialize;

use super::config::{DefaultsConfig, RuleConfig, RulesConfig};
use super::error::{RuleError, RulesError};
use super::RuleSet;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    version: u32,
    #[serde(default)]
    defaults: DefaultsConfig,
    rules: Vec<serde_yaml::Value>,
}

/// The largest rules file read: 4 MiB, above the biggest rule sets seen (20,000
/// rules are about 2.5 MB) with room to spare. Parsing costs about 50 bytes of
/// peak memory per byte of text (serde_yaml's `Value` tree, then the rules):
/// `check-rules` peaked at 62 MiB on a 1 MiB file (8,621 rules; a ConfigMap holds
/// at most 1 MiB, so no ConfigMap can cost more), 134 MiB on 2.5 MB (20,266
/// rules) and 217 MiB on a file at this cap (33,820 rules), measured with
/// `/usr/bin/time -f %M meshlimit-agent check-rules FILE` (debug build). An agent
/// given files above 1 MiB needs its memory limit raised by as much. Readers stop
/// at this size plus one byte (see the agent's rules watcher), so a bigger file is
/// never held.
pub const MAX_RULES_FILE_BYTES: usize = 4 * 1024 * 1024;

/// Parses and compiles a rules file's text. `file` names it in every error.
pub fn parse_rules(file: &str, text: &str) -> Result<RuleSet, RulesError> {
    check_bounds(text)
        .and_then(|()| parse_config(text))
        .and_then(|config| RuleSet::compile(&config))
        .map_err(|e| e.in_file(file))
}

/// Refuses a text over [`MAX_RULES_FILE_BYTES`] or holding a YAML alias, before
/// anything expands it.
fn check_bounds(text: &str) -> Result<(), RulesError> {
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
    for event in saphyr_parser::Parser::new_from_str(text) {
        match event {
            Ok((saphyr_parser::Event::Alias(_), span)) => {
                return Err(RuleError::new(
                    None,
                    "-",
                    format!(
                        "line {}, column {}: YAML aliases (`*name`) are not allowed in rules files: \
                         each alias is expanded in full, so a few KB of nested aliases can take \
                         gigabytes; write the value out",
                        span.start.line(),
                        span.start.col() + 1
                    ),
                )
                .into());
            }
            Ok((saphyr_parser::Event::StreamEnd, _)) => break,
            Ok(_) => {}
            // serde_yaml reports malformed YAML in its own words (the fixtures'
            // texts); the scan only looks for aliases.
            Err(_) => break,
        }
    }
    Ok(())
}

fn parse_config(text: &str) -> Result<RulesConfig, RulesError> {
    let value: serde_yaml::Value = serde_yaml::from_str(text)
        .map_err(|e| RuleError::new(None, "-", format!("not valid YAML or JSON: {e}")))?;
    let shape: FileShape = serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        RuleError::new(None, field, e.into_inner().to_string())
    })?;
    let mut rules = Vec::with_capacity(shape.rules.len());
    let mut errors = Vec::new();
    for (i, raw) in shape.rules.into_iter().enumerate() {
        let name = raw
            .get("name")
            .and_then(serde_yaml::Value::as_str)
            .map_or_else(|| format!("#{}", i + 1), str::to_string);
        match serde_path_to_error::deserialize::<_, RuleConfig>(raw) {
            Ok(rule) => rules.push(rule),
            Err(e) => {
                let field = e.path().to_string();
                errors.push(RuleError::new(
                    Some(&name),
                    field,
                    e.into_inner().to_string(),
                ));
            }
        }
    }
    if !errors.is_empty() {
        return Err(RulesError { errors });
    }
    Ok(RulesConfig {
        version: shape.version,
        defaults: shape.defaults,
        rules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        "version: 1\nrules:\n  - {name: a, key: [method], limit: {requests: 1, per: 1s}}\n";

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
        assert!(
            msg.starts_with("r.yaml: ") && msg.contains("line 2, column 10: YAML aliases"),
            "{msg}"
        );
        // An anchor alone is harmless and accepted; JSON stays accepted.
        let anchored = GOOD.replace("key: [method]", "key: &k [method]");
        assert!(parse_rules("r.yaml", &anchored).is_ok());
        let json = r#"{"version": 1, "rules": [{"name": "a*b", "key": ["method"],
            "limit": {"requests": 1, "per": "1s"}}]}"#;
        let err = parse_rules("r.json", json).unwrap_err().to_string();
        assert!(!err.contains("alias"), "{err}");
    }

    #[test]
    fn oversized_text_is_refused() {
        let mut text = String::from(GOOD);
        text.push_str(&"#".repeat(MAX_RULES_FILE_BYTES));
        let err = parse_rules("r.yaml", &text).unwrap_err().to_string();
        assert!(err.contains("larger than 4194304 bytes"), "{err}");
    }
}
