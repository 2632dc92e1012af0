//! `meshlimit-sim run SCENARIO...`: runs each scenario against real agents and
//! Redis, writes `<name>.csv`, `<name>.md`, `<name>.png` and `summary.md` into
//! `--out`, and prints the summary table.
//!
//! `meshlimit-sim virtual --seed N SCENARIO`: runs it in the virtual fleet
//! (`meshlimit_sim::vtime`) and prints its figures and verdict; with
//! `--seeds K`, seeds N to N + K − 1, one line each, and the command that
//! reproduces each seed that misses a target; with `--json`, one JSON object a
//! seed with the figures `tools/seeds.py` compares between two builds.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use meshlimit_sim::{report, Overrides, RunOptions, RunReport, Scenario, SimError};

#[derive(Parser)]
#[command(name = "meshlimit-sim", about = "meshlimit's accuracy harness")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenarios (YAML files) and write their report.
    Run {
        /// Scenario files, run one after the other.
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Where the CSV, Markdown and PNG files go.
        #[arg(long, default_value = "bench/results/accuracy")]
        out: PathBuf,
        #[command(flatten)]
        shape: Shape,
        /// An argument for every agent, after the scenario's own (repeat it:
        /// `--agent-arg=--false-limit-checks --agent-arg=100000`).
        #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
        agent_args: Vec<String>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// Exit 1 when a target is missed (the report is written either way).
        #[arg(long)]
        check: bool,
        /// Also write every request to `<name>.events.csv`.
        #[arg(long)]
        events: bool,
    },
    /// Run one scenario in virtual time (one thread, no Redis, no agent
    /// processes), from one seed or a sweep of seeds.
    Virtual {
        scenario: PathBuf,
        /// The run's seed (default: the scenario's).
        #[arg(long)]
        seed: Option<u64>,
        /// Runs this many seeds from `--seed` on, one line each.
        #[arg(long, default_value_t = 1)]
        seeds: u64,
        /// One JSON object a seed (figures and per-second rows of all keys)
        /// in place of the lines and misses.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        shape: Shape,
    },
}

/// The run's shape, over the scenario's own: both commands take it.
#[derive(Args)]
struct Shape {
    /// The short variant of each scenario (what `make test` runs).
    #[arg(long)]
    short: bool,
    /// Seconds of load, in place of the scenario's.
    #[arg(long)]
    duration: Option<f64>,
    /// Simulated gateways (Envoy worker VMs), in place of the scenario's.
    #[arg(long)]
    gateways: Option<usize>,
    /// Agents the gateways are spread over, in place of the scenario's.
    #[arg(long)]
    agents: Option<usize>,
}

impl Shape {
    fn overrides(self, agent_args: Vec<String>) -> Overrides {
        Overrides {
            short: self.short,
            duration: self.duration,
            gateways: self.gateways,
            agents: self.agents,
            agent_args,
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run {
            scenarios,
            out,
            shape,
            agent_args,
            quiet,
            check,
            events,
        } => run(
            scenarios,
            out,
            shape.overrides(agent_args),
            quiet,
            check,
            events,
        ),
        Command::Virtual {
            scenario,
            seed,
            seeds,
            json,
            shape,
        } => {
            let overrides = shape.overrides(Vec::new());
            match virtual_runs(&scenario, seed, seeds, json, &overrides) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("meshlimit-sim: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// Runs seeds `first..first + count` of one scenario; true when every seed
/// met every target.
fn virtual_runs(
    path: &std::path::Path,
    first: Option<u64>,
    count: u64,
    json: bool,
    overrides: &Overrides,
) -> Result<bool, SimError> {
    let plan = Scenario::load(path)?.plan(overrides)?;
    let first = first.unwrap_or(plan.scenario.seed);
    let name = path.display().to_string();
    let mut missed = Vec::new();
    for seed in first..first.saturating_add(count) {
        let r = meshlimit_sim::vtime::run(&plan, seed)?;
        if json {
            println!("{}", seed_json(seed, &r));
            if !r.passed() {
                missed.push(seed);
            }
            continue;
        }
        if count == 1 {
            println!("{}", report::markdown::scenario(&r));
        } else {
            let f = &r.figures;
            println!(
                "seed {seed}: admitted/limit {:.4}, wrongly limited {}, wrongly allowed {}, agent calls {}, scripts {}{}",
                f.steady.ratio,
                f.steady.wrongly_limited,
                f.steady.wrongly_allowed,
                f.agent_calls,
                f.script_calls,
                if r.passed() { "" } else { "  MISS" }
            );
        }
        if !r.passed() {
            missed.push(seed);
            for c in r.checks.iter().filter(|c| !c.pass) {
                eprintln!("  seed {seed} MISS: {}: {}", c.what, c.value);
            }
            eprintln!(
                "  reproduce: {}",
                meshlimit_sim::vtime::command(&name, seed, overrides)
            );
        }
    }
    if !json {
        println!(
            "{} of {count} seeds met every target",
            count - missed.len() as u64
        );
    }
    Ok(missed.is_empty())
}

/// One seed's figures for `tools/seeds.py`: the verdict, the steady part, the
/// call counts and the all-keys second rows.
fn seed_json(seed: u64, r: &RunReport) -> serde_json::Value {
    let f = &r.figures;
    let seconds: Vec<_> = f
        .seconds
        .iter()
        .filter(|s| s.key.is_none())
        .map(|s| {
            serde_json::json!([
                s.second,
                s.offered,
                s.admitted,
                s.ideal,
                s.wrongly_limited,
                s.wrongly_allowed
            ])
        })
        .collect();
    serde_json::json!({
        "seed": seed,
        "passed": r.passed(),
        "ratio": f.steady.ratio,
        "requests": f.totals.requests,
        "wrongly_limited": f.totals.wrongly_limited,
        "steady_requests": f.steady.requests,
        "steady_wrongly_limited": f.steady.wrongly_limited,
        "steady_wrongly_allowed": f.steady.wrongly_allowed,
        "script_calls": f.script_calls,
        "agent_calls": f.agent_calls,
        "waits": f.waits,
        "hottest_node_scripts_per_sec": f.hottest_node_scripts_per_sec,
        "seconds": seconds,
    })
}

fn run(
    scenarios: Vec<PathBuf>,
    out: PathBuf,
    overrides: Overrides,
    quiet: bool,
    check: bool,
    events: bool,
) -> ExitCode {
    let short = overrides.short;
    let opts = RunOptions {
        out: Some(out.clone()),
        progress: !quiet,
        events,
    };
    let command = format!(
        "meshlimit-sim run {}{}",
        if short { "--short " } else { "" },
        scenarios
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut reports = Vec::new();
    let mut failed = false;
    for path in &scenarios {
        match run_one(path, &overrides, &opts) {
            Ok(r) => reports.push(r),
            Err(e) => {
                eprintln!("meshlimit-sim: {e}");
                failed = true;
            }
        }
        // After each scenario, so a long run leaves its results so far.
        if let Err(e) = write_summary(&out, &command, &reports) {
            eprintln!("meshlimit-sim: {e}");
            return ExitCode::from(2);
        }
    }
    println!("{}", report::markdown::table(&reports));
    println!("report: {}", out.join("summary.md").display());
    if failed {
        ExitCode::from(2)
    } else if check && reports.iter().any(|r| !r.passed()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn write_summary(
    out: &std::path::Path,
    command: &str,
    reports: &[RunReport],
) -> Result<(), SimError> {
    let header = format!("{}\n\nCommand: `{command}`", machine_line());
    let path = out.join("summary.md");
    std::fs::create_dir_all(out).map_err(|e| SimError::io(out, e))?;
    std::fs::write(&path, report::summary(&header, reports)).map_err(|e| SimError::io(&path, e))
}

fn run_one(
    path: &std::path::Path,
    overrides: &Overrides,
    opts: &RunOptions,
) -> Result<RunReport, SimError> {
    let plan = Scenario::load(path)?.plan(overrides)?;
    let report = meshlimit_sim::run(&plan, opts)?;
    for c in &report.checks {
        let mark = if c.pass { "pass" } else { "MISS" };
        eprintln!("  {mark}: {}: {}", c.what, c.value);
    }
    Ok(report)
}

/// The machine the run was made on: cores and CPU model.
fn machine_line() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, m)| m.trim().to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("Machine: {cores} cores, {model}; the gateways share one thread, agents and Redis the rest.")
}
