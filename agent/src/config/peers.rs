//! Peer regions as the command line gives them: `--peer-region NAME=URL` and
//! the lines of `--peer-regions-file`. What the agent does with them is
//! `regions::setup`'s.

use super::StoreSpec;
use meshlimit_store::spec::StoreSpecError;
use std::path::PathBuf;

/// Why a peer region (`NAME=URL`) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    #[error("`{0}`: expected NAME=redis://HOST:PORT")]
    Shape(String),
    #[error("`{0}`: a region is 1 to 63 characters of [A-Za-z0-9._-]")]
    Name(String),
    #[error(transparent)]
    Store(#[from] StoreSpecError),
    #[error("region {0}: a peer region needs a Redis URL")]
    NotRedis(String),
}

/// A refused line of a peer regions file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {source}")]
pub struct PeersFileError {
    pub line: usize,
    pub source: PeerError,
}

/// Reads a peer regions file: one `NAME=URL` a line; blank lines and `#`
/// comments are skipped.
pub(crate) fn parse_peers_file(text: &str) -> Result<Vec<(String, StoreSpec)>, PeersFileError> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(line, l)| parse_peer(l).map_err(|source| PeersFileError { line, source }))
        .collect()
}

/// Reads `NAME=URL`, the URL as `--store` takes it (redis://, redis+cluster://,
/// or rediss for TLS). Credentials never travel in the URL (it is logged): see
/// `--region-credentials-dir`.
pub(crate) fn parse_peer(text: &str) -> Result<(String, StoreSpec), PeerError> {
    let (name, url) = text
        .split_once('=')
        .ok_or_else(|| PeerError::Shape(text.to_string()))?;
    let name = name.trim();
    let valid = (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid {
        return Err(PeerError::Name(name.to_string()));
    }
    match StoreSpec::parse(url)? {
        StoreSpec::Memory => Err(PeerError::NotRedis(name.to_string())),
        spec => Ok((name.to_string(), spec)),
    }
}

/// Why the regions setup was refused at start.
#[derive(Debug, thiserror::Error)]
pub enum RegionsSetupError {
    #[error("{}: {source}", path.display())]
    ReadPeers {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    PeersFile {
        path: PathBuf,
        source: PeersFileError,
    },
    #[error("peer regions need this region's store to be Redis (--store redis://…)")]
    NotRedis,
    #[error("region {0} is named twice (--region, --peer-region)")]
    NamedTwice(String),
    #[error("--region-floor {floor} cannot hold for {regions} regions: it must be above 0 and at most 1/{regions}")]
    Floor { floor: f64, regions: usize },
}
