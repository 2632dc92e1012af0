//! The node pool (two-level leasing). For each hot key this agent keeps the
//! tokens it took from the store beyond what the asking filter needed, and serves
//! the node's next asks from them; only pool misses go to the store. Pooled
//! tokens expire with the lease TTL: unspent tokens are dropped, never hoarded.
//!
//! It also keeps the node's demand per key (a decaying count of tokens handed
//! out and asks denied, time constant 1 s), which sizes the next store lease, and
//! a node-level denial cache, so a key over its limit costs the store one call per
//! lease period per node instead of one per filter ask.
//!
//! Time is a parameter (`now_ns`), so tests move it by hand.
//!
//! Bounded: at most `max_keys` keys (`--max-keys`, default 25,000, enforced per
//! lock shard), about 1.2 KiB each at worst (a key of at most 1 KiB and its
//! ~64-byte entry; see `crate::store::memory` for the sum). `run` sweeps it every
//! second ([`Pools::sweep`]). Dropping an entry, by the sweep or at the cap, only
//! loses unspent pooled tokens (they expire with their lease anyway), a denial
//! cache (the next ask goes to the store) and a demand estimate (the next lease
//! starts small): it never hands out a token, and a key without an entry always
//! asks the store.

use std::collections::HashMap;
use std::sync::Mutex;

use meshlimit_core::{DescriptorKey, NANOS_PER_SEC};

const SHARDS: usize = 16;
/// The demand estimate's time constant.
const DEMAND_TAU_NS: f64 = NANOS_PER_SEC as f64;

/// Pools for every key this node has leased, bounded in size.
pub struct Pools {
    shards: Vec<Mutex<HashMap<DescriptorKey, Entry>>>,
    max_per_shard: usize,
}

/// What the pool can do for one ask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PoolTake {
    /// Served from the pool: `tokens` for the filter.
    Served {
        tokens: u32,
        remaining: u32,
        reset_ns: u64,
    },
    /// The node knows the key is over its limit until `retry_after_ns` from now.
    Denied { retry_after_ns: u64 },
    /// Ask the store; `demand_per_sec` is this node's recent demand for the key;
    /// `dropped` pooled tokens expired unspent.
    Miss { demand_per_sec: f64, dropped: u32 },
}

/// What the store granted: tokens, what it kept, and when its bucket is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreGrant {
    pub tokens: u32,
    pub remaining: u32,
    pub reset_ns: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    tokens: u32,
    /// What a filter gets per ask: half of the last store grant.
    chunk: u32,
    expires_ns: u64,
    remaining: u32,
    reset_at_ns: u64,
    denied_until_ns: u64,
    demand: f64,
    demand_at_ns: u64,
}

impl Default for Pools {
    fn default() -> Self {
        Self::new(100_000)
    }
}

impl Pools {
    /// Pools for at most about `max_keys` keys; past that, asks go to the store
    /// unpooled (correct, only costlier).
    pub fn new(max_keys: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            max_per_shard: max_keys.div_ceil(SHARDS).max(1),
        }
    }

    /// Serves an ask of `cost` tokens from the pool if it can.
    pub fn take(&self, key: &DescriptorKey, now_ns: u64, cost: u32, want: Option<u32>) -> PoolTake {
        self.with(key, now_ns, |e| {
            // Pooled tokens first: a hold set at the last grant starts once they
            // are spent.
            if e.expires_ns > now_ns && e.tokens >= cost {
                // The same share the filter of the last store grant got, at least
                // the cost: with one filter, two asks per store call.
                let tokens = e.tokens.min(want.unwrap_or(e.chunk).max(cost));
                e.tokens -= tokens;
                e.add_demand(now_ns, tokens);
                return PoolTake::Served {
                    tokens,
                    remaining: e.remaining.saturating_add(e.tokens),
                    reset_ns: e.reset_at_ns.saturating_sub(now_ns),
                };
            }
            if e.denied_until_ns > now_ns {
                e.add_demand(now_ns, cost);
                return PoolTake::Denied {
                    retry_after_ns: e.denied_until_ns - now_ns,
                };
            }
            let dropped = std::mem::take(&mut e.tokens);
            PoolTake::Miss {
                demand_per_sec: e.demand_at(now_ns),
                dropped,
            }
        })
        .unwrap_or(PoolTake::Miss {
            demand_per_sec: 0.0,
            dropped: 0,
        })
    }

    /// Records a store grant of `granted` tokens for an ask of `cost`: the filter
    /// gets half (at least its cost), the pool keeps the rest until `ttl_ns`.
    /// Returns the filter's tokens.
    pub fn fill(
        &self,
        key: &DescriptorKey,
        now_ns: u64,
        grant: StoreGrant,
        cost: u32,
        ttl_ns: u64,
    ) -> u32 {
        self.fill_then_hold(key, now_ns, grant, cost, None, ttl_ns, 0)
    }

    /// [`Pools::fill`], and once the pooled tokens are spent, asks are denied at the
    /// node until `hold_ns` from now: the store's bucket was drained, and asking
    /// it again before a lease's worth has refilled would only fetch crumbs.
    // Each argument is a distinct quantity of one grant; a struct would only
    // rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn fill_then_hold(
        &self,
        key: &DescriptorKey,
        now_ns: u64,
        grant: StoreGrant,
        cost: u32,
        want: Option<u32>,
        ttl_ns: u64,
        hold_ns: u64,
    ) -> u32 {
        let StoreGrant {
            tokens: granted,
            remaining,
            reset_ns,
        } = grant;
        let filter = want
            .unwrap_or_else(|| granted.div_ceil(2))
            .max(cost)
            .min(granted);
        self.with(key, now_ns, |e| {
            // Concurrent store calls for one key each fill the pool: add to what
            // is pooled, never overwrite it (that would lose granted tokens).
            let carried = if e.expires_ns > now_ns { e.tokens } else { 0 };
            e.tokens = carried.saturating_add(granted - filter);
            e.chunk = filter;
            e.expires_ns = now_ns.saturating_add(ttl_ns);
            e.remaining = remaining;
            e.reset_at_ns = now_ns.saturating_add(reset_ns);
            e.denied_until_ns = now_ns.saturating_add(hold_ns);
            e.add_demand(now_ns, filter);
        });
        filter
    }

    /// Records a store denial: asks for the key are denied at the node until then.
    pub fn deny(&self, key: &DescriptorKey, now_ns: u64, cost: u32, retry_after_ns: u64) {
        self.with(key, now_ns, |e| {
            e.denied_until_ns = now_ns.saturating_add(retry_after_ns);
            // A denial answering a concurrent ask must not strand tokens that
            // another ask's grant just pooled: they are served first.
            if e.expires_ns <= now_ns {
                e.tokens = 0;
            }
            e.add_demand(now_ns, cost);
        });
    }

    /// Drops entries with nothing pooled, no denial and no recent demand.
    pub fn sweep(&self, now_ns: u64) {
        for shard in &self.shards {
            if let Ok(mut map) = shard.lock() {
                map.retain(|_, e| {
                    e.expires_ns > now_ns
                        || e.denied_until_ns > now_ns
                        || e.demand_at(now_ns) >= 0.5
                });
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

    fn with<R>(
        &self,
        key: &DescriptorKey,
        now_ns: u64,
        f: impl FnOnce(&mut Entry) -> R,
    ) -> Option<R> {
        let shard = self.shards.get(key.fingerprint() as usize % SHARDS)?;
        let mut map = shard.lock().ok()?;
        if !map.contains_key(key) && map.len() >= self.max_per_shard {
            map.retain(|_, e| e.expires_ns > now_ns || e.denied_until_ns > now_ns);
            if map.len() >= self.max_per_shard {
                return None;
            }
        }
        Some(f(map.entry(key.clone()).or_default()))
    }
}

impl Entry {
    /// Adds `tokens` to the decaying count: count(t) = Σ tokens × e^(−age/τ).
    fn add_demand(&mut self, now_ns: u64, tokens: u32) {
        self.demand = self.decayed(now_ns) + f64::from(tokens);
        self.demand_at_ns = now_ns;
    }

    fn decayed(&self, now_ns: u64) -> f64 {
        let age = now_ns.saturating_sub(self.demand_at_ns) as f64;
        self.demand * (-age / DEMAND_TAU_NS).exp()
    }

    /// Tokens per second: a steady rate r settles the count at r × τ.
    fn demand_at(&self, now_ns: u64) -> f64 {
        self.decayed(now_ns) * NANOS_PER_SEC as f64 / DEMAND_TAU_NS
    }
}

#[cfg(test)]
mod tests;
