//! What a command can fail with, and the exit code each gives: the one place
//! `meshlimit` maps failures to exit codes (0 ok, 1 invalid or failed, 64 usage).

use meshlimit_agent::config::{ConfigError, EXIT_USAGE};

use crate::fleet_override::OverrideError;
use crate::replay::ReplayCommandError;

/// A command's failure.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A bad configuration the flags accepted: a missing or short secret, a
    /// store no command can reach.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `replay`: a rules file or the log could not be read.
    #[error(transparent)]
    Replay(#[from] ReplayCommandError),
    /// `override`: the store could not do it, or had nothing to act on.
    #[error(transparent)]
    Override(#[from] OverrideError),
    /// A rule name the rules file does not hold.
    #[error("{file} has no rule `{rule}`{}", did_you_mean(close))]
    UnknownRule {
        rule: String,
        file: String,
        /// The file's names closest to it, closest first.
        close: Vec<String>,
    },
    /// `key-id`: not as many parts as the rule's key has.
    #[error("rule {rule} keys on {expected} part(s) ({parts}), {given} given: give them in that order{}", if *expected == 0 { " (none: `key: []` is one bucket)" } else { "" })]
    KeyParts {
        rule: String,
        expected: usize,
        parts: String,
        given: usize,
    },
    /// The command wrote its own diagnostics (`check-rules`' errors, `import`'s
    /// refusals, `explain`'s ambiguous request) and exits with `code`.
    #[error("exit {code}")]
    Reported { code: u8 },
}

impl CliError {
    /// `Ok` for a command that answers 0, else the code it reported.
    pub(crate) fn reported(code: u8) -> Result<(), CliError> {
        match code {
            0 => Ok(()),
            code => Err(CliError::Reported { code }),
        }
    }

    /// The process's exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) => EXIT_USAGE,
            CliError::Replay(_)
            | CliError::Override(_)
            | CliError::UnknownRule { .. }
            | CliError::KeyParts { .. } => 1,
            CliError::Reported { code } => *code,
        }
    }

    /// Whether `main` still has to say what went wrong (a reported failure
    /// has said it).
    pub fn needs_message(&self) -> bool {
        !matches!(self, CliError::Reported { .. })
    }
}

/// `: did you mean `a`, `b`?` for the close names, or nothing.
fn did_you_mean(close: &[String]) -> String {
    if close.is_empty() {
        return String::new();
    }
    let names: Vec<String> = close.iter().map(|n| format!("`{n}`")).collect();
    format!("; did you mean {}?", names.join(", "))
}

/// The names of `names` closest to `name` (at most 5, closest first): within
/// a third of its length in edits (at least 2), or holding it whole.
pub(crate) fn close_names<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let most = (name.chars().count() / 3).max(2);
    let mut close: Vec<(usize, &str)> = names
        .filter_map(|n| {
            let d = edits(name, n);
            (d <= most || n.contains(name) || name.contains(n)).then_some((d, n))
        })
        .collect();
    close.sort_unstable();
    close
        .into_iter()
        .take(5)
        .map(|(_, n)| n.to_string())
        .collect()
}

/// The Levenshtein distance between `a` and `b`, in characters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_are_a_few_edits_away_or_hold_the_name() {
        let names = [
            "search-per-api-key",
            "login-per-ip",
            "search-total",
            "reports",
        ];
        assert_eq!(
            close_names("search-per-apikey", names.into_iter()),
            ["search-per-api-key"]
        );
        assert_eq!(close_names("login", names.into_iter()), ["login-per-ip"]);
        assert!(close_names("zzz", names.into_iter()).is_empty());
    }
}
