//! The node pool (two-level leasing). For each hot key this agent keeps the
//! tokens it took from the store beyond what the asking filter needed, and serves
//! the node's next asks from them; only pool misses go to the store. Pooled
//! tokens expire with the lease TTL: unspent tokens are dropped, never hoarded.
//! When the agent stops, the unspent tokens of token buckets go back to the
//! store ([`Pools::hand_back`]), so an upgrade loses none of them.
//!
//! It also keeps the node's demand per key (the tokens its filters asked for,
//! served or not, as a decaying count with a time constant of 1 s), which
//! sizes the next store lease, and a node-level denial cache, so a key over its
//! limit costs the store one call per lease period per node instead of one per
//! filter ask.
//!
//! Each key's tokens, denial, demand and store call in flight are a
//! [`Lease`] (`meshlimit_core::lease`), the same state machine the filter keeps
//! per key: so there is at most one store call per key in flight at this agent
//! (the asks that find the pool empty while it is out wait for it,
//! [`PoolTake::Wait`]), and the ask that takes the pool below its refill mark
//! is served from what is left while one store call refills it in the
//! background ([`PoolTake::Served`] with `refill`).
//!
//! Time is a parameter (`now_ns`), so tests move it by hand.
//!
//! Bounded: at most `max_keys` keys (`--max-keys`; its default in
//! `config::defaults`; enforced per lock shard), about 1.2 KiB each at worst (a key of at most 1 KiB and its
//! 168-byte entry; see `meshlimit_store::memory` for the sum). `run` sweeps it every
//! second ([`Pools::sweep`]). Dropping an entry, by the sweep or at the cap, only
//! loses unspent pooled tokens (they expire with their lease anyway), a denial
//! cache (the next ask goes to the store) and a demand estimate (the next lease
//! starts small): it never hands out a token, and a key without an entry always
//! asks the store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use meshlimit_core::policy::LeasePolicy;
use meshlimit_core::pool_entry::{Ask, PoolEntry};
use meshlimit_core::DescriptorKey;
use meshlimit_store::GiveBack;
use tokio::sync::broadcast;

mod take;
mod view;

pub use meshlimit_core::pool_entry::{GrantTimes, StoreGrant, MAX_QUEUE_NS};
pub use take::PoolTake;
pub use view::PoolView;

const SHARDS: usize = 16;

/// Pools for every key this node has leased, bounded in size.
pub struct Pools {
    shards: Vec<Mutex<HashMap<DescriptorKey, Entry>>>,
    max_per_shard: usize,
    /// How often a served filter asks (half a lease's life: it asks for that
    /// much of its demand): what a turn counts the asks it skips by (see
    /// `meshlimit_core::pool_entry`).
    ask_period_ns: u64,
    /// Set once the pooled tokens are handed back: nothing is fetched ahead
    /// of an ask after.
    closed: AtomicBool,
}

/// One key's entry: its policy state (`meshlimit_core::pool_entry`) and
/// the channel its waiting asks are told on.
#[derive(Debug, Default)]
struct Entry {
    key: PoolEntry,
    /// Told when the store call in flight ends (the asks waiting on it).
    /// Its end wakes the asks waiting on it in the order they came (a
    /// broadcast's waiters are a FIFO list; a watch channel's are spread over
    /// shards its runtime picks at random, so which waiting ask took the
    /// pool's tokens first differed from run to run of one seed in the
    /// virtual fleet).
    call: Option<broadcast::Sender<()>>,
}

impl Default for Pools {
    fn default() -> Self {
        Self::new(
            crate::config::defaults::max_keys(),
            LeasePolicy::default().ask_period_ns(),
        )
    }
}

impl Pools {
    /// Pools for at most about `max_keys` keys (past that, asks go to the
    /// store unpooled: correct, only costlier), whose filters ask every
    /// `ask_period_ns` while they are served.
    pub fn new(max_keys: usize, ask_period_ns: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            max_per_shard: max_keys.div_ceil(SHARDS).max(1),
            ask_period_ns,
            closed: AtomicBool::new(false),
        }
    }

    /// Serves an ask of `cost` tokens from the pool if it can. A store call it
    /// starts (a miss, a refill) is given `call_timeout_ns` to end.
    pub fn take(
        &self,
        key: &DescriptorKey,
        now_ns: u64,
        cost: u32,
        want: Option<u32>,
        call_timeout_ns: u64,
    ) -> PoolTake {
        self.take_counted(key, now_ns, cost, want, call_timeout_ns, true)
    }

    /// [`Pools::take`] again for an ask that waited on the key's store call:
    /// its demand was counted by its first take.
    pub fn retake(
        &self,
        key: &DescriptorKey,
        now_ns: u64,
        cost: u32,
        want: Option<u32>,
        call_timeout_ns: u64,
    ) -> PoolTake {
        self.take_counted(key, now_ns, cost, want, call_timeout_ns, false)
    }

    /// [`Pools::take`] or [`Pools::retake`]: `count`, whether the ask's
    /// demand is counted.
    fn take_counted(
        &self,
        key: &DescriptorKey,
        now_ns: u64,
        cost: u32,
        want: Option<u32>,
        call_timeout_ns: u64,
        count: bool,
    ) -> PoolTake {
        let ask = Ask {
            now_ns,
            cost,
            asked: want.unwrap_or(cost).max(cost),
            call_timeout_ns,
            count,
            period_ns: self.ask_period_ns,
            refills: !self.closed.load(Ordering::Relaxed),
        };
        self.with(key, now_ns, |e| e.take(&ask))
            .unwrap_or(PoolTake::Miss {
                demand_per_sec: 0.0,
                dropped: 0,
                waited: 0,
            })
    }

    /// Records a store grant of `granted` tokens for an ask of `cost`: the filter
    /// gets its cost, the pool keeps the rest until `ttl_ns`. Returns the
    /// filter's tokens.
    pub fn fill(
        &self,
        key: &DescriptorKey,
        now_ns: u64,
        grant: StoreGrant,
        cost: u32,
        ttl_ns: u64,
    ) -> u32 {
        let times = GrantTimes {
            ttl_ns,
            hold_ns: 0,
            turn_period_ns: 0,
        };
        self.fill_then_hold(key, now_ns, grant, (cost, None), times)
            .0
    }

    /// [`Pools::fill`] for an ask of `cost` that says it will spend `want`,
    /// and once the pooled tokens are spent, asks are denied at the node until
    /// `times.hold_ns` from now: the store's bucket was drained, and asking
    /// it again before a lease's worth has refilled would only fetch crumbs.
    /// `cost` 0 is a refill: every token joins the pool. Ends the call in flight.
    ///
    /// `times.turn_period_ns` (non-zero for a node far over its share, one lease
    /// period) gives the node's filters turns while the hold lasts (`meshlimit_core::pool_entry`):
    /// each grant says when its filter may ask again, each ask turned away
    /// when to come back, behind the tokens booked before it, at the pace the
    /// store's tokens come. An ask wanting more than a period's tokens is
    /// not booked, and comes back at the hold's end. Without turns, every
    /// turned-away filter would ask again at the hold's end, and all but the
    /// few the next round serves would be turned away again: a call each per
    /// round for nothing. Returns the filter's tokens and its turn.
    pub fn fill_then_hold(
        &self,
        key: &DescriptorKey,
        now_ns: u64,
        grant: StoreGrant,
        (cost, want): (u32, Option<u32>),
        times: GrantTimes,
    ) -> (u32, Option<u64>) {
        let filter = StoreGrant::filter_tokens(grant.tokens, (cost, want));
        let period_ns = self.ask_period_ns;
        let next = self
            .with(key, now_ns, |e| {
                let next = e.key.fill(now_ns, grant, (cost, want), times, period_ns);
                e.end_call();
                next
            })
            .flatten();
        (filter, next)
    }

    /// Records a store denial: asks for the key are denied at the node until
    /// then, with turns at the starts of periods `turn_period_ns` long (see
    /// [`Pools::fill_then_hold`]). Ends the call in flight.
    pub fn deny(&self, key: &DescriptorKey, now_ns: u64, retry_after_ns: u64, turn_period_ns: u64) {
        self.with(key, now_ns, |e| {
            e.key.deny(now_ns, retry_after_ns, turn_period_ns);
            e.end_call();
        });
    }

    /// Takes every unexpired pooled token of a token bucket out of the pool,
    /// as what goes back to the store when the agent stops, and stops
    /// fetching ahead: no background refill starts after, and an ask that
    /// finds the pool empty asks the store for what its filter takes (the
    /// lease service's `may_prefetch`); what a grant pools all the same goes
    /// at the next hand-back. Tokens the filters hold are theirs, not the
    /// pool's: they are not here. `share_of` is the region's share of a key's
    /// limit now (`None`: its rule is gone, and with it the bucket's cap: its
    /// tokens are dropped, as they would expire).
    pub fn hand_back(
        &self,
        now_ns: u64,
        share_of: impl Fn(&DescriptorKey) -> Option<f64>,
    ) -> Vec<GiveBack> {
        self.closed.store(true, Ordering::Relaxed);
        let mut back = Vec::new();
        for shard in &self.shards {
            let Ok(mut map) = shard.lock() else { continue };
            for (key, e) in map.iter_mut() {
                let Some((limit, tokens)) = e.key.take_back(now_ns) else {
                    continue;
                };
                let Some(share) = share_of(key) else { continue };
                back.push(GiveBack {
                    key: key.clone(),
                    limit,
                    share,
                    tokens,
                });
            }
        }
        back
    }

    /// Whether the pool has been handed back ([`Pools::hand_back`]).
    pub fn is_handed_back(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Marks a background refill of `key` in flight, when its hold is over,
    /// no call is in flight, it has an entry and the pools are not handed
    /// back. False: nothing to do.
    pub fn begin_refill(&self, key: &DescriptorKey, now_ns: u64, call_timeout_ns: u64) -> bool {
        if self.closed.load(Ordering::Relaxed) {
            return false;
        }
        self.with(key, now_ns, |e| {
            let begun = e.key.begin_refill(now_ns, call_timeout_ns);
            if begun {
                e.call = Some(broadcast::channel(1).0);
            }
            begun
        })
        .unwrap_or(false)
    }

    /// The store call for the key failed: the asks waiting on it take again
    /// (and one of them calls).
    pub fn call_failed(&self, key: &DescriptorKey, now_ns: u64) {
        self.with(key, now_ns, |e| {
            e.key.call_failed();
            e.end_call();
        });
    }

    /// Whether this node's demand for `key` would spend a lease within its
    /// life (see `meshlimit_core::lease::THICK_TOKENS_PER_LIFE`): only then are
    /// tokens fetched without an ask waiting for them.
    pub fn is_thick(&self, key: &DescriptorKey, now_ns: u64, life_ns: u64) -> bool {
        meshlimit_core::lease::is_thick(self.demand(key, now_ns), life_ns)
    }

    /// What the store's bucket for `key` held after its last answer to this
    /// node (0 after a denial, and for a key without an entry).
    pub fn store_left(&self, key: &DescriptorKey) -> u32 {
        self.read(key, |e| e.key.store_left()).unwrap_or(0)
    }

    /// The unexpired tokens pooled for `key` (0 for a key without an entry).
    pub fn pooled(&self, key: &DescriptorKey, now_ns: u64) -> u32 {
        self.read(key, |e| e.key.pooled(now_ns)).unwrap_or(0)
    }

    /// The tokens the store gave this node for `key` over about the last
    /// second (0 for a key without an entry).
    pub fn intake(&self, key: &DescriptorKey, now_ns: u64) -> f64 {
        self.read(key, |e| e.key.intake(now_ns)).unwrap_or(0.0)
    }

    /// This node's recent demand for `key`, tokens per second (0 for a key
    /// without an entry).
    pub fn demand(&self, key: &DescriptorKey, now_ns: u64) -> f64 {
        self.read(key, |e| e.key.demand(now_ns)).unwrap_or(0.0)
    }

    /// Drops entries with nothing pooled, no denial and no recent demand.
    pub fn sweep(&self, now_ns: u64) {
        for shard in &self.shards {
            if let Ok(mut map) = shard.lock() {
                map.retain(|_, e| e.key.is_live(now_ns));
            }
        }
    }

    /// Keys held (for tests and metrics).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .filter_map(|s| s.lock().ok().map(|m| m.len()))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads `key`'s entry, if it has one, without creating it.
    fn read<R>(&self, key: &DescriptorKey, f: impl FnOnce(&Entry) -> R) -> Option<R> {
        let shard = self.shards.get(key.fingerprint() as usize % SHARDS)?;
        let map = shard.lock().ok()?;
        map.get(key).map(f)
    }

    fn with<R>(
        &self,
        key: &DescriptorKey,
        now_ns: u64,
        f: impl FnOnce(&mut Entry) -> R,
    ) -> Option<R> {
        let shard = self.shards.get(key.fingerprint() as usize % SHARDS)?;
        let mut map = shard.lock().ok()?;
        if !map.contains_key(key) && map.len() >= self.max_per_shard {
            map.retain(|_, e| e.key.is_busy(now_ns));
            if map.len() >= self.max_per_shard {
                return None;
            }
        }
        Some(f(map.entry(key.clone()).or_default()))
    }
}

impl Entry {
    /// Tells the asks waiting on the store call that it ended.
    fn end_call(&mut self) {
        if let Some(tx) = self.call.take() {
            let _ = tx.send(());
        }
    }
}

#[cfg(test)]
mod tests;
