//! Settling a store answer into the node pool: what a grant leaves pooled,
//! how long a denial or a spent pool is held before the store is asked again.

use std::sync::Arc;

use meshlimit_core::policy;
use meshlimit_core::{DescriptorKey, Limit, Take};

use crate::pool::{GrantTimes, StoreGrant};
use meshlimit_store::Acquire;

use super::LeaseService;

impl LeaseService {
    /// Puts a store answer for a pooled key into the pool, one way for an
    /// ask's call and a background refill: a grant fills the pool (the asking
    /// filter's `cost`, or its `want`, taken out; 0 for a refill) and, when it
    /// left the store fewer than a lease, holds the key until a lease's worth
    /// has refilled; a denial is cached for its wait plus that refill. Either
    /// hold ends in a refill by the clock; a denial is held no longer than
    /// `until_change_ns`, the rule's next schedule edge. Returns the filter's
    /// tokens, or the node's wait.
    // Each argument is a distinct quantity of one answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn settle_pooled(
        self: &Arc<Self>,
        rule: &str,
        lease: u32,
        acquire: &Acquire,
        now: u64,
        take: Take,
        (cost, want): (u32, Option<u32>),
        until_change_ns: u64,
    ) -> (Take, Option<u64>) {
        let far_over = self.far_over(acquire, now);
        let policy = &self.settings.policy;
        // The asks the hold turns away are spaced (`Pools::fill_then_hold`).
        let spacing = policy.spacing_ns(acquire.limit.algorithm(), far_over);
        let enforced = acquire.enforced_limit();
        let mut next_ask = None;
        let (settled, hold) = match take {
            Take::Granted {
                tokens,
                remaining,
                reset_ns,
            } => {
                let ttl = policy.lease_life_ns(acquire.limit.algorithm(), reset_ns);
                let hold = policy.hold_ns(lease, remaining, reset_ns, &enforced, far_over);
                let grant = StoreGrant {
                    tokens,
                    remaining,
                    reset_ns,
                };
                let times = GrantTimes {
                    ttl_ns: ttl,
                    hold_ns: hold,
                    spacing_ns: spacing,
                };
                let (filter, next) =
                    self.pools
                        .fill_then_hold(&acquire.key, now, grant, (cost, want), times);
                next_ask = next.map(|n| n.min(until_change_ns));
                let settled = Take::Granted {
                    tokens: filter,
                    remaining,
                    reset_ns,
                };
                (settled, hold)
            }
            Take::Denied { retry_after_ns } => {
                let wait = policy
                    .denial_hold_ns(lease, acquire.min, retry_after_ns, &enforced, far_over)
                    .min(until_change_ns);
                self.pools.deny(&acquire.key, now, wait, spacing);
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
        (settled, next_ask)
    }

    /// [`LeaseService::settle_pooled`] for an answer no filter waits to
    /// spend from (a denial, a background refill).
    pub(super) fn settle_unasked(
        self: &Arc<Self>,
        rule: &str,
        lease: u32,
        until_change_ns: u64,
        acquire: &Acquire,
        now: u64,
        take: Take,
    ) -> Take {
        self.settle_pooled(rule, lease, acquire, now, take, (0, None), until_change_ns)
            .0
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
    /// last answer here.
    pub(super) fn may_prefetch(
        &self,
        key: &DescriptorKey,
        enforced: &Limit,
        demand: f64,
        lease: u32,
    ) -> bool {
        let left = self.pools.store_left(key);
        policy::may_prefetch(enforced, demand, lease, self.live_nodes(), left)
    }
}
