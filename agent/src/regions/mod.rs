//! Regions (docs/guide/regions.md, docs/design/regions.md): each region owns
//! its Redis and enforces a share of every `scope: global` limit; shares follow
//! demand once a period (a second) and always sum to the limit. No
//! cross-region round trip ever enters the
//! request path: the lease path reads a cached share ([`Shares::share`]) and adds
//! to an in-memory demand count ([`Shares::record_offered`]); background tasks do
//! the rest:
//!
//! - every agent flushes its demand into its region's Redis a few times a period
//!   and refreshes its cached shares once a period ([`cache`]);
//! - one agent per region, elected through a lock in that Redis ([`election`]),
//!   seals the region's demand, reads every region's, and publishes its region's
//!   shares ([`rebalancer`], the function in [`share`]).
//!
//! Static stability: an agent with no published share for a key uses the floor;
//! cached shares stay when Redis does not answer; a rebalancer that cannot read
//! every region publishes nothing new. The split degrades to static, never to
//! unlimited. Redis keys: [`meshlimit_store::redis::keys::region`]; the rest
//! in `docs/design/regions.md`.

pub(crate) mod cache;
pub mod clock;
pub mod conn;
pub(crate) mod demand;
pub(crate) mod election;
pub(crate) mod exchange;
pub mod metrics;
pub(crate) mod rebalancer;
pub(crate) mod setup;
pub(crate) mod share;
pub mod table;

use meshlimit_core::secret::KeyIds;

use meshlimit_store::redis::keys::region as keys;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use meshlimit_core::rules::{Rule, RuleSet, Scope};
use meshlimit_core::wire::{LeaseAnswer, LeaseItem};
use meshlimit_core::DescriptorKey;
use tokio::task::JoinSet;

use crate::config::StoreSpec;
use crate::shutdown::Shutdown;
use conn::{RegionConn, RegionError};
use demand::{DemandBook, PeriodDemand};
use election::Leadership;
use meshlimit_store::redis::client::Connect;
use metrics::RegionMetrics;
use rebalancer::Rebalancer;
use table::ShareTable;

pub(crate) use setup::regions_config;

/// The rebalancer seals and reads at this offset into each period: after the
/// agents' last flush of the period ([`cache::FLUSH_AT`]).
pub(crate) const REBALANCE_AT: Duration = Duration::from_millis(10);
/// Keys whose demand one agent counts per period, at most.
const MAX_DEMAND_KEYS: usize = 100_000;

/// How this agent takes part in the region exchange.
#[derive(Debug, Clone)]
pub(crate) struct RegionsConfig {
    /// This agent's region and its Redis.
    pub(crate) region: String,
    pub(crate) store: StoreSpec,
    /// Every other region and its Redis.
    pub(crate) peers: Vec<(String, StoreSpec)>,
    /// The least share of a global limit a region ever holds.
    pub(crate) floor: f64,
    /// This agent's id in the election.
    pub(crate) agent_id: String,
    /// How to reach this region's Redis (its credentials and TLS).
    pub(crate) credentials: Connect,
    /// How to reach each peer's Redis: its own credentials, never this region's.
    pub(crate) peer_credentials: std::collections::BTreeMap<String, Connect>,
    /// Deadline of each Redis call of the region tasks, and how long a
    /// rebalancer waits for the other regions to seal a period.
    pub(crate) timeout: Duration,
    /// How keys are named in the regions' Redis (from the deployment secret).
    pub(crate) key_ids: KeyIds,
}

/// The lease path's view of the regions: a cheap handle, shared with the region
/// tasks. Until [`Shares::enable`] (no peer regions), every rule gets the whole
/// limit and nothing is counted.
#[derive(Clone, Default)]
pub struct Shares {
    cell: Arc<OnceLock<Regional>>,
}

struct Regional {
    floor: f64,
    table: ArcSwap<ShareTable>,
    demand: DemandBook,
    /// Names keys in every region's Redis (demand and share hashes).
    ids: KeyIds,
}

impl Shares {
    /// Turns regions on with this floor; false if they were already on.
    pub fn enable(&self, floor: f64, ids: KeyIds) -> bool {
        self.cell
            .set(Regional {
                floor,
                table: ArcSwap::from_pointee(ShareTable::default()),
                demand: DemandBook::new(MAX_DEMAND_KEYS),
                ids,
            })
            .is_ok()
    }

    /// True when `rule` is split between regions.
    pub(crate) fn is_split(&self, rule: &Rule) -> bool {
        rule.scope == Scope::Global && self.cell.get().is_some()
    }

    /// The share of `rule`'s limit this region enforces for `key`: 1 for
    /// region-scoped rules (and without peers), else the published share, or the
    /// floor while none is published.
    pub(crate) fn share(&self, rule: &Rule, key: &DescriptorKey) -> f64 {
        match self.cell.get() {
            Some(r) if rule.scope == Scope::Global => r
                .table
                .load()
                .get(&keys::exchange_key(&r.ids, key))
                .map_or(r.floor, |e| e.share),
            _ => 1.0,
        }
    }

    /// Counts what a lease request offered for split rules: the tokens granted,
    /// or the cost of an ask denied or unanswered.
    pub(crate) fn record_offered(
        &self,
        rules: Option<&RuleSet>,
        items: &[LeaseItem],
        answers: &[Option<LeaseAnswer>],
    ) {
        let (Some(r), Some(rules)) = (self.cell.get(), rules) else {
            return;
        };
        let period = clock::period_of(clock::now_ms());
        for (item, answer) in items.iter().zip(answers) {
            if !rules
                .rule(&item.rule)
                .is_some_and(|rule| self.is_split(rule))
            {
                continue;
            }
            let tokens = match answer {
                Some(LeaseAnswer::Grant { tokens, .. }) => *tokens,
                _ => item.cost,
            };
            // A denied ask counts what its rule costs (the API refuses any other
            // cost), so no caller books demand beyond what it could spend.
            r.demand.record(
                &keys::exchange_key(&r.ids, &item.key),
                u64::from(tokens),
                period,
            );
        }
    }

    /// The cached shares.
    pub fn table(&self) -> Arc<ShareTable> {
        self.cell
            .get()
            .map(|r| r.table.load_full())
            .unwrap_or_default()
    }

    /// Replaces the cached shares (the refresh task; tests).
    pub fn install(&self, table: ShareTable) {
        if let Some(r) = self.cell.get() {
            r.table.store(Arc::new(table));
        }
    }

    /// Takes the demand counted so far (the flush task).
    pub fn take_demand(&self) -> PeriodDemand {
        self.cell.get().map(|r| r.demand.take()).unwrap_or_default()
    }
}

/// How many demand flushes each agent sends its region's Redis a second.
pub fn flushes_per_second() -> f64 {
    cache::FLUSH_EVERY.as_secs_f64().recip()
}

/// The bytes one demand flush sends to the region's Redis for `demand` (key →
/// tokens, keys as [`keys::exchange_key`] names them) counted in `period`:
/// every partition's pipeline as encoded on the wire. The capacity figures
/// (`make capacity-inputs`) read it.
pub fn flush_bytes(period: u64, demand: std::collections::HashMap<String, u64>) -> usize {
    exchange::flush_pipes(period, demand)
        .iter()
        .map(|(_, p)| p.get_packed_pipeline().len())
        .sum()
}

/// Starts the region tasks of this agent and turns `shares` on.
pub(crate) fn start(
    cfg: &RegionsConfig,
    shares: &Shares,
    metrics: &Arc<RegionMetrics>,
    tasks: &mut JoinSet<()>,
    shutdown: &Shutdown,
) -> Result<(), RegionError> {
    let own = Arc::new(RegionConn::new(
        &cfg.region,
        &cfg.store,
        &cfg.credentials,
        cfg.timeout,
    )?);
    let mut regions = vec![own.clone()];
    for (name, spec) in &cfg.peers {
        regions.push(Arc::new(RegionConn::new(
            name,
            spec,
            &cfg.peer_credentials.get(name).cloned().unwrap_or_default(),
            cfg.timeout,
        )?));
    }
    shares.enable(cfg.floor, cfg.key_ids.clone());
    let lead = Arc::new(Leadership::new(&cfg.agent_id));
    let rebalancer = Rebalancer::new(regions, cfg.floor, lead.clone(), cfg.timeout);
    let (m, s) = (metrics, shutdown);
    tasks.spawn(election::run(own.clone(), lead, m.clone(), s.clone()));
    tasks.spawn(rebalancer::run(
        rebalancer,
        m.clone(),
        REBALANCE_AT,
        s.clone(),
    ));
    tasks.spawn(cache::flush_loop(
        own.clone(),
        shares.clone(),
        m.clone(),
        s.clone(),
    ));
    tasks.spawn(cache::refresh_loop(
        own,
        shares.clone(),
        m.clone(),
        s.clone(),
    ));
    Ok(())
}

#[cfg(test)]
mod tests;
