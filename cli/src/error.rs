//! What a command can fail with, and the exit code each gives: the one place
//! `meshlimit` maps failures to exit codes (0 ok, 1 invalid or failed, 2 an
//! ambiguous request, 64 usage).

use meshlimit_agent::config::{ConfigError, EXIT_USAGE};

use crate::fleet_override::OverrideError;
use crate::import::MapError;
use crate::replay::ReplayCommandError;

/// A failure the command has already described on its diagnostics stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Reported {
    /// The input is invalid, unreadable or refused (`check-rules`' errors, a
    /// rules change beyond its guard, `import`'s refusals), or the output
    /// could not be written.
    #[error("refused, as reported")]
    Refused,
    /// `explain`: the request is ambiguous (a header a rule keys on, given
    /// twice), which the filter answers 400.
    #[error("an ambiguous request, as reported")]
    Ambiguous,
}

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
    /// `import`: a `--map` of no known shape.
    #[error(transparent)]
    Map(#[from] MapError),
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
    /// refusals, `explain`'s ambiguous request).
    #[error(transparent)]
    Reported(#[from] Reported),
}

impl CliError {
    /// The process's exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) | CliError::Map(_) => EXIT_USAGE,
            CliError::Replay(_)
            | CliError::Override(_)
            | CliError::UnknownRule { .. }
            | CliError::KeyParts { .. }
            | CliError::Reported(Reported::Refused) => 1,
            CliError::Reported(Reported::Ambiguous) => 2,
        }
    }

    /// The exit code of a command's `result`: 0 for `Ok`.
    pub fn code_of(result: &Result<(), CliError>) -> u8 {
        result.as_ref().err().map_or(0, CliError::exit_code)
    }

    /// Whether `main` still has to say what went wrong (a reported failure
    /// has said it).
    pub fn needs_message(&self) -> bool {
        !matches!(self, CliError::Reported(_))
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
    fn each_failure_has_its_exit_code_and_a_reported_one_no_message() {
        let code = |r: Result<(), CliError>| CliError::code_of(&r);
        assert_eq!(code(Ok(())), 0);
        assert_eq!(code(Err(Reported::Refused.into())), 1);
        assert_eq!(code(Err(Reported::Ambiguous.into())), 2);
        let map = crate::import::Mapping::from_options(&["x".into()]).unwrap_err();
        assert_eq!(code(Err(map.into())), EXIT_USAGE);
        assert!(!CliError::from(Reported::Refused).needs_message());
    }

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
