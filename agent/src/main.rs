//! The `meshlimit-agent` binary: parses the command line and hands over to the
//! library. Exit codes: 0 success (and `--help`, `--version`), 1 an invalid rules
//! file for `check-rules` or a failure at run time, 64 a bad flag or configuration
//! (with one line on stderr saying why).

use std::io::Write;
use std::process::ExitCode;

use meshlimit_agent::check_rules::check_rules_against;
use meshlimit_agent::config::{Cli, Command, RunArgs, EXIT_USAGE};
use meshlimit_agent::run::{init_logging, run, RunError};
use meshlimit_core::DescriptorKey;

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
        Command::CheckRules(args) => {
            let code = check_rules_against(
                &args.path,
                args.against.as_deref(),
                args.format,
                &mut std::io::stdout(),
                &mut std::io::stderr(),
            );
            ExitCode::from(code)
        }
        Command::Replay(args) => ExitCode::from(replay_command(&args)),
        Command::Explain(args) => ExitCode::from(meshlimit_agent::explain::explain(
            &args,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        )),
        Command::Import(args) => ExitCode::from(meshlimit_agent::import::import(
            &args,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        )),
        Command::Override(args) => {
            ExitCode::from(meshlimit_agent::fleet_override::override_command(
                &args,
                &mut std::io::stdout(),
                &mut std::io::stderr(),
            ))
        }
        Command::Schema => {
            let text = meshlimit_core::rules::schema::rules_schema_text();
            let _ = write!(std::io::stdout(), "{text}");
            ExitCode::SUCCESS
        }
        Command::KeyId(args) => print_with_secret(&args.secret, |secret| {
            let key = DescriptorKey::new(&args.rule, &args.parts);
            secret.key_ids().id(&key).to_string()
        }),
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

/// `replay`: 0 replayed, 1 a rules file or the log could not be read.
fn replay_command(args: &meshlimit_agent::config::ReplayArgs) -> u8 {
    use meshlimit_agent::replay::{replay, report};
    let load = |path: &std::path::Path| -> Result<meshlimit_core::RuleSet, String> {
        let file = path.display().to_string();
        let text = meshlimit_agent::rules_watch::read_rules_file(path)
            .map_err(|e| format!("{file}: cannot read: {e}"))?;
        meshlimit_core::rules::parse_rules(&file, &text).map_err(|e| e.to_string())
    };
    let sets = load(&args.rules).and_then(|new| {
        let old = args.baseline.as_deref().map(load).transpose()?;
        Ok((new, old))
    });
    let (new, old) = match sets {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "meshlimit-agent: {e}");
            return 1;
        }
    };
    let result = if args.log.as_os_str() == "-" {
        replay(std::io::stdin().lock(), &new, old.as_ref())
    } else {
        match std::fs::File::open(&args.log) {
            Ok(f) => replay(std::io::BufReader::new(f), &new, old.as_ref()),
            Err(e) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "meshlimit-agent: {}: {e}",
                    args.log.display()
                );
                return 1;
            }
        }
    };
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "meshlimit-agent: {}: {e}",
                args.log.display()
            );
            return 1;
        }
    };
    let ids = args.secret.load().map_or_else(
        |_| meshlimit_core::secret::KeyIds::placeholder(),
        |s| s.key_ids(),
    );
    let json = args.format == meshlimit_agent::config::CheckFormat::Json;
    report(&result, &new, &ids, json, &mut std::io::stdout());
    0
}

/// Prints what `line` makes of the deployment's secret; a missing or bad
/// secret is a usage error.
fn print_with_secret(
    args: &meshlimit_agent::config::SecretArgs,
    line: impl FnOnce(&meshlimit_core::secret::Secret) -> String,
) -> ExitCode {
    match args.load() {
        Ok(secret) => {
            let _ = writeln!(std::io::stdout(), "{}", line(&secret));
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "meshlimit-agent: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}
