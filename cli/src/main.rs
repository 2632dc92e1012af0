//! The `meshlimit` binary: parses the command line and hands over to the
//! library. Exit codes: 0 success (and `--help`, `--version`), 1 an invalid
//! rules file or a failed command, 2 a request `explain` finds ambiguous, 64 a
//! bad flag or configuration (with one line on stderr saying why).

use std::io::Write;
use std::process::ExitCode;

use meshlimit_agent::config::parse_args;
use meshlimit_cli::args::{Cli, COMMANDS};

fn main() -> ExitCode {
    let cli: Cli = match parse_args(std::env::args_os(), "meshlimit", COMMANDS) {
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
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    match meshlimit_cli::execute(&cli.command, &mut out, &mut err) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if e.needs_message() {
                let _ = writeln!(err, "meshlimit: {e}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}
