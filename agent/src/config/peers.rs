//! Peer regions as the command line gives them: `--peer-region NAME=URL` and
//! the lines of `--peer-regions-file`. What the agent does with them is
//! `regions::setup`'s.

use super::StoreSpec;

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
