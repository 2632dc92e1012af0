//! The regions setup from the command line: `--region`, `--peer-region NAME=URL`
//! (repeatable), `--peer-regions-file`, `--region-floor`, `--region-timeout-ms`.
//! Every mistake is refused at start (exit 64) with one line saying why. The
//! peers themselves are read by `config::peers`; this module depends on the
//! configuration, never the other way round.

use meshlimit_core::secret::KeyIds;
use std::collections::HashSet;
use std::time::Duration;

use super::RegionsConfig;
use crate::config::peers::{parse_peers_file, RegionsSetupError};
use crate::config::{ConfigError, RunArgs, StoreSpec};

/// The regions setup of `args`, or `None` without peer regions (every rule is
/// then enforced whole in this region). `agent_id` names this agent in the election.
pub(crate) fn regions_config(
    args: &RunArgs,
    agent_id: &str,
    key_ids: &KeyIds,
) -> Result<Option<RegionsConfig>, ConfigError> {
    let mut peers = args.peer_regions.clone();
    if let Some(path) = &args.peer_regions_file {
        let text =
            std::fs::read_to_string(path).map_err(|source| RegionsSetupError::ReadPeers {
                path: path.clone(),
                source,
            })?;
        let more = parse_peers_file(&text).map_err(|source| RegionsSetupError::PeersFile {
            path: path.clone(),
            source,
        })?;
        peers.extend(more);
    }
    if peers.is_empty() {
        return Ok(None);
    }
    let cfg = RegionsConfig {
        region: args.region.clone(),
        store: args.store.clone(),
        peers: peers.clone(),
        floor: args.region_floor,
        agent_id: agent_id.to_string(),
        credentials: args.redis_connect()?,
        peer_credentials: peers
            .iter()
            .map(|(name, spec)| {
                let connect = args.region_connect(name, spec, |v| std::env::var(v).ok())?;
                Ok((name.clone(), connect))
            })
            .collect::<Result<_, ConfigError>>()?,
        timeout: Duration::from_millis(args.region_timeout_ms),
        key_ids: key_ids.clone(),
    };
    validate(&cfg)?;
    Ok(Some(cfg))
}

/// Checks a regions setup: unique names, Redis stores, a floor every region can hold.
pub(crate) fn validate(cfg: &RegionsConfig) -> Result<(), RegionsSetupError> {
    if matches!(cfg.store, StoreSpec::Memory) {
        return Err(RegionsSetupError::NotRedis);
    }
    let mut seen = HashSet::new();
    for name in std::iter::once(&cfg.region).chain(cfg.peers.iter().map(|(n, _)| n)) {
        if !seen.insert(name) {
            return Err(RegionsSetupError::NamedTwice(name.clone()));
        }
    }
    let regions = 1 + cfg.peers.len();
    if !(cfg.floor > 0.0 && cfg.floor * regions as f64 <= 1.0) {
        return Err(RegionsSetupError::Floor {
            floor: cfg.floor,
            regions,
        });
    }
    Ok(())
}
