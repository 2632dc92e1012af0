//! `meshlimit-bench`, the driver behind `make bench`: starts the agent (and
//! Redis, and on it the remote check's rate limit service), then Envoy once
//! per configuration and run, drives it with wrk and
//! meshlimit-loadgen, runs the criterion benchmarks, and writes
//! `bench/results/latest.md` and `latest.csv`. It builds nothing: `make bench`
//! builds first.

mod counters;
mod csv;
mod envoy;
mod error;
mod machine;
mod micro;
mod number;
mod options;
mod phases;
mod procs;
mod profile;
mod records;
mod report;
mod request_path;
mod scale;
mod scenario;
mod services;
mod tables;
mod wrk;

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

use crate::error::{BenchError, Context, Result};
use crate::options::Options;
use crate::phases::Bench;

fn main() -> ExitCode {
    let opts = Options::parse().effective();
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshlimit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: &Options) -> Result<()> {
    preflight()?;
    let machine = machine::Machine::read();
    eprintln!("bench: {}", machine.line());
    let dir = tempfile::Builder::new()
        .prefix("meshlimit-bench-")
        .tempdir()?;
    let keep = std::env::var_os("BENCH_KEEP_TMP").is_some_and(|v| v == "1");
    let results = {
        let mut bench = Bench::start(opts, dir.path())?;
        bench.throughput()?;
        if !opts.skip_decision_log {
            bench.decision_log()?;
        }
        if opts.perf {
            bench.profile()?;
        }
        if !opts.skip_over_limit {
            bench.over_limit()?;
        }
        if !opts.skip_latency {
            bench.latency()?;
        }
        if !opts.skip_request_path {
            bench.request_path()?;
        }
        if !opts.skip_rules_scale {
            bench.rules_at_scale()?;
        }
        bench.results
    };
    let mut results = results;
    if !opts.skip_micro {
        eprintln!("bench: criterion benchmarks");
        results.micro = micro::run(&opts.envoy_cpu, opts.smoke)?;
        results.step(
            "criterion",
            micro::command(&opts.envoy_cpu, opts.smoke).join(" "),
        );
    }
    let out = meshlimit_tests::repo_root().join(&opts.out);
    std::fs::create_dir_all(&out).context(out.display())?;
    write(
        &out.join("latest.md"),
        &report::render(&results, opts, &machine),
    )?;
    write(&out.join("latest.csv"), &csv::render(&results))?;
    eprintln!("bench: wrote {}", out.join("latest.md").display());
    if keep {
        eprintln!("bench: keeping {}", dir.keep().display());
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).context(path.display())
}

/// Everything the run needs, checked before anything starts.
fn preflight() -> Result<()> {
    let files = [
        (meshlimit_tests::envoy_bin(), "run `make tools`"),
        (meshlimit_tests::agent_bin(), "run `make build`"),
        (meshlimit_tests::filter_wasm(), "run `make build`"),
        (
            envoy::floor_wasm(),
            "run `make bench` (it builds bench/floor-filter)",
        ),
        (
            phases::loadgen_bin(),
            "run `make bench` (it builds bench/loadgen)",
        ),
        (
            services::rls_bin(),
            "run `make bench` (it builds bench/rls)",
        ),
    ];
    for (path, fix) in files {
        if !path.exists() {
            return Err(BenchError::new(format!(
                "{} is missing: {fix}",
                path.display()
            )));
        }
    }
    for program in ["taskset", "wrk", "redis-server", "redis-cli"] {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
        if !found {
            return Err(BenchError::new(format!(
                "{program} is not on PATH: run `make tools`"
            )));
        }
    }
    Ok(())
}
