//! What is wrong with a rules file, said so a person can fix it:
//! `FILE:LINE:COLUMN: rule NAME: field rules[3].limit.per: what is wrong`, at
//! the offending field (`FILE:LINE:COLUMN: not valid YAML…` where the YAML
//! itself is broken), and as JSON for tools (`check-rules --format json`).

use std::fmt;

/// One problem in a rules file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
pub struct RuleError {
    /// The file, as given on the command line (empty when checking text).
    pub file: String,
    /// The line (1-based) the error is about: where the offending field is
    /// written (its mapping when it is missing), or where the YAML broke;
    /// `None` when not known (rules compiled from values, not text).
    pub line: Option<usize>,
    /// The column (1-based) on that line, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// The rule's name (or `#N`, its position, when it has no usable name);
    /// `None` for problems outside any rule.
    pub rule: Option<String>,
    /// The field, as a path inside the rule (`limit.per`, `key[1]`), or `-`.
    pub field: String,
    /// The field's path in the file (`rules[3].limit.per`, `defaults.mode`);
    /// empty for a problem of the file as a whole (not YAML, unreadable).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    pub message: String,
}

/// Every problem found in one file. A file is refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RulesError {
    pub errors: Vec<RuleError>,
}

impl RuleError {
    pub(crate) fn new(
        rule: Option<&str>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            file: String::new(),
            line: None,
            column: None,
            rule: rule.map(str::to_string),
            field: field.into(),
            path: String::new(),
            message: message.into(),
        }
    }

    /// The same error, about line `line`.
    #[cfg_attr(not(feature = "yaml"), allow(dead_code))]
    pub(crate) fn at_line(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }

    /// The same error, about line `line`, column `column`.
    #[cfg_attr(not(feature = "yaml"), allow(dead_code))]
    pub(crate) fn at(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }
}

impl RulesError {
    /// Stamps every error with the file it came from.
    pub fn in_file(mut self, file: &str) -> Self {
        for e in &mut self.errors {
            e.file = file.to_string();
        }
        self
    }
}

impl From<RuleError> for RulesError {
    fn from(e: RuleError) -> Self {
        Self { errors: vec![e] }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = match (self.line, self.column) {
            (Some(line), Some(column)) => format!(":{line}:{column}"),
            (Some(line), None) => format!(":{line}"),
            _ => String::new(),
        };
        match (self.file.is_empty(), at.is_empty()) {
            (false, _) => write!(f, "{}{at}: ", self.file)?,
            (true, false) => write!(f, "line {}: ", &at[1..])?,
            (true, true) => {}
        }
        if let Some(rule) = &self.rule {
            write!(f, "rule {rule}: ")?;
        }
        let field = match (self.path.as_str(), self.field.as_str()) {
            ("", "" | "-") => None,
            ("", field) => Some(field),
            (path, _) => Some(path),
        };
        match field {
            Some(field) => write!(f, "field {field}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

/// The path of `field` below `parent` (`rules[3]` and `limit.per`:
/// `rules[3].limit.per`; an empty or `-` field: the parent itself).
pub(crate) fn child(parent: &str, field: &str) -> String {
    match field {
        "" | "-" => parent.to_string(),
        _ if parent.is_empty() => field.to_string(),
        _ if field.starts_with('[') => format!("{parent}{field}"),
        _ => format!("{parent}.{field}"),
    }
}
