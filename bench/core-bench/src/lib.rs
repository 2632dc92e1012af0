//! Fixtures for the decision benchmarks (`benches/decision.rs`): rule sets of a
//! given size, a typical request, descriptor keys. Kept in the library so they
//! are type-checked and unit-tested with the workspace, not only under
//! `cargo bench`.

use meshlimit_core::rules::{RulesConfig, RulesError};
use meshlimit_core::{DescriptorKey, RequestInfo, RuleSet};

/// A fixture that did not build: a bug in the fixture, not in what it measures.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// The JSON written here is not a rules file.
    #[error("{0}")]
    Config(#[from] serde_json::Error),
    /// The rules file does not compile.
    #[error("{0}")]
    Rules(#[from] RulesError),
}

/// `n` rules, one per API path prefix (`/api/<i>/`), each keyed on the API key:
/// a request matches exactly one, and every rule is looked at.
pub fn rule_set(n: usize) -> Result<RuleSet, FixtureError> {
    Ok(RuleSet::compile(&rule_set_config(n)?)?)
}

/// The rules file of [`rule_set`], before compiling.
pub fn rule_set_config(n: usize) -> Result<RulesConfig, FixtureError> {
    let rules: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "name": format!("api-{i}"),
                "match": {"path_prefix": format!("/api/{i}/"), "methods": ["GET", "POST"]},
                "key": [{"header": "x-api-key"}],
                "limit": {"requests": 100 + i, "per": "1s"},
            })
        })
        .collect();
    Ok(serde_json::from_value(serde_json::json!({
        "version": 1,
        "rules": rules,
    }))?)
}

/// A request with the dozen headers a real one carries, for the last rule of a
/// set of `n` (`/api/<n-1>/items`).
pub fn request(n: usize) -> RequestInfo {
    request_for(&format!("/api/{}/items?page=2", n.saturating_sub(1)))
}

/// The same request for a path no rule of any set matches (`/api/none/items`,
/// between the rules' prefixes).
pub fn request_none() -> RequestInfo {
    request_for("/api/none/items?page=2")
}

fn request_for(path: &str) -> RequestInfo {
    let headers = [
        (":authority", "api.example.com"),
        (":path", "/api/items?page=2"),
        (":method", "GET"),
        (":scheme", "https"),
        ("user-agent", "bench/1.0"),
        ("accept", "application/json"),
        ("accept-encoding", "gzip, br"),
        ("x-request-id", "5b0c1f8e-2d4a-4b57-9a1e-0c2f3e4d5a6b"),
        ("x-forwarded-proto", "https"),
        ("x-envoy-expected-rq-timeout-ms", "15000"),
        ("x-api-key", "k-0123456789abcdef"),
        ("content-length", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    RequestInfo::new(path, "GET", headers)
}

/// [`request`] of a one-rule set with a verified token's 12 claims in its
/// dynamic metadata (jwt_authn's namespace, `payload`), beside another
/// filter's metadata.
pub fn request_with_claims() -> RequestInfo {
    use meshlimit_core::metadata::{Field, StructBuilder, JWT_AUTHN};
    let text = |s: &str| Field::String(s.to_string());
    let payload = StructBuilder::new()
        .with("iss", text("https://issuer.example.com/"))
        .with("sub", text("user-0123456789abcdef"))
        .with("aud", Field::List(vec![text("api"), text("web")]))
        .with("exp", Field::Number(1_796_120_752.0))
        .with("iat", Field::Number(1_796_117_152.0))
        .with("nbf", Field::Number(1_796_117_152.0))
        .with("jti", text("5b0c1f8e-2d4a-4b57-9a1e-0c2f3e4d5a6b"))
        .with("plan", text("pro"))
        .with(
            "org",
            Field::Struct(StructBuilder::new().with("id", text("org-42"))),
        )
        .with("scope", text("read write"))
        .with("email_verified", Field::Bool(true))
        .with("azp", text("web-client"));
    let mut req = request(1);
    req.metadata = vec![
        (
            "envoy.filters.http.header_to_metadata".to_string(),
            StructBuilder::new().with("tenant", text("t-7")).encode(),
        ),
        (
            JWT_AUTHN.to_string(),
            StructBuilder::new()
                .with("payload", Field::Struct(payload))
                .encode(),
        ),
    ];
    req
}

/// The stream's dynamic metadata as the proxy hands it over (property
/// `metadata`) for a request of [`request_with_claims`].
pub fn metadata_of(req: &RequestInfo) -> Vec<u8> {
    meshlimit_core::metadata::encode_metadata(&req.metadata)
}

/// A set of one rule keyed on `key` (a key part as the rules file writes it).
pub fn one_rule_keyed_on(key: serde_json::Value) -> Result<RuleSet, FixtureError> {
    let config: RulesConfig = serde_json::from_value(serde_json::json!({
        "version": 1,
        "rules": [{"name": "one", "key": [key], "limit": {"requests": 100, "per": "1s"}}],
    }))?;
    Ok(RuleSet::compile(&config)?)
}

/// `n` distinct keys of one rule, as the filter builds them.
pub fn keys(n: usize) -> Vec<DescriptorKey> {
    (0..n)
        .map(|i| {
            let api_key = format!("k-{i:016x}");
            DescriptorKey::new("search-per-api-key", [api_key.as_str()])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_matches_exactly_one_rule() -> Result<(), Box<dyn std::error::Error>> {
        for n in [1, 10, 1_000] {
            let set = rule_set(n)?;
            let applicable = set.applicable(&request(n))?;
            assert_eq!(applicable.len(), 1, "{n} rules");
            assert_eq!(applicable[0].rule.name, format!("api-{}", n - 1));
            let none = set.applicable(&request_none())?;
            assert!(none.is_empty(), "{n} rules");
        }
        assert_eq!(keys(3).len(), 3);
        Ok(())
    }
}
