//! `meshlimit-capacity`, behind `make capacity-inputs`: measures the inputs of
//! the capacity model (docs/operations/capacity.md) on this machine and writes
//! them to `bench/results/capacity-inputs.md` and `.json`. Redis's work per
//! item comes from Redis's own accounting (`INFO`), so other processes taking
//! turns on a shared machine's CPUs slow the run without moving the figures.
//! Loopback only; it stops by itself in a few minutes. bench/README.md says
//! what each figure is.

mod info;
mod load;
mod measure;
mod report;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::info::MissingField;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "meshlimit-capacity",
    about = "The capacity model's inputs, measured: Redis work, bytes and memory per item, the filter's memory, the region exchange's bytes"
)]
pub struct Options {
    /// Rounds of every measurement (the figures are their medians).
    #[arg(long, env = "CAPACITY_ROUNDS", default_value_t = 5)]
    pub rounds: usize,
    /// Seconds of each load shape in a round.
    #[arg(long, env = "CAPACITY_SECONDS", default_value_t = 3.0)]
    pub seconds: f64,
    /// Buckets created per memory measurement.
    #[arg(long, env = "CAPACITY_BUCKETS", default_value_t = 100_000)]
    pub buckets: u64,
    /// Where the two files go, from the workspace root.
    #[arg(long, env = "CAPACITY_OUT", default_value = "bench/results")]
    pub out: PathBuf,
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum CapError {
    #[error(transparent)]
    Info(#[from] MissingField),
    #[error("redis: {0}")]
    Redis(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the deployment secret: {0}")]
    Secret(#[from] meshlimit_core::secret::SecretError),
    #[error("meshlimit-wasm-cost --memory: {0}")]
    WasmCost(String),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

fn main() -> ExitCode {
    let opts = Options::parse();
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshlimit-capacity: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: &Options) -> Result<(), CapError> {
    let machine = report::Machine::read();
    eprintln!(
        "capacity: {} CPUs, {}, {}",
        machine.cpus, machine.cpu_model, machine.redis
    );
    let measured = measure::all(opts)?;
    let out = meshlimit_tests::repo_root().join(&opts.out);
    std::fs::create_dir_all(&out)?;
    let machine = machine.finished();
    std::fs::write(
        out.join("capacity-inputs.md"),
        report::markdown(&measured, &machine, opts),
    )?;
    std::fs::write(out.join("capacity-inputs.json"), report::json(&measured)?)?;
    eprintln!(
        "capacity: wrote {}",
        out.join("capacity-inputs.md").display()
    );
    Ok(())
}
