//! The pool's background refills: when a pooled key is refilled from the
//! store, how big the refill is, and how its answer fills the pool.

use std::sync::Arc;
use std::time::Duration;

use meshlimit_core::policy;
use meshlimit_core::rules::Rule;
use meshlimit_core::{DescriptorKey, Limit};

use meshlimit_store::{Acquire, Acquired, StoreError};

use super::settle::Terms;
use super::LeaseService;

/// A background refill of the pool: its rule and lease size.
pub(super) struct Refill {
    rule: String,
    lease: u32,
    /// The rule's next schedule edge, from when the refill was asked.
    until_change_ns: u64,
}

impl LeaseService {
    /// Refills the pool of `key` in the background: the ask that crossed the
    /// pool's refill mark was served from what was left. One store call of a
    /// lease sized by the node's demand; its answer fills the pool (or caches
    /// the denial) and ends the call the pool marked.
    pub(super) fn refill(
        self: &Arc<Self>,
        rule: &Rule,
        limit: &Limit,
        share: f64,
        key: &DescriptorKey,
    ) {
        let demand = self.pools.demand(key, self.now_ns());
        let enforced = limit.scaled(share.min(1.0));
        let far_over_of = policy::far_over_of(&enforced, demand, self.live_nodes());
        let policy = &self.settings.policy;
        let lease = policy.lease_size(
            rule,
            &enforced,
            1,
            demand,
            far_over_of,
            self.pools.intake(key, self.now_ns()),
        );
        if !self.may_prefetch(key, &enforced, demand, lease) {
            // Nearly empty: no tokens ahead of an ask. The call the pool
            // marked ends unmade (nobody waits on a refill).
            self.pools.call_failed(key, self.now_ns());
            return;
        }
        let acquire = Acquire {
            key: key.clone(),
            limit: *limit,
            min: 1,
            max: policy.store_max(lease, 0, demand, policy.paced(far_over_of)),
            share,
        };
        let utc_ns = crate::regions::clock::now_ns();
        let p = Refill {
            rule: rule.name.clone(),
            lease,
            until_change_ns: rule.until_change_ns(utc_ns),
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
    pub(super) fn refill_after(
        self: &Arc<Self>,
        rule: &str,
        limit: Limit,
        share: f64,
        key: &DescriptorKey,
        after_ns: u64,
    ) {
        let service = Arc::clone(self);
        let (rule, key) = (rule.to_string(), key.clone());
        let timeout = u64::try_from(self.call_timeout().as_nanos()).unwrap_or(u64::MAX);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_nanos(after_ns)).await;
            let now = service.now_ns();
            // A thin key's token fetched by the clock would mostly expire in
            // the pool before anyone asks: its next ask fetches it instead.
            let life = service.settings.policy.ttl_ns;
            // Tokens still pooled when the hold ends: the node spends slower
            // than it asks (a burst has ended, its demand estimate lags).
            // Its refill ahead of need fetches more when they run low.
            if !service.pools.is_thick(&key, now, life)
                || service.pools.pooled(&key, now) > 0
                || !service.pools.begin_refill(&key, now, timeout)
            {
                return;
            }
            let rules = service.rules.get();
            match rules.as_deref().and_then(|set| set.rule(&rule)) {
                // A hold may end in another schedule window: the limit then in
                // force (a rule with a schedule has no plans).
                Some(rule) if !rule.schedule.is_empty() => {
                    let utc_ns = crate::regions::clock::now_ns();
                    let limit = rule.limit_in_force(None, utc_ns).limit;
                    service.refill(rule, &limit, share, &key);
                }
                Some(rule) => service.refill(rule, &limit, share, &key),
                None => service.pools.call_failed(&key, now),
            }
        });
    }

    /// Applies a background refill's answer to the pool.
    pub(super) fn refilled(
        self: &Arc<Self>,
        p: &Refill,
        acquire: &Acquire,
        now: u64,
        result: Acquired,
    ) {
        match result {
            Ok(take) => {
                self.metrics.store_results("ok", 1);
                let terms = Terms {
                    rule: &p.rule,
                    lease: p.lease,
                    until_change_ns: p.until_change_ns,
                };
                self.settle_unasked(&terms, acquire, now, take);
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
}
