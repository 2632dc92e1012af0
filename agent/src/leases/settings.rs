//! How big a lease is, and the other tunables of lease handling.
//!
//! Lease sizing: a rule marked `accuracy: exact`, or slower than
//! `--exact-below-rps`, gets leases of exactly the request's cost, so every request
//! is checked in the store. Any other rule goes through the node pool
//! ([`crate::pool`]) and, on a pool miss, takes from the store
//! `max(cost, min(ceil(demand × lease_target), max(1, burst / 10)))` tokens (for
//! a node twice over its share, its part of a lease period of the rate and of
//! the burst, if more), where
//! `demand` is this node's recent demand for the key (tokens per second): about
//! `lease_target` (100 ms) of what the node spends, so a hot key costs the store
//! about ten calls per second per node whatever its request rate; never more than
//! a tenth of the burst per node, so what idle nodes hold stays a small part of
//! the limit (with `--pool-turns`, a node twice over its share takes exactly its
//! part of a lease period, see [`LeaseSettings::paced`]); and a cold key starts at one token (every request checked) until its
//! demand shows. A node at least twice over its share of the limit caches a
//! store denial until a whole lease's worth of tokens is back, and for one
//! lease period (`target`) at least, so a key well over its limit costs the
//! store ten calls per second per node however many nodes share it; a
//! node nearer its share takes the store's wait alone, and takes no spare
//! tokens while the bucket is nearly empty (`LeaseService::may_prefetch`).

use std::time::Duration;

use meshlimit_core::rules::{Accuracy, Rule};
use meshlimit_core::{Algorithm, Limit};

use crate::config::defaults;

/// A lease is at most this part of the burst (a tenth), so what nodes that
/// spend slowly hold stays a small part of the limit. A node far over its
/// share spends what it holds at once; its lease may be its part of one lease
/// period of the rate (and of the burst), if that is more: with a burst of a
/// tenth of a second's rate, a tenth of it is 10 ms of the limit, and a node
/// far over it would call the store every 10 ms instead of once a lease
/// period. Not more than a lease period of the rate: the node is held until
/// its lease has refilled, and a lease of its whole share's burst would hold
/// a region with a small share for a second at a time, so the regions
/// together would admit well under their one limit.
pub const BURST_PARTS: u32 = 10;

/// `--max-keys`' default: the per-key tables' cap (see `meshlimit_store::memory` for
/// the memory it bounds). Defined in `config::defaults`.
pub const DEFAULT_MAX_KEYS: usize = defaults::MAX_KEYS as usize;

/// The tunables of lease sizing and handling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseSettings {
    /// How long a filter may spend a granted lease.
    pub ttl: Duration,
    /// A lease holds about this much of the rule's rate.
    pub target: Duration,
    /// Rules slower than this (requests per second) get leases of one request.
    pub exact_below_rps: f64,
    /// Lease requests served at once; more are shed.
    pub max_inflight: usize,
    /// Keys the node pool and the fail-local buckets each hold at most.
    pub max_keys: usize,
    /// The store's deadline: how long an ask waits on another ask's store call
    /// for its key, and how long a call is marked in flight at most.
    pub store_deadline: Duration,
    /// A node far over its share gives its filters turns (`pool::turns`).
    pub turns: bool,
}

impl LeaseSettings {
    /// How long a grant's tokens may be spent, from the store's answer: the
    /// lease's life (`ttl`), but a fixed window's counts only until their
    /// window ends (`reset_ns`, the store's time to it), in the node's pool
    /// and at the filter alike. Counts of one window spent in the next would
    /// be admitted there on top of that window's own `requests`; cut at the
    /// edge, what is left of a lease is counted and never admitted (under
    /// the limit, never over). The edge is the store's, so a filter's lease
    /// may outlast it by the answer's way back and the millisecond the
    /// filter reads it in (rounded up). A token bucket or sliding window
    /// keeps the whole life: its tokens do not belong to one window.
    pub fn lease_life_ns(&self, algorithm: Algorithm, reset_ns: u64) -> u64 {
        let ttl = u64::try_from(self.ttl.as_nanos()).unwrap_or(u64::MAX);
        match algorithm {
            Algorithm::FixedWindow => ttl.min(reset_ns),
            Algorithm::TokenBucket | Algorithm::SlidingWindow => ttl,
        }
    }

    /// Whether a node far over its share of a key (`far_over_of`, see
    /// [`LeaseSettings::lease_size`]) is paced: with turns, it takes its part
    /// of each lease period from the store, one call a period, and no more.
    ///
    /// Why its part: the nodes of a key call the store at phases of
    /// their own, and a call takes what the bucket gathered since the last
    /// one, up to its lease. With leases of twice a node's part (or a tenth of
    /// the burst), the first node after a long gap would take several periods'
    /// worth and the next one a crumb, which leaves the filters given turns
    /// nothing (a denial each). At its part, a node that finds more in the
    /// bucket than it takes is calling after a long gap, and calls the sooner
    /// next time (`LeaseService::settle_pooled`), so the calls spread out and
    /// every call brings the part. Why its intake if more: a node far over its
    /// share whose peers take less than theirs (the only node with traffic for
    /// the key) would otherwise take its part a call, and call the store as
    /// often as its part goes into what it gets.
    pub fn paced(&self, far_over_of: Option<u32>) -> bool {
        self.turns && far_over_of.is_some()
    }

    /// True when every request of `rule` must be checked in the store.
    pub fn is_exact(&self, rule: &Rule, limit: &Limit) -> bool {
        rule.accuracy == Accuracy::Exact || limit.rate_per_sec() < self.exact_below_rps
    }

    /// The store lease for `cost` under `rule`'s `limit`, given this node's demand
    /// for the key in tokens per second (see the module docs). At most a
    /// tenth of the burst; for a node far over its share (`far_over_of`: the
    /// live nodes), at most its part of one lease period of the limit's rate
    /// (and of the burst), if that is more ([`BURST_PARTS`]); with turns
    /// ([`LeaseSettings::paced`]), that part, or a lease period of `intake`
    /// (the tokens a second the store gave this node for the key lately) if
    /// more, up to what it would be without turns.
    pub fn lease_size(
        &self,
        rule: &Rule,
        limit: &Limit,
        cost: u32,
        demand_per_sec: f64,
        far_over_of: Option<u32>,
        intake: f64,
    ) -> u32 {
        if self.is_exact(rule, limit) {
            return cost;
        }
        let by_rate = (demand_per_sec * self.target.as_secs_f64()).ceil();
        let tenth = (limit.burst() / BURST_PARTS).max(1);
        let by_burst = match far_over_of {
            Some(nodes) => {
                // Finite and non-negative; the cast saturates.
                let period = (limit.rate_per_sec() * self.target.as_secs_f64()).floor() as u32;
                let whole = limit.burst().min(period);
                let unpaced = tenth.max(whole / nodes.max(1));
                if self.turns {
                    // Rounded up: the parts add up to the whole period at least.
                    let part = whole.div_ceil(nodes.max(1));
                    // Finite and non-negative; the cast saturates.
                    let got = (intake * self.target.as_secs_f64()).ceil() as u32;
                    part.max(got).min(unpaced.max(part))
                } else {
                    unpaced
                }
            }
            None => tenth,
        };
        // `by_rate` is finite and positive; the cap keeps the cast in range.
        let lease = by_rate.min(f64::from(by_burst)).max(1.0) as u32;
        lease.max(cost)
    }

    /// The most one store call for a pooled key takes, for a `lease` of which
    /// `filter` tokens go to the asking filter: up to two leases (after a hold
    /// about one lease has refilled, plus what refilled while the ask
    /// travelled), and spare tokens for the pool only as many as the node
    /// will surely spend before they expire: with `n` asks expected in a
    /// lease's life at `demand_per_sec`, (n − 1) / 2. Asks come about at
    /// random, so the last of k spares expires unspent when fewer than k asks
    /// come in its life: one time in twenty at three asks expected (one
    /// spare, e^−3), less the more asks are expected. A token that
    /// expires is one the store's bucket lacks until it is full again: a key
    /// that runs near its limit carries the loss, and its other nodes find
    /// the bucket empty while it is under its limit. (Half the asks expected
    /// would let one spare in seven expire on a key of two asks a life: enough
    /// for a fleet of many gateways and cold keys, `zipf-keys`, to limit
    /// wrongly.) Never below the lease. A `paced` node
    /// ([`LeaseSettings::paced`]) takes one lease (the filter's ask, if more):
    /// its part of the period, no more.
    pub fn store_max(&self, lease: u32, filter: u32, demand_per_sec: f64, paced: bool) -> u32 {
        if paced {
            return lease.max(filter);
        }
        let asks = demand_per_sec.max(0.0) * self.ttl.as_secs_f64();
        let spend = ((asks - 1.0) / 2.0).floor().max(0.0);
        // Finite and non-negative; the cap keeps the cast in range.
        let spare = spend.min(f64::from(u32::MAX)) as u32;
        lease
            .saturating_mul(2)
            .min(filter.saturating_add(spare))
            .max(lease)
    }
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_millis(defaults::LEASE_TTL_MS),
            target: Duration::from_millis(defaults::LEASE_TARGET_MS),
            exact_below_rps: defaults::EXACT_BELOW_RPS,
            max_inflight: usize::try_from(defaults::MAX_INFLIGHT).unwrap_or(usize::MAX),
            max_keys: defaults::max_keys(),
            store_deadline: Duration::from_millis(defaults::STORE_DEADLINE_MS),
            turns: defaults::POOL_TURNS,
        }
    }
}
