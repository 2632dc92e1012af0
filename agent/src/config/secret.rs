//! Where the deployment's secret comes from: the agent's `run` and the
//! operator's commands (`meshlimit key-id`, `replay`, `override`) read it alike.

use std::path::PathBuf;

use clap::Args;
use meshlimit_core::secret::Secret;

use super::ConfigError;

/// Where the deployment's secret comes from.
#[derive(Debug, Clone, Args)]
pub struct SecretArgs {
    /// The deployment's secret, at least 32 bytes (`openssl rand -hex 32`). Set
    /// it through the environment (from a Kubernetes Secret), not on the command
    /// line, where other users of the host can read it.
    #[arg(
        long = "secret",
        env = "MESHLIMIT_SECRET",
        hide_env_values = true,
        hide = true
    )]
    pub secret: Option<String>,
    /// A file holding the deployment's secret (a mounted Kubernetes Secret); used
    /// when MESHLIMIT_SECRET is not set.
    #[arg(long, env = "MESHLIMIT_SECRET_FILE", value_name = "PATH")]
    pub(crate) secret_file: Option<PathBuf>,
}

impl SecretArgs {
    /// The secret, from MESHLIMIT_SECRET or else the file. Refused when absent or
    /// too short: an agent without one would serve any caller.
    pub fn load(&self) -> Result<Secret, ConfigError> {
        let bytes = match (&self.secret, &self.secret_file) {
            (Some(s), _) => s.clone().into_bytes(),
            (None, Some(path)) => std::fs::read(path)
                .map_err(|e| ConfigError::Secret(format!("cannot read {}: {e}", path.display())))?,
            (None, None) => {
                return Err(ConfigError::Secret(
                    "none given: set MESHLIMIT_SECRET or --secret-file (see docs/operations/deploying.md)"
                        .into(),
                ))
            }
        };
        Secret::new(&bytes).map_err(|e| ConfigError::Secret(e.to_string()))
    }
}
