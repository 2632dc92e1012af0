//! What can stop a simulation run.

use std::path::Path;

/// A run that could not be carried out (not a missed accuracy target: those are
/// results).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{file}: {detail}")]
    Scenario { file: String, detail: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// Starting Redis or an agent failed (the harness says why).
    #[error("starting {what}: {detail}")]
    Start { what: String, detail: String },
    #[error("{0}")]
    Run(String),
    #[error("drawing the plot: {0}")]
    Plot(String),
}

impl SimError {
    pub fn io(path: &Path, source: std::io::Error) -> SimError {
        SimError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
