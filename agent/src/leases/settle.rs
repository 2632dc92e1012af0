//! Settling a store answer into the node pool: what a grant leaves pooled,
//! how long a denial or a spent pool is held before the store is asked again.

use std::sync::Arc;

use meshlimit_core::{Algorithm, DescriptorKey, Limit, Take};

use crate::pool::StoreGrant;
use meshlimit_store::Acquire;

use super::LeaseService;

/// How far over its share of a limit a node's demand must be before the node
/// holds a key longer than the store said (see [`LeaseService::far_over`]).
/// At 2, a key offered at twice its limit or more, spread evenly, is held; a
/// key offered up to about its limit never is.
const FAR_OVER_SHARE: f64 = 2.0;

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
        // A node far over its share spaces the asks its hold turns away by a
        // lease period (`Pools::fill_then_hold`); a fixed window's hold ends
        // with the whole limit back, for every ask at once.
        let spacing = if far_over && acquire.limit.algorithm() != Algorithm::FixedWindow {
            self.period_ns()
        } else {
            0
        };
        let mut next_ask = None;
        let (settled, hold) = match take {
            Take::Granted {
                tokens,
                remaining,
                reset_ns,
            } => {
                let ttl = self
                    .settings
                    .lease_life_ns(acquire.limit.algorithm(), reset_ns);
                let hold = self.hold_ns(lease, remaining, reset_ns, acquire, far_over);
                let grant = StoreGrant {
                    tokens,
                    remaining,
                    reset_ns,
                };
                let (filter, next) = self.pools.fill_then_hold(
                    &acquire.key,
                    now,
                    grant,
                    cost,
                    want,
                    ttl,
                    hold,
                    spacing,
                );
                next_ask = next.map(|n| n.min(until_change_ns));
                let settled = Take::Granted {
                    tokens: filter,
                    remaining,
                    reset_ns,
                };
                (settled, hold)
            }
            Take::Denied { retry_after_ns } => {
                let wait = self
                    .denial_hold_ns(lease, retry_after_ns, acquire, far_over)
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

    /// Whether this node alone asks for `acquire`'s key at [`FAR_OVER_SHARE`]
    /// times its share of the limit or more (the region's enforced rate split
    /// evenly over its live agents). Only then does the node hold the key
    /// beyond what the store said: its key is well over its limit, every 429 it
    /// gets is the limit working, and waiting for a lease's worth saves the
    /// store a call per refilled token. A node nearer its share is told by the
    /// store alone when to ask again: a hold beyond that turns away requests
    /// that the store's bucket, refilling meanwhile, would admit, and on a key
    /// just at its limit those are 429s while it is under it.
    fn far_over(&self, acquire: &Acquire, now: u64) -> bool {
        self.far_over_share(
            &acquire.enforced_limit(),
            self.pools.demand(&acquire.key, now),
        )
    }

    /// [`LeaseService::far_over`] for a node demand of `demand` tokens a
    /// second under the region's `enforced` limit.
    pub(super) fn far_over_share(&self, enforced: &Limit, demand: f64) -> bool {
        let share = enforced.rate_per_sec() / f64::from(self.live_nodes());
        demand >= FAR_OVER_SHARE * share
    }

    /// The live nodes when a node demanding `demand` tokens a second is far
    /// over its share of the rate, for `LeaseSettings::lease_size`.
    pub(super) fn far_over_of(&self, enforced: &Limit, demand: f64) -> Option<u32> {
        self.far_over_share(enforced, demand)
            .then(|| self.live_nodes())
    }

    /// Whether this node may take tokens for its pool beyond what the asking
    /// filter wants (and refill it ahead of need): when the store's bucket
    /// held two `lease`s for every live node at its last answer here (what
    /// every node's pool may take at most, `LeaseSettings::store_max`), or
    /// when the node is far over its share. Otherwise the key is near its limit: the
    /// few tokens the bucket holds would sit in this pool while another
    /// node's ask finds the bucket empty, and a key under its limit would get
    /// a 429 for tokens nobody spent. Such a key costs the store a call per
    /// ask (it is thin per node, or it would be far over), and no token.
    pub(super) fn may_prefetch(
        &self,
        key: &DescriptorKey,
        enforced: &Limit,
        demand: f64,
        lease: u32,
    ) -> bool {
        self.far_over_share(enforced, demand)
            || self.pools.store_left(key) >= lease.saturating_mul(2 * self.live_nodes())
    }

    /// After a grant that left the store fewer than a lease: how long the pool
    /// waits before it asks the store again. A fixed window gives nothing back
    /// before it ends (`reset_ns`, its end), and everything then. A bucket (and
    /// a sliding window, which frees counts as the previous window slides out,
    /// at about the limit's rate) is held until a lease's worth has refilled,
    /// and for one lease period at least, when the node is `far_over` its
    /// share: it then calls the store once a lease period, however many nodes
    /// share the key (never longer than the whole burst takes to refill,
    /// `full_ns`). It is not held at all otherwise (the next ask goes to the
    /// store, whose denial says when a token is back).
    ///
    /// With turns (`--pool-turns`), such a node calls again sooner by the
    /// time the bucket took to gather what the grant left in it (`remaining`;
    /// down to half a period): it was called after a long gap since the key's
    /// last call from any node, and the node after it gets a short one. So
    /// the nodes' calls spread out over the period, and each brings its part
    /// (see `LeaseSettings::paced`).
    pub(super) fn hold_ns(
        &self,
        lease: u32,
        remaining: u32,
        reset_ns: u64,
        acquire: &Acquire,
        far_over: bool,
    ) -> u64 {
        match (acquire.limit.algorithm(), remaining < lease) {
            (_, false) => 0,
            (Algorithm::FixedWindow, true) => reset_ns,
            _ if far_over => {
                let hold = self
                    .refill_ns(lease - remaining, acquire)
                    .max(self.period_ns())
                    .min(self.full_ns(acquire));
                if self.settings.turns && remaining > 0 {
                    hold.saturating_sub(self.refill_ns(remaining, acquire))
                        .max(self.period_ns() / 2)
                        .min(hold)
                } else {
                    hold
                }
            }
            _ => 0,
        }
    }

    /// After a denial: its wait, plus, for a node `far_over` its share, the
    /// time a lease's worth takes to refill, and one lease period at least
    /// (for a fixed window, its wait alone: the window's end, when the whole
    /// limit is back).
    pub(super) fn denial_hold_ns(
        &self,
        lease: u32,
        retry_after_ns: u64,
        acquire: &Acquire,
        far_over: bool,
    ) -> u64 {
        if acquire.limit.algorithm() == Algorithm::FixedWindow || !far_over {
            return retry_after_ns;
        }
        retry_after_ns
            .saturating_add(self.refill_ns(lease.saturating_sub(acquire.min), acquire))
            .max(self.period_ns())
            .min(self.full_ns(acquire).max(retry_after_ns))
    }

    /// The time an empty bucket takes to refill its whole burst. A hold never
    /// runs past it: what refills after the bucket is full is lost, so a
    /// longer hold admits less than the limit when the burst is under one
    /// lease period of the rate (a burst of 50 at 1,000 a second, held
    /// 100 ms, would lose half of each refill). Such a key then costs the
    /// store one call per burst's refill, more than one a lease period.
    fn full_ns(&self, acquire: &Acquire) -> u64 {
        self.refill_ns(acquire.enforced_limit().burst(), acquire)
    }

    /// The lease period (`--lease-target-ms`).
    fn period_ns(&self) -> u64 {
        u64::try_from(self.settings.target.as_nanos()).unwrap_or(u64::MAX)
    }
}
