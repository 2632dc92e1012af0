//! What the node pool can do for one ask ([`PoolTake`]), the answer of
//! [`Pools::take`](super::Pools::take), and how a key's entry finds it.

use meshlimit_core::lease::Spend;
use tokio::sync::broadcast;

use super::Entry;

/// What the pool can do for one ask.
#[derive(Debug)]
pub enum PoolTake {
    /// Served from the pool: `tokens` for the filter. `refill`: the pool fell
    /// below its refill mark and has a store call marked in flight; the caller
    /// starts it (in the background) and reports its end.
    Served {
        tokens: u32,
        remaining: u32,
        reset_ns: u64,
        refill: bool,
        /// The filter's next turn, for a node far over its share (see
        /// [`Pools::fill_then_hold`](super::Pools::fill_then_hold)): it asks again no sooner.
        next_ask_ns: Option<u64>,
    },
    /// The node knows the key is over its limit until `retry_after_ns` from now.
    Denied { retry_after_ns: u64 },
    /// A store call for the key is in flight: wait for its end (the receiver
    /// is sent to or closed then), then take again.
    Wait(broadcast::Receiver<()>),
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

impl PartialEq for PoolTake {
    /// Equal answers; two waits are never equal (their calls differ).
    fn eq(&self, other: &Self) -> bool {
        use PoolTake::*;
        match (self, other) {
            (
                Served {
                    tokens: a,
                    remaining: b,
                    reset_ns: c,
                    refill: d,
                    next_ask_ns: i,
                },
                Served {
                    tokens: e,
                    remaining: f,
                    reset_ns: g,
                    refill: h,
                    next_ask_ns: j,
                },
            ) => (a, b, c, d, i) == (e, f, g, h, j),
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

/// One ask as a key's entry takes it.
pub(super) struct Ask {
    pub(super) now_ns: u64,
    pub(super) cost: u32,
    /// What the filter asked for: its want, at least its cost. This is the
    /// ask's demand, not what the pool happens to hold.
    pub(super) asked: u32,
    /// The time a store call this ask starts (a miss, a refill) is given.
    pub(super) call_timeout_ns: u64,
    /// Whether the ask's demand is counted: a retake after a wait was
    /// counted by its first take.
    pub(super) count: bool,
    /// The filters' ask period with turns (`Pools::with_turns`).
    pub(super) turns: Option<u64>,
    /// Whether a take below the refill mark starts a refill (not once the
    /// pool is handed back: `Pools::hand_back`).
    pub(super) refills: bool,
}

impl Entry {
    /// Serves `ask` from the pool if it can; otherwise it is turned away, waits
    /// on the store call in flight, or starts one.
    pub(super) fn take(&mut self, ask: &Ask) -> PoolTake {
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
            Spend::Empty { in_flight } => self.wait_or_miss(ask, in_flight),
        }
    }

    /// The ask took `tokens`, leaving `left` pooled; `refill`: the pool fell
    /// below its refill mark and a store call is marked in flight. With
    /// turns, the grant carries the filter's next turn.
    fn serve(&mut self, ask: &Ask, tokens: u32, left: u32, refill: bool) -> PoolTake {
        self.served = self.served.saturating_add(tokens);
        if refill {
            self.call = Some(broadcast::channel(1).0);
        }
        let next_ask_ns = ask.turns.and_then(|period| {
            let next = self.book(ask.now_ns, tokens)?;
            if ask.count {
                self.count_skipped(ask.now_ns, ask.asked, next, period);
            }
            Some(next)
        });
        PoolTake::Served {
            tokens,
            remaining: self.remaining.saturating_add(left),
            reset_ns: self.reset_at_ns.saturating_sub(ask.now_ns),
            refill,
            next_ask_ns,
        }
    }

    /// The node holds the key for `retry_after_ns`: the ask is sent back at
    /// its turn when one is booked, else after the hold, spaced by rounds.
    fn turn_away_ask(&mut self, ask: &Ask, retry_after_ns: u64) -> PoolTake {
        let (now_ns, asked) = (ask.now_ns, ask.asked);
        if let Some((turn, period)) = ask
            .turns
            .and_then(|period| Some((self.book(now_ns, asked)?, period)))
        {
            if ask.count {
                self.count_skipped(now_ns, asked, turn, period);
            }
            return PoolTake::Denied {
                retry_after_ns: turn,
            };
        }
        let rounds = self.turn_away(asked);
        // The asks this filter would have made meanwhile, one a round, count
        // as they would have: the node's demand, which sizes its leases and
        // tells whether it is far over its share, does not fall because fewer
        // ask.
        if ask.count {
            self.lease.add_demand(now_ns, asked.saturating_mul(rounds));
        }
        PoolTake::Denied {
            retry_after_ns: retry_after_ns
                .saturating_add(self.spacing_ns.saturating_mul(u64::from(rounds))),
        }
    }

    /// Nothing pooled for the ask: it waits on the store call `in_flight`,
    /// or starts one (a miss).
    fn wait_or_miss(&mut self, ask: &Ask, in_flight: bool) -> PoolTake {
        if let (true, Some(tx)) = (in_flight, &self.call) {
            let rx = tx.subscribe();
            self.waited = self.waited.saturating_add(1);
            return PoolTake::Wait(rx);
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
        self.call = Some(broadcast::channel(1).0);
        // The demand before this ask: a key nobody asked for is cold.
        let own = if ask.count { f64::from(ask.asked) } else { 0.0 };
        let demand = self.lease.demand_per_sec(now_ns) - own;
        PoolTake::Miss {
            demand_per_sec: demand.max(0.0),
            dropped,
            waited: std::mem::take(&mut self.waited),
        }
    }
}
