//! From what people wrote (`RulesConfig`) to what the request path runs (`RuleSet`):
//! every check happens here, once, and names the rule and field it refuses.

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64};
use std::sync::Arc;

use super::builder::RuleSetBuilder;
use super::config::*;
use super::error::{RuleError, RulesError};
use super::{Limits, Matcher, PathMatch, Rule, RuleSet};
use crate::fingerprint::fnv1a;
use crate::limit::Limit;
use crate::{NANOS_PER_MS, NANOS_PER_SEC};

/// The longest rule name; names become metric labels and key prefixes.
pub const MAX_RULE_NAME: usize = 64;
/// The longest a full burst may take to refill: the longest period. A bucket
/// is kept (its Redis key's expiry) until it would be full again, and the lease
/// script caps that at 400 days, so a slower refill would be forgotten early and
/// grant more than its limit. It also keeps every derived time (reset, retry,
/// expiry in µs) far inside what an `f64` counts exactly and an `i64` holds.
/// (Requests, burst and cost are `u32`: far below 2^53, so tokens held as `f64`,
/// as in Lua, are exact whole numbers.)
pub const MAX_REFILL_NS: u64 = MAX_PERIOD_NS;
/// The longest period, `366d`.
pub const MAX_PERIOD_NS: u64 = 366 * 86_400 * NANOS_PER_SEC;
/// The share of allowed decisions the decision log keeps when neither the rule
/// nor `defaults` says.
pub const DEFAULT_LOG_SAMPLE: f64 = 0.01;
/// The only schema version this build reads.
pub const SCHEMA_VERSION: u32 = 1;

impl RuleSet {
    /// Validates and compiles a rules file. Returns every problem found, not just
    /// the first, so one round of edits fixes a file. The set keeps a copy of the
    /// normalised file, to serve it ([`RuleSet::config`]).
    pub fn compile(config: &RulesConfig) -> Result<RuleSet, RulesError> {
        Self::compile_shared(Arc::new(config.clone()))
    }

    /// [`RuleSet::compile`] keeping `config` itself rather than a copy (the
    /// agent holds one file, not one per holder).
    pub fn compile_shared(config: Arc<RulesConfig>) -> Result<RuleSet, RulesError> {
        Self::compile_with(&config, &[]).finish(version_of(&config), Some(config))
    }

    /// [`RuleSet::compile`] for a host that only matches requests: no copy of
    /// the file is kept, about half the set's memory for large sets.
    pub fn compile_unserved(config: &RulesConfig) -> Result<RuleSet, RulesError> {
        Self::compile_with(config, &[]).finish(version_of(config), None)
    }

    /// [`RuleSet::compile_shared`], with each rule's line in the file (by
    /// position; a missing entry is an unknown line): every error about a rule
    /// carries it.
    #[cfg(feature = "yaml")]
    pub(crate) fn compile_at(
        config: RulesConfig,
        lines: &[Option<usize>],
    ) -> Result<RuleSet, RulesError> {
        let builder = Self::compile_with(&config, lines);
        let version = version_of(&config);
        builder.finish(version, Some(Arc::new(config)))
    }

    /// Every rule of `config` added to a builder.
    fn compile_with(config: &RulesConfig, lines: &[Option<usize>]) -> RuleSetBuilder {
        let mut builder = RuleSetBuilder::new(config);
        for (i, rule) in config.rules.iter().enumerate() {
            builder.add(rule, lines.get(i).copied().flatten());
        }
        builder
    }
}

/// The rules version: a content hash of the normalised rules, so every agent that
/// loads the same file announces the same version.
fn version_of(config: &RulesConfig) -> String {
    let canonical = serde_json::to_vec(config).unwrap_or_default();
    format!("{:016x}", fnv1a(&canonical))
}

pub(super) fn compile_rule(
    rule: &RuleConfig,
    defaults: &DefaultsConfig,
) -> Result<Rule, Vec<RuleError>> {
    let name = rule.name.as_str();
    let mut errors = Vec::new();
    let mut err = |field: &str, msg: String| errors.push(RuleError::new(Some(name), field, msg));
    // A trial copy (`NAME.trial`, made by the agent) may be that much longer.
    let longest = if name.ends_with(super::trial::TRIAL_SUFFIX) {
        MAX_RULE_NAME + super::trial::TRIAL_SUFFIX.len()
    } else {
        MAX_RULE_NAME
    };
    if name.is_empty()
        || name.len() > longest
        || !name
            .chars()
            .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '.' | '_' | '-'))
    {
        err(
            "name",
            format!("`{name}` must be 1 to {MAX_RULE_NAME} characters of [a-z0-9._-]"),
        );
    }
    let matcher = compile_match(
        rule.matches.as_ref().unwrap_or(&MatchConfig::default()),
        &mut err,
    );
    if rule.key.is_empty() {
        err("key", "at least one key part is required".into());
    }
    for (i, part) in rule.key.iter().enumerate() {
        match part {
            KeyPartConfig::Header(h) => check_header_name(h, &format!("key[{i}].header"), &mut err),
            KeyPartConfig::Query(q) if q.is_empty() || q.len() > 128 || q.chars().any(char::is_control) => err(
                &format!("key[{i}].query"),
                format!("`{q}` is not a query parameter name: 1 to 128 printable characters, as decoded (`user id`, not `user+id`)"),
            ),
            KeyPartConfig::Metadata(m) => {
                if let Err(e) = m.check() {
                    err(&format!("key[{i}].{}", metadata_field(m)), e);
                }
            }
            _ => {}
        }
    }
    if let Some(owner) = &rule.owner {
        if owner.is_empty() || owner.len() > 128 || owner.chars().any(char::is_control) {
            err("owner", "1 to 128 printable characters".into());
        }
    }
    if let Some(at) = &rule.expires {
        if super::expiry::parse_instant(at).is_none() {
            err(
                "expires",
                format!("`{at}` is not a UTC instant: write 2026-12-31 or 2026-12-31T18:00:00Z"),
            );
        }
    }
    if let Some(rate) = rule.log_sample {
        if !(rate.is_finite() && (0.0..=1.0).contains(&rate)) {
            err(
                "log_sample",
                format!("{rate} is not a share from 0 to 1 (0.01 keeps one allowed decision in a hundred)"),
            );
        }
    }
    let cost = rule.cost.unwrap_or(1);
    if cost == 0 {
        err("cost", "must be at least 1".into());
    }
    let algorithm = rule
        .algorithm
        .or(defaults.algorithm)
        .unwrap_or(Algorithm::TokenBucket);
    let limits = match (&rule.limit, &rule.plans) {
        (Some(l), None) => compile_limit(l, "limit", cost, algorithm, &mut err).map(Limits::Single),
        (None, Some(p)) => compile_plans(p, cost, algorithm, &mut err),
        (Some(_), Some(_)) => {
            err("plans", "give either `limit` or `plans`, not both".into());
            None
        }
        (None, None) => {
            err("limit", "a rule needs `limit` or `plans`".into());
            None
        }
    };
    match (limits, NonZeroU32::new(cost), errors.is_empty()) {
        (Some(limits), Some(cost), true) => Ok(Rule {
            name: rule.name.clone(),
            matcher,
            key: rule.key.clone(),
            limits,
            cost,
            mode: rule.mode.or(defaults.mode).unwrap_or(Mode::Enforce),
            on_failure: rule
                .on_failure
                .or(defaults.on_failure)
                .unwrap_or(FailurePolicy::Local),
            accuracy: rule
                .accuracy
                .or(defaults.accuracy)
                .unwrap_or(Accuracy::Fast),
            scope: rule.scope.or(defaults.scope).unwrap_or(Scope::Region),
            log_sample: rule
                .log_sample
                .or(defaults.log_sample)
                .unwrap_or(DEFAULT_LOG_SAMPLE),
            log_key: rule.log_key.unwrap_or_default(),
        }),
        _ => Err(errors),
    }
}

fn compile_match(m: &MatchConfig, err: &mut impl FnMut(&str, String)) -> Matcher {
    let path = match (&m.path, &m.path_prefix) {
        (Some(_), Some(_)) => {
            err(
                "match.path",
                "give either `path` or `path_prefix`, not both".into(),
            );
            PathMatch::Any
        }
        (Some(p), None) => {
            check_path(p, "match.path", err);
            PathMatch::Exact(crate::path::normalize(p.as_bytes()))
        }
        (None, Some(p)) => {
            check_path(p, "match.path_prefix", err);
            // Rules match normalised paths, so their paths are normalised too.
            let normal = crate::path::normalize(p.as_bytes());
            if p.ends_with('/') {
                PathMatch::Directory(normal)
            } else {
                PathMatch::Prefix(normal)
            }
        }
        (None, None) => PathMatch::Any,
    };
    let authority = m.authority.as_deref().and_then(|a| {
        crate::authority::HostPattern::parse(a)
            .map_err(|e| err("match.authority", e))
            .ok()
    });
    let mut name_pattern = |text: Option<&str>, field: &str| {
        text.and_then(|t| super::NamePattern::parse(t).map_err(|e| err(field, e)).ok())
    };
    let cluster = name_pattern(m.cluster.as_deref(), "match.cluster");
    let route = name_pattern(m.route.as_deref(), "match.route");
    let methods = m.methods.as_ref().map(|ms| {
        if ms.is_empty() {
            err(
                "match.methods",
                "an empty list matches nothing; leave `methods` out to match every method".into(),
            );
        }
        ms.iter()
            .enumerate()
            .map(|(i, method)| {
                if method.is_empty() || !method.chars().all(|c| c.is_ascii_alphabetic()) {
                    err(
                        &format!("match.methods[{i}]"),
                        format!("`{method}` is not an HTTP method"),
                    );
                }
                method.to_ascii_uppercase()
            })
            .collect()
    });
    let mut headers = Vec::new();
    for (name, hm) in &m.headers {
        let field = format!("match.headers.{name}");
        check_header_name(name, &field, err);
        match (hm.present, &hm.equals) {
            (Some(p), None) => {
                headers.push((name.to_ascii_lowercase(), super::HeaderMatch::Present(p)))
            }
            (None, Some(v)) => headers.push((
                name.to_ascii_lowercase(),
                super::HeaderMatch::Equals(v.clone()),
            )),
            _ => err(&field, "give exactly one of `present` or `equals`".into()),
        }
    }
    Matcher {
        path,
        authority,
        cluster,
        route,
        methods,
        headers,
    }
}

/// The field a metadata key part was written as (`claim` or `metadata`).
fn metadata_field(m: &crate::metadata::MetadataPath) -> &'static str {
    if m.as_claim().is_some() {
        "claim"
    } else {
        "metadata"
    }
}

fn compile_plans(
    p: &PlansConfig,
    cost: u32,
    algorithm: Algorithm,
    err: &mut impl FnMut(&str, String),
) -> Option<Limits> {
    let by = match (&p.header, &p.claim, &p.metadata) {
        (Some(h), None, None) => {
            check_header_name(h, "plans.header", err);
            Some(super::PlanSource::Header(h.to_ascii_lowercase()))
        }
        (None, Some(c), None) => {
            let path = crate::metadata::MetadataPath::claim(c);
            match path.check() {
                Ok(()) => Some(super::PlanSource::Metadata(path)),
                Err(e) => {
                    err("plans.claim", e);
                    None
                }
            }
        }
        (None, None, Some(m)) => {
            let path: crate::metadata::MetadataPath = m.clone().into();
            match path.check() {
                Ok(()) => Some(super::PlanSource::Metadata(path)),
                Err(e) => {
                    err("plans.metadata", e);
                    None
                }
            }
        }
        _ => {
            err(
                "plans",
                "give exactly one of `header`, `claim` or `metadata`: what names the plan".into(),
            );
            None
        }
    };
    if p.limits.is_empty() {
        err("plans.limits", "at least one plan is required".into());
    }
    let mut limits = BTreeMap::new();
    for (plan, l) in &p.limits {
        if let Some(limit) = compile_limit(l, &format!("plans.limits.{plan}"), cost, algorithm, err)
        {
            limits.insert(plan.clone(), limit);
        }
    }
    if !p.limits.contains_key(&p.default) {
        err(
            "plans.default",
            format!("plan `{}` is not in `plans.limits`", p.default),
        );
    }
    let default = limits.get(&p.default).copied()?;
    let by = by?;
    (limits.len() == p.limits.len()).then(|| Limits::Plans {
        by,
        default_plan: p.default.clone(),
        default,
        limits,
    })
}

fn compile_limit(
    l: &LimitConfig,
    field: &str,
    cost: u32,
    algorithm: Algorithm,
    err: &mut impl FnMut(&str, String),
) -> Option<Limit> {
    if let (Some(burst), true) = (l.burst, algorithm.is_window()) {
        err(
            &format!("{field}.burst"),
            format!(
                "`burst: {burst}` applies to `token_bucket` only: a `{}` admits `requests` per `per` window and has no burst: remove `burst`",
                algorithm.name()
            ),
        );
        return None;
    }
    let requests = NonZeroU32::new(l.requests);
    if requests.is_none() {
        err(&format!("{field}.requests"), "must be at least 1".into());
    }
    let per = match parse_period(&l.per) {
        Ok(ns) => NonZeroU64::new(ns),
        Err(msg) => {
            err(&format!("{field}.per"), msg);
            None
        }
    };
    let burst = NonZeroU32::new(l.burst.unwrap_or(l.requests));
    if l.burst == Some(0) {
        err(&format!("{field}.burst"), "must be at least 1".into());
    }
    let limit = Limit::new(requests?, per?, burst?).with_algorithm(algorithm);
    // A full burst's refill time, exactly (u32 × u64 fits in u128).
    let refill_ns =
        u128::from(limit.burst()) * u128::from(limit.per_ns()) / u128::from(limit.requests());
    if refill_ns > u128::from(MAX_REFILL_NS) {
        err(
            &format!("{field}.burst"),
            format!(
                "a full burst of {} takes {} days to refill at {} per `{}`; at most 366 days: raise `requests` or lower `burst`",
                limit.burst(),
                refill_ns / u128::from(86_400 * NANOS_PER_SEC),
                limit.requests(),
                l.per.trim()
            ),
        );
        return None;
    }
    if cost > limit.burst() {
        err(
            "cost",
            format!(
                "cost {cost} is above the {} {} of `{field}`: no request could ever pass",
                if algorithm.is_window() {
                    "requests"
                } else {
                    "burst"
                },
                limit.burst()
            ),
        );
        return None;
    }
    Some(limit)
}

/// Parses `250ms`, `1s`, `10s`, `1m`, `1h`, `1d` into nanoseconds.
pub fn parse_period(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit_ns = match unit {
        "ms" => NANOS_PER_MS,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3_600 * NANOS_PER_SEC,
        "d" => 86_400 * NANOS_PER_SEC,
        _ => return Err(format!("`{text}` is not a period: write a whole number and one of ms, s, m, h, d (e.g. 250ms, 1s, 1m)")),
    };
    match num.parse::<u64>().ok().and_then(|n| n.checked_mul(unit_ns)) {
        Some(ns) if (NANOS_PER_MS..=MAX_PERIOD_NS).contains(&ns) => Ok(ns),
        _ => Err(format!("`{text}` must be between 1ms and 366d")),
    }
}

fn check_header_name(name: &str, field: &str, err: &mut impl FnMut(&str, String)) {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
    if !ok {
        err(field, format!("`{name}` is not a header name"));
    }
}

fn check_path(path: &str, field: &str, err: &mut impl FnMut(&str, String)) {
    if !path.starts_with('/') {
        err(field, format!("`{path}` must start with `/`"));
    }
}
