//! One key's entry in a node's pool: the policy by which an agent serves its
//! filters' asks for a key from the tokens it took from the store, holds the
//! key after a drained grant or a denial, and gives a node far over its share
//! of the key's limit turns. The agent keeps one per key (`agent/src/pool.rs`
//! keeps them in a bounded map, with the channel its asks wait on); the
//! simulator runs the agent's. The entry's state is private: only its
//! methods, here and in `turns` (how a node far over its share gives its
//! filters turns), change it.
//!
//! Time is a parameter (`now_ns`).

use crate::lease::{Lease, Spend};
use crate::Limit;

mod turns;

pub use turns::MAX_QUEUE_NS;

/// What the store granted: tokens, what it kept, and when its bucket is full.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreGrant {
    pub tokens: u32,
    pub remaining: u32,
    pub reset_ns: u64,
    /// The token bucket the tokens came from: what the pooled ones go back
    /// under when the agent stops (`None`: a window's count, whose tokens
    /// are not handed back).
    pub bucket: Option<Limit>,
}

impl StoreGrant {
    /// What the store granted for an ask under `limit`.
    pub fn under(limit: Limit, tokens: u32, remaining: u32, reset_ns: u64) -> StoreGrant {
        StoreGrant {
            tokens,
            remaining,
            reset_ns,
            bucket: (!limit.algorithm().is_window()).then_some(limit),
        }
    }

    /// The tokens of a grant of `granted` that go to the filter that asked
    /// for `cost` and said it will spend `want`: its want, at least its cost,
    /// at most the grant (`cost` 0: a refill, whose tokens all join the pool).
    pub fn filter_tokens(granted: u32, (cost, want): (u32, Option<u32>)) -> u32 {
        if cost == 0 {
            0
        } else {
            want.unwrap_or(cost).max(cost).min(granted)
        }
    }
}

/// How long a store grant's tokens and the hold after them last: the pooled
/// tokens expire `ttl_ns` from the grant; once they are spent, asks are denied
/// at the node until `hold_ns` from the grant (0: no hold), and a node far
/// over its share gives turns at the starts of periods `turn_period_ns` long (0:
/// no turns; the asks turned away come back at the hold's end). See
/// [`PoolEntry::fill`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantTimes {
    pub ttl_ns: u64,
    pub hold_ns: u64,
    pub turn_period_ns: u64,
}

/// One ask as a key's entry takes it.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    pub now_ns: u64,
    pub cost: u32,
    /// What the filter asked for: its want, at least its cost. This is the
    /// ask's demand, not what the pool happens to hold.
    pub asked: u32,
    /// The time a store call this ask starts (a miss, a refill) is given.
    pub call_timeout_ns: u64,
    /// Whether the ask's demand is counted: a retake after a wait was
    /// counted by its first take.
    pub count: bool,
    /// The filters' ask period (half a lease's life): what a turn counts
    /// the asks it skips by.
    pub period_ns: u64,
    /// Whether a take below the refill mark starts a refill (not once the
    /// pool is handed back).
    pub refills: bool,
}

/// What the entry can do for one ask. `W` is what a wait holds: nothing
/// here; the agent's pool puts in it the receiver the call's end is told on.
#[derive(Debug)]
pub enum Take<W = ()> {
    /// Served from the pool: `tokens` for the filter. `refill`: the pool fell
    /// below its refill mark and has a store call marked in flight; the
    /// caller starts it (in the background) and reports its end.
    Served {
        tokens: u32,
        remaining: u32,
        reset_ns: u64,
        refill: bool,
        /// The filter's next turn, for a node far over its share: it asks
        /// again no sooner.
        next_ask_ns: Option<u64>,
    },
    /// The node knows the key is over its limit until `retry_after_ns` from now.
    Denied { retry_after_ns: u64 },
    /// A store call for the key is in flight: wait for its end, then take again.
    Wait(W),
    /// Ask the store (the call is marked in flight: report its end);
    /// `demand_per_sec` is this node's recent demand for the key; `dropped`
    /// pooled tokens expired unspent; `waited`: asks that waited on the last
    /// call and may still want tokens (the lease should cover them too).
    Miss {
        demand_per_sec: f64,
        dropped: u32,
        waited: u32,
    },
}

impl<W> Take<W> {
    /// The same answer, a wait holding `wait()` instead.
    pub fn with_wait<V>(self, wait: impl FnOnce(W) -> V) -> Take<V> {
        match self {
            Take::Served {
                tokens,
                remaining,
                reset_ns,
                refill,
                next_ask_ns,
            } => Take::Served {
                tokens,
                remaining,
                reset_ns,
                refill,
                next_ask_ns,
            },
            Take::Denied { retry_after_ns } => Take::Denied { retry_after_ns },
            Take::Wait(w) => Take::Wait(wait(w)),
            Take::Miss {
                demand_per_sec,
                dropped,
                waited,
            } => Take::Miss {
                demand_per_sec,
                dropped,
                waited,
            },
        }
    }

    /// Whether the answer marked a store call in flight (a refill, a miss).
    pub fn starts_call(&self) -> bool {
        matches!(self, Take::Served { refill: true, .. } | Take::Miss { .. })
    }
}

impl<W> PartialEq for Take<W> {
    /// Equal answers; two waits are never equal (each waits on its own call).
    fn eq(&self, other: &Self) -> bool {
        use Take::*;
        match (self, other) {
            (
                Served {
                    tokens: a,
                    remaining: b,
                    reset_ns: c,
                    refill: d,
                    next_ask_ns: e,
                },
                Served {
                    tokens: f,
                    remaining: g,
                    reset_ns: h,
                    refill: i,
                    next_ask_ns: j,
                },
            ) => (a, b, c, d, e) == (f, g, h, i, j),
            (Denied { retry_after_ns: a }, Denied { retry_after_ns: b }) => a == b,
            (
                Miss {
                    demand_per_sec: a,
                    dropped: b,
                    waited: c,
                },
                Miss {
                    demand_per_sec: d,
                    dropped: e,
                    waited: f,
                },
            ) => (a, b, c) == (d, e, f),
            _ => false,
        }
    }
}

/// One key at a node: its pooled lease, what the store's bucket held after
/// its last answer, and the queue of turns of a node far over its share.
#[derive(Debug, Default, Clone)]
pub struct PoolEntry {
    lease: Lease,
    remaining: u32,
    reset_at_ns: u64,
    /// Asks that waited on the call in flight: the next call's lease covers them.
    waited: u32,
    /// The period at whose starts turns come (0: no turns).
    turn_period_ns: u64,
    /// The node's queue of turns while it is far over its share: the time by
    /// which the tokens of the turns booked will have come from the store,
    /// one every `ns_per_token` (0: no queue).
    queue_end_ns: u64,
    ns_per_token: u64,
    /// Tokens the store gave this node, a count decaying with
    /// [`RATE_TAU_NS`].
    intake: f64,
    intake_at_ns: u64,
    /// The token bucket's limit of the last grant: what the pooled tokens go
    /// back under when the agent stops (`None`: a window's count, whose
    /// tokens are not handed back).
    bucket: Option<Limit>,
}

impl PoolEntry {
    /// Serves `ask` from the pool if it can; otherwise it is turned away, waits
    /// on the store call in flight (`waitable`: the holder has one to wait
    /// on), or starts one.
    pub fn take(&mut self, ask: &Ask, waitable: bool) -> Take {
        // Pooled tokens first: a hold set at the last grant starts once they
        // are spent. A filter gets what it says it will spend (`want`), at
        // least the cost; one that does not know yet gets its cost, so no
        // tokens sit in a filter that will not spend them.
        let usable = self.lease.usable(ask.now_ns);
        let tokens = if usable >= ask.cost {
            usable.min(ask.asked)
        } else {
            ask.cost
        };
        if ask.count {
            self.lease.add_demand(ask.now_ns, ask.asked);
        }
        match self.lease.spend(
            ask.now_ns,
            tokens,
            ask.refills.then_some(ask.call_timeout_ns),
        ) {
            Spend::Taken { left, refill } => self.serve(ask, tokens, left, refill),
            Spend::Denied { retry_after_ns } => self.turn_away_ask(ask, retry_after_ns),
            Spend::Empty { in_flight } => self.wait_or_miss(ask, in_flight && waitable),
        }
    }

    /// The ask took `tokens`, leaving `left` pooled; `refill`: the pool fell
    /// below its refill mark and a store call is marked in flight. With
    /// turns, the grant carries the filter's next turn.
    fn serve(&mut self, ask: &Ask, tokens: u32, left: u32, refill: bool) -> Take {
        let next_ask_ns = self.book(ask.now_ns, tokens);
        if let Some(next) = next_ask_ns.filter(|_| ask.count) {
            self.count_skipped(ask.now_ns, ask.asked, next, ask.period_ns);
        }
        Take::Served {
            tokens,
            remaining: self.remaining.saturating_add(left),
            reset_ns: self.reset_at_ns.saturating_sub(ask.now_ns),
            refill,
            next_ask_ns,
        }
    }

    /// The node holds the key for `retry_after_ns`: the ask is sent back at
    /// its turn when one is booked, else at the hold's end.
    fn turn_away_ask(&mut self, ask: &Ask, retry_after_ns: u64) -> Take {
        let Some(turn) = self.book(ask.now_ns, ask.asked) else {
            return Take::Denied { retry_after_ns };
        };
        if ask.count {
            self.count_skipped(ask.now_ns, ask.asked, turn, ask.period_ns);
        }
        Take::Denied {
            retry_after_ns: turn,
        }
    }

    /// Nothing pooled for the ask: it waits on the store call in flight
    /// (`wait`), or starts one (a miss).
    fn wait_or_miss(&mut self, ask: &Ask, wait: bool) -> Take {
        if wait {
            self.waited = self.waited.saturating_add(1);
            return Take::Wait(());
        }
        let now_ns = ask.now_ns;
        // Expired tokens are dropped (and said to be); unexpired ones fewer
        // than the cost join the next grant.
        let dropped = if self.lease.expires_ns <= now_ns {
            std::mem::take(&mut self.lease.tokens)
        } else {
            0
        };
        self.lease.begin_call(now_ns, ask.call_timeout_ns);
        // The demand before this ask: a key nobody asked for is cold.
        let own = if ask.count { f64::from(ask.asked) } else { 0.0 };
        let demand = self.lease.demand_per_sec(now_ns) - own;
        Take::Miss {
            demand_per_sec: demand.max(0.0),
            dropped,
            waited: std::mem::take(&mut self.waited),
        }
    }

    /// Records a store grant for an ask of `cost` that says it will spend
    /// `want`: the filter gets [`StoreGrant::filter_tokens`], the pool keeps
    /// the rest until `times.ttl_ns`; once the pooled tokens are spent, asks
    /// are denied at the node until `times.hold_ns` from now. `period_ns`:
    /// the filters' ask period. Returns the filter's next turn, for a node
    /// that gives turns.
    pub fn fill(
        &mut self,
        now_ns: u64,
        grant: StoreGrant,
        (cost, want): (u32, Option<u32>),
        times: GrantTimes,
        period_ns: u64,
    ) -> Option<u64> {
        let filter = StoreGrant::filter_tokens(grant.tokens, (cost, want));
        let unclaimed = self.lease.usable(now_ns);
        // Tokens already pooled are added to, never overwritten (that would
        // lose granted tokens).
        self.lease.grant(now_ns, grant.tokens, filter, times.ttl_ns);
        self.remaining = grant.remaining;
        self.reset_at_ns = now_ns.saturating_add(grant.reset_ns);
        self.bucket = grant.bucket;
        self.lease.deny_after_tokens(now_ns, times.hold_ns);
        self.turn_period_ns = times.turn_period_ns;
        self.pace(now_ns, times.hold_ns, grant.tokens, unclaimed);
        if filter == 0 {
            return None;
        }
        let next = self.book(now_ns, filter)?;
        self.count_skipped(now_ns, want.unwrap_or(cost).max(cost), next, period_ns);
        Some(next)
    }

    /// Records a store denial: asks are denied at the node until
    /// `retry_after_ns` from now; a node far over its share gives turns at
    /// the starts of periods `turn_period_ns` long (0: none).
    pub fn deny(&mut self, now_ns: u64, retry_after_ns: u64, turn_period_ns: u64) {
        self.turn_period_ns = turn_period_ns;
        // A denial answering a concurrent ask must not strand tokens that
        // another ask's grant just pooled: they are served first.
        self.lease.deny(now_ns, retry_after_ns);
        self.pace(now_ns, retry_after_ns, 0, 0);
        // The store held less than an ask.
        self.remaining = 0;
    }

    /// Takes the unexpired pooled tokens of a token bucket out of the entry:
    /// what goes back to the store when the agent stops, with the bucket's
    /// limit. `None` (and nothing taken) for a window's count or an empty pool.
    pub fn take_back(&mut self, now_ns: u64) -> Option<(Limit, u32)> {
        let tokens = self.lease.usable(now_ns);
        let limit = self.bucket.filter(|_| tokens > 0)?;
        self.lease.drop_tokens();
        Some((limit, tokens))
    }

    /// Marks a background refill in flight, when the hold is over and no call
    /// is in flight. False: nothing to do.
    pub fn begin_refill(&mut self, now_ns: u64, call_timeout_ns: u64) -> bool {
        self.lease.denied_until_ns() <= now_ns && self.lease.begin_call(now_ns, call_timeout_ns)
    }

    /// The store call failed: the asks waiting on it take again.
    pub fn call_failed(&mut self) {
        self.lease.failed();
    }

    /// What the store's bucket held after its last answer (0 after a denial).
    pub fn store_left(&self) -> u32 {
        self.remaining
    }

    /// The unexpired tokens pooled.
    pub fn pooled(&self, now_ns: u64) -> u32 {
        self.lease.usable(now_ns)
    }

    /// The node's recent demand, tokens per second.
    pub fn demand(&self, now_ns: u64) -> f64 {
        self.lease.demand_per_sec(now_ns)
    }

    /// The lease the entry keeps (read only).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Whether the entry holds anything that losing it would lose: tokens,
    /// a hold or a call in flight.
    pub fn is_busy(&self, now_ns: u64) -> bool {
        self.lease.expires_ns > now_ns
            || self.lease.denied_until_ns() > now_ns
            || self.lease.in_flight(now_ns)
    }

    /// Whether a sweep keeps the entry: busy, or with a demand of at least
    /// one token every two seconds.
    pub fn is_live(&self, now_ns: u64) -> bool {
        self.is_busy(now_ns) || self.lease.demand_per_sec(now_ns) >= 0.5
    }
}

#[cfg(test)]
mod tests;
