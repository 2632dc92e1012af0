//! The operator views of the decision log, behind the operator token (the
//! filters' `POST /v1/decisions` is in `decisions`):
//!
//! - `GET /v1/explain?rule=R&key_id=ID`: one key now: its bucket in the store
//!   (read without changing it, one call with its deadline, never retried), what
//!   the node pool holds for it, and its recent decisions on this node;
//! - `GET /v1/hot?rule=R`: the rule's hottest keys on this node.

use hyper::http::request::Parts;
use hyper::StatusCode;
use meshlimit_core::rules::{Limits, Rule};
use meshlimit_core::Limit;
use serde_json::json;

use super::{json, ApiError, ApiResponse, App};

pub(super) async fn explain(app: &App, parts: &Parts) -> Result<ApiResponse, ApiError> {
    let query = Query::parse(parts, &["rule", "key_id"])?;
    let key_id = query.get("key_id")?;
    if key_id.len() != 32 || !key_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::InvalidField(format!(
            "key_id `{key_id}` is not a key id (32 hex digits, as `meshlimit key-id` prints)"
        )));
    }
    let key_id = key_id.to_ascii_lowercase();
    let set = app.inner.parts.rules.get().ok_or(ApiError::NoRules)?;
    let rule = rule_of(&set, query.get("rule")?)?;
    let limit = base_limit(rule);
    let leases = &app.inner.parts.leases;
    let ids = app.key_ids();
    let (bucket, bucket_error) = match leases.store().peek(ids, &rule.name, &key_id, &limit).await {
        Ok(b) => (b, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let pool = leases.pool_view(|k| k.rule() == rule.name && ids.id(k).to_string() == key_id);
    json(
        StatusCode::OK,
        &json!({
            "rule": rule.name,
            "key_id": key_id,
            "rules_version": set.version(),
            "limit": {"requests": limit.requests(), "per_ms": limit.per_ns() / 1_000_000, "burst": limit.burst()},
            // No bucket in the store: a full one (or none yet).
            "bucket": bucket,
            "bucket_error": bucket_error,
            "pool": pool.first(),
            "recent": app.inner.parts.declog.recent(&rule.name, &key_id),
        }),
    )
}

pub(super) fn hot(app: &App, parts: &Parts) -> Result<ApiResponse, ApiError> {
    let query = Query::parse(parts, &["rule"])?;
    let set = app.inner.parts.rules.get().ok_or(ApiError::NoRules)?;
    let rule = rule_of(&set, query.get("rule")?)?;
    json(
        StatusCode::OK,
        &json!({
            "rule": rule.name,
            "rules_version": set.version(),
            "keys": app.inner.parts.declog.hot(&rule.name),
        }),
    )
}

fn rule_of<'s>(set: &'s meshlimit_core::RuleSet, name: &str) -> Result<&'s Rule, ApiError> {
    set.rule(name).ok_or_else(|| {
        ApiError::InvalidField(format!(
            "rule `{name}` is not in the rules in force (version {})",
            set.version()
        ))
    })
}

/// The limit a key id is read under: the rule's, or a plan rule's default
/// plan's (the id does not say which plan the key is on).
fn base_limit(rule: &Rule) -> Limit {
    match &rule.limits {
        Limits::Single(l) => *l,
        Limits::Plans { default, .. } => *default,
    }
}

/// A query string of known parameters, each at most once.
struct Query<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Query<'a> {
    fn parse(parts: &'a Parts, known: &[&str]) -> Result<Query<'a>, ApiError> {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for pair in parts.uri.query().unwrap_or("").split('&') {
            if pair.is_empty() {
                continue;
            }
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !known.contains(&name) {
                return Err(ApiError::InvalidField(format!(
                    "unknown parameter `{name}`; this route takes {}",
                    known.join(", ")
                )));
            }
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(ApiError::InvalidField(format!(
                    "parameter `{name}` given twice"
                )));
            }
            pairs.push((name, value));
        }
        Ok(Query(pairs))
    }

    fn get(&self, name: &str) -> Result<&'a str, ApiError> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ApiError::InvalidField(format!("parameter `{name}` is required")))
    }
}
