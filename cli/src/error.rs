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
            CliError::Replay(_) | CliError::Override(_) => 1,
            CliError::Reported { code } => *code,
        }
    }

    /// Whether `main` still has to say what went wrong (a reported failure
    /// has said it).
    pub fn needs_message(&self) -> bool {
        !matches!(self, CliError::Reported { .. })
    }
}
