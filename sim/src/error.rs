//! What can stop a simulation run.

use std::path::Path;

/// A run that could not be carried out (not a missed accuracy target: those are
/// results).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{file}: {detail}")]
    Scenario { file: String, detail: ScenarioError },
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
    /// The agent's address does not make a URI (a port the harness chose).
    #[error("agent address: {0}")]
    AgentAddress(#[from] hyper::http::uri::InvalidUri),
    #[error("drawing the plot: {0}")]
    Plot(String),
}

/// What is wrong in a scenario file (the file is named by
/// [`SimError::Scenario`]).
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Not YAML, an unknown field, or a field of the wrong type (boxed: the
    /// reader's error is large, and every `SimError` would carry its size).
    #[error("{0}")]
    Syntax(Box<serde_saphyr::Error>),
    #[error("gateways and agents must be at least 1")]
    Fleet,
    #[error("duration must be positive and longer than warmup")]
    Duration,
    #[error("a cluster needs at least one master")]
    EmptyCluster,
    #[error("traffic.keys must be at least 1")]
    Keys,
    #[error("traffic.rate: rates must be finite and not negative")]
    Rate,
    #[error("traffic.popularity.hot.share must be within [0, 1]")]
    HotShare,
    #[error("traffic.popularity.zipf.s must be at least 0")]
    ZipfExponent,
    #[error("traffic.spread.one.share must be within [0, 1]")]
    OneShare,
    #[error("traffic.spread.range needs from < to")]
    Range,
    #[error("traffic.spread.skewed.s must be at least 0")]
    SkewedExponent,
    #[error("network: delays must be finite and not negative")]
    Delays,
    #[error("network.loss must be within [0, 1]")]
    Loss,
    #[error("{0}")]
    Rules(#[from] meshlimit_core::rules::RulesError),
    /// The harness's deployment secret, refused as the filter's VM would.
    #[error("{0}")]
    Secret(#[from] meshlimit_core::secret::SecretError),
    /// The `filter` section, refused as a plugin configuration.
    #[error("{0}")]
    Filter(#[from] meshlimit_filter::config::ConfigError),
}

impl SimError {
    pub fn io(path: &Path, source: std::io::Error) -> SimError {
        SimError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
