//! `key: []`: one bucket for every request a rule matches.

use super::*;

fn aggregate() -> RuleSet {
    let rules = compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "search-total", "match": {"path_prefix": "/v1/search"},
             "key": [], "limit": {"requests": 1000, "per": "1s"}},
        ]
    }));
    match rules {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn every_matching_request_shares_the_rules_one_key() {
    let s = aggregate();
    assert!(s.rules()[0].is_aggregate());
    let mut varied = vec![
        request("/v1/search", "GET", &[]),
        request("/v1/search/deep/x?q=1", "POST", &[("x-api-key", "k1")]),
        request(
            "//v1/./search/%2e%2e/search/y",
            "GET",
            &[("x-api-key", "k2")],
        ),
        request(
            "/v1/search?api_key=a&api_key=b",
            "GET",
            &[("host", "a.example.com")],
        ),
    ];
    for (i, req) in varied.iter_mut().enumerate() {
        req.client_ip = Some(format!("192.0.2.{i}"));
    }
    for req in &varied {
        assert_eq!(keys(&s, req), ["search-total"], "{req:?}");
    }
}

#[test]
fn an_aggregate_rule_applies_only_where_it_matches() {
    let s = aggregate();
    // A prefix without a trailing `/` is a prefix of the text: `/v1/searches` is in.
    assert_eq!(
        keys(&s, &request("/v1/searches", "GET", &[])),
        ["search-total"]
    );
    for path in ["/v1", "/v2/search", "/"] {
        assert!(keys(&s, &request(path, "GET", &[])).is_empty(), "{path}");
    }
}

#[test]
fn a_missing_key_is_refused_and_an_empty_one_is_not() {
    let missing = compile(serde_json::json!({
        "version": 1,
        "rules": [{"name": "r", "limit": {"requests": 1, "per": "1s"}}]
    }));
    assert!(missing.is_err());
    let other = compile(serde_json::json!({
        "version": 1,
        "rules": [{"name": "r", "key": [], "limit": {"requests": 1, "per": "1s"}}]
    }));
    assert!(other.is_ok(), "{other:?}");
}
