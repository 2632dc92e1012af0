//! The lease service behind `POST /v1/lease`: finds each item's rule and limit in the
//! rules in force, sizes the lease, asks the store once for the whole request, and
//! turns the store's answers into wire answers.
//!
//! How big a lease is, and how long a key is held: `meshlimit_core::policy`,
//! with the service's settings in `settings`. One request's
//! items and answers: `answer`. What a store answer leaves in the node pool and
//! how long a denial holds: `settle`. The pool's background refills: `refill`.
//! The pool's tokens back to the store as the agent stops: `hand_back`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use meshlimit_core::wire::{LeaseRequest, LeaseResponse, WIRE_VERSION};
use meshlimit_core::NANOS_PER_SEC;
use tokio::sync::Semaphore;

use crate::fail_local::FailLocal;
use crate::false_limits::FalseLimits;
use crate::pool::Pools;
use crate::regions::Shares;
use crate::rules_watch::CurrentRules;
use meshlimit_store::Buckets;

mod answer;
mod hand_back;
pub mod metrics;
mod refill;
mod settings;
mod settle;

use answer::Pass;
pub use hand_back::HandedBack;
pub use metrics::LeaseMetrics;
pub use settings::{LeaseSettings, DEFAULT_MAX_KEYS};

/// Passes over one request's items: the first, and one after each wait on
/// another ask's store call for the same key. An item still waiting in the
/// last pass calls the store itself, so no ask waits more than twice.
const ROUNDS: usize = 3;

/// Answers lease requests.
pub struct LeaseService {
    rules: Arc<CurrentRules>,
    store: Arc<dyn Buckets>,
    metrics: Arc<LeaseMetrics>,
    settings: LeaseSettings,
    /// Caps the store calls in flight: past it work is shed (the filter applies the
    /// rule's failure policy at once) rather than queued behind a slow store.
    inflight: Semaphore,
    pools: Pools,
    epoch: Instant,
    /// This region's share of `global` rules, and their demand.
    shares: Shares,
    /// The node's fail-local buckets, used while the store is unreachable.
    fail_local: FailLocal,
    /// Agents alive in the region, from the heartbeat task; 0 = unknown.
    live_nodes: Arc<AtomicU32>,
    last_log_ns: AtomicU64,
    /// The node's false-limit checker, offered the pool's denials as they are
    /// made (none: they are not checked).
    false_limits: Option<Arc<FalseLimits>>,
}

/// Waits until every receiver has been sent to (or its sender is gone).
async fn futures_wait_all(waits: Vec<tokio::sync::broadcast::Receiver<()>>) {
    for mut rx in waits {
        let _ = rx.recv().await;
    }
}

impl LeaseService {
    /// A service answering from `store` under `rules`, offering the node
    /// pool's denials to `false_limits`.
    pub fn new(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Buckets>,
        metrics: Arc<LeaseMetrics>,
        settings: LeaseSettings,
        false_limits: Option<Arc<FalseLimits>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            rules,
            store,
            metrics,
            // `Semaphore::new` panics above MAX_PERMITS; clamp rather than trust the caller.
            inflight: Semaphore::new(settings.max_inflight.clamp(1, Semaphore::MAX_PERMITS)),
            settings,
            pools: Pools::new(settings.max_keys, settings.policy.ask_period_ns()),
            epoch: Instant::now(),
            shares: Shares::default(),
            fail_local: FailLocal::new(settings.max_keys),
            live_nodes: Arc::default(),
            last_log_ns: AtomicU64::new(0),
            false_limits,
        })
    }

    /// Drops the node pool's idle keys (nothing pooled, no denial, no demand).
    pub fn sweep_pools(&self) {
        self.pools.sweep(self.now_ns());
    }

    /// Keys the node pool holds.
    pub(crate) fn pool_view(
        &self,
        matches: impl Fn(&meshlimit_core::DescriptorKey) -> bool,
    ) -> Vec<crate::pool::PoolView> {
        self.pools.view(self.now_ns(), matches)
    }

    /// The lease path's metrics.
    pub fn metrics(&self) -> &Arc<LeaseMetrics> {
        &self.metrics
    }

    /// The store the leases are taken from.
    pub(crate) fn store(&self) -> &Arc<dyn Buckets> {
        &self.store
    }

    pub fn pooled_keys(&self) -> usize {
        self.pools.len()
    }

    /// The handle through which the region tasks set this service's shares.
    pub fn shares(&self) -> Shares {
        self.shares.clone()
    }

    /// Answers every item of a (validated) request, in order: from the node pool
    /// where it can, otherwise with one store call a round for the rest. An
    /// item whose key has a store call in flight at this agent waits for that
    /// call (at most the store deadline), then takes from the pool again.
    pub async fn lease(self: &Arc<Self>, req: &LeaseRequest) -> LeaseResponse {
        let rules = self.rules.get();
        let mut pass = Pass::new(req.items.len());
        for round in 0..ROUNDS {
            if round > 0 {
                if pass.waits.is_empty() {
                    break;
                }
                let deadline = self.call_timeout();
                self.metrics.pool_waits(pass.waits.len());
                let all = futures_wait_all(std::mem::take(&mut pass.waits));
                let _ = tokio::time::timeout(deadline, all).await;
            }
            let indices: Vec<usize> = if round == 0 {
                (0..req.items.len()).collect()
            } else {
                pass.answers
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| a.is_none())
                    .map(|(i, _)| i)
                    .collect()
            };
            self.first_pass(req, rules.as_deref(), &indices, round, &mut pass);
            // The round's store call goes out before anyone waits: an item of
            // this request, or of another, may wait on one of its keys, and a
            // call made only after this request's own waits would keep that
            // item waiting the whole deadline for nothing.
            self.call_and_answer(&mut pass).await;
        }
        let answers = pass.answers;
        self.shares
            .record_offered(rules.as_deref(), &req.items, &answers);
        LeaseResponse {
            v: WIRE_VERSION,
            items: answers
                .into_iter()
                .map(|a| a.unwrap_or_else(|| self.unavailable("internal")))
                .collect(),
        }
    }

    /// Sends the pass's store asks as one call and answers their items.
    async fn call_and_answer(self: &Arc<Self>, pass: &mut Pass<'_>) {
        if pass.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut pass.batch);
        let pending = std::mem::take(&mut pass.pending);
        let results = self.call_store(&batch).await;
        let now = self.now_ns();
        for ((p, acquire), result) in pending.iter().zip(&batch).zip(results) {
            pass.answers[p.index] = Some(self.answer(p, acquire, now, result));
        }
    }

    /// The deadline of one store call (and of a wait on another ask's call),
    /// with a millisecond's margin for the scheduling around it.
    pub(super) fn call_timeout(&self) -> Duration {
        self.settings.store_deadline + Duration::from_millis(1)
    }

    /// Nanoseconds on tokio's clock since the service started.
    pub(super) fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Agents alive in the region (1 until the heartbeats tell).
    pub(super) fn live_nodes(&self) -> u32 {
        self.live_nodes.load(Ordering::Relaxed).max(1)
    }

    /// The handle the heartbeat task keeps up to date.
    pub fn live_nodes_handle(&self) -> Arc<AtomicU32> {
        self.live_nodes.clone()
    }

    /// True at most once a second: a store outage must not flood the log.
    pub(super) fn should_log(&self, now: u64) -> bool {
        let last = self.last_log_ns.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= NANOS_PER_SEC;
        due && self
            .last_log_ns
            .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

#[cfg(test)]
mod tests;
