//! A healthy Redis Cluster under saturating load (`make ops-hour` runs it
//! before the hour; not in `make test`): 3 primaries with a replica each,
//! one agent and one Envoy, three rules over a hot key, 200,000 keys and
//! keys never seen again, offered more requests than this machine answers.
//! Nothing fails on purpose, so the store must stay whole: no node marked
//! down, and decisions by a failure policy at most 0.001% of all. It writes
//! the figures to `OPS_OUT/soak.md`; `OPS_SOAK_MINUTES` sets the length
//! (10 by default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use meshlimit_tests::{sample, target_dir, AgentOptions, RedisCluster, Stack};

use super::ops_hour::OUTCOMES;

const RULES: &str = "
version: 1
rules:
  - { name: hot, match: { path_prefix: /hot }, key: [{ header: x-api-key }], limit: { requests: 1000, per: 1s }, on_failure: local }
  - { name: keys, match: { path_prefix: /keys }, key: [{ header: x-api-key }], limit: { requests: 5, per: 10s }, on_failure: local }
  - { name: cold, match: { path_prefix: /cold }, key: [{ header: x-api-key }], limit: { requests: 100, per: 1m }, on_failure: open }
";
const RULE_NAMES: [&str; 3] = ["hot", "keys", "cold"];
/// The failure policy's share of decisions the soak allows: 0.001%.
const MAX_FAILURE_SHARE: f64 = 1e-5;

/// Which keys a load sends.
#[derive(Clone, Copy)]
enum Keys {
    One,
    Spread(u64),
    NewEachRequest,
}

/// Each load: path, offered rate, connections and its keys.
const LOADS: [(&str, f64, usize, Keys); 3] = [
    ("/hot", 2_000.0, 8, Keys::One),
    ("/keys", 4_000.0, 8, Keys::Spread(200_000)),
    ("/cold", 500.0, 4, Keys::NewEachRequest),
];

#[test]
#[ignore = "ten minutes at full load: make ops-hour"]
fn a_healthy_cluster_under_saturating_load() {
    let minutes: f64 = std::env::var("OPS_SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(10.0);
    let out = meshlimit_tests::repo_root()
        .join(std::env::var("OPS_OUT").unwrap_or_else(|_| "bench/results/ops-hour".to_string()));
    let loadgen = target_dir().join("release/meshlimit-loadgen");
    assert!(
        loadgen.exists(),
        "{} is missing: cargo build --release -p meshlimit-loadgen",
        loadgen.display()
    );
    let cluster = RedisCluster::start_with(3, 1, 1_000);
    let stack = Stack::start_with(AgentOptions::new(RULES).store(cluster.url()), |c| c);
    let before = Reading::take(&stack);
    let started = Instant::now();
    let seconds = minutes * 60.0;
    let loads: Vec<_> = LOADS
        .iter()
        .map(|(path, rate, connections, keys)| {
            let mut cmd = Command::new(&loadgen);
            cmd.args(["--url", &stack.envoy.url(path)])
                .args(["--rate", &rate.to_string()])
                .args(["--duration", &seconds.to_string()])
                .args(["--warmup", "0.1"])
                .args(["--connections", &connections.to_string()]);
            match keys {
                Keys::One => cmd.args(["--header", "x-api-key: hot"]),
                Keys::Spread(n) => {
                    cmd.args(["--unique-header", "x-api-key", "--keys", &n.to_string()])
                }
                Keys::NewEachRequest => cmd.args(["--unique-header", "x-api-key"]),
            };
            cmd.stdout(Stdio::piped())
                .spawn()
                .expect("meshlimit-loadgen")
        })
        .collect();
    let summaries: Vec<String> = loads
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("meshlimit-loadgen");
            assert!(out.status.success(), "meshlimit-loadgen failed");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
        .collect();
    let took = started.elapsed();
    let after = Reading::take(&stack);
    let report = report(&before, &after, took, &summaries, minutes);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("soak.md"), &report).unwrap();
    println!("{report}");
    let (decisions, failed) = after.minus(&before);
    let node_down = after.node_down - before.node_down;
    assert_eq!(node_down, 0.0, "a healthy cluster had nodes marked down");
    assert!(
        failed as f64 <= MAX_FAILURE_SHARE * decisions as f64,
        "{failed} of {decisions} decisions by a failure policy"
    );
}

/// The counters the soak judges, read once.
struct Reading {
    /// Per rule and outcome, as the filter counts them.
    decisions: [[u64; 5]; 3],
    node_down: f64,
    node_up: f64,
    unavailable: f64,
}

impl Reading {
    fn take(stack: &Stack) -> Reading {
        let mut decisions = [[0; 5]; 3];
        for (r, rule) in RULE_NAMES.iter().enumerate() {
            for (o, outcome) in OUTCOMES.iter().enumerate() {
                decisions[r][o] = stack.decisions(rule, outcome);
            }
        }
        let metrics = stack.agent.metrics();
        let events = "meshlimit_store_topology_events_total";
        Reading {
            decisions,
            node_down: sample(&metrics, events, &[("event", "node_down")]).unwrap_or(0.0),
            node_up: sample(&metrics, events, &[("event", "node_up")]).unwrap_or(0.0),
            unavailable: sample(&metrics, "meshlimit_lease_unavailable_total", &[]).unwrap_or(0.0),
        }
    }

    /// Decisions in all and by a failure policy since `before`.
    fn minus(&self, before: &Reading) -> (u64, u64) {
        let mut all = 0;
        let mut failed = 0;
        for r in 0..3 {
            for o in 0..5 {
                let n = self.decisions[r][o] - before.decisions[r][o];
                all += n;
                if o >= 2 {
                    failed += n;
                }
            }
        }
        (all, failed)
    }
}

fn report(
    before: &Reading,
    after: &Reading,
    took: Duration,
    loads: &[String],
    minutes: f64,
) -> String {
    let (all, failed) = after.minus(before);
    let secs = took.as_secs_f64();
    let mut md = format!(
        "# A healthy cluster under saturating load ({minutes} minutes)\n\n\
         `make ops-hour OPS_SOAK_MINUTES={minutes}` (tests/tests/it/ops_soak.rs): a Redis \
         Cluster of 3 primaries with a replica each, one agent and one Envoy (release \
         builds), three rules: a hot key at 1,000/s, 200,000 keys at 5 per 10 s, and a new \
         key every request at 100 per minute. Offered more than the machine answers.\n\n\
         | figure | value |\n|---|---|\n\
         | decisions | {all} ({:.0} a second) |\n\
         | by a failure policy | {failed} ({:.5} %) |\n\
         | store nodes marked down / up | {} / {} |\n\
         | lease items answered unavailable | {} |\n\n",
        all as f64 / secs,
        100.0 * failed as f64 / (all as f64).max(1.0),
        after.node_down - before.node_down,
        after.node_up - before.node_up,
        after.unavailable - before.unavailable,
    );
    md.push_str("Per rule (allowed, limited, failed open, failed closed, failed local):\n\n");
    for (r, rule) in RULE_NAMES.iter().enumerate() {
        let row: Vec<String> = (0..5)
            .map(|o| (after.decisions[r][o] - before.decisions[r][o]).to_string())
            .collect();
        md.push_str(&format!("- {rule}: {}\n", row.join(", ")));
    }
    md.push_str("\nThe load generators' summaries (meshlimit-loadgen, JSON):\n\n```\n");
    for (line, (path, ..)) in loads.iter().zip(LOADS) {
        md.push_str(&format!("{path} {line}\n"));
    }
    md.push_str("```\n");
    md
}
