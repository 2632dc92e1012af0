//! One key's lease, as a holder keeps it: the tokens it was granted and may spend
//! until they expire, the denial it caches, how fast it spends, and the one call
//! for more that it may have in flight. The filter keeps one per key in a
//! shared-data slot ([`crate::slot`]), the agent one per key in its node pool,
//! and the simulator runs the filter's; this is the only place their rules are
//! written:
//!
//! - granted tokens are spent before a cached denial (a denial answering a
//!   concurrent call must not strand tokens the store already handed out);
//! - expired tokens are dropped, never carried into a later grant;
//! - at most one call is in flight, until its answer or its deadline (a lost
//!   answer never wedges the key);
//! - a refill starts ahead of need: when what is left falls to what the holder
//!   spends during [`REFILL_ROUND_TRIPS`] measured round trips, the take that
//!   crosses the mark is served from what is left and tells its caller to start
//!   one call for more, so the requests behind it do not wait;
//!   No refill starts while a denial (or a hold the store's answer set) is
//!   cached: the store said when to ask again;
//! - a denial that ended within a round trip ([`Lease::denial_just_ended`])
//!   lets the filter hold the key at it until the call behind it answers
//!   (`crate::slot::LocalCheck::Held`), so its requests do not wait on that
//!   call; the agent's pool, whose asks come from filters that cache what it
//!   says, waits on its store call instead;
//! - the next ask is sized by the measured demand ([`Lease::want`]): tokens
//!   asked for per second of wall-clock time, whether they were there or not
//!   (a decaying count with a time constant of one second). A holder whose
//!   demand fills fewer than [`THICK_TOKENS_PER_LIFE`] tokens in a lease's life
//!   asks for its cost each time and never ahead.
//!
//! Time is a parameter (`now_ns`).

/// The time constant of every rate a holder keeps as a decaying count: a
/// key's demand at each holder, and a node's intake of a key's tokens
/// (`crate::pool_entry`). Lease sizes follow demand about this late; a
/// count reads as tokens per second as `count × 1 s ÷ τ`.
pub(crate) const RATE_TAU_NS: f64 = 1e9;
/// A refill starts when the tokens left would last this many round trips.
pub const REFILL_ROUND_TRIPS: f64 = 2.0;
/// A holder leases ahead (asks for more than its cost, refills before it runs
/// out) only when it spends at least this many tokens in a lease's life. A
/// thinner one asks for each request's cost when it needs it: tokens fetched
/// ahead would often expire before its next request, stranded, so the tokens
/// of a key that is thin at each holder stay where they are shared (the
/// node's pool, the store).
pub const THICK_TOKENS_PER_LIFE: f64 = 4.0;
/// Whether a demand of `demand_per_sec` fills a lease living `life_ns` with
/// at least [`THICK_TOKENS_PER_LIFE`] tokens.
pub fn is_thick(demand_per_sec: f64, life_ns: u64) -> bool {
    demand_per_sec * life_ns as f64 / 1e9 >= THICK_TOKENS_PER_LIFE
}

/// The round trip assumed before one is measured, in microseconds.
const INITIAL_RTT_US: u32 = 1_000;
/// The weight of a new round-trip sample in the mean.
const RTT_WEIGHT: f64 = 0.2;

/// One key's lease.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Lease {
    /// Unspent tokens, usable until `expires_ns`.
    pub tokens: u32,
    pub expires_ns: u64,
    /// Requests before this time are denied without asking. Written only by
    /// this module's grants and denials (read it with
    /// [`Lease::denied_until_ns`]), so a hold means one thing everywhere.
    pub(crate) denied_until_ns: u64,
    /// The last grant (with what it carried over) and when it came.
    pub granted: u32,
    pub granted_at_ns: u64,
    /// Tokens asked for (spent or not), as a count decaying with a time
    /// constant of one second, last updated at `demand_at_ns`: at a steady
    /// rate r it settles at r × 1 s, so it reads as tokens per second.
    pub demand: f32,
    pub demand_at_ns: u64,
    /// A call for this key is in flight since this time (0: none)...
    pub call_started_ns: u64,
    /// ...until its answer, or this deadline at the latest.
    pub call_deadline_ns: u64,
    /// The measured round trip of a call, in microseconds (0: none measured).
    pub rtt_us: u32,
}

/// What a lease can do for a request of `cost` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    /// Taken; `left` tokens remain. `refill`: this take crossed the refill mark,
    /// the lease now has a call marked in flight, and the caller must start it.
    Taken { left: u32, refill: bool },
    /// The cached denial holds until `retry_after_ns` from now.
    Denied { retry_after_ns: u64 },
    /// Nothing to spend. `in_flight`: a call for more is on its way.
    Empty { in_flight: bool },
}

impl Lease {
    /// Until when requests are denied without asking (0: no denial held).
    pub fn denied_until_ns(&self) -> u64 {
        self.denied_until_ns
    }

    /// True while a call is in flight at `now_ns`.
    pub fn in_flight(&self, now_ns: u64) -> bool {
        self.call_started_ns > 0 && now_ns < self.call_deadline_ns
    }

    /// Unexpired tokens at `now_ns`.
    pub fn usable(&self, now_ns: u64) -> u32 {
        if self.expires_ns > now_ns {
            self.tokens
        } else {
            0
        }
    }

    /// Takes `cost` tokens if the lease holds them (see the module docs for the
    /// order of tokens, denial and refill). `refill_timeout_ns`: the deadline of
    /// a refill this take may start; `None` for a holder that never refills
    /// ahead (every request of an exact rule is checked at the store).
    pub fn take(&mut self, now_ns: u64, cost: u32, refill_timeout_ns: Option<u64>) -> Spend {
        self.add_demand(now_ns, cost);
        self.spend(now_ns, cost, refill_timeout_ns)
    }

    /// [`Lease::take`] for a request whose demand was counted already (one
    /// that waited on a call and takes from its answer): a request counts
    /// once, however many times it looks.
    pub fn spend(&mut self, now_ns: u64, cost: u32, refill_timeout_ns: Option<u64>) -> Spend {
        if self.expires_ns > now_ns && self.tokens >= cost {
            self.tokens -= cost;
            // No refill while a denial holds: the store said when to ask again.
            let refill = refill_timeout_ns.is_some_and(|t| {
                self.denied_until_ns <= now_ns
                    && self.below_mark(now_ns, cost)
                    && self.begin_call(now_ns, t)
            });
            return Spend::Taken {
                left: self.tokens,
                refill,
            };
        }
        if self.denied_until_ns > now_ns {
            return Spend::Denied {
                retry_after_ns: self.denied_until_ns - now_ns,
            };
        }
        Spend::Empty {
            in_flight: self.in_flight(now_ns),
        }
    }

    /// Marks a call in flight until `timeout_ns` from now; false when one
    /// already is (single flight: the caller must not start another).
    pub fn begin_call(&mut self, now_ns: u64, timeout_ns: u64) -> bool {
        if self.in_flight(now_ns) {
            return false;
        }
        self.call_started_ns = now_ns.max(1);
        self.call_deadline_ns = now_ns.saturating_add(timeout_ns.max(1));
        true
    }

    /// Whether what is left, after a take of `cost`, lasts fewer than
    /// [`REFILL_ROUND_TRIPS`] round trips at the spend rate, or the lease expires
    /// within them. Only a lease that has a spend rate refills ahead: the first
    /// grant of a key is spent before its rate is known, and a thin holder
    /// (see [`THICK_TOKENS_PER_LIFE`]) asks when it needs a token.
    fn below_mark(&self, now_ns: u64, cost: u32) -> bool {
        if !self.is_thick() {
            return false;
        }
        let ahead_ns = REFILL_ROUND_TRIPS * f64::from(self.rtt_or_default()) * 1e3;
        let reserve = f64::from(self.demand) * ahead_ns / 1e9;
        f64::from(self.tokens) < reserve + f64::from(cost)
            || (self.expires_ns.saturating_sub(now_ns) as f64) < ahead_ns
    }

    /// Whether the key's last answer was a denial that ended less than a
    /// round trip before `now_ns`, or before the call now in flight began: a
    /// key over its limit a moment ago, whose next answer (the call behind the
    /// denial) is still to come. A grant clears the denial, so after one this
    /// is false.
    pub fn denial_just_ended(&self, now_ns: u64) -> bool {
        let since = if self.in_flight(now_ns) {
            self.call_started_ns
        } else {
            now_ns
        };
        let rtt_ns = u64::from(self.rtt_or_default()).saturating_mul(1_000);
        self.denied_until_ns != 0
            && since >= self.denied_until_ns
            && since - self.denied_until_ns < rtt_ns
    }

    fn rtt_or_default(&self) -> u32 {
        if self.rtt_us == 0 {
            INITIAL_RTT_US
        } else {
            self.rtt_us
        }
    }

    /// Whether this holder's demand fills a lease's life with enough tokens
    /// to lease ahead.
    pub fn is_thick(&self) -> bool {
        is_thick(
            f64::from(self.demand),
            self.expires_ns.saturating_sub(self.granted_at_ns),
        )
    }

    /// Tokens to ask for: this holder's demand over `period_ns`, at least
    /// `cost`. `None` for a thin holder (and before its first grant): it asks
    /// for its cost.
    pub fn want(&self, period_ns: u64, cost: u32) -> Option<u32> {
        if !self.is_thick() {
            return None;
        }
        let want = (f64::from(self.demand) * period_ns as f64 / 1e9).ceil();
        (want >= 1.0).then(|| (want.min(f64::from(u32::MAX)) as u32).max(cost))
    }

    /// What a holder asks for next: half a lease's life of demand, spent
    /// before the lease expires with half to spare for a rate that drops (a
    /// burst that ends); `None` for a thin holder (see [`Lease::want`]).
    pub fn next_ask(&self, cost: u32) -> Option<u32> {
        self.want(self.expires_ns.saturating_sub(self.granted_at_ns) / 2, cost)
    }

    /// Records a grant of `tokens` of which `cost` went to the request that
    /// asked (0 for a refill); the rest joins the unexpired tokens, all good
    /// until `ttl_ns` from now. Ends the call in flight.
    pub fn grant(&mut self, now_ns: u64, tokens: u32, cost: u32, ttl_ns: u64) {
        self.end_call(now_ns, true);
        let carried = self.usable(now_ns);
        self.tokens = carried.saturating_add(tokens.saturating_sub(cost));
        self.expires_ns = now_ns.saturating_add(ttl_ns);
        self.denied_until_ns = 0;
        self.granted = carried.saturating_add(tokens);
        self.granted_at_ns = now_ns;
    }

    /// Denies the key from when the unspent tokens are gone until `wait_ns`
    /// from now (a grant that carries the holder's next turn, or a node's
    /// hold after a grant that drained the store): tokens are
    /// spent before a cached denial, and no refill starts while it holds.
    /// Keeps the call state, unlike [`Lease::deny`], which answers a call.
    pub fn deny_after_tokens(&mut self, now_ns: u64, wait_ns: u64) {
        self.denied_until_ns = now_ns.saturating_add(wait_ns);
    }

    /// Records a denial: requests are denied until `retry_after_ns` from now,
    /// once the unexpired tokens are spent. Ends the call in flight.
    pub fn deny(&mut self, now_ns: u64, retry_after_ns: u64) {
        self.end_call(now_ns, true);
        self.denied_until_ns = now_ns.saturating_add(retry_after_ns);
        if self.expires_ns <= now_ns {
            self.tokens = 0;
        }
    }

    /// The call in flight failed (no answer): the next request may call again.
    pub fn failed(&mut self) {
        self.call_started_ns = 0;
        self.call_deadline_ns = 0;
    }

    /// Drops the tokens (a holder that must not keep them, such as a key whose
    /// slot changes hands); what they were is forgotten with them.
    pub fn drop_tokens(&mut self) {
        self.tokens = 0;
        self.expires_ns = 0;
    }

    fn end_call(&mut self, now_ns: u64, answered: bool) {
        if answered && self.call_started_ns > 0 && now_ns >= self.call_started_ns {
            let sample = ((now_ns - self.call_started_ns) / 1_000).min(u64::from(u32::MAX)) as f64;
            let rtt = if self.rtt_us == 0 {
                sample
            } else {
                f64::from(self.rtt_us) + RTT_WEIGHT * (sample - f64::from(self.rtt_us))
            };
            self.rtt_us = (rtt.round() as u32).max(1);
        }
        self.failed();
    }

    /// The demand at `now_ns`, in tokens per second.
    pub fn demand_per_sec(&self, now_ns: u64) -> f64 {
        let age = now_ns.saturating_sub(self.demand_at_ns) as f64;
        f64::from(self.demand) * (-age / RATE_TAU_NS).exp() * 1e9 / RATE_TAU_NS
    }

    /// Adds `cost` tokens asked for at `now_ns` to the decaying count (what
    /// [`Lease::take`] does; a holder serving asks of several tokens counts
    /// what was asked for, then [`Lease::spend`]s).
    ///
    /// A lease that expired with `cost` or more tokens unspent lowers the
    /// count first, to no more than the rate at which that lease was spent:
    /// every ask in its life found its tokens (they are spent before a cached
    /// denial), so the holder asked for no more than it spent. The count alone
    /// falls with a time constant of a second, so after a burst it sized
    /// leases for the burst for seconds, and their tokens expired unspent
    /// while other holders found the store's bucket empty.
    pub fn add_demand(&mut self, now_ns: u64, cost: u32) {
        let age = now_ns.saturating_sub(self.demand_at_ns) as f64;
        let mut decayed = f64::from(self.demand) * (-age / RATE_TAU_NS).exp();
        if let Some(spent) = self.spent_per_sec(now_ns, cost) {
            decayed = decayed.min(spent * RATE_TAU_NS / 1e9);
        }
        self.demand = (decayed + f64::from(cost)) as f32;
        self.demand_at_ns = now_ns;
    }

    /// The rate at which the last lease was spent over its life, in tokens per
    /// second, once it expired with at least `cost` tokens unspent.
    fn spent_per_sec(&self, now_ns: u64, cost: u32) -> Option<f64> {
        let life = self.expires_ns.saturating_sub(self.granted_at_ns);
        if self.expires_ns > now_ns || self.tokens < cost.max(1) || life == 0 {
            return None;
        }
        let spent = self.granted.saturating_sub(self.tokens);
        Some(f64::from(spent) * 1e9 / life as f64)
    }
}

#[cfg(test)]
mod tests;
