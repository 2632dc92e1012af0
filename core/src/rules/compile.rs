//! From what people wrote (`RulesConfig`) to what the request path runs (`RuleSet`):
//! every check happens here, once, and names the rule and field it refuses.

use std::num::NonZeroU32;

use super::config::*;
use super::error::RuleError;
use super::{Limits, Matcher, PathMatch, Rule};
use crate::NANOS_PER_SEC;

use limits::{compile_limit, compile_plans};
pub use limits::{parse_period, PeriodError};
use schedule::compile_schedule;

mod limits;
mod schedule;

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

pub(super) fn compile_rule(
    rule: &RuleConfig,
    defaults: &DefaultsConfig,
) -> Result<Rule, Vec<RuleError>> {
    let name = rule.name.as_str();
    let mut errors = Vec::new();
    let mut err = |field: &str, msg: String| errors.push(RuleError::new(Some(name), field, msg));
    check_name(name, "name", &mut err);
    let matcher = compile_match(
        rule.matches.as_ref().unwrap_or(&MatchConfig::default()),
        &mut err,
    );
    for (i, part) in rule.key.iter().enumerate() {
        match part {
            KeyPartConfig::Header(h) => check_header_name(h, &format!("key[{i}].header"), &mut err),
            KeyPartConfig::Query(q) if q.is_empty() || q.len() > 128 || q.chars().any(char::is_control) => err(
                &format!("key[{i}].query"),
                format!("`{q}` is not a query parameter name: 1 to 128 printable characters, as decoded (`user id`, not `user+id`)"),
            ),
            KeyPartConfig::Metadata(m) => {
                if let Err(e) = m.check() {
                    err(&format!("key[{i}].{}", metadata_field(m)), e.to_string());
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
    let accuracy = rule
        .accuracy
        .or(defaults.accuracy)
        .unwrap_or(Accuracy::Fast);
    let on_failure = rule
        .on_failure
        .or(defaults.on_failure)
        .unwrap_or(FailurePolicy::Local);
    let cold_start = rule.cold_start.or(defaults.cold_start).unwrap_or_default();
    if cold_start == ColdStart::Admit {
        if accuracy == Accuracy::Exact {
            err(
                "cold_start",
                "`admit` lets a request through before the store counts it; an `accuracy: exact` rule checks every request in the store: use `wait`".into(),
            );
        }
        if on_failure == FailurePolicy::Closed {
            err(
                "cold_start",
                "`admit` lets a request through before the agent answers; an `on_failure: closed` rule refuses what the agent did not answer for: use `wait`".into(),
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
    let schedule = compile_schedule(rule, cost, algorithm, &mut err);
    match (limits, NonZeroU32::new(cost), errors.is_empty()) {
        (Some(limits), Some(cost), true) => Ok(Rule {
            name: rule.name.clone(),
            expires_at: rule
                .expires
                .as_deref()
                .and_then(super::expiry::parse_instant),
            matcher,
            key: rule.key.clone(),
            limits,
            cost,
            mode: rule.mode.or(defaults.mode).unwrap_or(Mode::Enforce),
            on_failure,
            accuracy,
            scope: rule.scope.or(defaults.scope).unwrap_or(Scope::Region),
            cold_start,
            log_sample: rule
                .log_sample
                .or(defaults.log_sample)
                .unwrap_or(DEFAULT_LOG_SAMPLE),
            log_key: rule.log_key.unwrap_or_default(),
            schedule,
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
            .map_err(|e| err("match.authority", e.to_string()))
            .ok()
    });
    let mut name_pattern = |text: Option<&str>, field: &str| {
        text.and_then(|t| {
            super::NamePattern::parse(t)
                .map_err(|e| err(field, e.to_string()))
                .ok()
        })
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

/// A rule's or a window's name: a metric label and a key prefix.
fn check_name(name: &str, field: &str, err: &mut impl FnMut(&str, String)) {
    // A rule's trial copy (`NAME.trial`, made by the agent) may be that much longer.
    let longest = if field == "name" && name.ends_with(super::trial::TRIAL_SUFFIX) {
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
            field,
            format!("`{name}` must be 1 to {MAX_RULE_NAME} characters of [a-z0-9._-]"),
        );
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
