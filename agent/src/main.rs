//! The `meshlimit-agent` binary: what a DaemonSet runs, `meshlimit-agent run`.
//! It parses the command line and hands over to the library. Exit codes: 0
//! success (and `--help`, `--version`), 1 a failure at run time, 64 a bad flag
//! or configuration (with one line on stderr saying why). The commands a
//! person runs are the `meshlimit` binary's.

use std::io::Write;
use std::process::ExitCode;

use meshlimit_agent::config::{Cli, Command, RunArgs};
use meshlimit_agent::run::{init_logging, run, RunError};

fn main() -> ExitCode {
    let cli = match Cli::parse_from_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(exit) => {
            let _ = if exit.to_stdout {
                write!(std::io::stdout(), "{}", exit.message)
            } else {
                writeln!(std::io::stderr(), "{}", exit.message)
            };
            return ExitCode::from(exit.code);
        }
    };
    match cli.command {
        Command::Run(args) => match serve(*args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "meshlimit-agent: {e}");
                ExitCode::from(e.exit_code())
            }
        },
    }
}

fn serve(args: RunArgs) -> Result<(), RunError> {
    init_logging(&args.log, args.log_format)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("meshlimit-agent")
        .build()
        .map_err(RunError::Runtime)?;
    runtime.block_on(run(args))
}
