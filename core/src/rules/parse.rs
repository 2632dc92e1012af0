//! Reading a rules file written by people: YAML (JSON is valid YAML), each rule
//! deserialised on its own so an error names the rule and the field path.

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

/// Parses and compiles a rules file's text. `file` names it in every error.
pub fn parse_rules(file: &str, text: &str) -> Result<RuleSet, RulesError> {
    parse_config(text)
        .and_then(|config| RuleSet::compile(&config))
        .map_err(|e| e.in_file(file))
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
