//! meshlimit-cli: `meshlimit`, the operator's tool. The commands a person runs
//! rather than a DaemonSet: check, explain, replay and import rules offline,
//! print a key's id or the rules' schema, and act on a region's agents through
//! their store. Built on the agent's library (rules loading, the store, the
//! secret), so every check here is the one the agent makes.
//!
//! `main.rs` only wires: parse the command line ([`args`]), [`execute`] it,
//! and exit with the code of its [`CliError`].

#![forbid(unsafe_code)]

pub mod args;
pub mod check_rules;
mod error;
pub mod explain;
pub mod fleet_override;
pub mod import;
pub mod reference;
pub mod replay;

use std::io::Write;

use meshlimit_core::rules::trial::TRIAL_SUFFIX;
use meshlimit_core::DescriptorKey;

pub use error::{CliError, Reported};

use args::{Command, KeyIdArgs};

/// Runs `command`, writing its output to `out` and its diagnostics to `err`.
pub fn execute(
    command: &Command,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), CliError> {
    match command {
        Command::CheckRules(args) => check_rules::check_rules_against(
            &args.path,
            args.against.as_deref(),
            args.profile,
            args.format,
            out,
            err,
        ),
        Command::Replay(args) => Ok(replay::command(args, out)?),
        Command::Explain(args) => explain::explain(args, out, err),
        Command::Import(args) => import::import(args, out, err),
        Command::Override(args) => fleet_override::override_command(args, out),
        Command::Schema => {
            let text = meshlimit_core::rules::schema::rules_schema_text();
            let _ = write!(out, "{text}");
            Ok(())
        }
        Command::KeyId(args) => key_id(args, out, err),
    }
}

/// `key-id`: the id of the key, under the deployment's secret, for a rule
/// of the rules file and as many parts as its key has.
fn key_id(args: &KeyIdArgs, out: &mut impl Write, err: &mut impl Write) -> Result<(), CliError> {
    let secret = args.secret.load()?;
    let set = check_rules::read_set(&args.rules, err)?;
    // While a change is on trial its copy of a rule, `NAME.trial`, counts the
    // same keys under its own name, so their ids differ from the rule's: the
    // copy's key is the rule's, and the id is taken under the name asked for.
    let base = match args.rule.strip_suffix(TRIAL_SUFFIX) {
        Some(base) if set.rule(&args.rule).is_none() => base,
        _ => args.rule.as_str(),
    };
    let rule = named_rule(&set, base, &args.rules)?;
    let parts = rule.key_parts();
    if parts.len() != args.parts.len() {
        return Err(CliError::KeyParts {
            rule: rule.name.clone(),
            expected: parts.len(),
            parts: parts.join(", "),
            given: args.parts.len(),
        });
    }
    let key = DescriptorKey::new(&args.rule, &args.parts);
    let _ = writeln!(out, "{}", secret.key_ids().id(&key));
    Ok(())
}

/// The rule named `name` in `set`, or an error naming the rules closest to it.
pub(crate) fn named_rule<'s>(
    set: &'s meshlimit_core::rules::RuleSet,
    name: &str,
    file: &std::path::Path,
) -> Result<&'s meshlimit_core::rules::Rule, CliError> {
    set.rule(name).ok_or_else(|| CliError::UnknownRule {
        rule: name.to_string(),
        file: file.display().to_string(),
        close: error::close_names(name, set.rules().iter().map(|r| r.name.as_str())),
    })
}
