//! Unit tests of rule sets: the helpers they share, and one module per concept.

use super::*;
use crate::key::DescriptorKey;
use crate::limit::{limit, Algorithm};
use crate::NANOS_PER_SEC;

mod aggregate;
mod claims;
mod defaults;
#[cfg(feature = "yaml")]
mod fixtures;

/// The index against the linear scan: random rule sets (exact paths, prefixes
/// with and without a trailing slash, none; methods; a header condition; keys on
/// a header that may be sent twice) and random requests give the same rules, in
/// the same order, under the same keys, and the same errors.
mod index_vs_linear;
mod matching;
mod plans;
mod schedule;
mod spellings;
mod validation;
mod version;

fn compile(json: serde_json::Value) -> Result<RuleSet, RulesError> {
    let config: RulesConfig = serde_json::from_value(json)
        .map_err(|e| RulesError::from(RuleError::new(None, "-", e.to_string())))?;
    RuleSet::compile(&config)
}

fn request(path: &str, method: &str, headers: &[(&str, &str)]) -> RequestInfo {
    let headers = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    RequestInfo::new(path, method, headers)
}

fn set() -> RuleSet {
    let rules = compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "loose", "key": ["method"], "limit": {"requests": 1000, "per": "1s"}},
            {"name": "per-key", "match": {"path_prefix": "/v1/", "methods": ["get"], "headers": {"x-env": {"equals": "prod"}}},
             "key": [{"header": "x-api-key"}], "limit": {"requests": 10, "per": "1s", "burst": 20}},
            {"name": "plans", "key": [{"header": "x-customer"}],
             "plans": {"header": "x-plan", "default": "free", "limits": {
                 "free": {"requests": 1, "per": "1m"}, "pro": {"requests": 100, "per": "1m"}}}},
        ]
    }));
    match rules {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

fn keys(s: &RuleSet, req: &RequestInfo) -> Vec<String> {
    s.applicable(req)
        .unwrap()
        .iter()
        .map(|a| a.key.to_string())
        .collect()
}
