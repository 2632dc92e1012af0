//! "Why was I limited?" through real Envoy, the real filter and the real agent:
//! the access log names each request's deciding rule, decision and key id.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use meshlimit_tests::{eventually, key_id, AgentOptions, EnvoyConfig, Stack, EXACT_TWO_PER_HOUR};

/// Envoy writes its access log every 10 s by default; 50 ms here.
fn flush_often(config: EnvoyConfig) -> EnvoyConfig {
    config.arg("--file-flush-interval-msec").arg("50")
}

#[test]
fn the_access_log_names_the_rule_the_decision_and_the_key_id() {
    let stack = Stack::start_with(AgentOptions::new(EXACT_TWO_PER_HOUR), flush_often);
    let key = "alice-clear-key";
    let statuses = stack.statuses(3, "/anything", &[("x-api-key", key)]);
    assert_eq!(statuses, [200, 200, 429]);
    // Envoy writes its access log in the background.
    let mut lines = Vec::new();
    eventually(Duration::from_secs(10), "three access log lines", || {
        lines = stack.envoy.access_log();
        lines.len() >= 3
    });
    let id = key_id("per-key", &[key]);
    assert!(!id.contains(key));
    let allowed = format!("rule=per-key decision=allowed key_id={id}");
    let limited = format!("rule=per-key decision=limited key_id={id}");
    assert!(
        lines[0].contains(" 200 ") && lines[0].ends_with(&allowed),
        "{lines:?}"
    );
    assert!(
        lines[2].contains(" 429 ") && lines[2].ends_with(&limited),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| !l.contains(key)), "{lines:?}");

    // A request no rule applies to has nothing to name.
    assert_eq!(stack.get("/anything", &[]).status, 200);
    eventually(Duration::from_secs(10), "a fourth line", || {
        lines = stack.envoy.access_log();
        lines.len() >= 4
    });
    assert!(
        lines[3].ends_with("rule=- decision=- key_id=-"),
        "{lines:?}"
    );
}
