//! `cold_start: admit` through real Envoy: a key's first request is admitted
//! while its agent call is still out, the grant pays for it, and a key spent
//! at another Envoy gets exactly one unpaid request at a new one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use meshlimit_tests::{count, eventually, sample, signal, AgentOptions, Envoy, EnvoyConfig, Stack};

const RULES: &str = r#"
version: 1
rules:
  - name: cold-admit
    key: [{ header: x-api-key }]
    limit: { requests: 3, per: 1h }
    cold_start: admit
  - name: cold-wait
    key: [{ header: x-user }]
    limit: { requests: 3, per: 1h }
"#;

// The lease calls' deadline is the harness's (`TEST_TIMEOUT_MS`), which a
// loaded machine does not reach: these tests count cold starts exactly, and
// a cold start whose call gets no answer leaves its key unknown, so the next
// request would start cold again. A call can still fail before its deadline
// (both cold starts unpaid), so each failure message prints the filter's
// counters and how Envoy's calls to the agent ended, to tell the two apart.

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.filter_stat(name).unwrap_or(0)
}

/// The filter's cold-start and call counters, and how Envoy's calls to the
/// agent ended, for a failure's message.
fn counters(envoy: &Envoy) -> String {
    let filter = ["cold_starts", "cold_starts_unpaid", "lease_calls"]
        .map(|n| format!("{n}={}", stat(envoy, n)))
        .join(" ");
    let agent: Vec<String> = envoy
        .stats()
        .lines()
        .filter(|l| l.starts_with("cluster.meshlimit_agent.upstream_"))
        .filter(|l| !l.ends_with(": 0") && !l.contains("_bytes"))
        .map(|l| l.trim_start_matches("cluster.meshlimit_agent.").to_string())
        .collect();
    format!("{filter}; agent cluster: {}", agent.join(" "))
}

/// Leases the agent granted for `rule`.
fn granted(stack: &Stack, rule: &str) -> f64 {
    sample(
        &stack.agent.metrics(),
        "meshlimit_leases_granted_total",
        &[("rule", rule)],
    )
    .unwrap_or(0.0)
}

#[test]
fn a_cold_key_is_admitted_while_its_call_is_out_and_its_grant_pays_for_it() {
    let stack = Stack::start_with(AgentOptions::new(RULES), |c| c.concurrency(1));
    let pid = stack.agent.pid().unwrap();
    // The agent cannot answer: the cold start is answered by Envoy alone.
    signal(pid, "-STOP");
    let first = stack.get("/anything", &[("x-api-key", "alice")]);
    signal(pid, "-CONT");
    assert_eq!(first.status, 200, "{first:?}");
    // Nothing has counted it yet: no quota is claimed (not `r=0`).
    assert_eq!(first.header("ratelimit"), None, "{first:?}");
    eventually(Duration::from_secs(5), "the cold start counted", || {
        stat(&stack.envoy, "cold_starts") == 1
    });
    // The agent has answered the cold start's call (its grant is on its way
    // to the filter, or there: a request now waits on it or finds it spent).
    eventually(Duration::from_secs(5), "the cold start's grant", || {
        granted(&stack, "cold-admit") >= 1.0
    });
    // Three an hour, the cold start among them: its grant paid for it.
    let second = stack.get("/anything", &[("x-api-key", "alice")]);
    let seen = counters(&stack.envoy);
    assert_eq!(second.status, 200, "{second:?} {seen}");
    assert!(second.header("ratelimit").is_some(), "{second:?} {seen}");
    let rest = stack.statuses(3, "/anything", &[("x-api-key", "alice")]);
    assert_eq!(rest, vec![200, 429, 429]);
    assert_eq!(stack.decisions("cold-admit", "allowed"), 3);
    // A rule that waits admits the same, and never starts cold.
    let waited = stack.statuses(5, "/anything", &[("x-user", "bob")]);
    assert_eq!(count(&waited, 200), 3, "{waited:?}");
    eventually(Duration::from_secs(5), "the counters reported", || {
        stat(&stack.envoy, "lease_calls") > 0
    });
    assert_eq!(stat(&stack.envoy, "cold_starts"), 1);
    assert_eq!(stat(&stack.envoy, "cold_starts_unpaid"), 0);
}

#[test]
fn a_key_spent_at_another_envoy_gets_one_unpaid_request_at_a_new_one() {
    let stack = Stack::start_with(AgentOptions::new(RULES), |c| c.concurrency(1));
    let spent = stack.statuses(5, "/anything", &[("x-api-key", "carol")]);
    assert_eq!(
        spent,
        vec![200, 200, 200, 429, 429],
        "{}",
        counters(&stack.envoy)
    );

    // A second Envoy on the same agent has never seen carol.
    let other = Envoy::start_with(EnvoyConfig::new(stack.agent.port()).concurrency(1));
    eventually(Duration::from_secs(10), "the new Envoy's rules", || {
        stat(&other, "rules_ready_vms") >= 2
    });
    let statuses: Vec<u16> = (0..4)
        .map(|_| meshlimit_tests::get(&other.url("/anything"), &[("x-api-key", "carol")]).status)
        .collect();
    assert_eq!(
        statuses,
        vec![200, 429, 429, 429],
        "one request, then the store's denial; {}",
        counters(&other)
    );
    eventually(
        Duration::from_secs(5),
        "the unpaid cold start counted",
        || stat(&other, "cold_starts_unpaid") == 1,
    );
    assert_eq!(stat(&other, "cold_starts"), 1);
}
