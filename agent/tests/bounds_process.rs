//! What a caller can make the agent process hold, measured on the built binary:
//! the RSS of `run` under a flood of oversized keys, and the HTTP server's bounds
//! (header and body timeout, connection cap).

// Test helpers outside #[test] functions may unwrap too: a failure is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_meshlimit-agent");
const GOOD: &str =
    "version: 1\nrules:\n  - {name: api, key: [method], limit: {requests: 10, per: 1s}}\n";

/// The agent with no `MESHLIMIT_*` variable from the test's environment.
fn agent(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MESHLIMIT_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// A field of /proc/PID/status, in bytes (`VmHWM`, `VmRSS`), while it runs.
fn proc_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
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
        &format!("GET {path} HTTP/1.1\r\nhost: agent\r\nconnection: close\r\n\r\n"),
    )
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
fn a_flood_of_oversized_keys_leaves_the_agent_s_memory_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let (agent, addr) = start(&path, &[]);
    let pid = agent.0.id();
    let before = proc_kb(pid, "VmRSS").unwrap();
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
            "POST /v1/lease HTTP/1.1\r\nhost: agent\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        // Read one reply (small: its head and a short JSON error).
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).unwrap();
        let reply = String::from_utf8_lossy(&buf[..n]);
        if reply.starts_with("HTTP/1.1 400") {
            refused += 1;
        }
    }
    let after = proc_kb(pid, "VmRSS").unwrap();
    eprintln!("run RSS {before} bytes before the flood, {after} after");
    // Before the fix: +124 MB (62 MB of keys, held twice).
    assert!(
        after.saturating_sub(before) < 16 * 1024 * 1024,
        "RSS went from {before} to {after} bytes"
    );
    assert_eq!(refused, 1_000);
}

#[test]
fn half_sent_requests_are_closed_after_the_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let (_agent, addr) = start(&path, &[("MESHLIMIT_HEADER_TIMEOUT_MS", "500")]);
    // Half of them stop in the header, half in the body.
    let mut half: Vec<TcpStream> = (0..600)
        .map(|i| {
            let mut s = TcpStream::connect(&addr).unwrap();
            let sent: &[u8] = if i % 2 == 0 {
                b"POST /v1/lease HTTP/1.1\r\nhost: agent\r\ncontent-len"
            } else {
                b"POST /v1/lease HTTP/1.1\r\nhost: agent\r\ncontent-length: 100\r\n\r\n{\"v\":1,"
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
fn connections_past_the_cap_are_closed_at_once_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, GOOD).unwrap();
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
