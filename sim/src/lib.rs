//! meshlimit-sim, the accuracy harness: N simulated gateways in one process,
//! each running the filter's own request path (`meshlimit_filter::pipeline`: local
//! lease buckets, denial cache, lease requests over the wire protocol) against M
//! real agent processes and a real Redis or Redis Cluster, with load from a
//! scenario file. It measures admitted against the limit, wrong decisions (see
//! [`judge`]), Redis script calls and lease sizes, and writes a CSV, a Markdown
//! summary and a PNG plot.
//!
//! Layout: `scenario` reads the file; `stack` starts Redis and the agents;
//! `drive` runs the gateways (`gateway` over the filter's in-memory host
//! `meshlimit_filter::testing::MemoryHost`, `client`, `arrivals`) and records
//! (`record`, `judge`); `measure` turns the log into figures, `verdict` checks
//! them against the accuracy targets (docs/performance/accuracy.md), `report` writes them out.
//! `vtime` runs the same gateways against the agent's own lease code and a
//! modelled store in virtual time, one seed one run, into the same `record`,
//! `measure` and `verdict` (docs/contributing/testing.md).

pub mod arrivals;
pub mod client;
pub mod drive;
pub mod error;
pub mod gateway;
pub mod judge;
pub mod measure;
pub mod progress;
pub mod record;
pub mod report;
pub mod scenario;
pub mod stack;
pub mod verdict;
pub mod vtime;

use std::path::PathBuf;

pub use error::SimError;
pub use scenario::{Overrides, Plan, Scenario};

use measure::Figures;
use stack::{script_calls, Stack};
use verdict::Check;

/// A finished run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub name: String,
    pub description: String,
    pub short: bool,
    pub figures: Figures,
    pub checks: Vec<Check>,
    /// How the run was set up, for the report.
    pub setup: Setup,
}

/// The run's setup as the report states it.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    pub duration: f64,
    pub warmup: f64,
    pub gateways: usize,
    pub agents: usize,
    pub store: String,
    pub agent_args: Vec<String>,
    pub filter_timeout_ms: u64,
    pub elapsed: f64,
    pub unmatched: u64,
    /// Agent call failures by kind: timeouts, transport, status, body.
    pub failures: [u64; 4],
    /// Asks the agents denied from a node's cached denial or hold, without a
    /// store call (`meshlimit_pool_calls_total{kind="denied"}`).
    pub denied_at_nodes: u64,
    /// Where the tokens went.
    pub tokens: TokenFlow,
    /// The agents' false-limit SLI.
    pub false_limits: FalseLimitSli,
}

/// The false-limit SLI the agents computed from the gateways' decision
/// records and their pools' denials (summed over the agents and rules), to
/// set beside the judge's "wrongly limited".
#[derive(Debug, Clone, Default)]
pub struct FalseLimitSli {
    /// 429s checked: the store's own and the suspects peeked.
    pub checked: u64,
    /// Of those, found false.
    pub false_limits: u64,
    /// Suspects not checked (the agents' budget, queue, …).
    pub skipped: u64,
    /// The 429s the checks stand for (each check weighs for the suspects of
    /// its rule skipped for the budget before it), and the weight found false.
    pub weighed: u64,
    pub weighed_false: u64,
}

impl FalseLimitSli {
    /// The SLI: the weight found false ÷ the 429s weighed (0 without checks),
    /// as the agents' `meshlimit_false_limit_ratio` computes it, over the run.
    pub fn ratio(&self) -> f64 {
        self.weighed_false as f64 / self.weighed.max(1) as f64
    }
}

/// Where the leased tokens went, over the whole run.
#[derive(Debug, Clone, Default)]
pub struct TokenFlow {
    /// Tokens the gateways received in grants (each grant includes the cost of
    /// the request that asked).
    pub to_gateways: u64,
    /// Tokens the agents' pools dropped unspent (`meshlimit_lease_tokens_dropped_total`).
    pub dropped_at_agents: u64,
    /// Requests the limiter admitted (not by a failure policy).
    pub admitted: u64,
}

impl RunReport {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }
}

/// How to run a scenario.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Where `<name>.csv`, `<name>.md` and `<name>.png` go (none: nowhere).
    pub out: Option<PathBuf>,
    /// Show the progress line on the terminal.
    pub progress: bool,
    /// Also write every request to `<name>.events.csv`.
    pub events: bool,
}

/// Runs one planned scenario: starts the stack, offers the load, measures, and
/// writes the report where the options say.
pub fn run(plan: &Plan, opts: &RunOptions) -> Result<RunReport, SimError> {
    let stack = Stack::start(&plan.scenario)?;
    let before = stack.command_counts()?;
    let recorded = drive::simulate(plan, &stack, opts.progress)?;
    let after = stack.command_counts()?;
    let scripts = before
        .iter()
        .zip(&after)
        .map(|(b, a)| script_calls(b, a))
        .sum();
    stack.wait_for_false_limit_checks();
    let figures = measure::figures(plan, &recorded, scripts, &key_rates(plan));
    let setup = setup(plan, &stack, &recorded, figures.totals.admitted);
    drop(stack);
    let report = RunReport {
        name: plan.scenario.name.clone(),
        description: plan.scenario.description.clone(),
        short: plan.short,
        checks: verdict::checks(plan, &figures),
        figures,
        setup,
    };
    if let Some(dir) = &opts.out {
        report::write(dir, &report)?;
        if opts.events {
            let path = dir.join(format!("{}.events.csv", report.name));
            let text = report::csv::events(&recorded.log.events);
            std::fs::write(&path, text).map_err(|e| SimError::io(&path, e))?;
        }
    }
    Ok(report)
}

/// The run's setup and its token flow, read before the stack stops.
fn setup(plan: &Plan, stack: &Stack, recorded: &drive::Recorded, admitted: u64) -> Setup {
    let (s, a) = (&plan.scenario, &recorded.log.agent);
    let metrics = stack.agent_metrics();
    let sum = |name: &str| -> f64 { metrics.iter().map(|m| stack::metric_sum(m, name)).sum() };
    let dropped = sum("meshlimit_lease_tokens_dropped_total");
    let denied_at_nodes: f64 = metrics
        .iter()
        .map(|m| stack::metric_sum_of(m, "meshlimit_pool_calls_total", "kind=\"denied\""))
        .sum();
    Setup {
        duration: s.duration.0,
        warmup: s.warmup.0,
        gateways: s.gateways,
        agents: s.agents,
        store: stack.store_line(),
        agent_args: stack.agent_args.clone(),
        filter_timeout_ms: meshlimit_filter::config::millis(plan.filter.timeout),
        elapsed: recorded.elapsed,
        unmatched: recorded.log.unmatched,
        failures: [a.timeouts, a.transport_errors, a.bad_status, a.bad_body],
        denied_at_nodes: denied_at_nodes as u64,
        tokens: TokenFlow {
            to_gateways: a.lease_tokens.iter().map(|&t| u64::from(t)).sum(),
            dropped_at_agents: dropped as u64,
            admitted,
        },
        false_limits: FalseLimitSli {
            checked: sum("meshlimit_false_limit_checks_total") as u64,
            false_limits: sum("meshlimit_false_limits_total") as u64,
            skipped: sum("meshlimit_false_limit_checks_skipped_total") as u64,
            weighed: sum("meshlimit_false_limit_weighed_total") as u64,
            weighed_false: sum("meshlimit_false_limit_weighed_false_total") as u64,
        },
    }
}

/// Each key's rate (requests per second) under the strictest rule applying to it.
pub(crate) fn key_rates(plan: &Plan) -> Vec<f64> {
    let keys = gateway::Keys::new(
        &plan.scenario.traffic.key_header,
        plan.scenario.traffic.keys,
    );
    (0..keys.len())
        .map(|k| {
            let info = keys.request(u32::try_from(k).unwrap_or(u32::MAX));
            plan.rules
                .applicable(&info)
                .unwrap_or_default()
                .first()
                .map_or(0.0, |a| a.limit.rate_per_sec())
        })
        .collect()
}
