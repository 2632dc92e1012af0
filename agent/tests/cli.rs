//! The built binary, run as an operator would: exit codes and what lands on
//! stdout and stderr.

// Test helpers outside #[test] functions may unwrap too: a failure is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use common::SECRET;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const GOOD: &str =
    "version: 1\nrules:\n  - {name: api, key: [method], limit: {requests: 10, per: 1s}}\n";
const BAD: &str =
    "version: 1\nrules:\n  - {name: api, key: [method], limit: {requests: 10, per: 1 minute}}\n";

/// The agent binary with this deployment's secret and nothing else from the
/// test's environment.
fn agent(args: &[&str]) -> Command {
    common::agent_command(args)
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

fn rules_file(dir: &Path, content: &str) -> String {
    let path = dir.join("rules.yaml");
    std::fs::write(&path, content).unwrap();
    path.display().to_string()
}

#[track_caller]
fn assert_usage_error(result: (i32, String, String), needle: &str) {
    let (code, _, stderr) = result;
    assert_eq!(code, 64, "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr:?}");
    assert!(stderr.contains(needle), "{needle:?} not in {stderr:?}");
}

#[test]
fn bad_flags_exit_64_with_one_line() {
    assert_usage_error(
        run(&mut agent(&["run", "--rules", "r.yaml", "--bogus"])),
        "--bogus",
    );
    assert_usage_error(run(&mut agent(&["run"])), "--rules");
    assert_usage_error(
        run(&mut agent(&["run", "--rules", "r", "--listen", "nowhere"])),
        "--listen",
    );
    assert_usage_error(
        run(&mut agent(&["run", "--rules", "r", "--store", "etcd://x"])),
        "unknown store",
    );
    assert_usage_error(run(&mut agent(&["frobnicate"])), "frobnicate");
    let mut env = agent(&["run"]);
    env.env("MESHLIMIT_RULES", "r")
        .env("MESHLIMIT_LEASE_TTL_MS", "zero");
    assert_usage_error(run(&mut env), "--lease-ttl-ms");
}

#[test]
fn help_and_version_exit_0() {
    let (code, stdout, _) = run(&mut agent(&["--help"]));
    assert_eq!(code, 0);
    assert!(stdout.contains("check-rules"));
    let (code, stdout, _) = run(&mut agent(&["--version"]));
    assert_eq!(code, 0);
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn check_rules_good_and_bad() {
    let dir = tempfile::tempdir().unwrap();
    let path = rules_file(dir.path(), GOOD);
    let (code, stdout, _) = run(&mut agent(&["check-rules", &path]));
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with(&format!("{path}: ok (1 rules, version ")),
        "{stdout}"
    );

    let path = rules_file(dir.path(), BAD);
    let (code, _, stderr) = run(&mut agent(&["check-rules", &path]));
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(&format!(
            "{path}:3: rule api: field limit.per: `1 minute` is not a period"
        )),
        "{stderr}"
    );

    // The same as JSON on stdout, for CI annotations and admission checks.
    let (code, stdout, _) = run(&mut agent(&["check-rules", "--format", "json", &path]));
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["errors"][0]["file"], path.as_str());
    assert_eq!(report["errors"][0]["line"], 3);
    assert_eq!(report["errors"][0]["rule"], "api");
    assert_eq!(report["errors"][0]["field"], "limit.per");

    let (code, _, stderr) = run(&mut agent(&["check-rules", "/nonexistent/rules.yaml"]));
    assert_eq!(code, 1);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn malformed_stores_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    let path = rules_file(dir.path(), GOOD);
    for (store, why) in [
        ("redis://", "expected redis://HOST:PORT"),
        ("redis://localhost", "expected redis://HOST:PORT"),
        (
            "redis+cluster://a:1,b",
            "expected redis+cluster://HOST:PORT,HOST:PORT",
        ),
        ("etcd://x:1", "unknown store `etcd://x:1`"),
    ] {
        let result = run(&mut agent(&[
            "run",
            "--rules",
            &path,
            "--listen",
            "127.0.0.1:0",
            "--store",
            store,
        ]));
        assert_usage_error(result, why);
    }
}

#[test]
fn tls_flags_without_tls_or_with_a_missing_file_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    let path = rules_file(dir.path(), GOOD);
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not used").unwrap();
    let ca = ca.display().to_string();
    let base = ["run", "--rules", &path, "--listen", "127.0.0.1:0"];
    let plain = [
        &base[..],
        &["--store", "redis://127.0.0.1:1", "--redis-ca", &ca],
    ]
    .concat();
    assert_usage_error(
        run(&mut agent(&plain)),
        "no store or peer region is rediss://",
    );
    let missing = [
        &base[..],
        &[
            "--store",
            "rediss://127.0.0.1:1",
            "--redis-ca",
            "/nonexistent/ca.pem",
        ],
    ]
    .concat();
    assert_usage_error(run(&mut agent(&missing)), "/nonexistent/ca.pem");
}

#[test]
fn a_port_in_use_exits_64() {
    let dir = tempfile::tempdir().unwrap();
    let path = rules_file(dir.path(), GOOD);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    assert_usage_error(
        run(&mut agent(&["run", "--rules", &path, "--listen", &addr])),
        "cannot listen on",
    );
}

/// Kills the child on drop, so a failed assertion leaves no agent behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: agent\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

#[test]
fn run_serves_then_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = rules_file(dir.path(), GOOD);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let child = agent(&["run", "--rules", &path])
        .env("MESHLIMIT_LISTEN", &addr)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut agent = Running(child);
    let start = Instant::now();
    let ready = loop {
        match http_get(&addr, "/readyz") {
            Some(reply) if reply.starts_with("HTTP/1.1 200") => break reply,
            _ if start.elapsed() > Duration::from_secs(10) => panic!("agent not ready on {addr}"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    assert!(ready.ends_with("ready\n"), "{ready}");
    let metrics = http_get(&addr, "/metrics").unwrap();
    assert!(
        metrics.contains("meshlimit_rules_version_info{version="),
        "{metrics}"
    );

    let pid = agent.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = agent.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "agent ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    let mut stderr = String::new();
    agent
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("SIGTERM: shutting down"), "{stderr}");
}

#[test]
fn run_refuses_to_start_without_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(dir.path(), GOOD);
    let mut none = agent(&["run", "--rules", &rules, "--listen", "127.0.0.1:0"]);
    none.env_remove("MESHLIMIT_SECRET");
    assert_usage_error(run(&mut none), "secret: none given");
    let mut short = agent(&["run", "--rules", &rules, "--listen", "127.0.0.1:0"]);
    short.env("MESHLIMIT_SECRET", "too-short");
    assert_usage_error(run(&mut short), "at least 32");
}

#[test]
fn key_id_maps_a_known_key_to_its_id_and_only_with_the_secret() {
    let id = |secret: &str| {
        let mut cmd = agent(&["key-id", "--rule", "per-key", "k-123"]);
        cmd.env("MESHLIMIT_SECRET", secret);
        let (code, out, err) = run(&mut cmd);
        assert_eq!(code, 0, "{err}");
        out.trim().to_string()
    };
    let a = id(SECRET);
    assert_eq!(a.len(), 32, "{a}");
    assert!(a.bytes().all(|b| b.is_ascii_hexdigit()), "{a}");
    assert_eq!(a, id(SECRET), "stable");
    assert_ne!(a, id("another-secret-0123456789abcdef0123"));
    // The same id the library computes (and metrics, logs and Redis names use).
    let secret = meshlimit_core::secret::Secret::new(SECRET.as_bytes()).unwrap();
    let key = meshlimit_core::DescriptorKey::new("per-key", ["k-123"]);
    assert_eq!(a, secret.key_ids().id(&key).to_string());
}

#[test]
fn explain_shows_the_rules_a_request_meets_and_why_the_others_do_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(
        dir.path(),
        "version: 1
rules:
  - name: login-per-ip
    match: { path: /login, methods: [POST] }
    key: [client_ip]
    limit: { requests: 5, per: 1m }
    accuracy: exact
    on_failure: closed
  - name: per-key
    key: [{ header: x-api-key }]
    limit: { requests: 100, per: 1s }
  - name: search
    match: { path_prefix: /v1/search }
    key: [method]
    limit: { requests: 1000, per: 1s }
    mode: shadow
",
    );
    let args = [
        "explain",
        "--rules",
        &rules,
        "--method",
        "post",
        "--path",
        "//login/",
        "-H",
        "X-Api-Key: k-1",
        "--client-ip",
        "10.0.0.7",
    ];
    let (code, out, err) = run(&mut agent(&args));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with(": POST /login"), "{out}");
    assert!(
        lines[1].starts_with(
            "1. login-per-ip  applies  key login-per-ip|10.0.0.7  limit 5 per 1m (burst 5)"
        ) && lines[1].contains("accuracy exact  on_failure closed"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("2. per-key  applies  key per-key|k-1  limit 100 per 1s"),
        "{out}"
    );
    assert_eq!(
        lines[3],
        "3. search  skipped: path `/login` does not start with `/v1/search`"
    );
    let (code, json, _) = run(&mut agent(&[&args[..], &["--format", "json"]].concat()));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["request"]["path"], "/login");
    let rows = v["rules"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["key"], "login-per-ip|10.0.0.7");
    assert_eq!(rows[0]["limit"]["per_seconds"], 60.0);
    assert_eq!(rows[1]["applies"], true);
    assert_eq!(rows[2]["applies"], false);
    assert_eq!(rows[2]["mode"], "shadow");
    assert!(rows[2]["reason"].as_str().unwrap().contains("/v1/search"));
    // A key header sent twice: the filter's 400, said as such.
    let twice = [
        "explain",
        "--rules",
        &rules,
        "--path",
        "/",
        "-H",
        "x-api-key: a",
        "-H",
        "x_api_key: b",
    ];
    let (code, _, err) = run(&mut agent(&twice));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sent more than once"), "{err}");
}

#[test]
fn check_rules_against_lists_every_change_and_refuses_an_unapproved_cut() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let old = write(
        "old.yaml",
        "version: 1\nrules:\n  - {name: api, key: [method], limit: {requests: 100, per: 1s}}\n  - {name: gone, key: [method], limit: {requests: 5, per: 1s}}\n",
    );
    let new_rules = "version: 1\nrules:\n  - {name: api, key: [method], limit: {requests: 10, per: 1s}}\n  - {name: fresh, key: [method], limit: {requests: 5, per: 1s}, mode: shadow}\n";
    let new = write("new.yaml", new_rules);
    let (code, out, err) = run(&mut agent(&["check-rules", &new, "--against", &old]));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(
            "~ rule api: limit 100 per 1 s (burst 100) → 10 per 1 s (burst 10), ×0.10 — refused"
        ),
        "{out}"
    );
    assert!(out.contains("+ rule fresh: added (shadow)"), "{out}");
    assert!(out.contains("- rule gone: removed"), "{out}");
    // JSON for CI: the same changes, the refusal flagged.
    let (code, json, _) = run(&mut agent(&[
        "check-rules",
        &new,
        "--against",
        &old,
        "--format",
        "json",
    ]));
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let changes = v["changes"].as_array().unwrap();
    let api = changes.iter().find(|c| c["rule"] == "api").unwrap();
    assert_eq!(api["change"], "limit");
    assert_eq!(api["refused"], true);
    assert!((api["factor"].as_f64().unwrap() - 0.1).abs() < 1e-9);
    assert_eq!(changes.len(), 3);
    // Approved against the old file's version: exit 0.
    let version = v["against"]["version"].as_str().unwrap().to_string();
    let approved = write(
        "approved.yaml",
        &format!("{new_rules}changes: {{approve: [{{rule: api, against: \"{version}\"}}]}}\n"),
    );
    let (code, out, err) = run(&mut agent(&["check-rules", &approved, "--against", &old]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("refused"), "{out}");
}

#[test]
fn check_rules_warns_of_rules_that_expire_soon_or_have_expired() {
    let dir = tempfile::tempdir().unwrap();
    let soon = {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        // Three days ahead, as a date (midnight UTC).
        let days = now / 86_400 + 3;
        let (y, m, d) = civil(days as i64);
        format!("{y:04}-{m:02}-{d:02}")
    };
    let rules = rules_file(
        dir.path(),
        &format!(
            "version: 1\nrules:\n  - {{name: api, key: [method], limit: {{requests: 10, per: 1s}}}}\n  - {{name: trial, owner: growth, expires: \"{soon}\", key: [method], limit: {{requests: 99, per: 1s}}}}\n  - {{name: old, expires: \"2020-01-01\", key: [method], limit: {{requests: 99, per: 1s}}}}\n  - {{name: later, expires: \"2999-01-01\", key: [method], limit: {{requests: 99, per: 1s}}}}\n"
        ),
    );
    let (code, _, err) = run(&mut agent(&["check-rules", &rules]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "warning: rule trial (owner growth) expires at {soon}, in "
        )),
        "{err}"
    );
    assert!(
        err.contains("warning: rule old expired at 2020-01-01 and no longer applies"),
        "{err}"
    );
    assert!(!err.contains("later"), "{err}");
    let (_, bad_err) = {
        let bad = rules_file(
            dir.path(),
            "version: 1\nrules:\n  - {name: api, expires: tomorrow, key: [method], limit: {requests: 10, per: 1s}}\n",
        );
        let (code, _, err) = run(&mut agent(&["check-rules", &bad]));
        (code, err)
    };
    assert!(
        bad_err.contains("field expires: `tomorrow` is not a UTC instant"),
        "{bad_err}"
    );
}

/// (year, month, day) of a day number since 1970-01-01.
fn civil(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[test]
fn replay_shows_what_a_tighter_rule_would_reject_of_recorded_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let rules = |requests: u32| {
        format!("version: 1\nrules:\n  - {{name: per-key, key: [{{header: x-api-key}}], limit: {{requests: {requests}, per: 1s}}}}\n")
    };
    let old = write("old.yaml", &rules(30));
    let new = write("new.yaml", &rules(5));
    // 60 s of an access log: k1 every 50 ms (20/s), k2 every 500 ms (2/s), and
    // a line of noise. Envoy writes `-` for a header the request lacked.
    let mut log = String::from("not json\n");
    for ms in (0..60_000u64).step_by(50) {
        let t = format!(
            "2026-12-01T14:{:02}:{:02}.{:03}Z",
            ms / 60_000,
            (ms / 1000) % 60,
            ms % 1000
        );
        log.push_str(&format!(
            "{{\"start_time\":\"{t}\",\"method\":\"GET\",\"path\":\"/v1/x?q=1\",\"x-api-key\":\"k1\",\"x-other\":\"-\"}}\n"
        ));
        if ms % 500 == 0 {
            log.push_str(&format!(
                "{{\"start_time\":\"{t}\",\"method\":\"GET\",\"path\":\"/v1/x\",\"x-api-key\":\"k2\"}}\n"
            ));
        }
    }
    let log = write("access.log", &log);
    let (code, out, err) = run(&mut agent(&[
        "replay",
        "--rules",
        &new,
        "--baseline",
        &old,
        &log,
        "--format",
        "json",
    ]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests"], 1320);
    assert_eq!(v["skipped_lines"], 1);
    let rule = &v["rules"][0];
    assert_eq!(rule["applied"], 1320);
    // k1 offers 1,200 in 60 s; a bucket of 5 at 5/s admits 5 + 5 × 59.95 ≈ 305.
    let rejected = rule["would_reject"].as_u64().unwrap();
    assert!((893..=897).contains(&rejected), "{rejected}");
    assert_eq!(rule["baseline_would_reject"], 0);
    let keys = v["newly_limited_keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "only k1: {keys:?}");
    assert_eq!(keys[0]["would_reject"].as_u64(), Some(rejected));
    assert_eq!(keys[0]["key_id"].as_str().unwrap().len(), 32);
    // Text for people.
    let (_, text, _) = run(&mut agent(&[
        "replay",
        "--rules",
        &new,
        "--baseline",
        &old,
        &log,
    ]));
    assert!(
        text.contains(&format!(
            "rule per-key: applied to 1320, would reject {rejected} (baseline 0)"
        )),
        "{text}"
    );
    assert!(text.contains("newly limited: rule per-key key "), "{text}");
}
