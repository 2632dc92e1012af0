//! The command line reference pages, from the clap definitions the binaries
//! parse with: every subcommand, its usage, and every argument with its help,
//! default, environment variable and possible values.

use clap::{Arg, ArgAction, Command, CommandFactory};
use meshlimit_agent::config::EXIT_USAGE;

use super::generated_by;
use super::markdown::{cell, code, paragraphs, sentence, table};

/// docs/reference/cli-meshlimit.md: the operator's CLI.
pub fn meshlimit_page() -> String {
    let exits = [
        ("0", "done (also `--help` and `--version`)".to_string()),
        ("1", "an invalid rules file, or a command that failed".into()),
        ("2", "`explain`: the request is ambiguous".into()),
        (
            "64",
            format!("a bad flag or configuration, with one line on stderr saying why (`EXIT_USAGE` = {EXIT_USAGE})"),
        ),
    ];
    page(
        crate::args::Cli::command(),
        "the clap definition in cli/src/args.rs",
        "meshlimit (operator CLI)",
        &exits,
    )
}

/// docs/reference/cli-agent.md: the server's command line.
pub fn agent_page() -> String {
    let exits = [
        ("0", "stopped by SIGTERM or SIGINT (also `--help` and `--version`)".to_string()),
        ("1", "a failure at run time".into()),
        (
            "64",
            format!("a bad flag or configuration, or the listen address taken, with one line on stderr saying why (`EXIT_USAGE` = {EXIT_USAGE})"),
        ),
    ];
    page(
        meshlimit_agent::config::Cli::command(),
        "the clap definition in agent/src/config.rs",
        "meshlimit-agent (server)",
        &exits,
    )
}

/// A binary's page: what it is, its commands, each command's arguments, and
/// its exit codes.
fn page(mut cli: Command, source: &str, title: &str, exits: &[(&str, String)]) -> String {
    cli.build();
    let name = cli.get_name().to_string();
    let mut out = generated_by(source);
    out.push_str(&format!("# {title}\n\n"));
    if let Some(about) = cli.get_long_about().or(cli.get_about()) {
        out.push_str(&format!(
            "{}\n\n",
            paragraphs(&sentence(&about.to_string()))
        ));
    }
    out.push_str(&format!(
        "Every command takes `-h`/`--help` and `-V`/`--version`. Every flag with an \
         environment variable reads it when the flag is not given.\n\n\
         ```text\n{}\n```\n\n",
        cli.render_usage().to_string().trim_end()
    ));
    // clap's own `help` subcommand is `--help` by another name.
    let commands: Vec<&Command> = cli
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .collect();
    let rows: Vec<Vec<String>> = commands
        .iter()
        .map(|c| {
            vec![
                format!("[`{}`](#{})", c.get_name(), anchor(&name, c.get_name())),
                cell(&sentence(
                    &c.get_about().map(|a| a.to_string()).unwrap_or_default(),
                )),
            ]
        })
        .collect();
    out.push_str(&table(&["Command", "What it does"], &rows));
    out.push_str("\nExit codes:\n\n");
    let rows: Vec<Vec<String>> = exits
        .iter()
        .map(|(code, meaning)| vec![code.to_string(), meaning.clone()])
        .collect();
    out.push_str(&table(&["Code", "Meaning"], &rows));
    for command in commands {
        out.push('\n');
        out.push_str(&command_section(&name, command));
    }
    out
}

/// The section of one subcommand: its heading, description, usage and arguments.
fn command_section(program: &str, command: &Command) -> String {
    let mut out = format!("## {program} {}\n\n", command.get_name());
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        out.push_str(&format!(
            "{}\n\n",
            paragraphs(&sentence(&about.to_string()))
        ));
    }
    let mut usage = command.clone();
    out.push_str(&format!(
        "```text\n{}\n```\n\n",
        usage.render_usage().to_string().trim_end()
    ));
    let rows: Vec<Vec<String>> = command
        .get_arguments()
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .map(argument_row)
        .collect();
    if rows.is_empty() {
        out.push_str("No arguments.\n");
    } else {
        out.push_str(&table(
            &["Argument", "Default", "Environment", "Description"],
            &rows,
        ));
    }
    out
}

/// The anchor mdBook gives the heading `program command`.
fn anchor(program: &str, command: &str) -> String {
    format!("{program}-{command}")
}

/// One argument's row: how it is written, its default, its variable, and its
/// help with possible values and how often it may be given.
fn argument_row(arg: &Arg) -> Vec<String> {
    let default = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    let default = if default.is_empty() {
        String::new()
    } else {
        code(&default.join(","))
    };
    let env = arg
        .get_env()
        .map(|e| code(&e.to_string_lossy()))
        .unwrap_or_default();
    vec![spelling(arg), default, env, description(arg)]
}

/// `--flag VALUE`, `-H, --header NAME: VALUE` or `PATH` (a positional).
fn spelling(arg: &Arg) -> String {
    let value = value_name(arg);
    if arg.is_positional() {
        return code(&value);
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
    let optional_value = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
    let text = match (takes_value, optional_value) {
        (false, _) => names.join(", "),
        (true, false) => format!("{} {value}", names.join(", ")),
        (true, true) => format!("{} [{value}]", names.join(", ")),
    };
    code(&text)
}

/// The argument's value name(s), or its id in capitals.
fn value_name(arg: &Arg) -> String {
    match arg.get_value_names() {
        Some(names) if !names.is_empty() => names
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => arg.get_id().as_str().to_uppercase(),
    }
}

/// The argument's help, then what it accepts and the facts `--help` shows
/// apart: required, repeatable, hidden.
fn description(arg: &Arg) -> String {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let mut parts = vec![cell(&sentence(&help))];
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| match v.get_help() {
            Some(help) => format!("{}: {}", code(v.get_name()), cell(&help.to_string())),

            None => code(v.get_name()),
        })
        .collect();
    if !values.is_empty() {
        parts.push(format!(
            "Values: {}.",
            values.join("; ").trim_end_matches('.')
        ));
    }
    if arg.is_required_set() {
        parts.push("Required.".into());
    }
    if matches!(arg.get_action(), ArgAction::Append) {
        parts.push("Repeatable.".into());
    }
    if arg.is_hide_set() {
        parts.push("Not listed by `--help`.".into());
    }
    parts.retain(|p| !p.is_empty());
    parts.join(" ")
}
