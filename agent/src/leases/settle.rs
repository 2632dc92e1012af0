//! Settling a store answer into the node pool: what a grant leaves pooled,
//! how long a denial or a spent pool is held before the store is asked again.

use meshlimit_core::{Algorithm, Take};

use crate::pool::StoreGrant;
use crate::store::Acquire;

use super::LeaseService;

impl LeaseService {
    /// Puts a store answer for a pooled key into the pool, one way for an
    /// ask's call and a background refill: a grant fills the pool (the asking
    /// filter's `cost`, or its `want`, taken out; 0 for a refill) and, when it
    /// left the store fewer than a lease, holds the key until a lease's worth
    /// has refilled; a denial is cached for its wait plus that refill. Either
    /// hold ends in a refill by the clock. Returns the filter's tokens, or the
    /// node's wait.
    // Each argument is a distinct quantity of one answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn settle_pooled(
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
                let hold = self.hold_ns(lease, remaining, reset_ns, acquire);
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
    /// lease's worth has refilled; the pool asks the store no sooner. A fixed
    /// window gives nothing back before it ends (`reset_ns`, its end), and
    /// everything then; a sliding window frees counts as the previous window
    /// slides out, at about the limit's rate, like a bucket.
    pub(super) fn hold_ns(
        &self,
        lease: u32,
        remaining: u32,
        reset_ns: u64,
        acquire: &Acquire,
    ) -> u64 {
        match (acquire.limit.algorithm(), remaining < lease) {
            (_, false) => 0,
            (Algorithm::FixedWindow, true) => reset_ns,
            _ => self.refill_ns(lease - remaining, acquire),
        }
    }

    /// After a denial: its wait, plus the time a lease's worth takes to refill
    /// (for a fixed window, its wait alone: the window's end, when the whole
    /// limit is back).
    pub(super) fn denial_hold_ns(&self, lease: u32, retry_after_ns: u64, acquire: &Acquire) -> u64 {
        if acquire.limit.algorithm() == Algorithm::FixedWindow {
            return retry_after_ns;
        }
        retry_after_ns.saturating_add(self.refill_ns(lease.saturating_sub(acquire.min), acquire))
    }
}
