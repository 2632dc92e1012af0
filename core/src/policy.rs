//! The lease policy: how big a store lease is, how many tokens a store call
//! takes for a node's pool, and how long a node holds a key after a grant or a
//! denial. Pure arithmetic on the policy's tunables ([`LeasePolicy`]), the
//! limit, the node's demand, the live nodes and what the store left, so the
//! agent's pool, the filter and the simulator share one definition.
//!
//! Lease sizing: a rule marked `accuracy: exact` gets leases of exactly the
//! request's cost, so every request is checked in the store. Any other rule goes through the node pool
//! and, on a pool miss, takes from the store
//! `max(cost, min(ceil(demand × lease_target), max(1, burst / 10)))` tokens (for
//! a node twice over its share, its part of a lease period of the rate and of
//! the burst, if more), where
//! `demand` is this node's recent demand for the key (tokens per second): about
//! `lease_target` (100 ms) of what the node spends, so a hot key costs the store
//! about ten calls per second per node whatever its request rate; never more than
//! a tenth of the burst per node, so what idle nodes hold stays a small part of
//! the limit (a node twice over its share takes exactly its
//! part of a lease period, see [`LeasePolicy::paced`]); and a cold key starts
//! at one token (every request checked) until its demand shows. A node at least twice over its share of the limit caches a
//! store denial until a whole lease's worth of tokens is back, and for one
//! lease period (`target`) at least, so a key well over its limit costs the
//! store ten calls per second per node however many nodes share it; a
//! node nearer its share takes the store's wait alone, and takes no spare
//! tokens while the bucket is nearly empty ([`may_prefetch`]).

use core::time::Duration;

use crate::rules::{Accuracy, Rule};
use crate::{Algorithm, Limit, NANOS_PER_MS};

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

/// How far over its share of a limit a node's demand must be before the node
/// holds a key longer than the store said (see [`far_over_share`]).
/// At 2, a key offered at twice its limit or more, spread evenly, is held; a
/// key offered up to about its limit never is.
pub const FAR_OVER_SHARE: f64 = 2.0;

/// The fail-local safety factor: while the store (at the agent) or the agent
/// (at the filter) is unreachable, the fleet may admit up to this multiple of
/// a limit, so uneven traffic between nodes is not over-limited. The agent's
/// node ceiling uses it; the filter's `local_safety_factor` defaults to it.
pub const FAIL_LOCAL_SAFETY: f64 = 2.0;

/// `--region-floor`'s default: the least share of a global limit a region
/// holds. A filter does not know its agent's floor, so it cuts a global
/// rule's cached denials to the wait at this share (a lower floor set at the
/// agent cuts long waits short: extra asks, no extra admission).
pub const DEFAULT_REGION_FLOOR: f64 = 0.1;

/// `--lease-ttl-ms`'s default: how long a granted lease may be spent.
pub const DEFAULT_LEASE_TTL_MS: u64 = 300;
/// `--lease-target-ms`'s default: the lease period.
pub const DEFAULT_LEASE_TARGET_MS: u64 = 100;

/// The tunables of the lease policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeasePolicy {
    /// How long a filter may spend a granted lease (`--lease-ttl-ms`).
    pub ttl_ns: u64,
    /// The lease period: a lease holds about this much of the rule's rate
    /// (`--lease-target-ms`).
    pub period_ns: u64,
}

impl Default for LeasePolicy {
    fn default() -> Self {
        Self {
            ttl_ns: ms_to_ns(DEFAULT_LEASE_TTL_MS),
            period_ns: ms_to_ns(DEFAULT_LEASE_TARGET_MS),
        }
    }
}

/// Milliseconds in nanoseconds, saturating.
pub fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(NANOS_PER_MS)
}

/// `ns` in seconds, as `Duration::as_secs_f64` reads it.
fn secs(ns: u64) -> f64 {
    Duration::from_nanos(ns).as_secs_f64()
}

impl LeasePolicy {
    /// How long a grant's tokens may be spent, from the store's answer: the
    /// lease's life (`ttl_ns`), but a fixed window's counts only until their
    /// window ends (`reset_ns`, the store's time to it), in the node's pool
    /// and at the filter alike. Counts of one window spent in the next would
    /// be admitted there on top of that window's own `requests`; cut at the
    /// edge, what is left of a lease is counted and never admitted (under
    /// the limit, never over). The edge is the store's, so a filter's lease
    /// may outlast it by the answer's way back and the millisecond the
    /// filter reads it in (rounded up). A token bucket or sliding window
    /// keeps the whole life: its tokens do not belong to one window.
    pub fn lease_life_ns(&self, algorithm: Algorithm, reset_ns: u64) -> u64 {
        match algorithm {
            Algorithm::FixedWindow => self.ttl_ns.min(reset_ns),
            Algorithm::TokenBucket | Algorithm::SlidingWindow => self.ttl_ns,
        }
    }

    /// The period a node giving turns expects each filter to ask in: half a
    /// lease's life.
    pub fn ask_period_ns(&self) -> u64 {
        self.ttl_ns / 2
    }

    /// Whether a node far over its share of a key (`far_over_of`, see
    /// [`far_over_of`]) is paced: it gives its filters turns and takes its
    /// part of each lease period from the store, one call a period, and no
    /// more.
    ///
    /// Why its part: the nodes of a key call the store at phases of
    /// their own, and a call takes what the bucket gathered since the last
    /// one, up to its lease. With leases of twice a node's part (or a tenth of
    /// the burst), the first node after a long gap would take several periods'
    /// worth and the next one a crumb, which leaves the filters given turns
    /// nothing (a denial each). At its part, a node that finds more in the
    /// bucket than it takes is calling after a long gap, and calls the sooner
    /// next time ([`LeasePolicy::hold_ns`]), so the calls spread out and
    /// every call brings the part. Why its intake if more: a node far over its
    /// share whose peers take less than theirs (the only node with traffic for
    /// the key) would otherwise take its part a call, and call the store as
    /// often as its part goes into what it gets.
    pub fn paced(&self, far_over_of: Option<u32>) -> bool {
        far_over_of.is_some()
    }

    /// The store lease for `cost` under `rule`'s `limit`, given this node's demand
    /// for the key in tokens per second (see the module docs). At most a
    /// tenth of the burst; for a node far over its share (`far_over_of`: the
    /// live nodes), at most its part of one lease period of the limit's rate
    /// (and of the burst), if that is more ([`BURST_PARTS`]); paced
    /// ([`LeasePolicy::paced`]), that part, or a lease period of `intake`
    /// (the tokens a second the store gave this node for the key lately) if
    /// more, up to the larger of the part and a tenth of the burst.
    pub fn lease_size(
        &self,
        rule: &Rule,
        limit: &Limit,
        cost: u32,
        demand_per_sec: f64,
        far_over_of: Option<u32>,
        intake: f64,
    ) -> u32 {
        if rule.accuracy == Accuracy::Exact {
            return cost;
        }
        let period = secs(self.period_ns);
        let by_rate = (demand_per_sec * period).ceil();
        let by_burst = match far_over_of {
            Some(nodes) => self.far_over_lease(limit, nodes, intake),
            None => tenth(limit),
        };
        // `by_rate` is finite and positive; the cap keeps the cast in range.
        let lease = by_rate.min(f64::from(by_burst)).max(1.0) as u32;
        lease.max(cost)
    }

    /// [`LeasePolicy::lease_size`]'s cap for a node far over its share, one
    /// of `nodes`, whose store intake lately is `intake` tokens a second.
    fn far_over_lease(&self, limit: &Limit, nodes: u32, intake: f64) -> u32 {
        let period = secs(self.period_ns);
        // Finite and non-negative; the cast saturates.
        let whole = limit
            .burst()
            .min((limit.rate_per_sec() * period).floor() as u32);
        // Rounded up: the parts add up to the whole period at least.
        let part = whole.div_ceil(nodes.max(1));
        // Finite and non-negative; the cast saturates.
        let got = (intake * period).ceil() as u32;
        part.max(got).min(part.max(tenth(limit)))
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
    /// ([`LeasePolicy::paced`]) takes one lease (the filter's ask, if more):
    /// its part of the period, no more.
    pub fn store_max(&self, lease: u32, filter: u32, demand_per_sec: f64, paced: bool) -> u32 {
        if paced {
            return lease.max(filter);
        }
        let asks = demand_per_sec.max(0.0) * secs(self.ttl_ns);
        let spend = ((asks - 1.0) / 2.0).floor().max(0.0);
        // Finite and non-negative; the cap keeps the cast in range.
        let spare = spend.min(f64::from(u32::MAX)) as u32;
        lease
            .saturating_mul(2)
            .min(filter.saturating_add(spare))
            .max(lease)
    }

    /// The period at whose starts a node far over its share (`far_over`)
    /// gives its filters turns: a lease period. 0: no turns, for a node
    /// nearer its share, and for a fixed window, whose hold ends with the
    /// whole limit back, for every ask at once.
    pub fn turn_period_ns(&self, algorithm: Algorithm, far_over: bool) -> u64 {
        if far_over && algorithm != Algorithm::FixedWindow {
            self.period_ns
        } else {
            0
        }
    }

    /// After a grant that left the store fewer than a lease: how long the pool
    /// waits before it asks the store again, under the region's `enforced`
    /// limit. A fixed window gives nothing back
    /// before it ends (`reset_ns`, its end), and everything then. A bucket (and
    /// a sliding window, which frees counts as the previous window slides out,
    /// at about the limit's rate) is held until a lease's worth has refilled,
    /// and for one lease period at least, when the node is `far_over` its
    /// share: it then calls the store once a lease period, however many nodes
    /// share the key (never longer than the whole burst takes to refill,
    /// [`full_ns`]). It is not held at all otherwise (the next ask goes to the
    /// store, whose denial says when a token is back).
    ///
    /// Such a node calls again sooner by the
    /// time the bucket took to gather what the grant left in it (`remaining`;
    /// at once when that is the whole hold): it was called after a long gap
    /// since the key's last call from any node, and the node after it gets a
    /// short one. So
    /// the nodes' calls spread out over the period, and each brings its part
    /// (see [`LeasePolicy::paced`]).
    pub fn hold_ns(
        &self,
        lease: u32,
        remaining: u32,
        reset_ns: u64,
        enforced: &Limit,
        far_over: bool,
    ) -> u64 {
        match (enforced.algorithm(), remaining < lease) {
            (_, false) => 0,
            (Algorithm::FixedWindow, true) => reset_ns,
            _ if far_over => {
                let hold = refill_ns(lease - remaining, enforced)
                    .max(self.period_ns)
                    .min(full_ns(enforced));
                hold.saturating_sub(refill_ns(remaining, enforced))
            }
            _ => 0,
        }
    }

    /// After a denial of an ask of `min` tokens under the region's `enforced`
    /// limit: its wait, plus, for a node `far_over` its share, the
    /// time a lease's worth takes to refill, and one lease period at least
    /// (for a fixed window, its wait alone: the window's end, when the whole
    /// limit is back).
    pub fn denial_hold_ns(
        &self,
        lease: u32,
        min: u32,
        retry_after_ns: u64,
        enforced: &Limit,
        far_over: bool,
    ) -> u64 {
        if enforced.algorithm() == Algorithm::FixedWindow || !far_over {
            return retry_after_ns;
        }
        retry_after_ns
            .saturating_add(refill_ns(lease.saturating_sub(min), enforced))
            .max(self.period_ns)
            .min(full_ns(enforced).max(retry_after_ns))
    }
}

/// How much of a key's demand at a node one Envoy worker takes from the
/// node's shared lease at once: 10 ms of it, a tenth of the default lease
/// period, so a lease of a period's demand is ten slices or more.
pub const WORKER_SLICE_NS: u64 = 10 * NANOS_PER_MS;
/// A worker's slice is at most this part of the rule's burst (a hundredth),
/// a tenth of a lease's cap ([`BURST_PARTS`]).
pub const WORKER_SLICE_PARTS: u32 = 100;

/// The tokens an Envoy worker takes from the node's shared lease (proxy-wasm
/// shared data) for a request of `cost` on a key of `limit`: `cost` alone,
/// or a slice of more that the worker keeps in its own VM's memory and
/// spends on its next requests of the key with no host call. The key's
/// demand at the node is `demand_per_sec` (tokens a second, every worker's)
/// and the lease holds `usable` unexpired tokens.
///
/// A slice is [`WORKER_SLICE_NS`] of the demand, at most a hundredth of the
/// burst and half of what the lease holds; one of fewer than two requests'
/// cost is not taken. So the tokens a worker holds unspent are fewer than
/// `burst / 100` ([`WORKER_SLICE_PARTS`]), and those of a node's `W` workers
/// fewer than `W × burst / 100`; they expire with the lease they came from.
/// A key is worker-local only when its node demand is at least `200 × cost`
/// tokens a second: a warmer key takes `cost` from the shared lease on every
/// request, as without slices, and its calls to the agent are unchanged. A
/// hot key's slice is a tenth of its lease at most (both are the same
/// demand's share of the period, capped at a tenth and a hundredth of the
/// burst), so its lease still lasts ten slices and the node calls the agent
/// for it as often as before.
pub fn worker_slice(limit: &Limit, cost: u32, demand_per_sec: f64, usable: u32) -> u32 {
    let by_demand = (demand_per_sec.max(0.0) * secs(WORKER_SLICE_NS)).floor();
    // Finite and non-negative; the cap keeps the cast in range.
    let by_demand = by_demand.min(f64::from(u32::MAX)) as u32;
    let slice = by_demand
        .min(limit.burst() / WORKER_SLICE_PARTS)
        .min(usable / 2);
    if slice >= cost.saturating_mul(2) {
        slice
    } else {
        cost
    }
}

/// A tenth of `limit`'s burst ([`BURST_PARTS`]), one token at least.
fn tenth(limit: &Limit) -> u32 {
    (limit.burst() / BURST_PARTS).max(1)
}

/// The lease an ask of `cost` takes when `waited` asks waited on the last
/// store call and found it too small: enough to cover them too, but at most
/// a tenth of the `enforced` burst, as any lease (the ask's cost, if more).
pub fn cover_waiting(lease: u32, cost: u32, waited: u32, enforced: &Limit) -> u32 {
    let cover = cost.saturating_mul(waited.saturating_add(1));
    lease.max(cover.min(tenth(enforced).max(cost)))
}

/// Whether a node demanding `demand` tokens a second, one of `live_nodes`,
/// asks at [`FAR_OVER_SHARE`] times its share of the region's `enforced`
/// limit or more (the rate split evenly over the live nodes). Only then does
/// the node hold the key beyond what the store said: its key is well over
/// its limit, every 429 it gets is the limit working, and waiting for a
/// lease's worth saves the store a call per refilled token. A node nearer its
/// share is told by the store alone when to ask again: a hold beyond that
/// turns away requests that the store's bucket, refilling meanwhile, would
/// admit, and on a key just at its limit those are 429s while it is under it.
pub fn far_over_share(enforced: &Limit, demand: f64, live_nodes: u32) -> bool {
    let share = enforced.rate_per_sec() / f64::from(live_nodes);
    demand >= FAR_OVER_SHARE * share
}

/// The live nodes when a node demanding `demand` tokens a second is far
/// over its share of the rate ([`far_over_share`]), for
/// [`LeasePolicy::lease_size`].
pub fn far_over_of(enforced: &Limit, demand: f64, live_nodes: u32) -> Option<u32> {
    far_over_share(enforced, demand, live_nodes).then_some(live_nodes)
}

/// Whether a node may take tokens for its pool beyond what the asking
/// filter wants (and refill it ahead of need): when the store's bucket
/// held two `lease`s for every live node at its last answer to this node
/// (`store_left`; what every node's pool may take at most,
/// [`LeasePolicy::store_max`]), or when the node is far over its share.
/// Otherwise the key is near its limit: the few tokens the bucket holds
/// would sit in this pool while another node's ask finds the bucket empty,
/// and a key under its limit would get a 429 for tokens nobody spent. Such a
/// key costs the store a call per ask (it is thin per node, or it would be
/// far over), and no token.
pub fn may_prefetch(
    enforced: &Limit,
    demand: f64,
    lease: u32,
    live_nodes: u32,
    store_left: u32,
) -> bool {
    far_over_share(enforced, demand, live_nodes)
        || store_left >= lease.saturating_mul(2 * live_nodes)
}

/// The time `tokens` take to refill at `enforced`'s rate. A hold lasts
/// this long rather than a node's share of a lease (the region's rate
/// split over its live agents): that shorter hold costs the store fewer
/// calls for a key over its limit, but after a burst it keeps a key under
/// its limit rejected for seconds while the demand estimate decays. A node
/// far over its share is held at least one lease period
/// ([`LeasePolicy::hold_ns`]), and a hold's end calls the store only when
/// the pool is empty: nodes bank no tokens they do not spend, so what the
/// fleet admits stays steady from second to second.
pub fn refill_ns(tokens: u32, enforced: &Limit) -> u64 {
    let ns = (f64::from(tokens) / enforced.rate_per_ns()).ceil();
    if ns.is_finite() {
        ns.min(u64::MAX as f64) as u64
    } else {
        u64::MAX
    }
}

/// The time an empty bucket under `enforced` takes to refill its whole
/// burst. A hold never runs past it: what refills after the bucket is full
/// is lost, so a longer hold admits less than the limit when the burst is
/// under one lease period of the rate (a burst of 50 at 1,000 a second, held
/// 100 ms, would lose half of each refill). Such a key then costs the
/// store one call per burst's refill, more than one a lease period.
pub fn full_ns(enforced: &Limit) -> u64 {
    refill_ns(enforced.burst(), enforced)
}

#[cfg(test)]
mod tests;
