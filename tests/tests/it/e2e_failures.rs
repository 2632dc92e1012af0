//! End to end: the agent is gone. Each rule's failure policy decides, at once,
//! and the filter's own Envoy stats count it; a restarted agent is picked up
//! again without restarting Envoy, once the filter's back-off has run out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{count, eventually, AgentOptions, Stack};

const RULES: &str = r#"
version: 1
rules:
  - name: fails-open
    match: { path_prefix: /open }
    key: [{ header: x-api-key }]
    limit: { requests: 5, per: 1h }
    on_failure: open
  - name: fails-closed
    match: { path_prefix: /closed }
    key: [{ header: x-api-key }]
    limit: { requests: 5, per: 1h }
    on_failure: closed
  - name: fails-local
    match: { path_prefix: /local }
    key: [{ header: x-api-key }]
    limit: { requests: 5, per: 1h }
    on_failure: local
"#;

/// Far above the 5 ms budget of a lease call, far below anything that waits for
/// a dead agent (a connect timeout is 250 ms): no request may hang on it.
const NO_WAITING: Duration = Duration::from_millis(200);

fn timed(stack: &Stack, n: usize, path: &str) -> (Vec<u16>, Duration) {
    let mut slowest = Duration::ZERO;
    let statuses = (0..n)
        .map(|_| {
            let started = Instant::now();
            let status = stack.get(path, &[("x-api-key", "k")]).status;
            slowest = slowest.max(started.elapsed());
            status
        })
        .collect();
    (statuses, slowest)
}

#[test]
fn with_the_agent_down_each_rule_takes_its_failure_policy() {
    let mut stack = Stack::start(RULES);
    stack.agent.kill();

    let (open, slowest_open) = timed(&stack, 20, "/open");
    assert_eq!(
        count(&open, 200),
        20,
        "fail-open admits everything: {open:?}"
    );

    let (closed, slowest_closed) = timed(&stack, 5, "/closed");
    assert_eq!(
        count(&closed, 503),
        5,
        "fail-closed answers 503: {closed:?}"
    );
    let r = stack.get("/closed", &[("x-api-key", "k")]);
    assert_eq!(r.header("x-meshlimit-rule"), Some("fails-closed"));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"], "limiter_unavailable");

    // Limit 5 per hour, one node, safety factor 2: the node may admit 10 alone.
    let (local, slowest_local) = timed(&stack, 30, "/local");
    assert_eq!(
        count(&local, 200),
        10,
        "fail-local admits its local ceiling: {local:?}"
    );
    assert_eq!(count(&local, 429), 20, "{local:?}");

    for (what, slowest) in [
        ("open", slowest_open),
        ("closed", slowest_closed),
        ("local", slowest_local),
    ] {
        assert!(
            slowest < NO_WAITING,
            "a fail-{what} request took {slowest:?}"
        );
    }
    assert_eq!(stack.decisions("fails-open", "failed_open"), 20);
    assert_eq!(stack.decisions("fails-closed", "failed_closed"), 6);
    assert_eq!(stack.decisions("fails-local", "failed_local"), 30);
}

#[test]
fn a_restarted_agent_is_used_again_without_restarting_envoy() {
    let mut stack = Stack::start(RULES);
    stack.agent.kill();
    assert_eq!(stack.get("/closed", &[("x-api-key", "k")]).status, 503);
    stack.agent.restart();
    eventually(
        Duration::from_secs(5),
        "fail-closed requests to pass again",
        || stack.get("/closed", &[("x-api-key", "k")]).status == 200,
    );
}

#[test]
fn after_three_failed_calls_in_a_row_the_filter_backs_off_the_agent() {
    const BACKOFF: Duration = Duration::from_secs(3);
    let mut stack = Stack::start_with(AgentOptions::new(RULES), |c| {
        c.plugin("agent_backoff_ms", BACKOFF.as_millis() as u64)
    });
    assert_eq!(stack.get("/closed", &[("x-api-key", "k")]).status, 200);
    stack.agent.kill();
    // Past the 200 ms in which an agent that just answered counts as alive.
    std::thread::sleep(Duration::from_millis(300));
    let (closed, _) = timed(&stack, 3, "/closed");
    let backed_off_at = Instant::now();
    assert_eq!(closed, [503, 503, 503]);
    stack.agent.restart();
    stack.agent.wait_ready(Duration::from_secs(5));
    let restarted = backed_off_at.elapsed();
    assert!(
        restarted < BACKOFF - Duration::from_millis(500),
        "the agent took {restarted:?} to come back: too slow to see the back-off"
    );
    // The agent is back, but misses skip it until the back-off has run out.
    assert_eq!(
        stack.get("/closed", &[("x-api-key", "k")]).status,
        503,
        "backed off {:?} ago",
        backed_off_at.elapsed()
    );
    eventually(
        Duration::from_secs(10),
        "fail-closed requests to pass again",
        || stack.get("/closed", &[("x-api-key", "k")]).status == 200,
    );
    let back = backed_off_at.elapsed();
    assert!(
        back >= BACKOFF - Duration::from_millis(100),
        "the agent was asked again {back:?} after the back-off began"
    );
}
