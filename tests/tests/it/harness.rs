//! The harness itself: real redis-server and Redis Cluster, real Envoy from
//! `envoy.yaml`, and the agent wrapper (against a stand-in until the agent is built).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use meshlimit_tests::{
    agent_bin, envoy_bin, filter_wasm, free_port, get, render_envoy_config, repo_root, sample,
    try_request, Agent, AgentOptions, Envoy, EnvoyConfig, EnvoyPorts, RedisCluster, RedisServer,
    Resp, TEST_TIMEOUT_MS,
};

fn ok() -> Resp {
    Resp::Simple("OK".into())
}

#[test]
fn redis_server_answers_ping_and_keeps_nothing_across_restarts() {
    let mut redis = RedisServer::start();
    assert_eq!(redis.cmd(&["PING"]), Resp::Simple("PONG".into()));
    assert_eq!(redis.cmd(&["SET", "k", "v"]), ok());
    assert_eq!(redis.cmd(&["GET", "k"]).text().as_deref(), Some("v"));
    assert!(redis.url().starts_with("redis://127.0.0.1:"));

    redis.kill();
    assert!(refuses_connections(redis.port()));
    redis.restart();
    assert_eq!(redis.cmd(&["GET", "k"]), Resp::Bulk(None), "no persistence");
}

fn refuses_connections(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
}

#[test]
fn redis_cluster_of_three_masters_is_ok_on_every_node() {
    let cluster = RedisCluster::start(3);
    assert_eq!(cluster.ports().len(), 3);
    for node in 0..3 {
        let info = cluster.cluster_info(node);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
    }
    assert_shards_answer(&cluster, 3);
    let url = cluster.url();
    assert!(url.starts_with("redis+cluster://127.0.0.1:"), "{url}");
    assert_eq!(url.matches(',').count(), 2, "{url}");
}

#[test]
fn redis_cluster_of_two_masters_is_built_by_hand() {
    let cluster = RedisCluster::start(2);
    for node in 0..2 {
        let info = cluster.cluster_info(node);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_known_nodes:2"), "{info}");
    }
    assert_shards_answer(&cluster, 2);
}

/// Writes one hash-tagged key per master: every write lands on some node, after
/// at most one MOVED redirect, and the keys spread over every master.
fn assert_shards_answer(cluster: &RedisCluster, masters: usize) {
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..64 {
        let key = format!("{{meshlimit:{i}}}:tokens");
        let owner = match cluster.cmd(0, &["SET", &key, "1"]) {
            Resp::Simple(s) if s == "OK" => cluster.ports()[0],
            Resp::Error(moved) if moved.starts_with("MOVED") => {
                let addr = moved.split_whitespace().nth(2).unwrap();
                let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
                let node = cluster.ports().iter().position(|p| *p == port).unwrap();
                assert_eq!(cluster.cmd(node, &["SET", &key, "1"]), ok());
                port
            }
            other => panic!("SET {key}: {other:?}"),
        };
        owners.insert(owner);
    }
    assert_eq!(owners.len(), masters, "keys spread over every master");
}

#[test]
fn envoy_config_is_rendered_from_envoy_yaml() {
    let base = std::fs::read_to_string(repo_root().join("envoy.yaml")).unwrap();
    let ports = EnvoyPorts {
        listener: 21_000,
        backend: 21_001,
        admin: 21_002,
        agent: 21_003,
    };
    let config = EnvoyConfig::new(21_003)
        .plugin("timeout_ms", 50)
        .wasm("/x/filter.wasm");
    let yaml = render_envoy_config(&base, &ports, &config).unwrap();
    for old in ["10000", "10001", "9901", "8081"] {
        assert!(
            !yaml.contains(&format!("port_value: {old}")),
            "{old} left in:\n{yaml}"
        );
    }
    for new in [21_000, 21_001, 21_002, 21_003] {
        assert!(
            yaml.contains(&format!("port_value: {new}")),
            "{new} missing"
        );
    }
    let doc: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    let plugin = find_key(&doc, "root_id").unwrap();
    let json = plugin_configuration(&yaml);
    assert_eq!(json["agent_authority"], "127.0.0.1:21003");
    assert_eq!(json["timeout_ms"], 50);
    assert_eq!(
        json["agent_cluster"], "meshlimit_agent",
        "other fields kept"
    );
    assert_eq!(
        plugin["vm_config"]["code"]["local"]["filename"],
        "/x/filter.wasm"
    );

    // The harness's patient lease deadline unless a test sets one; the
    // bootstrap's own on request.
    let timeout = |config: &EnvoyConfig| {
        plugin_configuration(&render_envoy_config(&base, &ports, config).unwrap())["timeout_ms"]
            .clone()
    };
    assert_eq!(timeout(&EnvoyConfig::new(1)), TEST_TIMEOUT_MS);
    assert_eq!(timeout(&EnvoyConfig::new(1).shipped_deadline()), 5);

    let plain = render_envoy_config(&base, &ports, &EnvoyConfig::new(1).without_filter()).unwrap();
    assert!(!plain.contains("envoy.filters.http.wasm"));
    assert!(render_envoy_config("admin: {}", &ports, &config).is_err());
}

/// The wasm plugin's configuration JSON in a rendered bootstrap.
fn plugin_configuration(yaml: &str) -> serde_json::Value {
    let doc: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
    let plugin = find_key(&doc, "root_id").unwrap();
    serde_json::from_str(plugin["configuration"]["value"].as_str().unwrap()).unwrap()
}

/// The first mapping (depth first) that has `key`.
fn find_key<'a>(node: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    match node {
        serde_json::Value::Object(map) if map.contains_key(key) => Some(node),
        serde_json::Value::Object(map) => map.values().find_map(|v| find_key(v, key)),
        serde_json::Value::Array(items) => items.iter().find_map(|v| find_key(v, key)),
        _ => None,
    }
}

#[test]
fn envoy_yaml_passes_envoy_validation_without_the_filter() {
    let config = EnvoyConfig::new(free_port()).without_filter();
    let base = std::fs::read_to_string(repo_root().join("envoy.yaml")).unwrap();
    let yaml = render_envoy_config(&base, &EnvoyPorts::free(free_port()), &config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(envoy_bin())
        .args(["--mode", "validate", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn envoy_without_filter_proxies_to_the_backend() {
    let envoy = Envoy::start_with(EnvoyConfig::new(free_port()).without_filter());
    let resp = get(&envoy.url("/v1/anything"), &[("x-api-key", "k")]);
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.body, "ok\n");
    assert_eq!(resp.header("server"), Some("envoy"));
    assert_eq!(envoy.stat("cluster.backend.upstream_rq_200"), Some(1));
}

#[test]
fn envoy_starts_with_the_filter_from_envoy_yaml() {
    let wasm = filter_wasm();
    if !wasm.exists() {
        eprintln!(
            "skipped: {} does not exist yet (`make build` builds it)",
            wasm.display()
        );
        return;
    }
    // No agent behind the port: the filter must load and answer all the same.
    let envoy = Envoy::start(free_port());
    let resp = get(&envoy.url("/"), &[]);
    assert!((200..600).contains(&resp.status), "{resp:?}");
    assert!(envoy.stat("wasm.envoy.wasm.runtime.v8.active").unwrap_or(0) > 0);
}

#[test]
fn real_agent_starts_and_answers_health() {
    if !agent_bin().exists() {
        eprintln!(
            "skipped: {} does not exist yet (`make build`)",
            agent_bin().display()
        );
        return;
    }
    let rules = "version: 1\nrules:\n  - name: per-key\n    key: [{ header: x-api-key }]\n    limit: { requests: 5, per: 1s }\n";
    let mut agent = Agent::start(rules);
    assert_eq!(get(&agent.url("/healthz"), &[]).status, 200);
    agent.wait_ready(Duration::from_secs(10));
    assert!(agent.metrics().contains("meshlimit_"));
}

/// A stand-in for the agent binary: serves `/healthz`, and `/metrics` with the
/// rules file's content as a label; exits 0 on SIGTERM.
const STAND_IN: &str = r#"#!/usr/bin/env python3
import http.server, signal, sys
args = sys.argv[1:]
if args[:1] != ["run"] or "--fail" in args:
    sys.stderr.write("stand-in: bad arguments\n")
    sys.exit(64)
rules = args[args.index("--rules") + 1]
host, port = args[args.index("--listen") + 1].rsplit(":", 1)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/metrics":
            body = ('stand_in_rules{content="%s"} 1\n' % open(rules).read().strip()).encode()
        elif self.path in ("/healthz", "/readyz"):
            body = b"ok\n"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *_):
        pass
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
sys.stderr.write("stand-in: listening on %s:%s\n" % (host, port))
sys.stderr.flush()
http.server.HTTPServer((host, int(port)), Handler).serve_forever()
"#;

fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("stand-in-agent");
    std::fs::write(&path, STAND_IN).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn agent_harness_starts_reloads_restarts_and_stops() {
    let bin_dir = tempfile::tempdir().unwrap();
    let opts = AgentOptions::new("one").binary(stand_in(bin_dir.path()));
    let mut agent = Agent::start_with(opts);
    let content = |agent: &Agent| {
        let metrics = agent.metrics();
        ["one", "two"]
            .into_iter()
            .find(|c| sample(&metrics, "stand_in_rules", &[("content", c)]).is_some())
    };
    assert_eq!(content(&agent), Some("one"));

    agent.update_rules("two");
    assert_eq!(
        content(&agent),
        Some("two"),
        "the new file is seen through the links"
    );

    let port = agent.port();
    agent.restart();
    assert_eq!(agent.port(), port);
    assert_eq!(content(&agent), Some("two"));
    assert_eq!(agent.stderr().matches("stand-in: listening").count(), 2);

    let status = agent.stop().unwrap();
    assert!(status.success(), "SIGTERM first: {status}");
    assert!(!agent.is_running());
    assert!(try_request("GET", &agent.url("/healthz"), &[], None).is_err());
}

#[test]
fn agent_that_exits_fails_the_start_at_once_with_its_stderr() {
    let bin_dir = tempfile::tempdir().unwrap();
    let opts = AgentOptions::new("x")
        .binary(stand_in(bin_dir.path()))
        .arg("--fail");
    let started = Instant::now();
    let panic = std::panic::catch_unwind(|| Agent::start_with(opts)).unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("exited"), "{message}");
    assert!(message.contains("stand-in: bad arguments"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "did not wait for the timeout"
    );
}
