//! What is wrong with a rules file, said so a person can fix it:
//! `PATH: rule NAME: field FIELD: what is wrong`.

use std::fmt;

/// One problem in a rules file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RuleError {
    /// The file, as given on the command line (empty when checking text).
    pub file: String,
    /// The rule's name (or `#N`, its position, when it has no usable name);
    /// `None` for problems outside any rule.
    pub rule: Option<String>,
    /// The field, as a path inside the rule (`limit.per`, `key[1]`), or `-`.
    pub field: String,
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
            rule: rule.map(str::to_string),
            field: field.into(),
            message: message.into(),
        }
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
        if !self.file.is_empty() {
            write!(f, "{}: ", self.file)?;
        }
        if let Some(rule) = &self.rule {
            write!(f, "rule {rule}: ")?;
        }
        write!(f, "field {}: {}", self.field, self.message)
    }
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}
