//! The lease service behind `POST /v1/lease`: finds each item's rule and limit in the
//! rules in force, sizes the lease, asks the store once for the whole request, and
//! turns the store's answers into wire answers.
//!
//! Lease sizing (issue 4, static): a rule marked `accuracy: exact`, or slower than
//! `--exact-below-rps`, gets leases of exactly the request's cost, so every request
//! is checked in the store. Any other rule gets
//! `max(cost, min(ceil(rate_per_sec × lease_target), max(1, burst / 10)))`:
//! about `lease_target` (100 ms) of the rule's whole rate, but never more than a
//! tenth of the burst, so a handful of nodes holding unspent leases cannot drain a
//! key. A later issue sizes leases by this node's observed demand for the key.

use std::sync::Arc;
use std::time::{Duration, Instant};

use meshlimit_core::rules::{Accuracy, Rule};
use meshlimit_core::wire::{LeaseAnswer, LeaseItem, LeaseRequest, LeaseResponse, WIRE_VERSION};
use meshlimit_core::{Limit, Take, NANOS_PER_MS};
use tokio::sync::Semaphore;

use crate::metrics::Metrics;
use crate::rules_watch::CurrentRules;
use crate::store::{Acquire, Acquired, Store, StoreError};

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
}

/// An item that goes to the store: its place in the answer and its rule's name.
struct Pending<'a> {
    index: usize,
    rule: &'a str,
}

impl LeaseSettings {
    /// The lease size for `cost` under `rule`'s `limit` (see the module docs).
    pub fn lease_size(&self, rule: &Rule, limit: &Limit, cost: u32) -> u32 {
        let rate = limit.rate_per_sec();
        if rule.accuracy == Accuracy::Exact || rate < self.exact_below_rps {
            return cost;
        }
        let by_rate = (rate * self.target.as_secs_f64()).ceil();
        let by_burst = (limit.burst() / 10).max(1);
        // `by_rate` is finite and positive; the cap keeps the cast in range.
        let lease = by_rate.min(f64::from(by_burst)).max(1.0) as u32;
        lease.max(cost)
    }
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_millis(100),
            target: Duration::from_millis(100),
            exact_below_rps: 0.0,
            max_inflight: 1024,
        }
    }
}

impl LeaseService {
    pub fn new(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        settings: LeaseSettings,
    ) -> Self {
        Self {
            rules,
            store,
            metrics,
            // `Semaphore::new` panics above MAX_PERMITS; clamp rather than trust the caller.
            inflight: Semaphore::new(settings.max_inflight.clamp(1, Semaphore::MAX_PERMITS)),
            settings,
        }
    }

    /// Answers every item of a (validated) request, in order.
    pub async fn lease(&self, req: &LeaseRequest) -> LeaseResponse {
        let rules = self.rules.get();
        let mut answers: Vec<Option<LeaseAnswer>> = vec![None; req.items.len()];
        let mut batch = Vec::with_capacity(req.items.len());
        let mut pending = Vec::with_capacity(req.items.len());
        for (index, item) in req.items.iter().enumerate() {
            let rule = rules.as_deref().and_then(|set| set.rule(&item.rule));
            match rule {
                Some(rule) => {
                    batch.push(self.acquire_for(rule, item));
                    pending.push(Pending {
                        index,
                        rule: &rule.name,
                    });
                }
                None => {
                    let reason = if rules.is_some() {
                        "unknown_rule"
                    } else {
                        "no_rules"
                    };
                    answers[index] = Some(self.unavailable(reason));
                }
            }
        }
        let results = self.call_store(&batch).await;
        for (p, result) in pending.iter().zip(results) {
            answers[p.index] = Some(self.answer(p.rule, result));
        }
        LeaseResponse {
            v: WIRE_VERSION,
            items: answers
                .into_iter()
                .map(|a| a.unwrap_or_else(|| self.unavailable("internal")))
                .collect(),
        }
    }

    fn acquire_for(&self, rule: &Rule, item: &LeaseItem) -> Acquire {
        let (limit, _plan) = rule.limit_for_plan(item.plan.as_deref());
        Acquire {
            key: item.key.clone(),
            limit,
            min: item.cost,
            max: self.settings.lease_size(rule, &limit, item.cost),
        }
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

    fn answer(&self, rule: &str, result: Acquired) -> LeaseAnswer {
        match result {
            Ok(Take::Granted {
                tokens,
                remaining,
                reset_ns,
            }) => {
                self.metrics.store_results("ok", 1);
                self.metrics.lease_granted(rule, tokens);
                LeaseAnswer::Grant {
                    tokens,
                    ttl_ms: u64::try_from(self.settings.ttl.as_millis()).unwrap_or(u64::MAX),
                    remaining,
                    reset_ms: reset_ns.div_ceil(NANOS_PER_MS),
                }
            }
            Ok(Take::Denied { retry_after_ns }) => {
                self.metrics.store_results("ok", 1);
                self.metrics.lease_denied(rule);
                LeaseAnswer::Deny {
                    retry_after_ms: retry_after_ns.div_ceil(NANOS_PER_MS),
                }
            }
            Err(e) => {
                self.metrics.store_results(e.metric_result(), 1);
                if !matches!(e, StoreError::Shed) {
                    tracing::warn!(rule, "lease unavailable: {e}");
                }
                self.unavailable(e.reason())
            }
        }
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
