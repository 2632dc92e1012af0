//! Deciding, for one key, which of the limiter's decisions were wrong, against
//! ideal token buckets with the rule's rate and burst (`meshlimit_core::Bucket`,
//! the same maths the store runs).
//!
//! - **Wrongly limited**: a request rejected (429 or 503) while the key's offered
//!   traffic was within its limit: an ideal bucket fed every arrival of the key
//!   (each takes a token when there is one) admits this request, and admitted
//!   every arrival of the key from one rule period before this request's arrival
//!   until its decision. A key offered above its limit is not "under its limit
//!   over the window", so which of its requests get through is not judged here;
//!   how many do is `admitted/limit`. (Up to the decision, not the arrival: while
//!   a request waits for the store, requests of other gateways that arrived after
//!   it may be served first; if the key reached its limit meanwhile, this one was
//!   at the limit's edge, not wrongly limited.)
//! - **Wrongly allowed**: a request admitted while the key had used its allowance:
//!   an ideal bucket replayed over the admitted requests, in the order they were
//!   decided and at the instant each was decided, holds less than the request's
//!   cost. Equivalently: for some window ending at that decision, the key's
//!   admissions exceeded burst + rate × window. The replay starts full at the
//!   arrival of the key's first admitted request, as the store's bucket starts
//!   full at its first lease.
//!   The store decided somewhere between the request's arrival and its decision,
//!   and a full bucket loses what it would refill meanwhile; so for a request
//!   decided `w` after its arrival, the replay's cap is burst + rate × `w` (only a
//!   full bucket is affected). A wrongly allowed request does not spend the
//!   replay's tokens, so each excess admission is counted once.
//! - **Held back** (a diagnostic, not a target): a rejection while that replay of
//!   admissions still held a whole token, i.e. unspent allowance sat somewhere in
//!   the fleet (in leases, in an agent's pool) while this request was turned away.
//!
//! The simulator feeds arrivals in arrival order and decisions in decision order
//! (one thread, one monotonic clock), so both replays are exact.

use meshlimit_core::{Bucket, Limit, Take};

/// One key's judge.
#[derive(Debug, Clone)]
pub struct Judge {
    limit: Limit,
    cost: u32,
    offered: Option<Bucket>,
    admitted: Option<Replay>,
    /// The last arrival the offered-traffic bucket could not admit.
    last_over_ns: Option<u64>,
}

/// The replay of admissions: a token bucket whose cap stretches by the refill
/// of each request's wait (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Replay {
    tokens: f64,
    updated_ns: u64,
}

impl Judge {
    pub fn new(limit: Limit, cost: u32) -> Judge {
        Judge {
            limit,
            cost: cost.max(1),
            offered: None,
            admitted: None,
            last_over_ns: None,
        }
    }

    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// An arrival at `now_ns` (call in arrival order): true when an ideal
    /// limiter fed every arrival admits it.
    pub fn arrive(&mut self, now_ns: u64) -> bool {
        let limit = self.limit;
        let bucket = self
            .offered
            .get_or_insert_with(|| Bucket::full(&limit, now_ns));
        let admit = matches!(
            bucket.take(&limit, now_ns, self.cost, self.cost),
            Take::Granted { .. }
        );
        if !admit {
            self.last_over_ns = Some(now_ns);
        }
        admit
    }

    /// A rejection, decided now, of a request that arrived at `arrived_ns`: true
    /// when it was wrongly limited (see the module docs). Call in decision order,
    /// after every arrival up to now.
    pub fn rejected(&self, arrived_ns: u64, ideal_admit: bool) -> bool {
        let window_start = arrived_ns.saturating_sub(self.limit.per_ns());
        ideal_admit && self.last_over_ns.is_none_or(|t| t < window_start)
    }

    /// An admission decided at `now_ns` of a request that arrived at
    /// `arrived_ns` (call in decision order); true when it was wrongly allowed.
    pub fn admitted(&mut self, arrived_ns: u64, now_ns: u64) -> bool {
        let (rate, burst) = (self.limit.rate_per_ns(), f64::from(self.limit.burst()));
        let replay = self.admitted.get_or_insert(Replay {
            tokens: burst,
            updated_ns: arrived_ns,
        });
        let elapsed = now_ns.saturating_sub(replay.updated_ns) as f64;
        let wait = now_ns.saturating_sub(arrived_ns) as f64;
        let held = (replay.tokens + elapsed * rate).min(burst + wait * rate);
        replay.updated_ns = replay.updated_ns.max(now_ns);
        let cost = f64::from(self.cost);
        if held + 1e-9 >= cost {
            replay.tokens = held - cost;
            false
        } else {
            replay.tokens = held;
            true
        }
    }

    /// A rejection decided at `now_ns`: true when the replay of admissions still
    /// held a whole token (allowance held back).
    pub fn held_back(&self, now_ns: u64) -> bool {
        match &self.admitted {
            Some(r) => {
                let elapsed = now_ns.saturating_sub(r.updated_ns) as f64;
                let held = (r.tokens + elapsed * self.limit.rate_per_ns())
                    .min(f64::from(self.limit.burst()));
                held + 1e-9 >= f64::from(self.cost)
            }
            // Nothing admitted yet: the whole burst is unspent.
            None => true,
        }
    }
}

#[cfg(test)]
mod tests;
