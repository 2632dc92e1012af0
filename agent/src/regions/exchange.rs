//! The region exchange's Redis operations (key layout in [`super::keys`]). Work
//! over the key partitions runs at once, one pipeline per partition (one hash slot each), so
//! a tick costs a round trip or two to each region whatever the number of keys.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, Pipeline};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::conn::{RegionConn, RegionError};
use super::table::Entry;
use meshlimit_store::redis::keys::region::{
    self as keys, LEADER, META, PARTITIONS, PERIOD, SEALED,
};
use meshlimit_store::redis::script::{FLUSH_SCRIPT, SEAL_SCRIPT};

/// Demand keys live long enough to be sealed and read, not longer.
const DEMAND_TTL_MS: u64 = 10_000;
/// Published shares outlive any outage a region's agents could ride out: a dead
/// rebalancer leaves the last shares in force.
const SHARES_TTL_MS: u64 = 24 * 3_600 * 1_000;
/// How often a rebalancer looks whether a region has sealed the period yet.
const SEALED_POLL: Duration = Duration::from_millis(10);

/// Agents: adds demand counted in `period` to the region's Redis (every agent of
/// the region adds into the same hashes).
pub(crate) async fn flush(
    conn: &Arc<RegionConn>,
    period: u64,
    demand: HashMap<String, u64>,
) -> Result<(), RegionError> {
    each_partition::<redis::Value>(conn, flush_pipes(period, demand))
        .await
        .map(drop)
}

/// The pipelines of one flush, one per partition that has demand.
pub(crate) fn flush_pipes(period: u64, demand: HashMap<String, u64>) -> Vec<(usize, Pipeline)> {
    let mut pipes: Vec<Option<Pipeline>> = vec![None; PARTITIONS];
    for (key, tokens) in demand {
        let b = keys::partition(&key);
        if let Some(p) = pipes.get_mut(b) {
            p.get_or_insert_with(|| {
                let mut p = redis::pipe();
                p.cmd("EVAL")
                    .arg(FLUSH_SCRIPT)
                    .arg(3)
                    .arg(keys::demand(b, period))
                    .arg(keys::marker(b, period))
                    .arg(keys::demand(b, period + 1))
                    .arg(DEMAND_TTL_MS);
                p
            })
            .arg(key)
            .arg(tokens);
        }
    }
    pipes
        .into_iter()
        .enumerate()
        .filter_map(|(b, p)| p.map(|p| (b, p)))
        .collect()
}

/// The leader: seals its region's demand for `period`, then says so in the meta.
pub(crate) async fn seal(conn: &Arc<RegionConn>, period: u64) -> Result<(), RegionError> {
    let pipes = (0..PARTITIONS)
        .map(|b| {
            let mut p = redis::pipe();
            p.cmd("EVAL")
                .arg(SEAL_SCRIPT)
                .arg(3)
                .arg(keys::demand(b, period))
                .arg(keys::sealed(b, period))
                .arg(keys::marker(b, period))
                .arg(DEMAND_TTL_MS)
                .ignore();
            (b, p)
        })
        .collect();
    each_partition::<()>(conn, pipes).await?;
    conn.query(redis::cmd("HSET").arg(META).arg(SEALED).arg(period))
        .await
}

/// A leader: the demand a region sealed for `period`, waiting up to `wait` for
/// the region's own leader to seal it.
pub(crate) async fn read_sealed(
    conn: &Arc<RegionConn>,
    period: u64,
    wait: Duration,
) -> Result<HashMap<String, u64>, RegionError> {
    let until = Instant::now() + wait;
    loop {
        let sealed: Option<u64> = conn.query(redis::cmd("HGET").arg(META).arg(SEALED)).await?;
        if sealed.is_some_and(|s| s >= period) {
            break;
        }
        if Instant::now() + SEALED_POLL > until {
            return Err(RegionError::NotSealed {
                region: conn.region().to_string(),
                period,
            });
        }
        tokio::time::sleep(SEALED_POLL).await;
    }
    let pipes = (0..PARTITIONS)
        .map(|b| {
            let mut p = redis::pipe();
            p.cmd("HGETALL").arg(keys::sealed(b, period));
            (b, p)
        })
        .collect();
    let parts = each_partition::<(HashMap<String, u64>,)>(conn, pipes).await?;
    Ok(parts.into_iter().flat_map(|(_, (m,))| m).collect())
}

/// The leader: replaces its region's shares by `entries` (each partition in
/// one MULTI/EXEC, so an agent never reads a half-written partition), then announces
/// `period` in the meta; agents read the shares once they see it.
pub(crate) async fn publish(
    conn: &Arc<RegionConn>,
    period: u64,
    leader: &str,
    entries: &HashMap<String, Entry>,
) -> Result<(), RegionError> {
    let mut fields: Vec<Vec<(&str, String)>> = vec![Vec::new(); PARTITIONS];
    for (key, e) in entries {
        if let Some(f) = fields.get_mut(keys::partition(key)) {
            f.push((key.as_str(), e.encode()));
        }
    }
    let pipes = fields
        .into_iter()
        .enumerate()
        .map(|(b, f)| {
            let name = keys::shares(b);
            let mut p = redis::pipe();
            p.atomic().cmd("DEL").arg(&name).ignore();
            if !f.is_empty() {
                p.cmd("HSET").arg(&name).arg(&f).ignore();
                p.cmd("PEXPIRE").arg(&name).arg(SHARES_TTL_MS).ignore();
            }
            (b, p)
        })
        .collect();
    each_partition::<()>(conn, pipes).await?;
    conn.query(
        redis::cmd("HSET")
            .arg(META)
            .arg(PERIOD)
            .arg(period)
            .arg(LEADER)
            .arg(leader),
    )
    .await
}

/// The leader, when it cannot compute new shares: keeps the last ones alive.
pub(crate) async fn keep_alive(conn: &Arc<RegionConn>) -> Result<(), RegionError> {
    let pipes = (0..PARTITIONS)
        .map(|b| {
            let mut p = redis::pipe();
            p.cmd("PEXPIRE")
                .arg(keys::shares(b))
                .arg(SHARES_TTL_MS)
                .ignore();
            (b, p)
        })
        .collect();
    each_partition::<()>(conn, pipes).await.map(drop)
}

/// The period of the region's published shares, if any.
pub(crate) async fn published_period(conn: &RegionConn) -> Result<Option<u64>, RegionError> {
    conn.query(redis::cmd("HGET").arg(META).arg(PERIOD)).await
}

/// The region's published shares, as stored.
pub(crate) async fn read_published(
    conn: &Arc<RegionConn>,
) -> Result<HashMap<String, String>, RegionError> {
    let pipes = (0..PARTITIONS)
        .map(|b| {
            let mut p = redis::pipe();
            p.cmd("HGETALL").arg(keys::shares(b));
            (b, p)
        })
        .collect();
    let parts = each_partition::<(HashMap<String, String>,)>(conn, pipes).await?;
    Ok(parts.into_iter().flat_map(|(_, (m,))| m).collect())
}

/// Runs one pipeline per partition, all at once; the first error fails the whole.
async fn each_partition<T>(
    conn: &Arc<RegionConn>,
    pipes: Vec<(usize, Pipeline)>,
) -> Result<Vec<(usize, T)>, RegionError>
where
    T: FromRedisValue + Send + 'static,
{
    let mut set = JoinSet::new();
    for (partition, pipe) in pipes {
        let conn = conn.clone();
        set.spawn(async move { conn.pipe::<T>(&pipe).await.map(|v| (partition, v)) });
    }
    let mut out = Vec::with_capacity(set.len());
    let mut failure = None;
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(e)) => failure = Some(e),
            Err(e) => {
                failure = Some(RegionError::Redis {
                    region: conn.region().to_string(),
                    reason: e.to_string(),
                })
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
