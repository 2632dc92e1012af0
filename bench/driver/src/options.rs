//! The driver's command line. Every flag also reads a `BENCH_*` variable, so
//! `make bench BENCH_ROUNDS=3` and `BENCH_SMOKE=1 make bench` work.

use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser};

use crate::services::StoreChoice;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "meshlimit-bench",
    about = "What meshlimit costs Envoy, as ratios measured in one run"
)]
pub struct Options {
    /// Interleaved rounds of every configuration (throughput phase).
    #[arg(long, env = "BENCH_ROUNDS", default_value_t = 5)]
    pub rounds: usize,
    /// Seconds of each measured wrk run.
    #[arg(long, env = "BENCH_SECONDS", default_value_t = 5)]
    pub seconds: u32,
    /// Rounds of the open-loop latency phase.
    #[arg(long, env = "BENCH_LATENCY_ROUNDS", default_value_t = 3)]
    pub latency_rounds: usize,
    /// Measured seconds of each open-loop run (after a 1 s warm-up).
    #[arg(long, env = "BENCH_LATENCY_SECONDS", default_value_t = 8.0)]
    pub latency_seconds: f64,
    /// wrk connections.
    #[arg(long, env = "BENCH_CONNECTIONS", default_value_t = 32)]
    pub connections: u32,
    /// The agent's store: auto uses Redis when the agent supports it.
    #[arg(long, env = "BENCH_STORE", value_enum, default_value_t = StoreChoice::Auto)]
    pub store: StoreChoice,
    /// The CPU Envoy is pinned to.
    #[arg(long, env = "BENCH_ENVOY_CPU", default_value = "0")]
    pub envoy_cpu: String,
    /// The CPU the load generators are pinned to.
    #[arg(long, env = "BENCH_LOAD_CPU", default_value = "1")]
    pub load_cpu: String,
    /// The CPUs the agent and Redis are pinned to (a taskset list).
    #[arg(long, env = "BENCH_AGENT_CPU", default_value = "1")]
    pub agent_cpu: String,
    /// meshlimit's lease-call deadline (`timeout_ms`; envoy.yaml has 5). At
    /// saturation Envoy's own event loop holds an answer for several ms, so the
    /// default deadline would measure the failure policy, not the agent path.
    #[arg(long, env = "BENCH_FILTER_TIMEOUT_MS", default_value_t = 50)]
    pub filter_timeout_ms: u64,
    /// One short round of everything: keeps the bench code from rotting.
    #[arg(long, env = "BENCH_SMOKE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub smoke: bool,
    /// Only these configurations (comma-separated ids, e.g. `a,c`), for quick
    /// experiments; the report then lacks the others' figures.
    #[arg(long, env = "BENCH_ONLY", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Skip the over-limit phase.
    #[arg(long, env = "BENCH_SKIP_OVER_LIMIT", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub skip_over_limit: bool,
    /// Skip the latency phase.
    #[arg(long, env = "BENCH_SKIP_LATENCY", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub skip_latency: bool,
    /// Skip the request-path phase (hot key on leases, cold keys, open loop).
    #[arg(long, env = "BENCH_SKIP_REQUEST_PATH", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub skip_request_path: bool,
    /// Skip the decision log phase ((g0), (g1): Envoy's CPU per request with
    /// the decision log off and on).
    #[arg(long, env = "BENCH_SKIP_DECISION_LOG", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub skip_decision_log: bool,
    /// Skip the rules-at-scale phase.
    #[arg(long, env = "BENCH_SKIP_RULES_SCALE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub skip_rules_scale: bool,
    /// Rules counts of the rules-at-scale phase (comma-separated; the first is
    /// the baseline the others are compared with).
    #[arg(long, env = "BENCH_SCALE_RULES", value_delimiter = ',', default_values_t = [10, 1_000, 20_000])]
    pub scale_rules: Vec<usize>,
    /// After the throughput rounds, run (c), (e), (f), (e1)–(e4) once more with
    /// Envoy sampled by `perf` (apt: linux-perf), and add where its CPU went to
    /// the report.
    #[arg(long, env = "BENCH_PERF", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub perf: bool,
    /// Skip the criterion benchmarks.
    #[arg(long, env = "BENCH_SKIP_MICRO", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub skip_micro: bool,
    /// Where latest.md and latest.csv go (relative to the repository root); a
    /// smoke run writes to `<out>/smoke` so it never replaces real figures.
    #[arg(long, env = "BENCH_OUT", default_value = "bench/results")]
    pub out: PathBuf,
}

impl Options {
    /// Whether configuration `id` runs.
    pub fn selected(&self, id: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == id)
    }

    /// The smoke settings: one round, one-second runs.
    pub fn effective(mut self) -> Self {
        if self.smoke {
            self.rounds = 1;
            self.seconds = 1;
            self.latency_rounds = 1;
            self.latency_seconds = 1.0;
            self.out = self.out.join("smoke");
        }
        self
    }
}
