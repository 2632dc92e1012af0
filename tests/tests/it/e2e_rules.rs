//! End to end: rules change while everything runs (a ConfigMap's atomic symlink
//! swap), and a broken change is refused without losing the limit in force.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{count, eventually, sample, Stack};

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
    // The harness's patient lease deadline: admissions are counted exactly.
    let mut stack = Stack::start(&rules(3));
    let statuses = stack.statuses(6, "/", &[("x-api-key", "first")]);
    assert_eq!(count(&statuses, 200), 3, "{statuses:?}");

    let updated = Instant::now();
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
    // That probe's worker runs the new set; so must every other before the count.
    stack.wait_filters_on_served_rules(updated, "every filter VM on the new limit");
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
        log.contains("rule per-key: field rules[0].limit.pr: unknown field `pr`"),
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
