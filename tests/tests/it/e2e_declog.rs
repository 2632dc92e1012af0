//! The decision log and the online explain through real Envoy, the real filter
//! and the real agent: a limited request's line found by its `x-request-id`,
//! allowed decisions sampled at the rule's rate, keys in clear only where a
//! rule opts in, rotated files capped, the new routes closed to other callers,
//! a limited key explained from its bucket and its recent decisions, and a
//! recorded decision log replayed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use meshlimit_tests::{
    agent_auth, cli_bin, eventually, get, key_id, operator_auth, post, sample, AgentOptions,
    EnvoyConfig, RedisServer, Stack, TEST_SECRET,
};
use serde_json::Value;

const RULES: &str = r#"
version: 1
defaults:
  log_sample: 0
rules:
  - name: per-key
    key: [{ header: x-api-key }]
    limit: { requests: 2, per: 1h }
    accuracy: exact
  - name: sampled
    match: { path_prefix: /sampled }
    key: [{ header: x-user }]
    limit: { requests: 100000, per: 1h }
    log_sample: 0.2
  - name: clear
    match: { path_prefix: /clear }
    key: [{ header: x-team }]
    limit: { requests: 1, per: 1h }
    accuracy: exact
    log_key: clear
  - name: marker
    match: { path_prefix: /marker }
    key: [{ header: x-marker }]
    limit: { requests: 1000, per: 1h }
    log_sample: 1
"#;

/// One worker (all requests meet one VM, whose batches go out in order) and
/// a 100 ms sync, so records reach the agent quickly. The lease deadline is
/// the harness's: a missed one would hand a request to the failure policy,
/// and these tests count what the store decided.
fn one_worker(config: EnvoyConfig) -> EnvoyConfig {
    config.concurrency(1).plugin("sync_interval_ms", 100)
}

fn start(agent: AgentOptions) -> Stack {
    Stack::start_with(agent, one_worker)
}

/// The decision log lines the agent wrote to stdout.
fn lines(stack: &Stack) -> Vec<Value> {
    stack
        .agent
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// `GET path` through Envoy: its status and the `x-request-id` Envoy gave it
/// (the shipped `envoy.yaml` returns it on every answer).
fn send(stack: &Stack, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let r = stack.get(path, headers);
    let id = r.header("x-request-id").unwrap_or_default().to_string();
    assert!(!id.is_empty(), "no x-request-id in {r:?}");
    (r.status, id)
}

/// Sends a request the `marker` rule logs at every decision and waits for its
/// line, twice: the filter flushes again only once its earlier batches were
/// answered, and the agent writes in the order it took records, so every
/// decision made before the first marker is then in the log.
fn drain(stack: &Stack) -> Vec<Value> {
    for _ in 0..2 {
        let (status, id) = send(stack, "/marker", &[("x-marker", "m")]);
        assert_eq!(status, 200);
        eventually(Duration::from_secs(10), "the marker's log line", || {
            lines(stack).iter().any(|l| l["request_id"] == id.as_str())
        });
    }
    lines(stack)
}

#[test]
fn a_limited_request_is_found_by_its_request_id_with_rule_version_and_source() {
    let stack = start(AgentOptions::new(RULES).arg("--decision-log").arg("stdout"));
    let key = [("x-api-key", "alice")];
    let sent: Vec<(u16, String)> = (0..3).map(|_| send(&stack, "/x", &key)).collect();
    let statuses: Vec<u16> = sent.iter().map(|s| s.0).collect();
    assert_eq!(statuses, [200, 200, 429]);
    let log = drain(&stack);
    let limited: Vec<&Value> = log
        .iter()
        .filter(|l| l["request_id"] == sent[2].1.as_str())
        .collect();
    assert_eq!(limited.len(), 1, "{log:?}");
    let l = limited[0];
    let version = stack.agent.metrics();
    assert_eq!(l["rule"], "per-key");
    assert_eq!(l["decision"], "limited");
    assert_eq!(l["source"], "store", "{l}");
    assert_eq!(l["key_id"], key_id("per-key", &["alice"]).as_str());
    assert_eq!(l["tokens"], 0);
    assert!(l["retry_after_ms"].as_u64().unwrap() > 1_000_000, "{l}");
    assert!(
        version.contains(&format!(
            "meshlimit_rules_version_info{{version=\"{}\"}}",
            l["rules_version"].as_str().unwrap()
        )),
        "{l}"
    );
    assert!(l["time"].as_str().unwrap().ends_with('Z'));
    assert!(l["node"].as_str().is_some_and(|n| !n.is_empty()));
    assert!(l["filter"].as_str().unwrap().contains("/vm"));
    // `log_sample: 0` in `defaults`: the two allowed requests are not logged.
    assert!(
        !log.iter().any(|l| l["request_id"] == sent[0].1.as_str()),
        "{log:?}"
    );
    // The same key again meets the filter's cached denial.
    let (status, id) = send(&stack, "/x", &key);
    assert_eq!(status, 429);
    let log = drain(&stack);
    let again = log.iter().find(|l| l["request_id"] == id.as_str()).unwrap();
    assert_eq!(again["source"], "denial_cache", "{again}");
}

#[test]
fn allowed_decisions_are_logged_at_the_rules_sample_rate() {
    let stack = start(AgentOptions::new(RULES).arg("--decision-log").arg("stdout"));
    let n = 2_000;
    for i in 0..n {
        let user = format!("u{}", i % 50);
        assert_eq!(stack.get("/sampled", &[("x-user", &user)]).status, 200);
    }
    let log = drain(&stack);
    let kept = log.iter().filter(|l| l["rule"] == "sampled").count();
    // Every one admitted (a lease call that missed its 5 ms deadline on a busy
    // machine is admitted by the failure policy: `failed_local`), none logged
    // as a rejection.
    let odd: Vec<&Value> = log
        .iter()
        .filter(|l| l["rule"] == "sampled")
        .filter(|l| l.get("retry_after_ms").is_some() || l["sample_rate"] != 0.2)
        .collect();
    assert!(odd.is_empty(), "{odd:?}");
    // Binomial(2,000, 0.2): mean 400, sigma 17.9; 4 sigma either side.
    println!("sampled: {kept} of {n} allowed decisions logged (expected 400 ± 72)");
    assert!((328..=472).contains(&kept), "{kept} of {n}");
    let text = stack.agent.metrics();
    assert_eq!(
        sample(&text, "meshlimit_decision_log_records_total", &[]),
        Some(log.len() as f64)
    );
    assert_eq!(stack.filter_stat("decision_log_dropped").unwrap_or(0), 0);
}

#[test]
fn the_key_is_in_the_log_in_clear_only_where_the_rule_opts_in() {
    let stack = start(AgentOptions::new(RULES).arg("--decision-log").arg("stdout"));
    for _ in 0..3 {
        stack.get("/x", &[("x-api-key", "secret-customer-key")]);
        stack.get("/clear", &[("x-team", "team-blue")]);
    }
    let log = drain(&stack);
    let text = stack.agent.stdout();
    assert!(log.iter().any(|l| l["rule"] == "per-key"), "{text}");
    assert!(!text.contains("secret-customer-key"), "{text}");
    assert!(log
        .iter()
        .filter(|l| l["rule"] == "per-key")
        .all(|l| l.get("key").is_none()));
    let clear: Vec<&Value> = log.iter().filter(|l| l["rule"] == "clear").collect();
    assert_eq!(clear.len(), 2, "{log:?}");
    assert!(
        clear.iter().all(|l| l["key"] == "clear|team-blue"),
        "{clear:?}"
    );
}

#[test]
fn rotation_caps_the_decision_log_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("decisions.log");
    let stack = start(
        AgentOptions::new(RULES)
            .arg("--decision-log")
            .arg(path.to_str().unwrap())
            .env("MESHLIMIT_DECISION_LOG_MAX_BYTES", "4096")
            .env("MESHLIMIT_DECISION_LOG_FILES", "3"),
    );
    // About 400 bytes a line: 100 rejections fill the three files twice over.
    // The last 429's line is waited for, not the last request's: on a loaded
    // machine a lease call can miss its deadline and the failure policy admit
    // that request, and an admitted decision is not logged (`log_sample: 0`).
    let mut last = String::new();
    let mut rejected = 0;
    for _ in 0..100 {
        let (status, id) = send(&stack, "/x", &[("x-api-key", "bob")]);
        if status == 429 {
            last = id;
            rejected += 1;
        }
    }
    assert!(rejected >= 90, "{rejected} of 100 requests rejected");
    eventually(Duration::from_secs(10), "the last rejection's line", || {
        std::fs::read_to_string(&path).is_ok_and(|t| t.contains(&last))
    });
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["decisions.log", "decisions.log.1", "decisions.log.2"]
    );
    // Oldest file first: the lines kept are the newest, in decision order
    // (one worker's records reach the agent a batch at a time).
    let mut at = Vec::new();
    for name in names.iter().rev() {
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert!(text.len() <= 4096, "{name}: {} bytes", text.len());
        for l in text.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["rule"], "per-key");
            at.push(v["at_ms"].as_u64().unwrap());
        }
    }
    assert!(at.is_sorted(), "{at:?}");
    let total = at.len();
    // The oldest lines went with the deleted files.
    assert!(total < rejected, "{total} lines kept of {rejected}");
    assert_eq!(stack.agent.stdout(), "");
}

#[test]
fn a_caller_without_the_right_token_is_refused_on_the_new_routes() {
    let stack = start(AgentOptions::new(RULES));
    let id = key_id("per-key", &["alice"]);
    let explain = stack
        .agent
        .url(&format!("/v1/explain?rule=per-key&key_id={id}"));
    let hot = stack.agent.url("/v1/hot?rule=per-key");
    let decisions = stack.agent.url("/v1/decisions");
    let body = r#"{"v":1,"filter_id":"intruder","records":[]}"#;
    let wrong = [("authorization", "Bearer not-the-token")];
    assert_eq!(get(&explain, &[]).status, 401);
    assert_eq!(get(&explain, &wrong).status, 403);
    assert_eq!(get(&hot, &[]).status, 401);
    assert_eq!(get(&hot, &wrong).status, 403);
    assert_eq!(post(&decisions, &[], body).status, 401);
    assert_eq!(post(&decisions, &wrong, body).status, 403);
    let auth = agent_auth();
    let filters = [("authorization", auth.as_str())];
    assert_eq!(post(&decisions, &filters, body).status, 200);
    // The operator views take the operator token, not the filters'.
    assert_eq!(get(&explain, &filters).status, 403);
    assert_eq!(get(&hot, &filters).status, 403);
    let operator = operator_auth();
    let ok = [("authorization", operator.as_str())];
    assert_eq!(get(&explain, &ok).status, 200);
    assert_eq!(get(&hot, &ok).status, 200);
    assert_eq!(post(&decisions, &ok, body).status, 403);
    // A bad key id is named.
    let bad = get(
        &stack.agent.url("/v1/explain?rule=per-key&key_id=alice"),
        &ok,
    );
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("key_id"), "{bad:?}");
}

#[test]
fn online_explain_of_a_limited_key_shows_its_bucket_and_recent_decisions() {
    let redis = RedisServer::start();
    let stack = start(AgentOptions::new(RULES).store(redis.url()));
    // The agent connects to Redis on its first call: another key's request
    // waits for that, so carol's are decided by the store.
    stack.get("/x", &[("x-api-key", "warm-up")]);
    let key = [("x-api-key", "carol")];
    let sent: Vec<(u16, String)> = (0..3).map(|_| send(&stack, "/x", &key)).collect();
    let statuses: Vec<u16> = sent.iter().map(|s| s.0).collect();
    assert_eq!(statuses, [200, 200, 429], "{sent:?}");
    let limited = sent[2].1.clone();
    let auth = operator_auth();
    let id = key_id("per-key", &["carol"]);
    let url = stack
        .agent
        .url(&format!("/v1/explain?rule=per-key&key_id={id}"));
    let mut explained = Value::Null;
    eventually(
        Duration::from_secs(10),
        "the rejection in the explain",
        || {
            explained = get(&url, &[("authorization", auth.as_str())]).json();
            explained["recent"]
                .as_array()
                .is_some_and(|r| r.iter().any(|l| l["request_id"] == limited.as_str()))
        },
    );
    println!("{explained:#}");
    assert_eq!(explained["key_id"], id.as_str());
    assert_eq!(explained["limit"]["requests"], 2);
    // Two of two spent: the bucket in Redis is (nearly) empty, a full refill
    // an hour away.
    let bucket = &explained["bucket"];
    assert!(bucket["tokens"].as_f64().unwrap() < 0.01, "{explained}");
    assert!(
        bucket["full_in_ms"].as_u64().unwrap() > 3_500_000,
        "{explained}"
    );
    assert_eq!(explained["bucket_error"], Value::Null);
    let recent = explained["recent"].as_array().unwrap();
    assert_eq!(recent[0]["decision"], "limited", "{explained}");
    assert_eq!(recent[0]["source"], "store");
    // A key nobody sent has a full bucket: none in the store.
    let other = key_id("per-key", &["nobody"]);
    let none = get(
        &stack
            .agent
            .url(&format!("/v1/explain?rule=per-key&key_id={other}")),
        &[("authorization", auth.as_str())],
    )
    .json();
    assert_eq!(none["bucket"], Value::Null, "{none}");
    assert_eq!(none["recent"], serde_json::json!([]));
    // The rule's hottest keys: carol, with her rejection.
    let hot = get(
        &stack.agent.url("/v1/hot?rule=per-key"),
        &[("authorization", auth.as_str())],
    )
    .json();
    assert_eq!(hot["keys"][0]["key_id"], id.as_str(), "{hot}");
    assert_eq!(hot["keys"][0]["rejections"], 1, "{hot}");
}

#[test]
fn a_recorded_decision_log_replays_the_live_rejections() {
    let rules = RULES.replace("log_sample: 0\n", "log_sample: 1\n");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("decisions.log");
    let stack = start(
        AgentOptions::new(&rules)
            .arg("--decision-log")
            .arg(path.to_str().unwrap()),
    );
    let mut live = 0;
    for i in 0..60 {
        let key = format!("k{}", i % 7);
        if stack.get("/x", &[("x-api-key", &key)]).status == 429 {
            live += 1;
        }
    }
    assert_eq!(live, 60 - 7 * 2);
    for _ in 0..2 {
        let id = send(&stack, "/marker", &[("x-marker", "m")]).1;
        eventually(Duration::from_secs(10), "the marker's line", || {
            std::fs::read_to_string(&path).is_ok_and(|t| t.contains(&id))
        });
    }
    let report = replay(dir.path(), &rules, &path);
    let per_key = report["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "per-key")
        .unwrap()
        .clone();
    assert_eq!(per_key["applied"], 60, "{report}");
    assert_eq!(per_key["would_reject"], live, "{report}");
    assert_eq!(report["sampled_lines"], 0);
}

/// `meshlimit replay --rules RULES LOG --format json`.
fn replay(dir: &Path, rules: &str, log: &Path) -> Value {
    let rules_path = dir.join("rules.yaml");
    std::fs::write(&rules_path, rules).unwrap();
    let mut cmd = Command::new(cli_bin());
    cmd.arg("replay")
        .arg("--rules")
        .arg(&rules_path)
        .arg(log)
        .args(["--format", "json"]);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MESHLIMIT_") {
            cmd.env_remove(name);
        }
    }
    let out = cmd.env("MESHLIMIT_SECRET", TEST_SECRET).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
