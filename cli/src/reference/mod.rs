//! The generated reference pages of the book (docs/reference/): each made
//! from the code that is the truth of it, so that none can drift from it.
//!
//! - `cli-meshlimit.md` and `cli-agent.md`: the clap definitions of the
//!   `meshlimit` and `meshlimit-agent` command lines ([`commands`]);
//! - `metrics.md`: every metric the agent registers, as `run` wires them
//!   ([`metrics`]);
//! - `rules.md`: the rules file's JSON Schema, the one the rules types give and
//!   docs/rules.schema.json holds ([`rules`]).
//!
//! The test `cli/tests/it/reference.rs` compares each page with the committed
//! file and, with `MESHLIMIT_BLESS=1`, rewrites them ([`REGENERATE`]).

pub mod commands;
mod markdown;
pub mod metrics;
pub mod rules;

use meshlimit_agent::metrics::MetricsError;

/// The command that rewrites every generated page.
pub const REGENERATE: &str = "make reference";

/// One generated page: where it lives (from the repository's root) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub path: &'static str,
    pub text: String,
}

/// A page could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("the agent's metrics could not be registered: {0}")]
    Metrics(#[from] MetricsError),
    #[error("the rules schema has no usable {0}")]
    Schema(String),
}

/// Every generated page, rendered from the code.
pub fn pages() -> Result<Vec<Page>, ReferenceError> {
    Ok(vec![
        Page {
            path: "docs/reference/cli-meshlimit.md",
            text: commands::meshlimit_page(),
        },
        Page {
            path: "docs/reference/cli-agent.md",
            text: commands::agent_page(),
        },
        Page {
            path: "docs/reference/metrics.md",
            text: metrics::page()?,
        },
        Page {
            path: "docs/reference/rules.md",
            text: rules::page()?,
        },
    ])
}

/// The first line of every generated page: what made it, how to remake it.
fn generated_by(source: &str) -> String {
    format!(
        "<!-- Generated from {source} by cli/src/reference/; do not edit. \
         Regenerate: {REGENERATE} -->\n"
    )
}
