//! The false-limit SLI through real Envoy, the real filter and the real agent:
//! a key under its limit limited (induced: the node pool holds a drained key
//! for a lease's worth of refill, much longer than one token's, so the filter's
//! cached denial outlasts the refill) shows in `meshlimit_false_limits_total`;
//! an exact rule under the same traffic (its cached denial lasts exactly until
//! the request's cost is back) stays at zero.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{eventually, sample, AgentOptions, Stack};

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

#[test]
fn a_key_held_past_its_refill_counts_as_falsely_limited_and_an_exact_rule_stays_at_zero() {
    // The filter hands its records over every second (the default), so most
    // checks come hundreds of ms after their 429; the exact rule's last 429s
    // are checked once its bucket has refilled, untouched: only judging the
    // bucket at the rejection's moment keeps them true.
    let stack = Stack::start_with(
        AgentOptions::new(RULES)
            .arg("--lease-target-ms")
            .arg("1000"),
        |config| {
            config
                .concurrency(1)
                .plugin("sync_interval_ms", 1000)
                .plugin("timeout_ms", 100)
        },
    );
    // The same traffic on each rule in turn, 100 requests a second (one rule
    // at a time, so the node's check budget is not shared): a bucket drains
    // after about a second. The exact rule's traffic stops 0.9 s after its
    // drain, so its bucket refills untouched before most of its 429s are
    // checked. The pooled rule's 429s come from the node's hold while its
    // store bucket holds tokens again.
    let start = Instant::now();
    let mut limited = [0u32; 2];
    for i in 0u32..590 {
        let (n, path) = if i < 190 {
            (1, "/exact")
        } else {
            (0, "/pooled")
        };
        let status = stack.get(path, &[("x-k", "alice")]).status;
        assert!(status == 200 || status == 429, "{path}: {status}");
        limited[n] += u32::from(status == 429);
        // Paced, not racing: the request times matter, not a wait for state.
        let due = start + Duration::from_millis(10 * u64::from(i + 1));
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    println!("429s: pooled {}, exact {}", limited[0], limited[1]);
    assert!(limited[0] > 200 && limited[1] > 50, "{limited:?}");
    // Every 429 is in the records: wait until each was checked or skipped.
    let all = f64::from(limited[0] + limited[1]);
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
            metric(&stack, "meshlimit_false_limit_checks_total", "pooled")
                + metric(&stack, "meshlimit_false_limit_checks_total", "exact")
                + skipped
                == all
        },
    );
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
    assert!(
        metric(&stack, "meshlimit_false_limit_checks_total", "exact") >= 5.0,
        "{text}"
    );
    assert_eq!(
        metric(&stack, "meshlimit_false_limits_total", "exact"),
        0.0,
        "{text}"
    );
}
