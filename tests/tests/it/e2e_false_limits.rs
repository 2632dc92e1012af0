//! The false-limit SLI through real Envoy, the real filter, the real agent and
//! redis-server: a key far over its limit, held by the node pool after its
//! bucket drained, counts no false limit (its 429s are the limit working,
//! though the store's bucket refills during the hold); the same key limited
//! after its bucket was reset in the store (`DEL`, as an operator would: the
//! key is under its limit again, and the node's hold and the filter's cached
//! denial still turn it away) shows in `meshlimit_false_limits_total`; an
//! exact rule under the same traffic stays at zero.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{
    eventually, redis_bucket_key, sample, AgentOptions, RedisServer, Resp, Stack,
};

/// Both rules: 100 requests per 100 s (one token a second), burst 100. The
/// pooled one takes leases of a tenth of the burst (`--lease-target-ms 1000`
/// at this demand): once drained, the node holds the key for ten seconds while
/// the store's bucket regains a token every second.
const RULES: &str = r#"
version: 1
defaults:
  log_sample: 0
rules:
  - name: pooled
    match: { path_prefix: /pooled }
    key: [{ header: x-k }]
    limit: { requests: 100, per: 100s }
  - name: exact
    match: { path_prefix: /exact }
    key: [{ header: x-k }]
    limit: { requests: 100, per: 100s }
    accuracy: exact
"#;

fn metric(stack: &Stack, name: &str, rule: &str) -> f64 {
    sample(&stack.agent.metrics(), name, &[("rule", rule)]).unwrap_or(0.0)
}

/// Waits until every one of `all` 429s was checked or skipped (a node pool's
/// denial that answered a refill ahead of need is a suspect without a 429,
/// so there may be more).
fn wait_checked(stack: &Stack, all: u32) {
    eventually(
        Duration::from_secs(15),
        "every 429 checked or skipped",
        || {
            let text = stack.agent.metrics();
            let skipped: f64 = ["budget", "queue", "stale", "store_error"]
                .iter()
                .filter_map(|r| {
                    sample(
                        &text,
                        "meshlimit_false_limit_checks_skipped_total",
                        &[("reason", r)],
                    )
                })
                .sum();
            metric(stack, "meshlimit_false_limit_checks_total", "pooled")
                + metric(stack, "meshlimit_false_limit_checks_total", "exact")
                + skipped
                >= f64::from(all)
        },
    );
}

/// Sends `n` requests for alice on `path`, one each 10 ms from `start`'s
/// `from`-th slot; returns its 429s.
fn paced(stack: &Stack, path: &str, start: Instant, from: u32, n: u32) -> u32 {
    let mut limited = 0;
    for i in from..from + n {
        let status = stack.get(path, &[("x-k", "alice")]).status;
        assert!(status == 200 || status == 429, "{path}: {status}");
        limited += u32::from(status == 429);
        // Paced, not racing: the request times matter, not a wait for state.
        let due = start + Duration::from_millis(10 * u64::from(i + 1));
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    limited
}

#[test]
fn a_key_reset_under_its_hold_counts_as_falsely_limited_a_held_key_at_its_limit_and_an_exact_rule_do_not(
) {
    // The filter hands its records over every second (the default), so its
    // cached denials are checked hundreds of ms after their 429; the node
    // pool's denials are checked at once. Every suspect is checked (a budget
    // far above the 100 requests a second): the test is about which 429s are
    // false, not the sampling (with the default 10 a second, a second's
    // records arriving in one batch would leave most of them unchecked).
    let redis = RedisServer::start();
    let stack = Stack::start_with(
        AgentOptions::new(RULES)
            .store(redis.url())
            .arg("--lease-target-ms")
            .arg("1000")
            .arg("--false-limit-checks")
            .arg("1000"),
        |config| config.concurrency(1).plugin("sync_interval_ms", 1000),
    );
    // The same traffic on each rule in turn, 100 requests a second (one rule
    // at a time, so the node's check budget is not shared): a bucket drains
    // after about a second, and every 429 after it is the key at its limit.
    let start = Instant::now();
    let exact = paced(&stack, "/exact", start, 0, 190);
    let held = paced(&stack, "/pooled", start, 190, 200);
    println!("429s: exact {exact}, pooled while held {held}");
    assert!(exact > 50 && held > 50, "exact {exact}, pooled {held}");
    wait_checked(&stack, exact + held);
    assert_checked_none_false(&stack, "pooled");
    // The key's bucket reset in the store: full again, while the node still
    // holds the key (ten seconds from its drain) and the filter caches that
    // denial. Its 429s from now are false.
    let key = redis_bucket_key("pooled", &["alice"]);
    assert_eq!(redis.cmd(&["DEL", &key]), Resp::Int(1), "{key}");
    let reset = paced(&stack, "/pooled", start, 390, 200);
    println!("429s: pooled after the reset {reset}");
    assert!(reset > 50, "{reset}");
    wait_checked(&stack, exact + held + reset);
    let text = stack.agent.metrics();
    for rule in ["pooled", "exact"] {
        println!(
            "{rule}: {} false of {} checked, ratio {}",
            metric(&stack, "meshlimit_false_limits_total", rule),
            metric(&stack, "meshlimit_false_limit_checks_total", rule),
            metric(&stack, "meshlimit_false_limit_ratio", rule),
        );
    }
    assert!(
        metric(&stack, "meshlimit_false_limits_total", "pooled") > 0.0,
        "{text}"
    );
    assert!(
        metric(&stack, "meshlimit_false_limit_ratio", "pooled") > 0.0,
        "{text}"
    );
    assert_checked_none_false(&stack, "exact");
}

/// `rule` had at least 5 of its 429s checked, none found false.
fn assert_checked_none_false(stack: &Stack, rule: &str) {
    let text = stack.agent.metrics();
    assert!(
        metric(stack, "meshlimit_false_limit_checks_total", rule) >= 5.0,
        "{rule}: {text}"
    );
    assert_eq!(
        metric(stack, "meshlimit_false_limits_total", rule),
        0.0,
        "{rule}: {text}"
    );
}
