//! End to end through real Envoy, the real filter and the real agent (embedded
//! store): a rule with `key: []` counts every request it matches in one bucket,
//! whatever path under its prefix, key header or forwarded address each sends.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use meshlimit_tests::{count, AgentOptions, Stack};

const SEARCH_TOTAL: &str = r#"
version: 1
rules:
  - name: search-total
    match: { path_prefix: /v1/search }
    key: []
    limit: { requests: 5, per: 1h }
    accuracy: exact
"#;

#[test]
fn a_prefix_aggregate_rule_holds_every_matching_request_to_one_bucket() {
    // `trusted_hops: 1`: the filter keys `client_ip` on the X-Forwarded-For
    // entry each request writes, so every request below comes from another
    // client address as far as the rules can tell.
    let stack = Stack::start_with(AgentOptions::new(SEARCH_TOTAL), |mut c| {
        c.plugin.insert("trusted_hops".into(), 1.into());
        c
    });
    let paths = [
        "/v1/search",
        "/v1/search/books?q=1",
        "/v1/search/",
        "//v1/search/films",
        "/v1/search/%61uthors",
        "/v1/./search/x;y=1",
        "/V1/search",
        "/v1/searches",
        "/v1/search/a/../b",
        "/v1/search?api_key=z",
        "/v1/search/music",
        "/v1/search/games",
    ];
    let statuses: Vec<u16> = paths
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let key = format!("k-{i}");
            let ip = format!("198.51.100.{i}");
            let r = stack.get(path, &[("x-api-key", &key), ("x-forwarded-for", &ip)]);
            (r.status, r.header("x-meshlimit-rule").map(str::to_string))
        })
        .map(|(status, rule)| {
            if status == 429 {
                assert_eq!(rule.as_deref(), Some("search-total"));
            }
            status
        })
        .collect();
    // `/V1/search` is another path (paths are case-sensitive): 11 requests
    // match, the first five pass, the other six share the drained bucket.
    assert_eq!(statuses[6], 200, "{statuses:?}");
    let matched: Vec<u16> = statuses
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 6)
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(matched[..5], [200; 5], "{statuses:?}");
    assert_eq!(count(&matched, 429), 6, "{statuses:?}");
    assert_eq!(stack.decisions("search-total", "limited"), 6);
    // A request the rule does not match is not limited.
    assert_eq!(stack.get("/v2/search", &[]).status, 200);
}
