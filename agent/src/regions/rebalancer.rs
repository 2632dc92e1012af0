//! The region's rebalancer: run by every agent, acting only on the one elected
//! ([`super::election`]). Once a period, for the period just over, it
//!
//! 1. seals its region's demand (so every region's rebalancer reads the same
//!    numbers, whatever an agent flushes late),
//! 2. reads the sealed demand of every region, its own included, waiting a short
//!    while for the others to seal theirs,
//! 3. if every region answered: computes its region's share of every active key
//!    ([`super::share::shares`]) and publishes them; otherwise keeps the last
//!    shares in force (it never takes a silent region's share for itself).
//!
//! Every rebalancer evaluates the same function on the same sealed demand, so the
//! shares the regions publish for a period sum to 1 with no further exchange.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::clock;
use super::conn::{RegionConn, RegionError};
use super::election::Leadership;
use super::exchange;
use super::share::shares;
use super::table::Entry;
use crate::regions::metrics::RegionMetrics;
use crate::shutdown::Shutdown;

/// Periods a key may go without demand anywhere before it is dropped (its
/// regions fall back to the floor).
pub(crate) const IDLE_PERIODS: u32 = 30;
/// The most keys with published shares; past it the keys with the least demand
/// take the floor.
pub(crate) const MAX_KEYS: usize = 50_000;

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tick {
    /// Another agent leads.
    Follower,
    /// New shares published for this many keys.
    Published { keys: usize },
    /// These regions could not be read: the last shares stay.
    Stale { regions: Vec<String> },
}

/// The rebalancer's state (kept across periods while this agent leads).
pub(crate) struct Rebalancer {
    /// This region first, then the peers.
    regions: Vec<Arc<RegionConn>>,
    floor: f64,
    lead: Arc<Leadership>,
    /// How long to wait for the other regions to seal a period.
    wait: Duration,
    /// Active keys and the periods each has gone without demand; loaded from the
    /// region's published shares when this agent becomes the leader.
    known: Option<HashMap<String, u32>>,
}

impl Rebalancer {
    pub fn new(
        regions: Vec<Arc<RegionConn>>,
        floor: f64,
        lead: Arc<Leadership>,
        wait: Duration,
    ) -> Self {
        Self {
            regions,
            floor,
            lead,
            wait,
            known: None,
        }
    }

    /// Rebalances after `period`, if this agent leads.
    pub(crate) async fn tick(
        &mut self,
        period: u64,
        metrics: &RegionMetrics,
    ) -> Result<Tick, RegionError> {
        let Some(own) = self.regions.first().cloned() else {
            return Ok(Tick::Follower);
        };
        if !self.lead.is_leader(Instant::now()) {
            self.known = None;
            return Ok(Tick::Follower);
        }
        let mut known = match self.known.take() {
            Some(k) => k,
            None => load_known(&own).await?,
        };
        exchange::seal(&own, period).await?;
        let mut demand = Vec::with_capacity(self.regions.len());
        let mut silent = Vec::new();
        for (conn, result) in self.regions.iter().zip(self.read_all(period).await) {
            metrics.region_peer(conn.region(), result.is_ok());
            match result {
                Ok(d) => demand.push(d),
                Err(e) => {
                    tracing::warn!("rebalance of period {period}: {e}");
                    silent.push(conn.region().to_string());
                }
            }
        }
        if !silent.is_empty() {
            self.known = Some(known);
            exchange::keep_alive(&own).await?;
            return Ok(Tick::Stale { regions: silent });
        }
        let entries = compute(&mut known, &demand, 0, self.floor, MAX_KEYS);
        self.known = Some(known);
        if !self.lead.is_leader(Instant::now()) {
            return Ok(Tick::Follower);
        }
        exchange::publish(&own, period, self.lead.id(), &entries).await?;
        Ok(Tick::Published {
            keys: entries.len(),
        })
    }

    /// Every region's sealed demand for `period`, read at once, in region order.
    async fn read_all(&self, period: u64) -> Vec<Result<HashMap<String, u64>, RegionError>> {
        let mut set = JoinSet::new();
        for (i, conn) in self.regions.iter().enumerate() {
            let (conn, wait) = (conn.clone(), self.wait);
            set.spawn(async move { (i, exchange::read_sealed(&conn, period, wait).await) });
        }
        let mut out: Vec<Result<HashMap<String, u64>, RegionError>> = self
            .regions
            .iter()
            .map(|c| {
                Err(RegionError::Redis {
                    region: c.region().to_string(),
                    reason: "read task failed".into(),
                })
            })
            .collect();
        while let Some(Ok((i, result))) = set.join_next().await {
            if let Some(entry) = out.get_mut(i) {
                *entry = result;
            }
        }
        out
    }
}

/// The shares of region `own` for every active key, from every region's demand
/// (`demand[r]`: key → tokens offered in region r). Updates `known`: keys with
/// demand anywhere become (or stay) active; keys idle for more than
/// [`IDLE_PERIODS`] are dropped, and past `max_keys` the least demanded are.
pub(crate) fn compute(
    known: &mut HashMap<String, u32>,
    demand: &[HashMap<String, u64>],
    own: usize,
    floor: f64,
    max_keys: usize,
) -> HashMap<String, Entry> {
    for region in demand {
        for key in region.keys() {
            known.entry(key.clone()).or_insert(0);
        }
    }
    let mut rows: Vec<(String, Vec<f64>, f64)> = Vec::with_capacity(known.len());
    known.retain(|key, idle| {
        let d: Vec<f64> = demand
            .iter()
            .map(|r| r.get(key).copied().unwrap_or(0) as f64)
            .collect();
        let total: f64 = d.iter().sum();
        *idle = if total > 0.0 {
            0
        } else {
            idle.saturating_add(1)
        };
        let keep = *idle <= IDLE_PERIODS;
        if keep {
            rows.push((key.clone(), d, total));
        }
        keep
    });
    if rows.len() > max_keys {
        rows.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        for (key, _, _) in rows.drain(max_keys..) {
            known.remove(&key);
        }
    }
    rows.into_iter()
        .map(|(key, d, total)| {
            let share = shares(&d, floor).get(own).copied().unwrap_or(floor);
            (
                key,
                Entry {
                    share,
                    demand: total,
                },
            )
        })
        .collect()
}

/// The keys a newly elected leader starts from: those its region publishes.
async fn load_known(own: &Arc<RegionConn>) -> Result<HashMap<String, u32>, RegionError> {
    let published = exchange::read_published(own).await?;
    Ok(published.into_keys().map(|k| (k, 0)).collect())
}

/// Ticks at `offset` into every period until shutdown.
pub async fn run(
    mut rebalancer: Rebalancer,
    metrics: Arc<RegionMetrics>,
    offset: Duration,
    mut shutdown: Shutdown,
) {
    loop {
        let period = tokio::select! {
            p = clock::at_offset(clock::PERIOD, offset) => p,
            _ = shutdown.wait() => return,
        };
        let started = Instant::now();
        let result = rebalancer.tick(period.saturating_sub(1), &metrics).await;
        let outcome = match &result {
            Ok(Tick::Follower) => None,
            Ok(Tick::Published { .. }) => Some("ok"),
            Ok(Tick::Stale { .. }) => Some("stale"),
            Err(e) => {
                tracing::warn!("rebalance of period {}: {e}", period.saturating_sub(1));
                Some("error")
            }
        };
        if let Some(outcome) = outcome {
            metrics.region_rebalance(outcome, started.elapsed());
        }
    }
}

#[cfg(test)]
mod tests;
