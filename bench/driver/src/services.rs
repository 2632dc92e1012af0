//! The agent (and Redis for its store), and the per-request remote check's
//! rate limit service on the same Redis, pinned to the load generator's CPU so
//! Envoy's CPU holds Envoy alone. Their CPU and Redis's command counts are read
//! around each measured run.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use meshlimit_tests::{free_port, try_request};

use crate::error::{BenchError, Context, Result};
use crate::procs::{output, wait_for, Pinned};
use crate::scenario;

/// The benchmark runs the host's (glibc) build of the agent, not the image's
/// static musl one: two glibc arenas, trimmed from 64 KiB, keep its rules
/// reloads from growing it (bench/results/agent-image.md compares the two).
const AGENT_GLIBC_TUNABLES: &str = "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=65536";

/// Which store the agent uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreChoice {
    /// Redis if this agent build supports it, else the in-memory store.
    Auto,
    Memory,
    Redis,
}

pub struct Redis {
    /// Held for its `Drop`: Redis stops with this value.
    _proc: Pinned,
    pub port: u16,
}

pub struct Agent {
    pub proc: Pinned,
    pub port: u16,
    /// The rules file it watches.
    pub rules_path: PathBuf,
    /// `memory` or `redis://127.0.0.1:PORT`.
    pub store: String,
    pub command: String,
}

/// Redis commands counted by INFO commandstats, by command name.
pub type CommandCounts = BTreeMap<String, u64>;

impl Redis {
    pub fn start(cpu: &str, dir: &Path) -> Result<Redis> {
        let port = free_port();
        let args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut proc = Pinned::spawn("redis", cpu, Path::new("redis-server"), &args, &[], dir)?;
        wait_for(
            Duration::from_secs(10),
            "redis-server to answer PING",
            || {
                proc.check_running()?;
                let pong =
                    output(Command::new("redis-cli").args(["-p", &port.to_string(), "ping"]));
                Ok(pong.is_ok_and(|p| p.trim() == "PONG").then_some(()))
            },
        )?;
        Ok(Redis { _proc: proc, port })
    }

    /// Calls per command since Redis started (`INFO commandstats`), without the
    /// INFO calls this driver makes.
    pub fn command_counts(&self) -> Result<CommandCounts> {
        let text = output(Command::new("redis-cli").args([
            "-p",
            &self.port.to_string(),
            "info",
            "commandstats",
        ]))?;
        Ok(text
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
                Some((name.to_string(), calls.parse().ok()?))
            })
            .filter(|(name, _)| name != "info")
            .collect())
    }
}

/// Lease-script calls and all commands between two snapshots. The agent sends
/// its lease script alone as EVALSHA (and its read-only form); its other
/// scripts (heartbeat, the false-limit SLI's peeks of rejected keys, at most
/// 10 a second) go as EVAL and are the SLI's cost, not the lease path's, so
/// they count only in the total. (A NOSCRIPT fallback sends the lease script
/// as EVAL once per node and restart.)
pub fn script_and_total_calls(before: &CommandCounts, after: &CommandCounts) -> (u64, u64) {
    let delta = |name: &str| {
        after
            .get(name)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(name).copied().unwrap_or(0))
    };
    let scripts = ["evalsha", "evalsha_ro"].iter().map(|n| delta(n)).sum();
    let total = after.keys().map(|n| delta(n)).sum();
    (scripts, total)
}

impl Agent {
    /// Starts the release agent `name` (its rules file and log are named after
    /// it) with `rules` on `store` and waits for `/readyz`.
    pub fn start(name: &str, rules: &str, store: &str, cpu: &str, dir: &Path) -> Result<Agent> {
        let rules_path: PathBuf = dir.join(format!("rules-{name}.yaml"));
        std::fs::write(&rules_path, rules).context(rules_path.display())?;
        let port = free_port();
        let args: Vec<String> = [
            "run",
            "--rules",
            &rules_path.to_string_lossy(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--store",
            store,
            "--log",
            "warn",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let binary = meshlimit_tests::agent_bin();
        let command = format!(
            "GLIBC_TUNABLES={AGENT_GLIBC_TUNABLES} taskset -c {cpu} {} {}",
            binary.display(),
            args.join(" ")
        );
        let env = [("GLIBC_TUNABLES", AGENT_GLIBC_TUNABLES)];
        let mut proc = Pinned::spawn(name, cpu, &binary, &args, &env, dir)?;
        let ready = format!("http://127.0.0.1:{port}/readyz");
        wait_for(Duration::from_secs(20), "the agent's /readyz", || {
            proc.check_running()?;
            Ok(try_request("GET", &ready, &[], None)
                .is_ok_and(|r| r.status == 200)
                .then_some(()))
        })?;
        Ok(Agent {
            proc,
            port,
            rules_path,
            store: store.to_string(),
            command,
        })
    }

    /// The agent's Prometheus text (`/metrics`, open without the token).
    pub fn metrics(&self) -> Result<String> {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        let resp = try_request("GET", &url, &[], None).map_err(BenchError::new)?;
        if resp.status != 200 {
            return Err(BenchError::new(format!("{url}: status {}", resp.status)));
        }
        Ok(resp.body)
    }

    /// Replaces the rules file at once (a new file renamed over the old, so the
    /// agent never reads half of it).
    pub fn rewrite_rules(&self, rules: &str) -> Result<()> {
        let next = self.rules_path.with_extension("next");
        std::fs::write(&next, rules).context(next.display())?;
        std::fs::rename(&next, &self.rules_path).context(self.rules_path.display())
    }
}

/// `bench/rls`, the per-request remote check's gRPC rate limit service.
pub struct RateLimitService {
    /// Held for its `Drop`: the service stops with this value.
    _proc: Pinned,
    pub port: u16,
    pub command: String,
}

/// The release build of `bench/rls`.
pub fn rls_bin() -> PathBuf {
    meshlimit_tests::target_dir().join("release/meshlimit-bench-rls")
}

impl RateLimitService {
    /// Starts the service on `redis`, every descriptor limited to
    /// [`scenario::HIGH_LIMIT`] a second (every request admitted), and waits
    /// until it accepts connections (it connects to Redis first).
    pub fn start(redis: &Redis, cpu: &str, dir: &Path) -> Result<RateLimitService> {
        let port = free_port();
        let args: Vec<String> = vec![
            "--listen".to_string(),
            format!("127.0.0.1:{port}"),
            "--redis".into(),
            format!("redis://127.0.0.1:{}", redis.port),
            "--limit".into(),
            scenario::HIGH_LIMIT.to_string(),
            "--window-seconds".into(),
            "1".into(),
        ];
        let binary = rls_bin();
        let command = format!("taskset -c {cpu} {} {}", binary.display(), args.join(" "));
        let mut proc = Pinned::spawn("rls", cpu, &binary, &args, &[], dir)?;
        wait_for(
            Duration::from_secs(10),
            "meshlimit-bench-rls to listen",
            || {
                proc.check_running()?;
                Ok(TcpStream::connect(("127.0.0.1", port))
                    .is_ok()
                    .then_some(()))
            },
        )?;
        Ok(RateLimitService {
            _proc: proc,
            port,
            command,
        })
    }
}

/// Starts Redis (unless the choice is `memory`) and the agent on it. With `auto`,
/// an agent build that refuses the Redis store falls back to memory, and the
/// returned note says so.
pub fn start_store_and_agent(
    choice: StoreChoice,
    rules: &str,
    cpu: &str,
    dir: &Path,
) -> Result<(Option<Redis>, Agent, String)> {
    if choice == StoreChoice::Memory {
        let agent = Agent::start("agent", rules, "memory", cpu, dir)?;
        return Ok((None, agent, "memory (chosen)".into()));
    }
    let redis = Redis::start(cpu, dir)?;
    let url = format!("redis://127.0.0.1:{}", redis.port);
    match Agent::start("agent", rules, &url, cpu, dir) {
        Ok(agent) => Ok((
            Some(redis),
            agent,
            format!("redis ({url}, redis-server on CPU {cpu})"),
        )),
        Err(e) if choice == StoreChoice::Auto => {
            eprintln!("bench: the agent refused the Redis store, using memory: {e}");
            let agent = Agent::start("agent", rules, "memory", cpu, dir)?;
            let first_line = e.to_string().lines().last().unwrap_or_default().to_string();
            Ok((
                None,
                agent,
                format!("memory (this agent build refused --store redis: {first_line})"),
            ))
        }
        Err(e) => Err(BenchError::new(format!("agent on {url}: {e}"))),
    }
}
