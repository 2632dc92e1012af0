//! The regions setup from the command line: `--region`, `--peer-region NAME=URL`
//! (repeatable), `--peer-regions-file`, `--region-floor`, `--region-timeout-ms`.
//! Every mistake is refused at start (exit 64) with one line saying why.

use meshlimit_core::secret::KeyIds;
use std::collections::HashSet;
use std::time::Duration;

use super::RegionsConfig;
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
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Regions(format!("{}: {e}", path.display())))?;
        let more = parse_peers_file(&text)
            .map_err(|e| ConfigError::Regions(format!("{}: {e}", path.display())))?;
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
    validate(&cfg).map_err(ConfigError::Regions)?;
    Ok(Some(cfg))
}

/// Reads a peer regions file: one `NAME=URL` a line; blank lines and `#`
/// comments are skipped.
pub(crate) fn parse_peers_file(text: &str) -> Result<Vec<(String, StoreSpec)>, String> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(n, l)| parse_peer(l).map_err(|e| format!("line {n}: {e}")))
        .collect()
}

/// Reads `NAME=URL`, the URL as `--store` takes it (redis://, redis+cluster://,
/// or rediss for TLS). Credentials never travel in the URL (it is logged): see
/// `--region-credentials-dir`.
pub(crate) fn parse_peer(text: &str) -> Result<(String, StoreSpec), String> {
    let (name, url) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}`: expected NAME=redis://HOST:PORT"))?;
    let name = name.trim();
    let valid = (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid {
        return Err(format!(
            "`{name}`: a region is 1 to 63 characters of [A-Za-z0-9._-]"
        ));
    }
    match StoreSpec::parse(url)? {
        StoreSpec::Memory => Err(format!("region {name}: a peer region needs a Redis URL")),
        spec => Ok((name.to_string(), spec)),
    }
}

/// Checks a regions setup: unique names, Redis stores, a floor every region can hold.
pub(crate) fn validate(cfg: &RegionsConfig) -> Result<(), String> {
    if matches!(cfg.store, StoreSpec::Memory) {
        return Err("peer regions need this region's store to be Redis (--store redis://…)".into());
    }
    let mut seen = HashSet::new();
    for name in std::iter::once(&cfg.region).chain(cfg.peers.iter().map(|(n, _)| n)) {
        if !seen.insert(name) {
            return Err(format!(
                "region {name} is named twice (--region, --peer-region)"
            ));
        }
    }
    let regions = 1 + cfg.peers.len();
    if !(cfg.floor > 0.0 && cfg.floor * regions as f64 <= 1.0) {
        return Err(format!(
            "--region-floor {} cannot hold for {regions} regions: it must be above 0 and at most 1/{regions}",
            cfg.floor
        ));
    }
    Ok(())
}
