//! The rules as the agent serves them to filters: JSON lines, a head line with the
//! version, the rule count and the file's settings, then one rule a line. A filter
//! reads them a slice at a time ([`RulesLoad::step`]) between requests, so a set of
//! 20,000 rules (3 MB) is never parsed and compiled in one turn of a worker's loop
//! with requests waiting behind it.
//!
//! Compact JSON never holds a raw newline (control characters are escaped in
//! strings), so a line is exactly one value.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::builder::RuleSetBuilder;
use super::config::{RuleConfig, RulesConfig};
use super::{RuleSet, RulesError};

/// The media type of the served lines (`Accept` on `GET /v1/rules`).
pub const RULES_LINES_TYPE: &str = "application/jsonl";

/// The first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Head {
    /// The rules version (the content hash the agent computed).
    version: String,
    /// How many rule lines follow.
    rules: usize,
    /// The file's settings, with no rules.
    file: RulesConfig,
}

/// The lines of `set` (one that keeps its file, [`RuleSet::compile`]), rules in
/// the set's strictest-first order so a loading filter's sort is one pass.
pub fn encode(set: &RuleSet) -> Option<Vec<u8>> {
    let config = set.config()?;
    let head = Head {
        version: set.version().to_string(),
        rules: config.rules.len(),
        file: RulesConfig {
            rules: Vec::new(),
            ..config.clone()
        },
    };
    let by_name: HashMap<&str, &RuleConfig> =
        config.rules.iter().map(|r| (r.name.as_str(), r)).collect();
    // Serializing these types cannot fail (string keys, and no non-finite float
    // passes validation); an empty line would be refused on load.
    let mut out = serde_json::to_vec(&head).unwrap_or_default();
    for rule in set
        .rules()
        .iter()
        .filter_map(|r| by_name.get(r.name.as_str()))
    {
        out.push(b'\n');
        out.extend(serde_json::to_vec(rule).unwrap_or_default());
    }
    Some(out)
}

/// Why served lines were not loaded: the VM keeps the rules it has.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadError {
    #[error("rules head line: {0}")]
    Head(String),
    #[error("rules line {line}: {message}")]
    Rule { line: usize, message: String },
    #[error("rules: the head announced {expected} rules, {found} arrived")]
    Count { expected: usize, found: usize },
    #[error("{0}")]
    Rules(RulesError),
}

/// Served lines being compiled, a slice of rules at a time.
#[derive(Debug)]
pub struct RulesLoad {
    body: Vec<u8>,
    /// Where the next rule line starts.
    at: usize,
    version: String,
    expected: usize,
    builder: RuleSetBuilder,
}

impl RulesLoad {
    /// Reads the head line of `body`.
    pub fn start(body: Vec<u8>) -> Result<Self, LoadError> {
        let end = line_end(&body, 0);
        let head: Head = serde_json::from_slice(body.get(..end).unwrap_or_default())
            .map_err(|e| LoadError::Head(e.to_string()))?;
        let builder = RuleSetBuilder::new(&head.file);
        Ok(Self {
            at: (end + 1).min(body.len()),
            body,
            version: head.version,
            expected: head.rules,
            builder,
        })
    }

    /// The version being loaded.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The next slice of the load: up to `rules` more rules while lines are
    /// left, then one part of finishing the set per call (a few ms each for
    /// 20,000 rules); true once the set is ready for [`RulesLoad::finish`].
    pub fn step(&mut self, rules: usize) -> Result<bool, LoadError> {
        if self.at < self.body.len() {
            for _ in 0..rules {
                if self.at >= self.body.len() {
                    break;
                }
                let end = line_end(&self.body, self.at);
                let line = self.body.get(self.at..end).unwrap_or_default();
                // Line 1 is the head; rule n is on line n + 1.
                let number = self.builder.len() + 2;
                let rule: RuleConfig =
                    serde_json::from_slice(line).map_err(|e| LoadError::Rule {
                        line: number,
                        message: e.to_string(),
                    })?;
                self.builder.add(&rule, None);
                self.at = end + 1;
            }
            return Ok(false);
        }
        if self.builder.len() != self.expected {
            return Err(LoadError::Count {
                expected: self.expected,
                found: self.builder.len(),
            });
        }
        Ok(self.builder.finish_part())
    }

    /// The compiled set (kept without a copy of the file: a filter only matches),
    /// and the lines, to hand to other VMs.
    pub fn finish(mut self) -> Result<(RuleSet, Vec<u8>), LoadError> {
        while !self.step(usize::MAX)? {}
        let set = self
            .builder
            .finish(self.version, None)
            .map_err(LoadError::Rules)?;
        Ok((set, self.body))
    }

    /// Loads `body` in one go (a VM with no rules yet has no requests to keep
    /// waiting for them).
    pub fn run(body: Vec<u8>) -> Result<(RuleSet, Vec<u8>), LoadError> {
        Self::start(body)?.finish()
    }
}

/// The end of the line starting at `from`: its newline, or the body's end.
fn line_end(body: &[u8], from: usize) -> usize {
    body.get(from..)
        .and_then(|rest| rest.iter().position(|b| *b == b'\n'))
        .map_or(body.len(), |n| from + n)
}

#[cfg(test)]
mod tests;
