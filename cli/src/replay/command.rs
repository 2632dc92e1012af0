//! `meshlimit replay`: reads the rules and the log the flags name, replays,
//! and prints the report.

use std::io::Write;
use std::path::Path;

use meshlimit_core::rules::RulesError;
use meshlimit_core::RuleSet;

use super::{replay, report, ReplayError};
use crate::args::{CheckFormat, ReplayArgs};

/// Why `replay` printed no report.
#[derive(Debug, thiserror::Error)]
pub enum ReplayCommandError {
    #[error("{file}: cannot read: {source}")]
    ReadRules {
        file: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Rules(#[from] RulesError),
    #[error("{log}: {source}")]
    OpenLog { log: String, source: std::io::Error },
    #[error("{log}: {source}")]
    Log { log: String, source: ReplayError },
}

/// Replays `args.log` (`-`: standard input) through the rules and writes the
/// report to `out`.
pub fn command(args: &ReplayArgs, out: &mut impl Write) -> Result<(), ReplayCommandError> {
    let new = load(&args.rules)?;
    let old = args.baseline.as_deref().map(load).transpose()?;
    let log = args.log.display().to_string();
    let result = if args.log.as_os_str() == "-" {
        replay(std::io::stdin().lock(), &new, old.as_ref())
    } else {
        let file =
            std::fs::File::open(&args.log).map_err(|source| ReplayCommandError::OpenLog {
                log: log.clone(),
                source,
            })?;
        replay(std::io::BufReader::new(file), &new, old.as_ref())
    };
    let result = result.map_err(|source| ReplayCommandError::Log { log, source })?;
    let ids = args.secret.load().map_or_else(
        |_| meshlimit_core::secret::KeyIds::placeholder(),
        |s| s.key_ids(),
    );
    report(&result, &new, &ids, args.format == CheckFormat::Json, out);
    Ok(())
}

/// A rules file, read and compiled.
fn load(path: &Path) -> Result<RuleSet, ReplayCommandError> {
    let file = path.display().to_string();
    let text = meshlimit_agent::rules_watch::read_rules_file(path).map_err(|source| {
        ReplayCommandError::ReadRules {
            file: file.clone(),
            source,
        }
    })?;
    Ok(meshlimit_core::rules::parse_rules(&file, &text)?)
}
