//! What a caller or a rules file can make the agent process hold, measured on the
//! built binary: the peak RSS (`VmHWM` in /proc/PID/status) of `check-rules` and of
//! `run` given a "billion laughs" rules file, the RSS of `run` under a flood of
//! oversized keys, and the HTTP server's bounds (header timeout, connection cap).

// Test helpers outside #[test] functions may unwrap too: a failure is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::common;

use common::SECRET;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GOOD: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/api-ten-per-second.yaml"
));
/// A running agent's growth for a reload of a billion-laughs file (core
/// `rules::parse`); `meshlimit check-rules` is held to the same margin
/// (cli/tests/it/bounds.rs).
const LAUGHS_MARGIN_BYTES: u64 = 2 * 1024 * 1024;
/// The agent binary with this deployment's secret and nothing else from the
/// test's environment.
fn agent(args: &[&str]) -> Command {
    common::agent_command(args)
}

/// The filters' `authorization` header line, as the node's Envoys send it.
fn auth_line() -> String {
    let secret = meshlimit_core::secret::Secret::new(SECRET.as_bytes()).unwrap();
    format!("authorization: Bearer {}\r\n", secret.agent_token())
}

/// Kills the child on drop, so a failed assertion leaves no agent behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

fn http(addr: &str, request: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

fn http_get(addr: &str, path: &str) -> Option<String> {
    http(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nhost: agent\r\n{}connection: close\r\n\r\n",
            auth_line()
        ),
    )
}

/// A rules file of the good rules, in a directory that lives as long as the
/// returned guard.
fn good_rules_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, GOOD).unwrap();
    (dir, path)
}

/// Starts `run` on a free port with `env` and waits for /readyz.
fn start(rules: &Path, env: &[(&str, &str)]) -> (Running, String) {
    let addr = free_addr();
    let mut cmd = agent(&["run", "--rules", &rules.display().to_string()]);
    cmd.env("MESHLIMIT_LISTEN", &addr)
        .env("MESHLIMIT_RULES_POLL_MS", "20")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let running = Running(cmd.spawn().unwrap());
    let start = Instant::now();
    loop {
        match http_get(&addr, "/readyz") {
            Some(reply) if reply.starts_with("HTTP/1.1 200") => break,
            _ if start.elapsed() > Duration::from_secs(10) => panic!("agent not ready on {addr}"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    (running, addr)
}

fn metric(addr: &str, series: &str) -> Option<f64> {
    let reply = http_get(addr, "/metrics")?;
    reply
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

#[test]
fn a_live_reload_refuses_a_billion_laughs_and_keeps_the_last_good_rules() {
    let (dir, path) = good_rules_file();
    let (agent, addr) = start(&path, &[]);
    let pid = agent.0.id();
    let rules_before = http_get(&addr, "/v1/rules").unwrap();
    let before = meshlimit_tests::proc_bytes(pid, "VmHWM").unwrap();

    // Written beside and renamed over, as a ConfigMap update is atomic.
    std::fs::write(
        dir.path().join("next.yaml"),
        meshlimit_tests::billion_laughs(),
    )
    .unwrap();
    std::fs::rename(dir.path().join("next.yaml"), &path).unwrap();
    let start = Instant::now();
    while metric(&addr, "meshlimit_rules_reloads_total{result=\"error\"}") != Some(1.0) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the reload was not refused"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = meshlimit_tests::proc_bytes(pid, "VmHWM").unwrap();
    eprintln!("run peak RSS (VmHWM) {before} bytes before the reload, {after} after");
    assert!(
        after.saturating_sub(before) < LAUGHS_MARGIN_BYTES,
        "the reload took the agent's peak RSS from {before} to {after} bytes"
    );
    // Still ready, still serving the same rules.
    assert!(http_get(&addr, "/readyz")
        .unwrap()
        .starts_with("HTTP/1.1 200"));
    let body = |r: &str| r.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    assert_eq!(
        body(&http_get(&addr, "/v1/rules").unwrap()),
        body(&rules_before)
    );
}

#[test]
fn a_flood_of_oversized_keys_leaves_the_agent_s_memory_as_it_was() {
    let (_dir, path) = good_rules_file();
    let (agent, addr) = start(&path, &[]);
    let pid = agent.0.id();
    let before = meshlimit_tests::proc_bytes(pid, "VmRSS").unwrap();
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut refused = 0;
    for i in 0..1_000 {
        let key = format!("api|{i}-{}", "x".repeat(62_000));
        let body = format!(
            r#"{{"v":1,"rules_version":"","items":[{{"rule":"api","key":"{key}","cost":1}}]}}"#
        );
        let request = format!(
            "POST /v1/lease HTTP/1.1\r\nhost: agent\r\n{}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            auth_line(),
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        // Read one reply (small: its head and the item's refusal).
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).unwrap();
        let reply = String::from_utf8_lossy(&buf[..n]);
        if reply.starts_with("HTTP/1.1 200") && reply.contains(r#""reason":"key_too_long""#) {
            refused += 1;
        }
    }
    let after = meshlimit_tests::proc_bytes(pid, "VmRSS").unwrap();
    eprintln!("run RSS {before} bytes before the flood, {after} after");
    // Kept, the keys would add about 124 MB (62 MB of keys, held twice).
    assert!(
        after.saturating_sub(before) < 16 * 1024 * 1024,
        "RSS went from {before} to {after} bytes"
    );
    assert_eq!(refused, 1_000);
}

#[test]
fn half_sent_requests_are_closed_after_the_header_timeout() {
    let (_dir, path) = good_rules_file();
    let (_agent, addr) = start(&path, &[("MESHLIMIT_HEADER_TIMEOUT_MS", "500")]);
    // Half of them stop in the header, half in the body.
    let in_body = format!(
        "POST /v1/lease HTTP/1.1\r\nhost: agent\r\n{}content-length: 100\r\n\r\n{{\"v\":1,",
        auth_line()
    );
    let mut half: Vec<TcpStream> = (0..600)
        .map(|i| {
            let mut s = TcpStream::connect(&addr).unwrap();
            let sent: &[u8] = if i % 2 == 0 {
                b"POST /v1/lease HTTP/1.1\r\nhost: agent\r\ncontent-len"
            } else {
                in_body.as_bytes()
            };
            s.write_all(sent).unwrap();
            s
        })
        .collect();
    let start = Instant::now();
    for (i, s) in half.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        // EOF; a read timeout would be an Err.
        s.read_to_end(&mut rest).unwrap();
        let reply = String::from_utf8_lossy(&rest);
        if i % 2 == 1 {
            assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
        }
    }
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "closed after {:?}",
        start.elapsed()
    );
    // The agent still answers.
    assert!(http_get(&addr, "/readyz")
        .unwrap()
        .starts_with("HTTP/1.1 200"));
}

#[test]
fn a_request_header_past_8_kib_gets_431() {
    let (_dir, path) = good_rules_file();
    let (_agent, addr) = start(&path, &[]);
    let with_header = |bytes: usize| {
        let request = format!(
            "GET /readyz HTTP/1.1\r\nhost: agent\r\nx-pad: {}\r\nconnection: close\r\n\r\n",
            "a".repeat(bytes)
        );
        http(&addr, &request).unwrap_or_default()
    };
    let under = with_header(7 * 1024);
    assert!(under.starts_with("HTTP/1.1 200"), "{under}");
    let over = with_header(9 * 1024);
    assert!(over.starts_with("HTTP/1.1 431"), "{over:?}");
    // The agent still answers.
    assert!(http_get(&addr, "/readyz")
        .unwrap()
        .starts_with("HTTP/1.1 200"));
}

#[test]
fn connections_past_the_cap_are_closed_at_once_and_counted() {
    let (_dir, path) = good_rules_file();
    let (_agent, addr) = start(&path, &[("MESHLIMIT_MAX_CONNECTIONS", "50")]);
    // Wait for the readiness probe's connection to be released.
    std::thread::sleep(Duration::from_millis(100));
    let idle: Vec<TcpStream> = (0..50)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // The 51st is accepted by the kernel, then closed by the agent at once.
    let start = Instant::now();
    let reply = http_get(&addr, "/readyz").unwrap_or_default();
    assert_eq!(reply, "", "a connection past the cap was served");
    assert!(start.elapsed() < Duration::from_secs(1));
    drop(idle);
    let start = Instant::now();
    loop {
        match metric(&addr, "meshlimit_connections_refused_total") {
            Some(n) => {
                assert!(n >= 1.0);
                break;
            }
            None if start.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            None => panic!("the agent did not come back below its cap"),
        }
    }
}
