//! Safe rule changes, end to end: generated traffic through real Envoy, the
//! real filter and the real agent, Envoy's access log in the JSON lines
//! `meshlimit replay` reads, then the real `replay` over that log. With
//! the rules that ran live, the replay rejects, per rule and per key, what the
//! live run rejected; a tighter set names the keys it would newly limit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use meshlimit_tests::{
    cli_bin, eventually, key_id, request, AgentOptions, EnvoyConfig, Stack, TEST_SECRET,
};
use serde_json::Value;

/// Three rules, every one checked exactly at the store and refilling over an
/// hour, so that nothing refills between the live run and its replay. The two
/// keyed on `x-api-key` overlap on /search; the client IP (not taken from
/// X-Forwarded-For: the stack trusts no proxy) is one key for every request.
const LIVE_RULES: &str = r#"
version: 1
rules:
  - name: per-key
    key: [{ header: x-api-key }]
    limit: { requests: 22, per: 1h }
    accuracy: exact
  - name: search-per-key
    match: { path_prefix: /search }
    key: [{ header: x-api-key }, method]
    limit: { requests: 5, per: 1h }
    accuracy: exact
  - name: login-per-ip
    match: { path: /login, methods: [POST] }
    key: [client_ip]
    limit: { requests: 8, per: 1h }
    accuracy: exact
"#;

const API_KEYS: [&str; 6] = [
    "key-alpha",
    "key-bravo",
    "key-charlie",
    "key-delta",
    "key-echo",
    "key-foxtrot",
];
const PATHS: [&str; 5] = [
    "/search",
    "/search/items?q=1",
    "/items",
    "/orders/7",
    "/login",
];
const METHODS: [&str; 2] = ["GET", "POST"];
const REQUESTS: usize = 200;
const SEED: u64 = 0x6d65_7368_6c69_6d69;

/// One generated request: method, path and API key (`None`: anonymous).
struct Req {
    method: &'static str,
    path: &'static str,
    api_key: Option<&'static str>,
}

/// splitmix64: the same traffic in every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next() % items.len() as u64) as usize]
    }
}

fn traffic() -> Vec<Req> {
    let mut rng = Rng(SEED);
    (0..REQUESTS)
        .map(|_| {
            let api_key = match rng.next() % 8 {
                0 => None,
                _ => Some(rng.pick(&API_KEYS)),
            };
            Req {
                method: rng.pick(&METHODS),
                path: rng.pick(&PATHS),
                api_key,
            }
        })
        .collect()
}

/// Every key the traffic can form, by (rule, key id) → what it stands for.
fn known_keys() -> BTreeMap<(String, String), String> {
    let mut keys = BTreeMap::new();
    let mut add = |rule: &str, parts: &[&str]| {
        keys.insert(
            (rule.to_string(), key_id(rule, parts)),
            format!("{rule}:{}", parts.join("|")),
        );
    };
    for k in API_KEYS {
        add("per-key", &[k]);
        for m in METHODS {
            add("search-per-key", &[k, m]);
        }
    }
    add("login-per-ip", &["127.0.0.1"]);
    keys
}

/// `meshlimit replay --rules RULES [--baseline BASELINE] LOG --format json`
/// with the deployment's secret, so that its key ids are the live run's.
fn replay(dir: &Path, rules: &str, baseline: Option<&str>, log: &Path) -> Value {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write a rules file");
        path
    };
    let mut cmd = Command::new(cli_bin());
    cmd.arg("replay")
        .arg("--rules")
        .arg(write("new.yaml", rules));
    if let Some(old) = baseline {
        cmd.arg("--baseline").arg(write("old.yaml", old));
    }
    cmd.arg(log).args(["--format", "json"]);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MESHLIMIT_") {
            cmd.env_remove(name);
        }
    }
    let out = cmd
        .env("MESHLIMIT_SECRET", TEST_SECRET)
        .output()
        .expect("run meshlimit replay (make build)");
    assert!(
        out.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "replay's output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Per rule, the report's `field` (`would_reject`, `baseline_would_reject`).
fn per_rule(report: &Value, field: &str) -> BTreeMap<String, u64> {
    report["rules"]
        .as_array()
        .expect("rules in the report")
        .iter()
        .map(|r| {
            (
                r["rule"].as_str().unwrap().to_string(),
                r[field].as_u64().unwrap_or_else(|| panic!("{field}: {r}")),
            )
        })
        .collect()
}

/// Per (rule, key id), the report's newly limited keys and their rejections.
fn per_key(report: &Value) -> BTreeMap<(String, String), u64> {
    report["newly_limited_keys"]
        .as_array()
        .expect("newly_limited_keys in the report")
        .iter()
        .map(|k| {
            (
                (
                    k["rule"].as_str().unwrap().to_string(),
                    k["key_id"].as_str().unwrap().to_string(),
                ),
                k["would_reject"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `name=value` of a line of the stack's own access log (a request no rule
/// applied to ends in `-`, with no fields).
fn field_of<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
}

/// [`field_of`], which the line must have.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    field_of(line, name).unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

#[test]
fn replaying_the_live_access_log_rejects_what_the_live_run_rejected() {
    let stack = Stack::start_with(AgentOptions::new(LIVE_RULES), |c: EnvoyConfig| {
        c.replay_log(&["x-api-key"])
            // Envoy writes its access logs every 10 s by default; 50 ms here.
            .arg("--file-flush-interval-msec")
            .arg("50")
    });

    // The live run: one request at a time, so the log's order is the order
    // the filter and the store saw.
    let mut live_429 = 0u64;
    for r in traffic() {
        let headers: Vec<(&str, &str)> = r.api_key.map(|k| ("x-api-key", k)).into_iter().collect();
        let body = (r.method == "POST").then_some(&b""[..]);
        let resp = request(r.method, &stack.envoy.url(r.path), &headers, body);
        match resp.status {
            200 => {}
            429 => live_429 += 1,
            other => panic!("{} {}: {other} {resp:?}", r.method, r.path),
        }
    }

    let log = stack.envoy.replay_log();
    let mut decisions = Vec::new();
    eventually(
        Duration::from_secs(10),
        "every request in both access logs",
        || {
            let lines = std::fs::read_to_string(&log).unwrap_or_default();
            decisions = stack.envoy.access_log();
            lines.lines().count() == REQUESTS && decisions.len() == REQUESTS
        },
    );

    // Live, per rule: the filter's own counts of the requests each rule
    // rejected; per key: the access log's deciding rule and key id of each 429.
    let rules = ["per-key", "search-per-key", "login-per-ip"];
    let live: BTreeMap<String, u64> = rules
        .iter()
        .map(|r| (r.to_string(), stack.decisions(r, "limited")))
        .collect();
    let mut live_keys: BTreeMap<(String, String), u64> = BTreeMap::new();
    for line in decisions
        .iter()
        .filter(|l| field_of(l, "decision") == Some("limited"))
    {
        let key = (
            field(line, "rule").to_string(),
            field(line, "key_id").to_string(),
        );
        *live_keys.entry(key).or_default() += 1;
    }
    for rule in rules {
        assert!(live[rule] > 0, "{rule} rejected nothing live: {live:?}");
    }
    let share = live_429 as f64 / REQUESTS as f64;
    assert!(
        (0.15..=0.5).contains(&share),
        "{live_429} of {REQUESTS} rejected live: the traffic should make every rule reject some, not most"
    );
    // A request two rules rejected at once would count under both rules but
    // under one key in the access log; this traffic has none.
    assert_eq!(live.values().sum::<u64>(), live_429, "{live:?}");
    assert_eq!(live_keys.values().sum::<u64>(), live_429, "{live_keys:?}");
    let known = known_keys();
    for key in live_keys.keys() {
        assert!(
            known.contains_key(key),
            "unknown key {key:?} in the access log"
        );
    }

    eprintln!("live: {live_429} of {REQUESTS} rejected; per rule {live:?}; per key {live_keys:?}");

    let dir = tempfile::tempdir().expect("a temporary directory");
    let same = replay(dir.path(), LIVE_RULES, None, &log);
    assert_eq!(same["requests"], REQUESTS, "{same}");
    assert_eq!(same["skipped_lines"], 0, "{same}");
    assert_eq!(same["ambiguous"], 0, "{same}");
    assert_eq!(per_rule(&same, "would_reject"), live, "{same}");
    // Without a baseline every key the set rejects is "newly" limited.
    assert_eq!(per_key(&same), live_keys, "{same}");

    // A rules file whose limit differs does not give the live counts.
    let looser = LIVE_RULES.replace("requests: 22", "requests: 30");
    let differs = replay(dir.path(), &looser, None, &log);
    let looser_counts = per_rule(&differs, "would_reject");
    assert!(
        looser_counts["per-key"] < live["per-key"],
        "looser per-key: {looser_counts:?}, live: {live:?}"
    );

    // A tighter set against the running one: the running one's counts as the
    // baseline, and the keys the tighter one would newly limit, by id.
    let tighter = LIVE_RULES.replace("requests: 5,", "requests: 3,");
    let change = replay(dir.path(), &tighter, Some(LIVE_RULES), &log);
    assert_eq!(per_rule(&change, "baseline_would_reject"), live, "{change}");
    let new = per_rule(&change, "would_reject");
    assert!(
        new["search-per-key"] > live["search-per-key"],
        "{new:?} vs {live:?}"
    );
    let newly = per_key(&change);
    assert!(!newly.is_empty(), "{change}");
    let search_keys: BTreeSet<&String> = newly
        .keys()
        .filter(|(rule, _)| rule == "search-per-key")
        .map(|key| &known[key])
        .collect();
    assert!(
        !search_keys.is_empty(),
        "no search key newly limited: {change}"
    );
    for (key, n) in &newly {
        assert!(known.contains_key(key), "unknown key {key:?}: {change}");
        assert!(
            *n > live_keys.get(key).copied().unwrap_or(0),
            "{key:?}: {change}"
        );
    }
}
