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

const SEARCH_400: &str = r#"
version: 1
rules:
  - name: search-total
    match: { path_prefix: /v1/search }
    key: []
    limit: { requests: 400, per: 1s, burst: 40 }
"#;

/// A whole-endpoint limit at 400 a second on a path prefix, leased (`fast`),
/// offered 1.5 times that from three kinds of caller (other paths under the
/// prefix, other API keys, other addresses): over the steady seconds the
/// callers together get the limit. The band, ±5 % of 1,200, is the leased
/// mode's: a node's lease (at most a tenth of the burst, 4 tokens) and the
/// filter's slot can each hold at most one lease across a window's edge, far
/// inside 60 requests; what the bound guards is the one bucket, since three
/// buckets would admit all 600 a second. The rate is one the load keeps to
/// with a build running beside the suite on two cores.
#[test]
fn a_prefix_aggregate_rule_at_four_hundred_a_second_admits_the_limit_in_total() {
    use meshlimit_tests::{count_between, Load};
    use std::time::{Duration, Instant};

    let stack = Stack::start_with(AgentOptions::new(SEARCH_400), |mut c| {
        c.plugin.insert("trusted_hops".into(), 1.into());
        c
    });
    let callers = [
        ("/v1/search", "k-1", "198.51.100.1"),
        ("/v1/search/books?q=2", "k-2", "198.51.100.2"),
        ("/v1/search/films", "k-3", "198.51.100.3"),
    ];
    let started = Instant::now();
    let loads: Vec<Load> = callers
        .iter()
        .map(|(path, key, ip)| {
            let headers = [("x-api-key", *key), ("x-forwarded-for", *ip)];
            Load::start(
                &stack.envoy.url(path),
                &headers,
                200.0,
                4,
                Duration::from_secs(4),
            )
        })
        .collect();
    // The load's four seconds are the measurement.
    std::thread::sleep(
        (started + Duration::from_secs(4)).saturating_duration_since(Instant::now()),
    );
    let samples: Vec<_> = loads.into_iter().flat_map(Load::stop).collect();
    let (from, to) = (
        started + Duration::from_secs(1),
        started + Duration::from_secs(4),
    );
    let offered = samples.iter().filter(|s| s.at >= from && s.at < to).count();
    let admitted = count_between(&samples, from, to, 200);
    let limited = count_between(&samples, from, to, 429);
    assert!(
        offered >= 1_600,
        "the load fell behind: {offered} requests offered in 3 s"
    );
    assert_eq!(
        admitted + limited,
        offered,
        "every request answered 200 or 429"
    );
    assert!(
        (1_140..=1_260).contains(&admitted),
        "{admitted} admitted of {offered} in 3 s at 400/s in total"
    );
}
