//! End to end through real Envoy, the real filter and the real agent (embedded
//! store): what a client sees when a limit holds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use meshlimit_tests::{count, Stack};

const EXACT_10: &str = r#"
version: 1
rules:
  - name: exact-per-key
    key: [{ header: x-api-key }]
    limit: { requests: 10, per: 1h, burst: 10 }
    accuracy: exact
"#;

#[test]
fn an_exact_rule_admits_exactly_its_burst_and_says_why_it_rejects() {
    let stack = Stack::start(EXACT_10);
    let started = std::time::Instant::now();
    let statuses = stack.statuses(30, "/anything", &[("x-api-key", "alice")]);
    assert_eq!(count(&statuses, 200), 10, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 20, "{statuses:?}");
    // The first ten pass, then every request is rejected.
    assert!(statuses[..10].iter().all(|s| *s == 200), "{statuses:?}");

    let r = stack.get("/anything", &[("x-api-key", "alice")]);
    assert_eq!(r.status, 429);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    // One token of a 10-per-hour bucket comes back 6 minutes after the first
    // was taken, that is a little under 360 s from now, which rounds up to 360
    // (a whole second earlier only if these requests took over a second).
    let elapsed = started.elapsed().as_secs();
    assert!(
        (360 - elapsed..=360).contains(&retry),
        "retry-after {retry}, {elapsed} s after the first request"
    );
    assert_eq!(
        r.header("ratelimit-policy"),
        Some("\"exact-per-key\";q=10;w=3600")
    );
    assert_eq!(
        r.header("ratelimit"),
        Some(format!("\"exact-per-key\";r=0;t={retry}").as_str())
    );
    assert_eq!(r.header("x-envoy-ratelimited"), Some("true"));
    assert_eq!(r.header("x-meshlimit-rule"), Some("exact-per-key"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body = r.json();
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(body["rule"], "exact-per-key");
    assert_eq!(body["retry_after_seconds"], retry);

    // Another key has its own bucket, and allowed responses carry the quota.
    let other = stack.get("/anything", &[("x-api-key", "bob")]);
    assert_eq!(other.status, 200);
    assert_eq!(
        other.header("ratelimit-policy"),
        Some("\"exact-per-key\";q=10;w=3600")
    );
    assert!(
        other
            .header("ratelimit")
            .unwrap()
            .starts_with("\"exact-per-key\";r=9;"),
        "{other:?}"
    );

    // A request the rule does not apply to (no API key) is not limited.
    assert_eq!(stack.get("/anything", &[]).status, 200);
    assert_eq!(stack.decisions("exact-per-key", "limited"), 21);
}

#[test]
fn the_retry_after_is_that_of_the_rule_that_clears_last() {
    let stack = Stack::start(
        r#"
version: 1
rules:
  - name: per-ten-seconds
    key: [{ header: x-api-key }]
    limit: { requests: 1, per: 10s }
    accuracy: exact
  - name: per-ten-minutes
    key: [method]
    limit: { requests: 1, per: 10m }
    accuracy: exact
"#,
    );
    assert_eq!(stack.get("/", &[("x-api-key", "k")]).status, 200);
    let r = stack.get("/", &[("x-api-key", "k")]);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("x-meshlimit-rule"), Some("per-ten-minutes"));
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(
        retry > 10 && retry <= 600,
        "retry-after {retry} should be the 10-minute rule's"
    );
}

#[test]
fn a_shadow_rule_never_rejects_but_counts_what_it_would_have() {
    let mut stack = Stack::start(
        r#"
version: 1
rules:
  - name: shadow-one
    key: [{ header: x-api-key }]
    limit: { requests: 1, per: 1h }
    mode: shadow
    accuracy: exact
"#,
    );
    let statuses = stack.statuses(8, "/", &[("x-api-key", "k")]);
    assert_eq!(count(&statuses, 200), 8, "{statuses:?}");
    assert_eq!(stack.decisions("shadow-one", "shadow_limited"), 7);
    assert_eq!(stack.decisions("shadow-one", "allowed"), 1);
    // The agent hears of them at the filters' next sync (every second).
    meshlimit_tests::eventually(
        std::time::Duration::from_secs(5),
        "the agent to count shadow decisions",
        || {
            let m = stack.agent.metrics();
            meshlimit_tests::sample(
                &m,
                "meshlimit_decisions_total",
                &[("rule", "shadow-one"), ("outcome", "shadow_limited")],
            ) == Some(7.0)
        },
    );
    stack.agent.stop();
}
