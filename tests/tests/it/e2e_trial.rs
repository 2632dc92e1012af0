//! A rules change's trial in shadow end to end, through real Envoy with the
//! filter, real agents and, for the region, a real redis-server: a new rule
//! runs in shadow for the running file's `changes.shadow_first`, then enforces; a
//! tightened rule enforces its old limit while its new one's would-be
//! rejections are counted (`NAME.trial`), then the new limit; two agents on one
//! Redis agree on the trial's start, and a restarted agent keeps it; `override
//! end-trial` ends it early on every agent; `override pin` takes every agent to
//! the previous rules version within 2 s and `clear` back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use meshlimit_tests::{
    count, eventually, fleet_override_gauge, label, run_override, sample, within, within_by, Agent,
    AgentOptions, RedisServer, Resp, Stack, EXACT_TWO_PER_HOUR, FILTERS_WITHIN,
    STRICT_ONE_PER_HOUR,
};

/// Running rules: a loose limit on every request with a key.
const BASE: &str = r"
version: 1
rules:
  - name: base
    key: [{ header: x-api-key }]
    limit: { requests: 1000, per: 1s }
";

/// `BASE` and a new rule, one request per hour on /strict, on trial for
/// `PERIOD` (set into the text).
const WITH_NEW: &str = r"
version: 1
changes: { shadow_first: PERIOD }
rules:
  - name: base
    key: [{ header: x-api-key }]
    limit: { requests: 1000, per: 1s }
  - name: strict
    match: { path_prefix: /strict }
    key: [{ header: x-api-key }]
    limit: { requests: 1, per: 1h }
    accuracy: exact
";

fn with_new(period: &str) -> String {
    WITH_NEW.replace("PERIOD", period)
}

/// `BASE` with a trial of `period` for the next change: a change is held to
/// the guards of the rules in force, not to its own.
fn base(period: &str) -> String {
    BASE.replace(
        "rules:",
        &format!("changes: {{ shadow_first: {period} }}\nrules:"),
    )
}

/// The rules version an agent serves.
fn served(agent: &Agent) -> Option<String> {
    label(&agent.metrics(), "meshlimit_rules_version_info", "version")
}

/// When the agent's trial ends (Unix seconds), while one runs.
fn trial_end(agent: &Agent) -> Option<f64> {
    let text = agent.metrics();
    sample(&text, "meshlimit_rules_trial", &[]).filter(|on| *on == 1.0)?;
    sample(&text, "meshlimit_rules_trial_end_seconds", &[])
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits (bounded) until the filters run the trial's set: a request on a
/// fresh key is counted for `rule`, and every VM reports the version the agent
/// serves (each worker's VM takes it at its own sync).
fn wait_filters_on(stack: &Stack, rule: &str, path: &str) {
    let since = Instant::now();
    let mut probe = 0;
    eventually(
        Duration::from_secs(5),
        "the filters to run the trial",
        || {
            probe += 1;
            let key = format!("probe-{probe}");
            stack.get(path, &[("x-api-key", &key)]);
            stack.decisions(rule, "allowed") + stack.decisions(rule, "shadow_limited") > 0
        },
    );
    stack.wait_filters_on_served_rules(since, "every filter VM on the trial's set");
}

#[test]
fn a_new_rule_runs_in_shadow_for_the_trial_then_enforces() {
    let mut stack = Stack::start(&base("6s"));
    let before = served(&stack.agent).unwrap();
    stack.agent.update_rules(&with_new("6s"));
    eventually(Duration::from_secs(5), "the trial to start", || {
        trial_end(&stack.agent).is_some()
    });
    let end = trial_end(&stack.agent).unwrap();
    assert_ne!(served(&stack.agent).unwrap(), before);
    wait_filters_on(&stack, "strict", "/strict/a");

    // During the trial: over its limit, never refused, counted shadow_limited.
    let key = [("x-api-key", "k")];
    let limited = stack.decisions("strict", "shadow_limited");
    let mut passed = 0;
    while unix_now() < end - 1.0 {
        assert_eq!(
            stack.get("/strict/a", &key).status,
            200,
            "refused during the trial"
        );
        passed += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(passed >= 5, "only {passed} requests in the trial");
    assert!(
        stack.decisions("strict", "shadow_limited") >= limited + u64::try_from(passed).unwrap() - 1,
        "would-be rejections not counted"
    );
    assert!(stack.agent.stderr().contains("rules on trial"));

    // After it: the rule enforces as written, within the filters' sync.
    eventually(Duration::from_secs(6), "the rule to enforce", || {
        stack.get("/strict/a", &key).status == 429
    });
    let enforcing_after = unix_now() - end;
    assert!(
        enforcing_after > -0.5,
        "enforced {enforcing_after:.2} s before the trial's end"
    );
    assert_eq!(trial_end(&stack.agent), None);
    assert!(stack.agent.stderr().contains("rules trial over"));
    eprintln!("new rule: enforcing {enforcing_after:.2} s after the trial's end");
}

/// `per-key` at 5 an hour per key, exact (the harness's rule, loosened),
/// whose guards let the next change cut it to a tenth on a trial of 6 s.
fn five() -> String {
    EXACT_TWO_PER_HOUR
        .replace("requests: 2", "requests: 5")
        .replace(
            "rules:",
            "changes: { max_tightening: 0.1, shadow_first: 6s }\nrules:",
        )
}

/// The harness's rule as written, 2 an hour: cut from 5 (×0.4, allowed by
/// the running file's maximum), on trial for 6 s.
fn two() -> String {
    EXACT_TWO_PER_HOUR.replace(
        "rules:",
        "changes: { max_tightening: 0.1, shadow_first: 6s }\nrules:",
    )
}

#[test]
fn a_tightened_rule_enforces_its_old_limit_while_the_new_ones_would_rejects_are_counted() {
    let mut stack = Stack::start(&five());
    stack.agent.update_rules(&two());
    eventually(Duration::from_secs(5), "the trial to start", || {
        trial_end(&stack.agent).is_some()
    });
    let end = trial_end(&stack.agent).unwrap();
    wait_filters_on(&stack, "per-key.trial", "/");

    // The old limit enforces (5), the new one (2) is counted beside it.
    let statuses = stack.statuses(7, "/", &[("x-api-key", "k")]);
    assert!(unix_now() < end, "the requests outlasted the trial");
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);
    let would = stack.decisions("per-key.trial", "shadow_limited");
    assert!(
        would >= 3,
        "{would} would-be rejections counted, 3 expected"
    );
    // The agent names the keys the new limit would reject by id, never in clear.
    eventually(Duration::from_secs(3), "the trial's top keys", || {
        let text = stack.agent.metrics();
        sample(
            &text,
            "meshlimit_trial_top_keys",
            &[("rule", "per-key.trial"), ("rank", "1")],
        )
        .is_some_and(|n| n >= 1.0)
    });
    let text = stack.agent.metrics();
    let top = label(&text, "meshlimit_trial_top_keys", "key").unwrap();
    assert_ne!(top, "k");
    assert_eq!(top.len(), 32, "a key id: {top}");

    // After the trial: the new limit, as written.
    eventually(Duration::from_secs(8), "the trial to end", || {
        trial_end(&stack.agent).is_none()
    });
    eventually(Duration::from_secs(4), "the new limit to enforce", || {
        let key = format!("after-{}", unix_now());
        stack.statuses(3, "/", &[("x-api-key", &key)]) == [200, 200, 429]
    });
    assert_eq!(
        sample(&stack.agent.metrics(), "meshlimit_trial_top_keys", &[]),
        None,
        "the trial's top keys outlived it"
    );
}

#[test]
fn agents_on_one_redis_agree_on_the_trial_a_restarted_one_keeps_it_and_end_trial_ends_it() {
    let redis = RedisServer::start();
    let running = base("1m");
    let mut stack = Stack::start_with(AgentOptions::new(&running).store(redis.url()), |c| c);
    let mut other = Agent::start_with(AgentOptions::new(&running).store(redis.url()));
    other.wait_ready(Duration::from_secs(10));
    let rules = with_new("1m");
    stack.agent.update_rules(&rules);
    // The second agent installs the version a second later: the first one's
    // start stays.
    std::thread::sleep(Duration::from_secs(1));
    other.update_rules(&rules);
    eventually(Duration::from_secs(5), "both agents on trial", || {
        trial_end(&stack.agent).is_some() && trial_end(&other).is_some()
    });
    let end = trial_end(&stack.agent).unwrap();
    assert_eq!(
        trial_end(&other),
        Some(end),
        "the agents disagree on the trial's end"
    );
    let composed = served(&stack.agent).unwrap();
    assert_eq!(served(&other).as_deref(), Some(composed.as_str()));
    // The start is the store's, recorded once.
    let file_version = {
        let Resp::Bulk(Some(v)) = redis.cmd(&["GET", "ml:{fleet}:trial"]) else {
            panic!("no trial recorded");
        };
        // Sealed: `<MAC under the deployment secret> <version>`.
        let sealed = String::from_utf8(v).unwrap();
        sealed.split_once(' ').unwrap().1.to_string()
    };
    let Resp::Bulk(Some(start)) = redis.cmd(&[
        "HGET",
        &format!("ml:{{fleet}}:trial:{file_version}"),
        "start_ms",
    ]) else {
        panic!("no trial start recorded");
    };
    let start: f64 = String::from_utf8(start).unwrap().parse().unwrap();
    assert!(((start + 60_000.0) / 1_000.0 - end).abs() < 1e-3);

    // Restarted, an agent joins the trial running instead of enforcing at once.
    other.restart();
    other.wait_ready(Duration::from_secs(10));
    assert_eq!(trial_end(&other), Some(end));
    assert_eq!(served(&other).as_deref(), Some(composed.as_str()));

    // Ended early by the operator: every agent within 2 s, the filters at
    // their next sync after it.
    wait_filters_on(&stack, "strict", "/strict/a");
    let key = [("x-api-key", "k")];
    assert_eq!(stack.statuses(2, "/strict/a", &key), [200, 200]);
    let ended = Instant::now();
    let said = run_override(&["end-trial"], &redis.url());
    assert!(said.contains(&file_version), "{said}");
    let agents = within(ended, "both agents to end the trial", || {
        trial_end(&stack.agent).is_none() && trial_end(&other).is_none()
    });
    assert_eq!(served(&stack.agent).as_deref(), Some(file_version.as_str()));
    assert_eq!(served(&other).as_deref(), Some(file_version.as_str()));
    let envoy = within_by(
        FILTERS_WITHIN,
        ended,
        "the new rule to enforce through Envoy",
        || stack.get("/strict/a", &key).status == 429,
    );
    eprintln!("end-trial: agents {agents:?}, Envoy enforcing {envoy:?}");
}

/// The same rule loosened (applies at once, no trial).
fn loose() -> String {
    STRICT_ONE_PER_HOUR.replace("requests: 1,", "requests: 1000,")
}

fn pin_gauge(agent: &Agent) -> Option<f64> {
    fleet_override_gauge(agent, "pin")
}

#[test]
fn override_pin_takes_every_agent_to_the_previous_version_and_clear_back() {
    let redis = RedisServer::start();
    let mut stack = Stack::start_with(
        AgentOptions::new(STRICT_ONE_PER_HOUR).store(redis.url()),
        |c| c,
    );
    let mut other = Agent::start_with(AgentOptions::new(STRICT_ONE_PER_HOUR).store(redis.url()));
    other.wait_ready(Duration::from_secs(10));
    let v1 = served(&stack.agent).unwrap();
    stack.agent.update_rules(&loose());
    other.update_rules(&loose());
    eventually(
        Duration::from_secs(5),
        "both agents on the new version",
        || served(&stack.agent).is_some_and(|v| v != v1) && served(&other).is_some_and(|v| v != v1),
    );
    let v2 = served(&stack.agent).unwrap();
    eventually(Duration::from_secs(5), "Envoy on the new version", || {
        let key = format!("new-{}", unix_now());
        count(&stack.statuses(3, "/", &[("x-api-key", &key)]), 200) == 3
    });
    assert_eq!(pin_gauge(&stack.agent), Some(0.0));

    let pinned = Instant::now();
    let said = run_override(&["pin", "--reason", "INC-7"], &redis.url());
    assert!(said.contains(&v1), "{said}");
    let agents = within(pinned, "both agents to serve the previous version", || {
        served(&stack.agent).as_deref() == Some(v1.as_str())
            && served(&other).as_deref() == Some(v1.as_str())
    });
    assert_eq!(pin_gauge(&stack.agent), Some(1.0));
    assert_eq!(pin_gauge(&other), Some(1.0));
    let envoy = within_by(
        FILTERS_WITHIN,
        pinned,
        "Envoy to enforce the previous limit",
        || {
            let key = format!("pinned-{}", unix_now());
            stack.statuses(2, "/", &[("x-api-key", &key)]) == [200, 429]
        },
    );
    assert!(other.stderr().contains("INC-7"));
    // Restarted while pinned, an agent has no previous version: every rule in
    // shadow instead, said in its log and a metric.
    other.restart();
    other.wait_ready(Duration::from_secs(10));
    eventually(
        Duration::from_secs(3),
        "the restarted agent to shadow every rule",
        || sample(&other.metrics(), "meshlimit_fleet_pin_missing", &[]) == Some(1.0),
    );
    assert_ne!(served(&other).as_deref(), Some(v1.as_str()));
    assert!(other.stderr().contains("does not have"));

    let cleared = Instant::now();
    run_override(&["clear"], &redis.url());
    let back = within(cleared, "both agents back on the latest version", || {
        served(&stack.agent).as_deref() == Some(v2.as_str())
            && served(&other).as_deref() == Some(v2.as_str())
    });
    within_by(
        FILTERS_WITHIN,
        cleared,
        "Envoy back on the latest limit",
        || {
            let key = format!("cleared-{}", unix_now());
            count(&stack.statuses(3, "/", &[("x-api-key", &key)]), 200) == 3
        },
    );
    assert_eq!(pin_gauge(&other), Some(0.0));
    eprintln!("pin: agents {agents:?}, Envoy {envoy:?}; clear: agents {back:?}");
}
