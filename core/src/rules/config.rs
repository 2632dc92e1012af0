//! Serde types that mirror the rules file (see docs/reference/rules.md). They
//! hold what people wrote; `compile` turns them into a validated [`super::RuleSet`].
//! Unknown fields are errors: a typo in a limit must not become "no limit".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::limit::Algorithm;
pub use crate::metadata::MetadataPath;
pub use key_part::{KeyPartConfig, MetadataConfig};

mod key_part;

/// The whole rules file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RulesConfig {
    /// The schema version: 1.
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 1)))]
    pub version: u32,
    /// Fields that apply to every rule that omits them.
    #[serde(default)]
    pub defaults: DefaultsConfig,
    /// The rules; every rule that matches a request is evaluated, the strictest first.
    #[cfg_attr(feature = "schema", schemars(length(min = 1)))]
    pub rules: Vec<RuleConfig>,
    /// How far one edit may tighten an enforced limit, and the approvals of the
    /// tightenings that go further.
    #[serde(default, skip_serializing_if = "ChangesConfig::is_default")]
    pub changes: ChangesConfig,
}

/// The guard on rule changes: an enforced limit cut below `max_tightening` × its
/// running value is refused (by `check-rules --against` and by the agent at
/// reload) unless `approve` names the rule and the running version it replaces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ChangesConfig {
    /// The smallest factor (new ÷ running) an enforced limit may be cut to
    /// without an approval; default 0.5.
    #[serde(default = "default_max_tightening")]
    #[cfg_attr(feature = "schema", schemars(range(min = 0.0, max = 1.0)))]
    pub max_tightening: f64,
    /// Approved tightenings: this rule may be cut further than `max_tightening`
    /// when the running rules are `against` (the version `check-rules` and the
    /// metrics show), so an approval never outlives the change it was for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approve: Vec<ApprovalConfig>,
    /// How long a new rule, or the new limit of a tightened enforced rule, runs
    /// in shadow (counted, never refused) before it enforces, when the agent
    /// installs this file over a running version: `10m`, `1h`; `0s` turns the
    /// trial off. Default 5m. A tightened rule keeps enforcing its running limit
    /// meanwhile. The first rules an agent loads apply at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(regex(pattern = r"^[0-9]+(ms|s|m|h|d)$")))]
    pub shadow_first: Option<String>,
}

/// One approved tightening.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    pub rule: String,
    /// The running rules version this change replaces.
    pub against: String,
}

/// Half the running limit: a typo of one digit (×0.1) is refused, an ordinary
/// adjustment is not.
pub const DEFAULT_MAX_TIGHTENING: f64 = 0.5;

fn default_max_tightening() -> f64 {
    DEFAULT_MAX_TIGHTENING
}

/// How long new and tightened rules run in shadow when `changes.shadow_first`
/// is not given: long enough to see a busy hour's minute-scale traffic against
/// the new limit, short enough that a change is in force the same coffee break.
pub const DEFAULT_SHADOW_FIRST: &str = "5m";

impl Default for ChangesConfig {
    fn default() -> Self {
        ChangesConfig {
            max_tightening: DEFAULT_MAX_TIGHTENING,
            approve: Vec::new(),
            shadow_first: None,
        }
    }
}

impl ChangesConfig {
    fn is_default(&self) -> bool {
        *self == ChangesConfig::default()
    }

    /// `shadow_first` in milliseconds (the default when absent, 0 when off), or
    /// what is wrong with it.
    pub fn shadow_first_ms(&self) -> Result<u64, super::PeriodError> {
        let text = self.shadow_first.as_deref().unwrap_or(DEFAULT_SHADOW_FIRST);
        let t = text.trim();
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(digits);
        if !num.is_empty() && num.bytes().all(|b| b == b'0') {
            // `0s` (any unit): off. The unit is still checked, and a refusal
            // quotes the text as written.
            return match super::parse_period(&format!("1{unit}")) {
                Ok(_) => Ok(0),
                Err(_) => Err(super::PeriodError::Unreadable(text.to_string())),
            };
        }
        super::parse_period(text).map(|ns| ns / crate::NANOS_PER_MS)
    }
}

impl RuleConfig {
    /// The rule with `defaults` written into each field it omits, so it keeps
    /// its meaning in a file with other defaults.
    pub fn with_defaults(mut self, d: &DefaultsConfig) -> Self {
        self.mode = self.mode.or(d.mode);
        self.on_failure = self.on_failure.or(d.on_failure);
        self.accuracy = self.accuracy.or(d.accuracy);
        self.scope = self.scope.or(d.scope);
        self
    }
}

/// Fields that apply to every rule that omits them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DefaultsConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<FailurePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<Accuracy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<Algorithm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start: Option<ColdStart>,
    /// The share of allowed decisions the decision log keeps, 0 to 1
    /// (rejections are always kept); default 0.01.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 0.0, max = 1.0)))]
    pub log_sample: Option<f64>,
}

/// One rule as written: `name`, `key`, and either `limit` or `plans`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("oneOf" = [{"required": ["limit"]}, {"required": ["plans"]}]))
)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// 1 to 64 characters of [a-z0-9._-]; unique in the file. Metric label and key prefix.
    #[cfg_attr(feature = "schema", schemars(regex(pattern = r"^[a-z0-9._-]{1,64}$")))]
    pub name: String,
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<MatchConfig>,
    /// What the limit is counted per: `method`, `client_ip`, `path`, `route`,
    /// `authority`, `header: NAME`, `query: NAME`, `claim: NAME`,
    /// `metadata: {filter, path}`; `[]` counts every request the rule matches
    /// in one bucket (a limit on an endpoint as a whole).
    pub key: Vec<KeyPartConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plans: Option<PlansConfig>,
    /// Tokens one request takes (default 1); at most the burst.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = u32::MAX)))]
    pub cost: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<FailurePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<Accuracy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// How the limit counts: `token_bucket` (default), `fixed_window` or
    /// `sliding_window` (`requests` per `per`; no `burst`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<Algorithm>,
    /// What a key's first request at an Envoy does while that Envoy holds
    /// nothing for the key: `wait` (default) for the agent's answer, or
    /// `admit` at once while its lease is asked in the background (`fast`
    /// rules that do not fail closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start: Option<ColdStart>,
    /// Who owns the rule (a team, a ticket): shown by `explain` and `check-rules`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 128)))]
    pub owner: Option<String>,
    /// When the rule stops applying by itself: `YYYY-MM-DD` or
    /// `YYYY-MM-DDTHH:MM:SSZ`, UTC. For exceptions that must not outlive their
    /// reason; `check-rules` warns a week ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// The share of this rule's allowed decisions the decision log keeps, 0 to
    /// 1 (rejections are always kept); default `defaults.log_sample`, else 0.01.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 0.0, max = 1.0)))]
    pub log_sample: Option<f64>,
    /// How the decision log names this rule's keys: `id` (default, the keyed
    /// hash) or `clear` (the key itself too, for rules whose keys are not
    /// personal data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_key: Option<LogKey>,
    /// Time windows (UTC) with another limit; the first window that covers an
    /// instant gives the limit in force, outside every window `limit` applies.
    /// Rules with `limit` only: a rule with `plans` cannot have a schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(length(max = 32)))]
    pub schedule: Vec<WindowConfig>,
}

/// One window of a schedule: when (`minutes` within every hour or `hours`
/// within every day, on `days`), and the limit fields that differ in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend(
        "oneOf" = [{"required": ["minutes"]}, {"required": ["hours"]}],
        "anyOf" = [{"required": ["requests"]}, {"required": ["per"]}, {"required": ["burst"]}]
    ))
)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// A name for the window, shown by `explain` and `check-rules`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(regex(pattern = r"^[a-z0-9._-]{1,64}$")))]
    pub name: Option<String>,
    /// Days of the week (UTC) the window opens on: `mon` … `sun`; every day
    /// when left out. A span running past midnight belongs to the day it opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(min = 1),
            inner(regex(pattern = r"^(mon|tue|wed|thu|fri|sat|sun)$"))
        )
    )]
    pub days: Option<Vec<String>>,
    /// A span within every hour (UTC), from included to excluded: whole
    /// minutes `MM-MM` (`00-30` is the first half hour of every hour), or to
    /// the second `MMmSSs-MMmSSs` (`00m00s-00m30s` is its first 30 seconds);
    /// `to` may be `60`, and a `to` before `from` runs into the next hour.
    /// `MM:00` is a whole minute too; `MM:SS` with seconds is refused, as it
    /// reads as minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(regex(
            pattern = r"^\s*[0-9]{2}(:00|m[0-9]{2}s)?\s*-\s*[0-9]{2}(:00|m[0-9]{2}s)?\s*$"
        ))
    )]
    pub minutes: Option<String>,
    /// A span within every day, `HH:MM-HH:MM` (UTC), from included to
    /// excluded: `09:00-17:00`; `to` may be `24:00`, and a `to` before `from`
    /// runs past midnight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^\s*[0-9]{2}:[0-9]{2}\s*-\s*[0-9]{2}:[0-9]{2}\s*$"))
    )]
    pub hours: Option<String>,
    /// Requests per `per` in the window (default: the rule's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = u32::MAX)))]
    pub requests: Option<u32>,
    /// The refill period in the window (default: the rule's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^\s*[0-9]+(ms|s|m|h|d)\s*$"))
    )]
    pub per: Option<String>,
    /// The bucket's capacity in the window (default: the rule's `burst`, else
    /// the window's `requests`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = u32::MAX)))]
    pub burst: Option<u32>,
}

/// Conditions that must all hold for a rule to apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("not" = {"required": ["path", "path_prefix"]}))
)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// This path exactly (normalised); not with `path_prefix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(regex(pattern = r"^/")))]
    pub path: Option<String>,
    /// Paths that start with this (ending in `/`: the directory and below).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(regex(pattern = r"^/")))]
    pub path_prefix: Option<String>,
    /// HTTP methods; leave out to match every method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1), inner(regex(pattern = r"^[A-Za-z]+$")))
    )]
    pub methods: Option<Vec<String>>,
    /// The request's host (`:authority`/`Host`, lower case, without port or
    /// trailing dot): a host, or `*.suffix` for every host below `suffix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(regex(
            pattern = r"^(\*\.)?([A-Za-z0-9-]+\.)*[A-Za-z0-9-]+\.?$|^\[[0-9A-Fa-f:.]+\]$"
        ))
    )]
    pub authority: Option<String>,
    /// The destination: Envoy's upstream cluster name (`xds.cluster_name`;
    /// under Istio `outbound|PORT|SUBSET|SERVICE.NAMESPACE.svc.cluster.local`),
    /// exactly, or, with a leading `*`, every name ending in what follows
    /// (`*.shop.svc.cluster.local`: every service of namespace `shop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 256)))]
    pub cluster: Option<String>,
    /// The Envoy route's name (`xds.route_name`), exactly or `*suffix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 256)))]
    pub route: Option<String>,
    /// Header conditions by header name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "schema", schemars(extend("propertyNames" = {"pattern": "^[A-Za-z0-9_-]+$"})))]
    pub headers: BTreeMap<String, HeaderMatchConfig>,
}

/// `{ present: true }` or `{ equals: value }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("minProperties" = 1, "maxProperties" = 1))
)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatchConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
}

/// A limit as written: `requests` per `per`, and for a token bucket its `burst`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct LimitConfig {
    /// Requests allowed per `per`.
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = u32::MAX)))]
    pub requests: u32,
    /// A whole number and one of ms, s, m, h, d: `250ms`, `1s`, `1m` (1ms to 366d).
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^\s*[0-9]+(ms|s|m|h|d)\s*$"))
    )]
    pub per: String,
    /// The bucket's capacity (default: `requests`); `token_bucket` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = u32::MAX)))]
    pub burst: Option<u32>,
}

/// Per-plan limits chosen by a header's value, a verified JWT's claim or a
/// value of Envoy's dynamic metadata (exactly one of the three).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("oneOf" = [{"required": ["header"]}, {"required": ["claim"]}, {"required": ["metadata"]}]))
)]
#[serde(deny_unknown_fields)]
pub struct PlansConfig {
    /// The header whose value names the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(regex(pattern = "^[A-Za-z0-9_-]+$")))]
    pub header: Option<String>,
    /// The verified JWT claim whose value names the plan (`jwt_authn` with
    /// `payload_in_metadata: payload`); `org.plan` is the claim `plan` inside
    /// the claim `org`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 128)))]
    pub claim: Option<String>,
    /// The dynamic metadata value that names the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<MetadataConfig>,
    /// The plan used when the value (header, claim or metadata) is absent or
    /// names no plan; must be in `limits`.
    pub default: String,
    /// The limit of each plan, by plan name.
    #[cfg_attr(feature = "schema", schemars(extend("minProperties" = 1)))]
    pub limits: BTreeMap<String, LimitConfig>,
}

/// How the decision log names a rule's keys: `id` (default) only by their keyed
/// hash, `clear` by the key itself as well.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum LogKey {
    #[default]
    Id,
    Clear,
}

/// `enforce` (default): over the limit gets a 429. `shadow`: counted and
/// reported, never refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Enforce,
    Shadow,
}

/// When the limiter cannot decide: `open` allows, `closed` refuses, `local`
/// (default) limits with a node-local bucket per key of about the limit × 2 ÷
/// the nodes (the guide's Failure policies page gives the exact sizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    Open,
    Closed,
    Local,
}

/// `fast` (default): node leases. `exact`: every request checked in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Accuracy {
    Fast,
    Exact,
}

/// A key's first request at an Envoy that holds nothing for it. `wait`
/// (default): it waits for the agent's answer, like any miss. `admit`: it is
/// admitted at once and the key's lease is asked in the background; the grant
/// pays for it, and the key's next requests spend the rest or wait on that one
/// call. The bound: per Envoy and key, one request's cost is admitted before
/// the store counted it, each time the Envoy finds nothing for the key (its
/// first request, or after its slot went to another key), and at most the
/// filter's `cold_starts_per_second` a worker across all keys. Such a request
/// is over its limit only when the store then denies the key (counted, with
/// calls that got no answer, in Envoy's `meshlimit.cold_starts_unpaid`). Only
/// for `accuracy: fast` rules that do not fail closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ColdStart {
    #[default]
    Wait,
    Admit,
}

/// `region` (default): one budget per region. `global`: shared across regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Region,
    Global,
}
