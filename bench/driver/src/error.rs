//! One error type for the driver: what failed, said so the person running
//! `make bench` can act on it (which process, which file, what it printed).

use std::fmt::Display;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BenchError(pub String);

pub type Result<T> = std::result::Result<T, BenchError>;

impl BenchError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl From<std::io::Error> for BenchError {
    fn from(e: std::io::Error) -> Self {
        Self(e.to_string())
    }
}

/// Adds what was being done to an error.
pub trait Context<T> {
    fn context(self, what: impl Display) -> Result<T>;
}

impl<T, E: Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Display) -> Result<T> {
        self.map_err(|e| BenchError(format!("{what}: {e}")))
    }
}
