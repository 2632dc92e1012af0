//! The built binary, run as an operator would: exit codes and what lands on
//! stdout and stderr.

// Test helpers outside #[test] functions may unwrap too: a failure is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::common;

use common::{rules_file, run};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GOOD: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/api-ten-per-second.yaml"
));

/// The agent binary with this deployment's secret and nothing else from the
/// test's environment.
fn agent(args: &[&str]) -> Command {
    common::agent_command(args)
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
    assert!(stdout.contains("run"));
    // The operator's commands are `meshlimit`'s, not the DaemonSet's binary's.
    for command in [
        "check-rules",
        "explain",
        "import",
        "replay",
        "override",
        "key-id",
        "schema",
    ] {
        assert!(!stdout.contains(command), "{command}: {stdout}");
        assert_usage_error(run(&mut agent(&[command])), command);
    }
    let (code, stdout, _) = run(&mut agent(&["--version"]));
    assert_eq!(code, 0);
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")));
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
    // The agent binds its port once its rules are read (so a successor
    // sharing the port answers what it accepts at once): the rules' log line
    // comes first, the error last.
    let (code, _, stderr) = run(&mut agent(&["run", "--rules", &path, "--listen", &addr]));
    assert_eq!(code, 64, "stderr: {stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("cannot listen on") && last.contains(&addr),
        "{stderr:?}"
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

/// `run` with GOOD rules and `extra` flags on a free port, stderr piped; the
/// agent and its address.
fn start_run(dir: &std::path::Path, extra: &[&str]) -> (Running, String) {
    let path = rules_file(dir, GOOD);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let args = [&["run", "--rules", path.as_str()][..], extra].concat();
    let child = agent(&args)
        .env("MESHLIMIT_LISTEN", &addr)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (Running(child), addr)
}

#[test]
fn run_serves_then_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr) = start_run(dir.path(), &[]);
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
    let (code, _) = exit_of(&mut agent, Duration::from_secs(10));
    assert_eq!(code, Some(0));
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

/// Waits for `agent` to exit; its exit code and when it exited.
fn exit_of(agent: &mut Running, within: Duration) -> (Option<i32>, Instant) {
    let start = Instant::now();
    loop {
        if let Some(status) = agent.0.try_wait().unwrap() {
            return (status.code(), Instant::now());
        }
        assert!(
            start.elapsed() < within,
            "agent still running after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn with_a_shutdown_delay_the_agent_serves_new_connections_after_sigterm() {
    const DELAY: Duration = Duration::from_millis(1_500);
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr) = start_run(dir.path(), &["--shutdown-delay-ms", "1500"]);
    let start = Instant::now();
    while !http_get(&addr, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "agent not ready on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let termed = Instant::now();
    let pid = agent.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    // A connection opened after SIGTERM, within the delay, is served.
    std::thread::sleep(Duration::from_millis(300));
    let reply = http_get(&addr, "/healthz").expect("a new connection after SIGTERM");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        termed.elapsed() < DELAY,
        "the check came too late to mean anything"
    );
    let (code, exited) = exit_of(&mut agent, Duration::from_secs(10));
    assert_eq!(code, Some(0));
    assert!(
        exited - termed >= DELAY,
        "exited {:?} after SIGTERM",
        exited - termed
    );
    let mut stderr = String::new();
    agent
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains("SIGTERM: serving 1.5s more before shutting down"),
        "{stderr}"
    );
}

#[test]
fn run_refuses_to_start_without_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(dir.path(), GOOD);
    let mut none = agent(&["run", "--rules", &rules, "--listen", "127.0.0.1:0"]);
    none.env_remove("MESHLIMIT_SECRET");
    assert_usage_error(
        run(&mut none),
        "secret: none given: set MESHLIMIT_SECRET or --secret-file (see docs/operations/deploying.md)",
    );
    let mut short = agent(&["run", "--rules", &rules, "--listen", "127.0.0.1:0"]);
    short.env("MESHLIMIT_SECRET", "too-short");
    assert_usage_error(run(&mut short), "at least 32");
}

#[test]
fn log_format_json_writes_one_json_object_a_line() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr) = start_run(dir.path(), &["--log-format", "json"]);
    let stderr = agent.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let serving = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no `serving` log line within 10 s: {e}"));
        let event: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(event["timestamp"].is_string(), "{line}");
        assert!(event["level"].is_string(), "{line}");
        if event["message"] == "meshlimit-agent serving" {
            break event;
        }
    };
    assert_eq!(serving["level"], "INFO", "{serving}");
    assert_eq!(serving["target"], "meshlimit_agent::run", "{serving}");
    // The event's fields sit beside the message.
    assert_eq!(serving["listen"], addr.as_str(), "{serving}");
    assert_eq!(serving["store"], "memory", "{serving}");
}
