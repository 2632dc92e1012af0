//! The lease service behind `POST /v1/lease`: finds each item's rule and limit in the
//! rules in force, sizes the lease, asks the store once for the whole request, and
//! turns the store's answers into wire answers.
//!
//! Lease sizing: a rule marked `accuracy: exact`, or slower than
//! `--exact-below-rps`, gets leases of exactly the request's cost, so every request
//! is checked in the store. Any other rule goes through the node pool
//! ([`crate::pool`]) and, on a pool miss, takes from the store
//! `max(cost, min(ceil(demand × lease_target), max(1, burst / 10)))` tokens, where
//! `demand` is this node's recent demand for the key (tokens per second): about
//! `lease_target` (100 ms) of what the node spends, so a hot key costs the store
//! about ten calls per second per node whatever its request rate; never more than
//! a tenth of the burst per node, so what idle nodes hold stays a small part of
//! the limit; and a cold key starts at one token (every request checked) until its
//! demand shows. A store denial is cached at the node until a whole lease's worth
//! of tokens is back, so a key over its limit costs the store the same ten calls
//! per second per node.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use meshlimit_core::rules::{Accuracy, FailurePolicy, Rule};
use meshlimit_core::wire::{LeaseAnswer, LeaseRequest, LeaseResponse, WIRE_VERSION};
use meshlimit_core::{DescriptorKey, Limit, Take, NANOS_PER_MS, NANOS_PER_SEC};
use tokio::sync::Semaphore;

use crate::config::defaults;
use crate::fallback::Fallback;
use crate::metrics::Metrics;
use crate::pool::{PoolTake, Pools, StoreGrant};
use crate::regions::Shares;
use crate::rules_watch::CurrentRules;
use crate::store::{Acquire, Acquired, Store, StoreError};

/// `--max-keys`' default: the per-key tables' cap (see `crate::store::memory` for
/// the memory it bounds). Defined in `config::defaults`.
pub const DEFAULT_MAX_KEYS: usize = defaults::MAX_KEYS as usize;

/// The tunables of lease sizing and handling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseSettings {
    /// How long a filter may spend a granted lease.
    pub ttl: Duration,
    /// A lease holds about this much of the rule's rate.
    pub target: Duration,
    /// Rules slower than this (requests per second) get leases of one request.
    pub exact_below_rps: f64,
    /// Lease requests served at once; more are shed.
    pub max_inflight: usize,
    /// Keys the node pool and the fail-local buckets each hold at most.
    pub max_keys: usize,
    /// The store's deadline: how long an ask waits on another ask's store call
    /// for its key, and how long a call is marked in flight at most.
    pub store_deadline: Duration,
}

/// Answers lease requests.
pub struct LeaseService {
    rules: Arc<CurrentRules>,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    settings: LeaseSettings,
    /// Caps the store calls in flight: past it work is shed (the filter applies the
    /// rule's failure policy at once) rather than queued behind a slow store.
    inflight: Semaphore,
    pools: Pools,
    epoch: Instant,
    /// This region's share of `global` rules, and their demand.
    shares: Shares,
    /// The node's fail-local buckets, used while the store is unreachable.
    fallback: Fallback,
    /// Agents alive in the region, from the heartbeat task; 0 = unknown.
    live_nodes: Arc<AtomicU32>,
    last_log_ns: AtomicU64,
    /// This service, for the background refills it spawns.
    me: std::sync::Weak<LeaseService>,
}

/// A background refill of the pool: its rule and lease size.
struct Refill {
    rule: String,
    lease: u32,
}

/// Waits until every receiver has seen a change (or its sender is gone).
async fn futures_wait_all(waits: Vec<tokio::sync::watch::Receiver<()>>) {
    for mut rx in waits {
        let _ = rx.changed().await;
    }
}

/// An item that goes to the store: its place in the answer and its rule's name.
struct Pending<'a> {
    index: usize,
    rule: &'a str,
    /// Served through the node pool (not an exact rule).
    pooled: bool,
    /// What the filter expects to spend within a TTL.
    want: Option<u32>,
    /// The lease size (a pooled key may take up to two).
    lease: u32,
    /// The rule's failure policy, and the node's fail-local slice of its limit.
    on_failure: FailurePolicy,
    local_limit: Limit,
    /// This node's recent demand for the key (tokens per second, pooled keys).
    demand: f64,
}

impl LeaseSettings {
    /// True when every request of `rule` must be checked in the store.
    pub fn is_exact(&self, rule: &Rule, limit: &Limit) -> bool {
        rule.accuracy == Accuracy::Exact || limit.rate_per_sec() < self.exact_below_rps
    }

    /// The store lease for `cost` under `rule`'s `limit`, given this node's demand
    /// for the key in tokens per second (see the module docs).
    pub fn lease_size(&self, rule: &Rule, limit: &Limit, cost: u32, demand_per_sec: f64) -> u32 {
        if self.is_exact(rule, limit) {
            return cost;
        }
        let by_rate = (demand_per_sec * self.target.as_secs_f64()).ceil();
        let by_burst = (limit.burst() / 10).max(1);
        // `by_rate` is finite and positive; the cap keeps the cast in range.
        let lease = by_rate.min(f64::from(by_burst)).max(1.0) as u32;
        lease.max(cost)
    }
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_millis(defaults::LEASE_TTL_MS),
            target: Duration::from_millis(defaults::LEASE_TARGET_MS),
            exact_below_rps: defaults::EXACT_BELOW_RPS,
            max_inflight: usize::try_from(defaults::MAX_INFLIGHT).unwrap_or(usize::MAX),
            max_keys: defaults::max_keys(),
            store_deadline: Duration::from_millis(defaults::STORE_DEADLINE_MS),
        }
    }
}

impl LeaseService {
    pub fn new(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        settings: LeaseSettings,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            rules,
            store,
            metrics,
            // `Semaphore::new` panics above MAX_PERMITS; clamp rather than trust the caller.
            inflight: Semaphore::new(settings.max_inflight.clamp(1, Semaphore::MAX_PERMITS)),
            settings,
            pools: Pools::new(settings.max_keys),
            epoch: Instant::now(),
            shares: Shares::default(),
            fallback: Fallback::new(settings.max_keys),
            live_nodes: Arc::default(),
            last_log_ns: AtomicU64::new(0),
        })
    }

    /// Drops the node pool's idle keys (nothing pooled, no denial, no demand).
    pub fn sweep_pools(&self) {
        self.pools.sweep(self.now_ns());
    }

    /// Keys the node pool holds.
    pub fn pooled_keys(&self) -> usize {
        self.pools.len()
    }

    /// The handle through which the region tasks set this service's shares.
    pub fn shares(&self) -> Shares {
        self.shares.clone()
    }

    /// Answers every item of a (validated) request, in order: from the node pool
    /// where it can, otherwise with one store call for the rest. An item whose
    /// key has a store call in flight at this agent waits for that call (at
    /// most the store deadline), then takes from the pool again.
    pub async fn lease(self: &Arc<Self>, req: &LeaseRequest) -> LeaseResponse {
        let rules = self.rules.get();
        let mut answers: Vec<Option<LeaseAnswer>> = vec![None; req.items.len()];
        let mut batch = Vec::with_capacity(req.items.len());
        let mut pending = Vec::with_capacity(req.items.len());
        let mut waits = Vec::new();
        for round in 0..3 {
            if round > 0 {
                if waits.is_empty() {
                    break;
                }
                let deadline = self.call_timeout();
                self.metrics.pool_waits(waits.len());
                let all = futures_wait_all(std::mem::take(&mut waits));
                let _ = tokio::time::timeout(deadline, all).await;
            }
            let indices: Vec<usize> = if round == 0 {
                (0..req.items.len()).collect()
            } else {
                answers
                    .iter()
                    .enumerate()
                    .filter(|(i, a)| {
                        a.is_none() && !pending.iter().any(|p: &Pending| p.index == *i)
                    })
                    .map(|(i, _)| i)
                    .collect()
            };
            self.first_pass(
                req,
                rules.as_deref(),
                &indices,
                round,
                &mut answers,
                &mut batch,
                &mut pending,
                &mut waits,
            );
        }
        let results = self.call_store(&batch).await;
        let now = self.now_ns();
        for ((p, acquire), result) in pending.iter().zip(&batch).zip(results) {
            answers[p.index] = Some(self.answer(p, acquire, now, result));
        }
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

    /// The deadline of one store call (and of a wait on another ask's call),
    /// with a millisecond's margin for the scheduling around it.
    fn call_timeout(&self) -> Duration {
        self.settings.store_deadline + Duration::from_millis(1)
    }

    /// Refills the pool of `key` in the background: the ask that crossed the
    /// pool's refill mark was served from what was left. One store call of a
    /// lease sized by the node's demand; its answer fills the pool (or caches
    /// the denial) and ends the call the pool marked.
    fn refill(self: &Arc<Self>, rule: &Rule, limit: &Limit, share: f64, key: &DescriptorKey) {
        let demand = self.pools.demand(key, self.now_ns());
        let enforced = limit.scaled(share.min(1.0));
        let lease = self.settings.lease_size(rule, &enforced, 1, demand);
        let acquire = Acquire {
            key: key.clone(),
            limit: *limit,
            min: 1,
            max: lease.saturating_mul(2),
            share,
        };
        let p = Refill {
            rule: rule.name.clone(),
            lease,
        };
        let service = Arc::clone(self);
        self.metrics.pool_refill();
        tokio::spawn(async move {
            let result = service.call_store(std::slice::from_ref(&acquire)).await;
            let now = service.now_ns();
            let result = result.into_iter().next().unwrap_or(Err(StoreError::Shed));
            service.refilled(&p, &acquire, now, result);
        });
    }

    /// Refills the pool of `key` once a hold ends (`after_ns` from now): the
    /// store said when a lease's worth will be back, and the agent asks then,
    /// not before, and not only when an ask finds the pool empty. Skipped when
    /// the key is thin at this node (its demand would not spend a lease within
    /// its life), a call is in flight, or a later hold runs.
    fn refill_after(
        &self,
        rule: &str,
        limit: Limit,
        share: f64,
        key: &DescriptorKey,
        after_ns: u64,
    ) {
        let Some(service) = self.me.upgrade() else {
            return;
        };
        let (rule, key) = (rule.to_string(), key.clone());
        let timeout = u64::try_from(self.call_timeout().as_nanos()).unwrap_or(u64::MAX);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_nanos(after_ns)).await;
            let now = service.now_ns();
            // A thin key's token fetched by the clock would mostly expire in
            // the pool before anyone asks: its next ask fetches it instead.
            let life = u64::try_from(service.settings.ttl.as_nanos()).unwrap_or(u64::MAX);
            if !service.pools.is_thick(&key, now, life)
                || !service.pools.begin_refill(&key, now, timeout)
            {
                return;
            }
            let rules = service.rules.get();
            match rules.as_deref().and_then(|set| set.rule(&rule)) {
                Some(rule) => service.refill(rule, &limit, share, &key),
                None => service.pools.call_failed(&key, now),
            }
        });
    }

    /// Applies a background refill's answer to the pool.
    fn refilled(&self, p: &Refill, acquire: &Acquire, now: u64, result: Acquired) {
        match result {
            Ok(take) => {
                self.metrics.store_results("ok", 1);
                self.settle_pooled(&p.rule, p.lease, acquire, now, take, 0, None);
            }
            Err(e) => {
                self.metrics.store_results(e.metric_result(), 1);
                self.pools.call_failed(&acquire.key, now);
                if !matches!(e, StoreError::Shed) && self.should_log(now) {
                    tracing::warn!(
                        rule = p.rule,
                        "pool refill failed (logged once a second at most): {e}"
                    );
                }
            }
        }
    }

    /// Puts a store answer for a pooled key into the pool, one way for an
    /// ask's call and a background refill: a grant fills the pool (the asking
    /// filter's `cost`, or its `want`, taken out; 0 for a refill) and, when it
    /// left the store fewer than a lease, holds the key until a lease's worth
    /// has refilled; a denial is cached for its wait plus that refill. Either
    /// hold ends in a refill by the clock. Returns the filter's tokens, or the
    /// node's wait.
    // Each argument is a distinct quantity of one answer.
    #[allow(clippy::too_many_arguments)]
    fn settle_pooled(
        &self,
        rule: &str,
        lease: u32,
        acquire: &Acquire,
        now: u64,
        take: Take,
        cost: u32,
        want: Option<u32>,
    ) -> Take {
        let (settled, hold) = match take {
            Take::Granted {
                tokens,
                remaining,
                reset_ns,
            } => {
                let ttl = u64::try_from(self.settings.ttl.as_nanos()).unwrap_or(u64::MAX);
                let hold = self.hold_ns(lease, remaining, acquire);
                let grant = StoreGrant {
                    tokens,
                    remaining,
                    reset_ns,
                };
                let filter =
                    self.pools
                        .fill_then_hold(&acquire.key, now, grant, cost, want, ttl, hold);
                let settled = Take::Granted {
                    tokens: filter,
                    remaining,
                    reset_ns,
                };
                (settled, hold)
            }
            Take::Denied { retry_after_ns } => {
                let wait = self.denial_hold_ns(lease, retry_after_ns, acquire);
                self.pools.deny(&acquire.key, now, wait);
                (
                    Take::Denied {
                        retry_after_ns: wait,
                    },
                    wait,
                )
            }
        };
        if hold > 0 {
            self.refill_after(rule, acquire.limit, acquire.share, &acquire.key, hold);
        }
        settled
    }

    /// After a grant that left the store fewer than a lease: the time until a
    /// lease's worth has refilled; the pool asks the store no sooner.
    fn hold_ns(&self, lease: u32, remaining: u32, acquire: &Acquire) -> u64 {
        self.refill_ns(lease.saturating_sub(remaining), acquire)
    }

    /// After a denial: its wait, plus the time a lease's worth takes to refill.
    fn denial_hold_ns(&self, lease: u32, retry_after_ns: u64, acquire: &Acquire) -> u64 {
        retry_after_ns.saturating_add(self.refill_ns(lease.saturating_sub(acquire.min), acquire))
    }

    /// The time `tokens` take to refill at the store's rate. (Holding each
    /// node for its share of a lease instead, the region's rate split over its
    /// live agents, cut the store's calls for a key over its limit about four
    /// times, but after a burst it kept a key under its limit rejected for
    /// seconds while the demand estimate decayed: 1.1% wrongly limited in the
    /// `burst` scenario against 0.16%. Correct answers come first.)
    fn refill_ns(&self, tokens: u32, acquire: &Acquire) -> u64 {
        let ns = (f64::from(tokens) / acquire.enforced_limit().rate_per_ns()).ceil();
        if ns.is_finite() {
            ns.min(u64::MAX as f64) as u64
        } else {
            u64::MAX
        }
    }

    /// Answers the items at `indices` from the pool where it can; the rest go
    /// in `batch` for the store, or, when their key's store call is in flight
    /// and this is not the last `round`, in `waits`.
    #[allow(clippy::too_many_arguments)]
    fn first_pass<'r>(
        self: &Arc<Self>,
        req: &LeaseRequest,
        rules: Option<&'r meshlimit_core::RuleSet>,
        indices: &[usize],
        round: usize,
        answers: &mut [Option<LeaseAnswer>],
        batch: &mut Vec<Acquire>,
        pending: &mut Vec<Pending<'r>>,
        waits: &mut Vec<tokio::sync::watch::Receiver<()>>,
    ) {
        let now = self.now_ns();
        let call_timeout = u64::try_from(self.call_timeout().as_nanos()).unwrap_or(u64::MAX);
        // Round 0 takes (and counts the asks' demand); later rounds take again
        // for asks that waited on a store call; the last may not wait again.
        let may_wait = round < 2;
        for &index in indices {
            let item = &req.items[index];
            let Some(rule) = rules.and_then(|set| set.rule(&item.rule)) else {
                let reason = if rules.is_some() {
                    "unknown_rule"
                } else {
                    "no_rules"
                };
                answers[index] = Some(self.unavailable(reason));
                continue;
            };
            let (limit, _plan) = rule.limit_for_plan(item.plan.as_deref());
            let share = self.shares.share(rule, &item.key);
            let pooled = !self.settings.is_exact(rule, &limit);
            let mut demand = 0.0;
            let mut waited = 0;
            if pooled {
                let take = if round == 0 {
                    self.pools
                        .take(&item.key, now, item.cost, item.want, call_timeout)
                } else {
                    self.pools
                        .retake(&item.key, now, item.cost, item.want, call_timeout)
                };
                match take {
                    PoolTake::Served {
                        tokens,
                        remaining,
                        reset_ns,
                        refill,
                    } => {
                        answers[index] = Some(self.grant(&rule.name, tokens, remaining, reset_ns));
                        if refill {
                            self.refill(rule, &limit, share, &item.key);
                        }
                        continue;
                    }
                    PoolTake::Wait(rx) if may_wait => {
                        waits.push(rx);
                        continue;
                    }
                    // Still in flight after a wait: this ask goes to the
                    // store itself.
                    PoolTake::Wait(_) => {
                        demand = 0.0;
                    }
                    PoolTake::Denied { retry_after_ns } => {
                        answers[index] = Some(self.deny(&rule.name, &item.key, retry_after_ns));
                        continue;
                    }
                    PoolTake::Miss {
                        demand_per_sec,
                        dropped,
                        waited: w,
                    } => {
                        if dropped > 0 {
                            self.metrics.tokens_dropped(&rule.name, dropped);
                        }
                        demand = demand_per_sec;
                        waited = w;
                    }
                }
            }
            let enforced = limit.scaled(share.min(1.0));
            let mut lease = self.settings.lease_size(rule, &enforced, item.cost, demand);
            if pooled {
                // Asks that waited on the last call and found it too small are
                // covered by this one (at most a tenth of the burst, as any lease).
                let cover = item.cost.saturating_mul(waited.saturating_add(1));
                lease = lease.max(cover.min((enforced.burst() / 10).max(item.cost)));
            }
            // A pooled key takes up to two leases: after a hold (below) about one
            // lease has refilled, plus what refilled while the ask travelled; taking
            // only one would leave that remainder in the bucket, call after call.
            let max = if pooled {
                lease.saturating_mul(2)
            } else {
                lease
            };
            batch.push(Acquire {
                key: item.key.clone(),
                limit,
                min: item.cost,
                max,
                share,
            });
            pending.push(Pending {
                index,
                rule: &rule.name,
                pooled,
                want: item.want,
                lease,
                on_failure: rule.on_failure,
                local_limit: Fallback::node_limit(&limit, share, self.live_nodes()),
                demand,
            });
        }
    }

    /// Nanoseconds on tokio's clock since the service started.
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// One store call for the whole batch, always one result per item.
    async fn call_store(&self, batch: &[Acquire]) -> Vec<Acquired> {
        if batch.is_empty() {
            return Vec::new();
        }
        let Ok(_permit) = self.inflight.try_acquire() else {
            return vec![Err(StoreError::Shed); batch.len()];
        };
        let started = Instant::now();
        let mut results = self.store.acquire(batch).await;
        self.metrics.store_call(batch.len(), started.elapsed());
        if results.len() != batch.len() {
            // A store bug must not shift answers onto the wrong items.
            let e = StoreError::Failed(format!(
                "{} answers for {} items",
                results.len(),
                batch.len()
            ));
            tracing::error!("{e}");
            results = vec![Err(e); batch.len()];
        }
        results
    }

    /// Turns a store result into the filter's answer; a pooled key's grant is
    /// split with the pool, and its denial is cached at the node until a whole
    /// lease's worth of tokens is back.
    fn answer(
        &self,
        p: &Pending<'_>,
        acquire: &Acquire,
        now: u64,
        result: Acquired,
    ) -> LeaseAnswer {
        match result {
            Ok(Take::Granted {
                tokens,
                remaining,
                reset_ns,
            }) => {
                self.metrics.store_results("ok", 1);
                self.fallback.forget(&acquire.key);
                if !p.pooled {
                    return self.grant(p.rule, tokens, remaining, reset_ns);
                }
                let take = Take::Granted {
                    tokens,
                    remaining,
                    reset_ns,
                };
                let filter = match self.settle_pooled(
                    p.rule,
                    p.lease,
                    acquire,
                    now,
                    take,
                    acquire.min,
                    p.want,
                ) {
                    Take::Granted { tokens, .. } => tokens,
                    Take::Denied { .. } => 0,
                };
                self.grant(
                    p.rule,
                    filter,
                    remaining.saturating_add(tokens - filter),
                    reset_ns,
                )
            }
            Ok(Take::Denied { retry_after_ns }) => {
                self.metrics.store_results("ok", 1);
                self.fallback.forget(&acquire.key);
                if !p.pooled {
                    return self.deny(p.rule, &acquire.key, retry_after_ns);
                }
                let take = Take::Denied { retry_after_ns };
                let wait = match self.settle_pooled(p.rule, p.lease, acquire, now, take, 0, None) {
                    Take::Denied { retry_after_ns } => retry_after_ns,
                    Take::Granted { .. } => retry_after_ns,
                };
                self.deny(p.rule, &acquire.key, wait)
            }
            Err(e) => {
                self.metrics.store_results(e.metric_result(), 1);
                if p.pooled {
                    self.pools.call_failed(&acquire.key, now);
                }
                if !matches!(e, StoreError::Shed) && self.should_log(now) {
                    tracing::warn!(
                        rule = p.rule,
                        "lease unavailable (logged once a second at most): {e}"
                    );
                }
                if p.on_failure != FailurePolicy::Local {
                    return self.unavailable(e.reason());
                }
                // The node's fail-local ceiling, held here once for every filter
                // of the node (the filters' own buckets take over only when the
                // agent itself is unreachable).
                self.metrics.lease_unavailable(e.reason());
                match self
                    .fallback
                    .take(&acquire.key, &p.local_limit, now, acquire.min, p.demand)
                {
                    Take::Granted { .. } => LeaseAnswer::Grant {
                        tokens: acquire.min,
                        ttl_ms: 0,
                        remaining: 0,
                        reset_ms: 0,
                        local: true,
                    },
                    Take::Denied { retry_after_ns } => LeaseAnswer::Deny {
                        retry_after_ms: retry_after_ns.div_ceil(NANOS_PER_MS),
                        local: true,
                    },
                }
            }
        }
    }

    fn grant(&self, rule: &str, tokens: u32, remaining: u32, reset_ns: u64) -> LeaseAnswer {
        self.metrics.lease_granted(rule, tokens);
        LeaseAnswer::Grant {
            tokens,
            ttl_ms: u64::try_from(self.settings.ttl.as_millis()).unwrap_or(u64::MAX),
            remaining,
            reset_ms: reset_ns.div_ceil(NANOS_PER_MS),
            local: false,
        }
    }

    fn deny(&self, rule: &str, key: &DescriptorKey, retry_after_ns: u64) -> LeaseAnswer {
        self.metrics.lease_denied(rule, key);
        LeaseAnswer::Deny {
            retry_after_ms: retry_after_ns.div_ceil(NANOS_PER_MS),
            local: false,
        }
    }

    /// Agents alive in the region (1 until the heartbeats tell).
    fn live_nodes(&self) -> u32 {
        self.live_nodes.load(Ordering::Relaxed).max(1)
    }

    /// The handle the heartbeat task keeps up to date.
    pub fn live_nodes_handle(&self) -> Arc<AtomicU32> {
        self.live_nodes.clone()
    }

    /// True at most once a second: a store outage must not flood the log.
    fn should_log(&self, now: u64) -> bool {
        let last = self.last_log_ns.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= NANOS_PER_SEC;
        due && self
            .last_log_ns
            .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    fn unavailable(&self, reason: &str) -> LeaseAnswer {
        self.metrics.lease_unavailable(reason);
        LeaseAnswer::Unavailable {
            reason: reason.to_string(),
        }
    }
}

#[cfg(test)]
mod tests;
