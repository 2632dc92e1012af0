//! Rules: the file's model (`config`), its validation and compilation (`compile`),
//! parsing from text (`parse`, with the `yaml` feature), and matching a request
//! against the compiled set (`matching`).

mod builder;
mod compile;
pub mod config;
mod error;
pub mod expiry;
mod explain;
mod index;
pub mod lines;
mod matching;
#[cfg(feature = "yaml")]
mod parse;
pub mod review;
pub mod schedule;
#[cfg(feature = "schema")]
pub mod schema;
mod stepsort;

pub mod trial;
#[cfg(feature = "yaml")]
mod wording;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;

pub use builder::RuleSetBuilder;
pub use compile::{parse_period, PeriodError, DEFAULT_LOG_SAMPLE, MAX_RULE_NAME, SCHEMA_VERSION};
pub use config::{
    Accuracy, ApprovalConfig, ChangesConfig, ColdStart, FailurePolicy, KeyPartConfig as KeyPart,
    LogKey, Mode, RulesConfig, Scope,
};
pub use error::{RuleError, RulesError};
pub use explain::{Explained, Explanation};
pub use matching::{Applicable, RequestError, RequestInfo};
#[cfg(feature = "yaml")]
pub use parse::{check_yaml_text, parse_rules, read_yaml, YamlError, MAX_RULES_FILE_BYTES};

use crate::limit::Limit;
use crate::metadata::MetadataPath;

/// A validated, compiled rules file, rules ordered strictest first.
#[derive(Debug, Clone)]
pub struct RuleSet {
    rules: Vec<Rule>,
    version: String,
    /// The normalised file, kept only by [`RuleSet::compile`] (a host that serves
    /// the rules); `None` from [`RuleSet::compile_unserved`].
    config: Option<Arc<RulesConfig>>,
    /// The file's guard on changes (see [`review`]).
    changes: ChangesConfig,
    /// What the rules read beyond the headers: each is a host call per request
    /// in the filter, made only when needed.
    needs: Needs,
    /// The rules by path condition: what `applicable` looks in.
    index: index::RuleIndex,
    /// Rule positions sorted by name, for [`RuleSet::rule`].
    by_name: Box<[usize]>,
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    /// `expires` in Unix seconds: from then on the rule no longer applies.
    pub expires_at: Option<u64>,
    matcher: Matcher,
    key: Vec<KeyPart>,
    pub limits: Limits,
    pub cost: NonZeroU32,
    pub mode: Mode,
    pub on_failure: FailurePolicy,
    pub accuracy: Accuracy,
    pub scope: Scope,
    pub cold_start: ColdStart,
    /// The share of allowed decisions the decision log keeps.
    pub log_sample: f64,
    pub log_key: LogKey,
    /// Windows with another limit (rules with `limit` only).
    pub schedule: schedule::Schedule,
}

/// A rule's limit at one instant: what [`Rule::limit_in_force`] answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InForce<'r> {
    pub limit: Limit,
    /// The plan the limit is of, for a rule with plans.
    pub plan: Option<&'r str>,
    /// The schedule window in force (its position), `None` outside every window.
    pub window: Option<usize>,
}

/// What a set's rules read of a request beyond its headers, path and method:
/// each a host call per request in the filter, made only when some rule needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    pub client_ip: bool,
    /// The route name (`route` key part, `match.route`).
    pub route: bool,
    /// The upstream cluster's name (`match.cluster`).
    pub cluster: bool,
    /// The filters whose dynamic metadata some rule keys on or picks its plan
    /// by, sorted, each once.
    pub metadata: Vec<String>,
}

/// A rule's limit: one for everyone, or one per plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Limits {
    Single(Limit),
    Plans {
        /// What names the plan.
        by: PlanSource,
        default_plan: String,
        default: Limit,
        limits: BTreeMap<String, Limit>,
    },
}

/// What names a rule's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanSource {
    /// A header (lower case).
    Header(String),
    /// A value of Envoy's dynamic metadata (a verified JWT's claim).
    Metadata(MetadataPath),
}

/// A condition on a name Envoy gives (cluster, route): this name, or every name
/// ending in a suffix (written `*suffix`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamePattern {
    Exact(String),
    Suffix(String),
}

/// A name pattern a rule cannot use: the pattern as written (borrowed: refusing
/// one allocates nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a name or `*suffix`: printable characters, one `*` and only first")]
pub struct NamePatternError<'a>(pub &'a str);

impl NamePattern {
    /// The pattern as written; `*` is only meaningful first.
    pub fn parse(text: &str) -> Result<Self, NamePatternError<'_>> {
        let (wild, name) = match text.strip_prefix('*') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if name.is_empty() || name.contains('*') || name.chars().any(char::is_control) {
            return Err(NamePatternError(text));
        }
        Ok(if wild {
            NamePattern::Suffix(name.to_string())
        } else {
            NamePattern::Exact(name.to_string())
        })
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Exact(n) => name == n,
            NamePattern::Suffix(s) => name.ends_with(s.as_str()),
        }
    }

    /// Whether every name `other` admits is admitted by `self`.
    pub fn covers(&self, other: &NamePattern) -> bool {
        match (self, other) {
            (a, NamePattern::Exact(n)) => a.matches(n),
            (NamePattern::Exact(_), NamePattern::Suffix(_)) => false,
            (NamePattern::Suffix(a), NamePattern::Suffix(b)) => b.ends_with(a.as_str()),
        }
    }
}

impl std::fmt::Display for NamePattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamePattern::Exact(n) => write!(f, "`{n}`"),
            NamePattern::Suffix(s) => write!(f, "`*{s}`"),
        }
    }
}

#[derive(Debug, Clone)]
struct Matcher {
    path: PathMatch,
    authority: Option<crate::authority::HostPattern>,
    cluster: Option<NamePattern>,
    route: Option<NamePattern>,
    methods: Option<Vec<String>>,
    headers: Vec<(String, HeaderMatch)>,
}

#[derive(Debug, Clone)]
enum PathMatch {
    Any,
    Exact(String),
    Prefix(String),
    /// A prefix that ended with `/`, normalised: the directory and below.
    Directory(String),
}

#[derive(Debug, Clone)]
enum HeaderMatch {
    Present(bool),
    Equals(String),
}

impl RuleSet {
    /// The content hash of the rules, the same on every agent for the same file.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The normalised rules, as served to filters; `None` for a set compiled by
    /// [`RuleSet::compile_unserved`].
    pub fn config(&self) -> Option<&RulesConfig> {
        self.config.as_deref()
    }

    /// [`RuleSet::config`], to keep beside the set without a copy.
    pub fn shared_config(&self) -> Option<Arc<RulesConfig>> {
        self.config.clone()
    }

    /// Frees up to `n` more of the set's rules, for a host that must not stall
    /// on freeing a large set it no longer uses (the filter, between requests);
    /// true once everything is freed. Meanwhile the set holds fewer rules.
    pub fn shed(&mut self, n: usize) -> bool {
        if self.rules.is_empty() {
            self.index = index::RuleIndex::default();
            self.by_name = Box::default();
            self.config = None;
            return true;
        }
        self.rules.truncate(self.rules.len().saturating_sub(n));
        false
    }

    /// The file's guard on changes: the tightening maximum, the approvals, the
    /// trial in shadow.
    pub fn changes(&self) -> &ChangesConfig {
        &self.changes
    }

    /// Rules, strictest first.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.rules.get(self.position(name)?)
    }

    /// The position of the rule named `name` in [`RuleSet::rules`].
    pub fn position(&self, name: &str) -> Option<usize> {
        let rule = |i: &usize| self.rules.get(*i);
        let at = self
            .by_name
            .binary_search_by(|i| rule(i).map_or("", |r| r.name.as_str()).cmp(name))
            .ok()?;
        self.by_name.get(at).copied()
    }

    /// True when some rule keys on `part`.
    pub fn uses(&self, part: &KeyPart) -> bool {
        match part {
            KeyPart::ClientIp => self.needs.client_ip,
            other => self.rules.iter().any(|r| r.key.contains(other)),
        }
    }

    /// What the rules read beyond headers, path and method (the filter fetches
    /// each from the host only when needed; each costs a host call per request).
    pub fn needs(&self) -> &Needs {
        &self.needs
    }
}

impl Rule {
    /// Whether the rule has expired at `now_secs` (Unix seconds): the test
    /// the agent leaves expired rules out of the set it serves by, and
    /// `explain` skips them by.
    pub fn has_expired(&self, now_secs: u64) -> bool {
        expiry::expired(self.expires_at, now_secs)
    }

    /// True for a rule with `key: []`: every request it matches counts in one
    /// bucket, whose key is the rule's name alone, whatever the client sends.
    pub fn is_aggregate(&self) -> bool {
        self.key.is_empty()
    }

    /// The limit in force at `now_ns` (ns since the Unix epoch, UTC) for
    /// `plan`: the first schedule window that covers the instant, else the
    /// rule's own limit (the plan's, else the default plan's). The one answer
    /// the filter, the agent, `explain` and `replay` use.
    pub fn limit_in_force(&self, plan: Option<&str>, now_ns: u64) -> InForce<'_> {
        let (limit, plan) = self.limit_for_plan(plan);
        match self.schedule.window_at(now_ns) {
            Some(i) => InForce {
                limit: self.schedule.windows().get(i).map_or(limit, |w| w.limit),
                plan,
                window: Some(i),
            },
            None => InForce {
                limit,
                plan,
                window: None,
            },
        }
    }

    /// The longest a denial may be cached at `now_ns`: until the schedule's
    /// next edge, where the limit in force may change (`u64::MAX` without a
    /// schedule).
    pub fn until_change_ns(&self, now_ns: u64) -> u64 {
        self.schedule.until_change_ns(now_ns).unwrap_or(u64::MAX)
    }

    /// The rule's own limit for `plan` (a plan name the rule knows), else the
    /// default plan's, whatever the schedule.
    pub(crate) fn limit_for_plan(&self, plan: Option<&str>) -> (Limit, Option<&str>) {
        match &self.limits {
            Limits::Single(l) => (*l, None),
            Limits::Plans {
                default_plan,
                default,
                limits,
                ..
            } => plan
                .and_then(|p| limits.get_key_value(p))
                .map(|(name, l)| (*l, Some(name.as_str())))
                .unwrap_or((*default, Some(default_plan.as_str()))),
        }
    }
}

impl Limits {
    /// The strictest limit, the one rules are ordered by.
    pub fn strictest(&self) -> Limit {
        match self {
            Limits::Single(l) => *l,
            Limits::Plans {
                limits, default, ..
            } => limits
                .values()
                .copied()
                .min_by(|a, b| a.rate_per_sec().total_cmp(&b.rate_per_sec()))
                .unwrap_or(*default),
        }
    }
}

#[cfg(test)]
mod tests;
