//! Settling a store answer into the node pool: what a grant leaves pooled,
//! how long a denial or a spent pool is held before the store is asked again.

use std::sync::Arc;

use meshlimit_core::policy;
use meshlimit_core::{DescriptorKey, Limit, Take};

use crate::pool::{GrantTimes, StoreGrant};
use meshlimit_store::Acquire;

use super::LeaseService;

/// What the ask (or refill) behind a pooled key's store answer fixes for
/// settling it.
pub(super) struct Terms<'a> {
    /// The rule, for the refill that ends a hold.
    pub(super) rule: &'a str,
    /// The lease asked for: a hold lasts until that much has refilled.
    pub(super) lease: u32,
    /// The rule's next schedule edge: no denial is held past it.
    pub(super) until_change_ns: u64,
}

impl LeaseService {
    /// Puts a store answer for a pooled key into the pool, one way for an
    /// ask's call and a background refill: a grant fills the pool (the asking
    /// filter's `cost`, or its `want`, taken out; 0 for a refill) and, when it
    /// left the store fewer than a lease, holds the key until a lease's worth
    /// has refilled; a denial is cached for its wait plus that refill. Either
    /// hold ends in a refill by the clock; a denial is held no longer than
    /// the rule's next schedule edge. Returns the filter's tokens, or the
    /// node's wait, and with a grant the filter's next turn.
    pub(super) fn settle_pooled(
        self: &Arc<Self>,
        terms: &Terms<'_>,
        acquire: &Acquire,
        now: u64,
        take: Take,
        ask: (u32, Option<u32>),
    ) -> (Take, Option<u64>) {
        let (settled, hold, next_ask) = match take {
            Take::Granted {
                tokens,
                remaining,
                reset_ns,
            } => {
                let grant = StoreGrant::under(acquire.limit, tokens, remaining, reset_ns);
                self.settle_grant(terms, acquire, now, grant, ask)
            }
            Take::Denied { retry_after_ns } => {
                let wait = self.settle_denial(terms, acquire, now, retry_after_ns);
                let settled = Take::Denied {
                    retry_after_ns: wait,
                };
                (settled, wait, None)
            }
        };
        if hold > 0 {
            self.refill_after(terms.rule, acquire.limit, acquire.share, &acquire.key, hold);
        }
        (settled, next_ask)
    }

    /// Fills the pool with a store `grant` for an ask of `(cost, want)`, and
    /// holds the key when the grant left the store fewer than a lease.
    /// Returns what the filter takes, the hold and the filter's next turn.
    fn settle_grant(
        &self,
        terms: &Terms<'_>,
        acquire: &Acquire,
        now: u64,
        grant: StoreGrant,
        ask: (u32, Option<u32>),
    ) -> (Take, u64, Option<u64>) {
        let (far_over, turn_period_ns) = self.turn_period(acquire, now);
        let policy = &self.settings.policy;
        let enforced = acquire.enforced_limit();
        let StoreGrant {
            remaining,
            reset_ns,
            ..
        } = grant;
        let hold_ns = policy.hold_ns(terms.lease, remaining, reset_ns, &enforced, far_over);
        let times = GrantTimes {
            ttl_ns: policy.lease_life_ns(acquire.limit.algorithm(), reset_ns),
            hold_ns,
            turn_period_ns,
        };
        let (filter, next) = self
            .pools
            .fill_then_hold(&acquire.key, now, grant, ask, times);
        let settled = Take::Granted {
            tokens: filter,
            remaining,
            reset_ns,
        };
        (settled, hold_ns, next.map(|n| n.min(terms.until_change_ns)))
    }

    /// Caches a store denial at the node; returns how long it holds.
    fn settle_denial(
        &self,
        terms: &Terms<'_>,
        acquire: &Acquire,
        now: u64,
        retry_after_ns: u64,
    ) -> u64 {
        let (far_over, turn_period_ns) = self.turn_period(acquire, now);
        let enforced = acquire.enforced_limit();
        let wait = self
            .settings
            .policy
            .denial_hold_ns(
                terms.lease,
                acquire.min,
                retry_after_ns,
                &enforced,
                far_over,
            )
            .min(terms.until_change_ns);
        self.pools.deny(&acquire.key, now, wait, turn_period_ns);
        wait
    }

    /// [`LeaseService::settle_pooled`] for an answer no filter waits to
    /// spend from (a denial, a background refill).
    pub(super) fn settle_unasked(
        self: &Arc<Self>,
        terms: &Terms<'_>,
        acquire: &Acquire,
        now: u64,
        take: Take,
    ) -> Take {
        self.settle_pooled(terms, acquire, now, take, (0, None)).0
    }

    /// Whether this node asks for `acquire`'s key far over its share, and so
    /// the period at whose starts it gives its filters turns
    /// (`Pools::fill_then_hold`).
    fn turn_period(&self, acquire: &Acquire, now: u64) -> (bool, u64) {
        let far_over = self.far_over(acquire, now);
        let algorithm = acquire.limit.algorithm();
        (
            far_over,
            self.settings.policy.turn_period_ns(algorithm, far_over),
        )
    }

    /// Whether this node asks for `acquire`'s key far over its share of the
    /// region's limit ([`policy::far_over_share`]).
    fn far_over(&self, acquire: &Acquire, now: u64) -> bool {
        policy::far_over_share(
            &acquire.enforced_limit(),
            self.pools.demand(&acquire.key, now),
            self.live_nodes(),
        )
    }

    /// [`policy::may_prefetch`] for `key`, from what the store left at its
    /// last answer here; never once the pool is handed back (the agent is
    /// stopping: tokens taken ahead would expire in its pool).
    pub(super) fn may_prefetch(
        &self,
        key: &DescriptorKey,
        enforced: &Limit,
        demand: f64,
        lease: u32,
    ) -> bool {
        let left = self.pools.store_left(key);
        !self.pools.is_handed_back()
            && policy::may_prefetch(enforced, demand, lease, self.live_nodes(), left)
    }
}
