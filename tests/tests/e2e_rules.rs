//! End to end: rules change while everything runs (a ConfigMap's atomic symlink
//! swap), and a broken change is refused without losing the limit in force.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use meshlimit_tests::{count, eventually, get, label, sample, Stack};

fn rules(limit: u32) -> String {
    format!(
        r#"
version: 1
rules:
  - name: per-key
    key: [{{ header: x-api-key }}]
    limit: {{ requests: {limit}, per: 1h }}
    accuracy: exact
"#
    )
}

#[test]
fn an_edited_rules_file_applies_without_restart_and_a_broken_one_is_refused() {
    let mut stack = Stack::start(&rules(3));
    let statuses = stack.statuses(6, "/", &[("x-api-key", "first")]);
    assert_eq!(count(&statuses, 200), 3, "{statuses:?}");

    stack.agent.update_rules(&rules(6));
    // Within 3 s the filters announce the new limit (a fresh key each probe).
    let mut probe = 0;
    eventually(
        Duration::from_secs(3),
        "the new limit to reach the filters",
        || {
            probe += 1;
            let r = stack.get("/", &[("x-api-key", &format!("probe-{probe}"))]);
            r.header("ratelimit-policy") == Some("\"per-key\";q=6;w=3600")
        },
    );
    let statuses = stack.statuses(10, "/", &[("x-api-key", "second")]);
    assert_eq!(count(&statuses, 200), 6, "{statuses:?}");

    // A typo in a limit must not become "no limit": the file is refused, the
    // error names the rule and the field, and the last good rules stay.
    let errors_before = reload_errors(&stack);
    stack.agent.update_rules(
        "version: 1\nrules:\n  - name: per-key\n    key: [{ header: x-api-key }]\n    limit: { requests: 1, pr: 1h }\n",
    );
    eventually(
        Duration::from_secs(3),
        "the agent to refuse the broken file",
        || reload_errors(&stack) > errors_before,
    );
    let log = stack.agent.stderr();
    assert!(
        log.contains("rule per-key: field limit.pr: unknown field `pr`"),
        "agent log:\n{log}"
    );
    let statuses = stack.statuses(10, "/", &[("x-api-key", "third")]);
    assert_eq!(
        count(&statuses, 200),
        6,
        "the last good limit still holds: {statuses:?}"
    );
}

fn reload_errors(stack: &Stack) -> f64 {
    sample(
        &stack.agent.metrics(),
        "meshlimit_rules_reloads_total",
        &[("result", "error")],
    )
    .unwrap_or(0.0)
}

/// 20,000 rules, one path prefix each (about 2.5 MB of YAML, a platform's
/// whole rule set), and a `probe` rule whose limit the test changes.
fn many_rules(probe_limit: u32) -> String {
    let mut text = format!(
        "version: 1\nrules:\n  - name: probe\n    match: {{ path_prefix: /probe/ }}\n    key: [{{ header: x-api-key }}]\n    limit: {{ requests: {probe_limit}, per: 1h }}\n    accuracy: exact\n"
    );
    for i in 0..20_000 {
        text.push_str(&format!(
            "  - name: api-{i}\n    match: {{ path_prefix: /r/{i}/ }}\n    key: [{{ header: x-api-key }}]\n    limit: {{ requests: 1000000, per: 1s }}\n"
        ));
    }
    text
}

#[test]
fn a_20000_rule_set_is_swapped_while_requests_are_decided_and_reaches_every_vm() {
    let mut stack = Stack::start(&many_rules(3));
    let policy = |stack: &Stack, key: &str| {
        stack
            .get("/probe/x", &[("x-api-key", key)])
            .header("ratelimit-policy")
            .map(str::to_string)
    };
    assert_eq!(
        policy(&stack, "before").as_deref(),
        Some("\"probe\";q=3;w=3600")
    );
    let version = |stack: &Stack| {
        label(
            &stack.agent.metrics(),
            "meshlimit_rules_version_info",
            "version",
        )
    };
    let old = version(&stack).expect("the agent announces its version");

    // Requests keep flowing on one key of a 20,000-rule set while it is swapped.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, url) = (Arc::clone(&stop), stack.envoy.url("/r/17/items"));
        thread::spawn(move || {
            let mut statuses = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                statuses.push(get(&url, &[("x-api-key", "steady")]).status);
            }
            statuses
        })
    };
    stack.agent.update_rules(&many_rules(6));
    let mut new = None;
    eventually(
        Duration::from_secs(5),
        "the agent to load the edited 20,000 rules",
        || {
            new = version(&stack).filter(|v| *v != old);
            new.is_some()
        },
    );
    let new = new.unwrap_or_default();
    // One VM per worker plus the main thread's: each runs the new version within
    // the sync interval (1 s) plus a second, and reports it at its next sync.
    eventually(
        Duration::from_secs(3),
        "every filter VM to run the new version",
        || {
            sample(
                &stack.agent.metrics(),
                "meshlimit_filters_on_version",
                &[("version", &new)],
            ) == Some(3.0)
        },
    );
    stop.store(true, Ordering::Relaxed);
    let statuses = load.join().expect("the load thread");
    assert!(
        statuses.len() >= 20,
        "requests flowed during the swap: {}",
        statuses.len()
    );
    assert_eq!(
        count(&statuses, 200),
        statuses.len(),
        "every request decided and admitted during the swap: {statuses:?}"
    );
    assert_eq!(
        policy(&stack, "after").as_deref(),
        Some("\"probe\";q=6;w=3600")
    );
}
