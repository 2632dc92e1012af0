//! The turns of a key's entry at a node far over its share.
//!
//! A node far over its share calls the store once a lease period,
//! and each call brings about the node's share of a period's tokens, fewer
//! than its filters want. It gives its filters turns: each grant it makes,
//! and each ask it turns away, books the ask's tokens in a queue that moves at
//! the rate the store's tokens come (a little faster, [`PACE_AHEAD`]), and
//! tells the filter when its turn comes, at the start of the lease period it
//! falls in (when the node calls the store): a grant carries it (the filter
//! spends its tokens, then rejects locally until then, and asks no sooner), a
//! denial waits until it. Without turns a filter asks as soon as it has spent
//! its grant, is turned away by the node's hold, and asks again at the hold's
//! end with every other: a key far over its limit costs more denied asks than
//! grants.
//!
//! An ask wanting more than a period's tokens (one gateway taking most of a
//! node's traffic) is not booked: its turn would push every other back by
//! more than a period. It comes back at the hold's end.

use super::PoolEntry;
use crate::lease::RATE_TAU_NS;

/// The furthest ahead a node books a filter's turn: it bounds how long a
/// filter keeps rejecting once its key's demand has fallen.
pub const MAX_QUEUE_NS: u64 = 1_000_000_000;

/// Turns are booked this much faster than the store's tokens come. A queue
/// that runs slower than the tokens leaves them to expire in the pool while
/// the filters wait for their turns, and the key admits less than its limit;
/// one that runs faster turns some filters away at their turn, a call each.
/// With each store call bringing the node's part (`LeasePolicy::paced`), a
/// small lead keeps the tokens spent and turns the fewest away (the
/// `one-gateway-40` scenario shows the trade).
const PACE_AHEAD: f64 = 1.05;

impl PoolEntry {
    /// Counts a store answer's `granted` tokens (0 for a denial) in the
    /// node's intake and sets the pace of its queue of turns: none unless
    /// the answer set a hold (`hold_ns`) and the node spaces its asks (it is
    /// far over its share). The intake is a count decaying with
    /// [`RATE_TAU_NS`], started at the first answer's tokens over its hold
    /// when that answer set one.
    ///
    /// An answer that finds tokens still pooled (`unclaimed`) starts the
    /// queue afresh: the node's filters do not come for what it takes, so
    /// its key's demand has fallen (a burst has ended), and the turns booked
    /// meanwhile are for asks that will not come. New turns booked behind
    /// them, up to [`MAX_QUEUE_NS`] ahead, would keep filters whose key is
    /// back under its limit rejecting for most of a second after the burst.
    /// A node far over its share claims every token it takes, so once it has
    /// settled its queue is not restarted.
    pub(super) fn pace(&mut self, now_ns: u64, hold_ns: u64, granted: u32, unclaimed: u32) {
        let count = if self.intake_at_ns == 0 && hold_ns > 0 {
            // The first answer's tokens over its hold, as a rate, as a count.
            f64::from(granted) * 1e9 / hold_ns as f64 * (RATE_TAU_NS / 1e9)
        } else {
            self.decayed_intake(now_ns) + f64::from(granted)
        };
        self.intake = count;
        self.intake_at_ns = now_ns.max(1);
        let rate = self.intake(now_ns);
        if self.turn_period_ns == 0 || hold_ns == 0 || rate < 1.0 {
            self.ns_per_token = 0;
            self.queue_end_ns = 0;
        } else {
            self.ns_per_token = (1e9 / (rate * PACE_AHEAD)) as u64;
            if unclaimed > 0 {
                self.queue_end_ns = 0;
            }
        }
    }

    /// The tokens the store gave this node over about the last second.
    pub fn intake(&self, now_ns: u64) -> f64 {
        self.decayed_intake(now_ns) * (1e9 / RATE_TAU_NS)
    }

    /// The intake count at `now_ns`.
    fn decayed_intake(&self, now_ns: u64) -> f64 {
        let age = now_ns.saturating_sub(self.intake_at_ns) as f64;
        self.intake * (-age / RATE_TAU_NS).exp()
    }

    /// Books `tokens` for an ask at `now_ns` in the node's queue of turns and
    /// returns when, from now, its turn comes: behind every turn booked
    /// before it, and not before the hold ends (at most [`MAX_QUEUE_NS`]).
    /// Tokens still pooled once the hold is over are booked too, the periods
    /// then counted from now. `None` when the node keeps no queue (it is not
    /// far over its share) or the ask wants more than a period's tokens.
    pub(super) fn book(&mut self, now_ns: u64, tokens: u32) -> Option<u64> {
        // Periods start at the hold's end, or now once it is over.
        let first = self.lease.denied_until_ns().max(now_ns);
        if self.ns_per_token == 0 {
            return None;
        }
        if u64::from(tokens).saturating_mul(self.ns_per_token) > self.turn_period_ns {
            return None;
        }
        let start = self
            .queue_end_ns
            .max(first)
            .min(now_ns.saturating_add(MAX_QUEUE_NS));
        self.queue_end_ns =
            start.saturating_add(u64::from(tokens).saturating_mul(self.ns_per_token));
        // Turns come at the periods' starts, when the node calls the store.
        let periods = start
            .saturating_sub(first)
            .div_ceil(self.turn_period_ns.max(1));
        let start = first
            .saturating_add(periods.saturating_mul(self.turn_period_ns))
            .min(now_ns.saturating_add(MAX_QUEUE_NS));
        Some(start.saturating_sub(now_ns))
    }

    /// Counts in the node's demand the asks a filter sent to its turn
    /// `next_ns` from now skips (one of `asked` tokens each `period_ns`, half
    /// a lease's life), as it would have made them: the node's demand, which
    /// sizes its leases and tells whether it is far over its share, does not
    /// fall because fewer ask.
    pub(super) fn count_skipped(&mut self, now_ns: u64, asked: u32, next_ns: u64, period_ns: u64) {
        let skipped = (u128::from(asked) * u128::from(next_ns) / u128::from(period_ns.max(1)))
            .min(u128::from(u32::MAX)) as u32;
        self.lease.add_demand(now_ns, skipped);
    }
}
