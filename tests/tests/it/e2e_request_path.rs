//! The request path through real Envoy: a key's requests share one agent call
//! (single flight), and a steady key's lease is refilled ahead of need, so its
//! calls are refills nobody waits for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{eventually, signal, AgentOptions, Stack};

const RULES: &str = r#"
version: 1
rules:
  - name: fast
    key: [{ header: x-api-key }]
    limit: { requests: 100000, per: 1s }
    on_failure: open
"#;

fn stat(stack: &Stack, name: &str) -> u64 {
    stack.filter_stat(name).unwrap_or(0)
}

#[test]
fn requests_for_one_key_wait_on_its_one_agent_call() {
    // One worker, and an agent that does not answer (stopped) for longer than
    // the filter's timeout: every request for the key arrives while the first
    // one's call is out. The harness's 5 s deadline, so that on a busy
    // machine all ten reach the filter before the call times out (a later
    // one would make a call of its own).
    let stack = Stack::start_with(AgentOptions::new(RULES), |c| c.concurrency(1));
    let pid = stack.agent.pid().unwrap();
    let (calls, waits) = (stat(&stack, "lease_calls"), stat(&stack, "lease_waits"));
    signal(pid, "-STOP");
    let stopped = Instant::now();
    // Each request's status, and when it was sent and answered (ms after the
    // stop): a failure below says whether the requests spread past the call.
    let answers: Vec<(u16, u128, u128)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..10)
            .map(|_| {
                s.spawn(|| {
                    let sent = stopped.elapsed().as_millis();
                    let status = stack.get("/x", &[("x-api-key", "shared")]).status;
                    (status, sent, stopped.elapsed().as_millis())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    signal(pid, "-CONT");
    // The call timed out: the rule fails open for all ten.
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses, vec![200; 10], "{answers:?}");
    eventually(Duration::from_secs(5), "the filter's counters", || {
        stat(&stack, "lease_waits") > waits
    });
    let calls = stat(&stack, "lease_calls") - calls;
    let waits = stat(&stack, "lease_waits") - waits;
    // Single flight: at most a call or two (a request that came after the
    // timeout makes a new one), every other request waited on one of them.
    let agent_cluster: Vec<String> = stack
        .envoy
        .stats()
        .lines()
        .filter(|l| l.starts_with("cluster.meshlimit_agent.upstream_"))
        .filter(|l| !l.ends_with(": 0"))
        .map(str::to_string)
        .collect();
    assert!(
        calls <= 2,
        "{calls} calls for one key; requests (status, sent, answered ms after the stop): \
         {answers:?}; the agent's cluster: {agent_cluster:?}"
    );
    assert!(calls + waits >= 10, "{calls} calls, {waits} waits");
}

#[test]
fn a_steady_key_is_refilled_ahead_and_its_requests_do_not_wait() {
    let stack = Stack::start_with(AgentOptions::new(RULES), |c| c.concurrency(1));
    let key = [("x-api-key", "steady")];
    // Warm-up: the lease learns the key's spend rate.
    for _ in 0..300 {
        assert_eq!(stack.get("/x", &key).status, 200);
    }
    let before = (stat(&stack, "lease_calls"), stat(&stack, "lease_refills"));
    for _ in 0..600 {
        assert_eq!(stack.get("/x", &key).status, 200);
    }
    let calls = stat(&stack, "lease_calls") - before.0;
    let refills = stat(&stack, "lease_refills") - before.1;
    assert!(
        calls > 0,
        "600 requests made no call: the lease never refilled"
    );
    // Nearly every call is a refill started ahead of need (a request that
    // found the lease empty would make a call of its own).
    assert!(
        refills * 10 >= calls * 9,
        "{refills} of {calls} calls were refills"
    );
}
