//! "Why was I limited?" through real Envoy, the real filter and the real agent:
//! the access log names each request's deciding rule, decision and key id, and
//! the usage path tells a caller its limits without spending a token.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{
    count, eventually, key_id, AgentOptions, EnvoyConfig, Stack, EXACT_TWO_PER_HOUR,
};

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

    // A request no rule applies to has nothing to name: no value is set.
    assert_eq!(stack.get("/anything", &[]).status, 200);
    eventually(Duration::from_secs(10), "a fourth line", || {
        lines = stack.envoy.access_log();
        lines.len() >= 4
    });
    assert!(lines[3].ends_with("ms -"), "{lines:?}");
}

const USAGE_RULES: &str = r#"
version: 1
rules:
  - name: per-key
    key: [{ header: x-api-key }]
    limit: { requests: 5, per: 1h }
    accuracy: exact
  - name: search
    match: { path_prefix: /search }
    key: [{ header: x-api-key }]
    limit: { requests: 50, per: 1h }
"#;

const USAGE: &str = "/.well-known/ratelimit";

#[test]
fn the_usage_path_answers_from_local_state_and_spends_nothing() {
    // The exact counts below are the store's (the harness's patient lease
    // deadline: a call past envoy.yaml's 5 ms would be admitted by the rule's
    // `local` failure policy and count one more).
    let stack = Stack::start(USAGE_RULES);
    let bob = [("x-api-key", "bob")];
    let usage = |query: &str| {
        let r = stack.get(&format!("{USAGE}{query}"), &bob);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        r.json()
    };
    let limit = |rule: &str, remaining: u32| {
        serde_json::json!({"rule": rule, "requests": if rule == "search" {50} else {5},
            "per_seconds": 3600, "remaining": remaining, "reset_seconds": 0})
    };
    // Nothing spent: full limits. Naming no request lists the rules that
    // apply to the usage request as sent (not `search`, scoped to another
    // path); naming one, the rules that would count it.
    for _ in 0..3 {
        assert_eq!(
            usage(""),
            serde_json::json!({"limits": [limit("per-key", 5)]})
        );
    }
    assert_eq!(
        usage("?path=/search/x"),
        serde_json::json!({"limits": [limit("per-key", 5), limit("search", 50)]})
    );
    assert_eq!(
        usage("?method=GET&path=/anything"),
        serde_json::json!({"limits": [limit("per-key", 5)]})
    );
    // Asking spent nothing: two requests pass and the usage shows them.
    assert_eq!(stack.statuses(2, "/anything", &bob), [200, 200]);
    let after = usage("?path=/anything");
    let line = &after["limits"][0];
    assert_eq!(
        (&line["rule"], &line["remaining"]),
        (&"per-key".into(), &3.into()),
        "{after}"
    );
    let reset = line["reset_seconds"].as_u64().unwrap();
    assert!((1..=3600).contains(&reset), "{after}");
    // Asking again spends nothing either: exactly three more pass.
    usage("");
    assert_eq!(stack.statuses(4, "/anything", &bob), [200, 200, 200, 429]);
    assert_eq!(usage("")["limits"][0]["remaining"], 0);
    // The usage answers never reached the backend, nor counted as decisions.
    assert_eq!(stack.decisions("per-key", "allowed"), 5);
    // Only a GET is answered; an ambiguous question is refused.
    let twice = stack.get(&format!("{USAGE}?path=/a&path=/b"), &bob);
    assert_eq!(twice.status, 400, "{twice:?}");
}

/// A worker answers the usage path `usage_per_second` (20) times a second
/// and a 429 past it, each answer counted in Envoy's stats.
#[test]
fn the_usage_path_is_limited_and_counted() {
    let stack = Stack::start(USAGE_RULES);
    let started = Instant::now();
    let statuses = stack.statuses(200, USAGE, &[("x-api-key", "bob")]);
    let secs = started.elapsed().as_secs_f64();
    let answered = count(&statuses, 200);
    let limited = count(&statuses, 429);
    eprintln!("200 usage requests in {secs:.2} s: {answered} answered, {limited} limited");
    assert_eq!(answered + limited, 200, "{statuses:?}");
    // Each of the two workers answers 20 at once and 20 a second after.
    let bound = (2.0 * (20.0 + 20.0 * secs)).ceil() as usize;
    assert!((20..=bound).contains(&answered), "{answered} > {bound}");
    assert!(limited > 0, "{statuses:?}");
    eventually(Duration::from_secs(10), "the usage counters", || {
        stack.filter_stat("usage.answered") == Some(answered as u64)
            && stack.filter_stat("usage.limited") == Some(limited as u64)
    });
}
