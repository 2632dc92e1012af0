//! `meshlimit-loadgen`: open-loop HTTP/1.1 load at a fixed rate against a loopback
//! URL; prints one JSON object (or a CSV header and row) on stdout.
//!
//!   meshlimit-loadgen --url http://127.0.0.1:10000/ --rate 5000 --duration 10 \
//!       --warmup 1 --connections 64 --header 'x-bench-hot: k' --format json

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use meshlimit_loadgen::{run, LoadOptions, OptionsError, Summary, Target};

#[derive(Debug, Parser)]
#[command(name = "meshlimit-loadgen", about, version)]
struct Cli {
    /// http://127.0.0.1:PORT/PATH (loopback only).
    #[arg(long)]
    url: String,
    /// Requests per second, on a fixed schedule.
    #[arg(long)]
    rate: f64,
    /// Measured seconds, after the warm-up.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds sent but not recorded first.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 2.0)]
    timeout: f64,
    /// `name: value`, repeatable.
    #[arg(long = "header")]
    headers: Vec<String>,
    /// A header given a value unique to each request.
    #[arg(long)]
    unique_header: Option<String>,
    /// With --unique-header: its values drawn from this many keys, each
    /// coming back once every KEYS requests.
    #[arg(long)]
    keys: Option<u64>,
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Csv,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let options = match options(&cli) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("meshlimit-loadgen: {e}");
            return ExitCode::from(64);
        }
    };
    let summary = match run(&options) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("meshlimit-loadgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.format {
        Format::Json => println!("{}", serde_json::to_string(&summary).unwrap_or_default()),
        Format::Csv => println!("{}\n{}", Summary::CSV_HEADER, summary.csv_row()),
    }
    ExitCode::SUCCESS
}

fn options(cli: &Cli) -> Result<LoadOptions, OptionsError> {
    let seconds = |s: f64| Duration::try_from_secs_f64(s).map_err(|_| OptionsError::Zero);
    let mut o = LoadOptions::new(Target::parse(&cli.url)?, cli.rate, seconds(cli.duration)?)?;
    o.warmup = seconds(cli.warmup)?;
    o.timeout = seconds(cli.timeout)?;
    o.connections = cli.connections;
    if o.connections == 0 {
        return Err(OptionsError::Zero);
    }
    o.unique_header = cli.unique_header.clone();
    o.keys = cli.keys;
    for h in &cli.headers {
        o = o.header(h)?;
    }
    Ok(o)
}
