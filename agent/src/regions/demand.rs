//! This agent's demand for `global` keys, added up per key per period (one wall
//! clock second) in memory, and taken a few times a period by the flush task that
//! writes it into the region's Redis in one batch: never a Redis call per request.
//!
//! Demand is what the agent sees offered: tokens it granted and the cost of every
//! ask it denied. What it cannot see is what a filter rejects from its own denial
//! cache without asking (see `docs/design/regions.md`).
//!
//! Time is a parameter (`period`), so tests need no clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use meshlimit_core::fingerprint::fingerprint;

const SHARDS: usize = 16;
/// Periods kept when the flush task cannot keep up (its Redis is down): older ones
/// are worthless to a rebalancer that has sealed them already.
const KEEP_PERIODS: usize = 3;

/// Demand per period per key.
pub(crate) type PeriodDemand = BTreeMap<u64, HashMap<String, u64>>;

/// The agent's demand book, sharded so concurrent lease requests rarely share a lock.
pub(crate) struct DemandBook {
    shards: Vec<Mutex<PeriodDemand>>,
    max_keys_per_shard: usize,
}

impl DemandBook {
    /// A book holding at most about `max_keys` keys per period; past that, new keys
    /// are not counted (their regions' shares stay where they are).
    pub fn new(max_keys: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(BTreeMap::new())).collect(),
            max_keys_per_shard: max_keys.div_ceil(SHARDS).max(1),
        }
    }

    /// Adds `tokens` offered for `key` in `period`.
    pub(crate) fn record(&self, key: &str, tokens: u64, period: u64) {
        let index = (fingerprint(key.as_bytes()) % SHARDS as u64) as usize;
        let Some(shard) = self.shards.get(index) else {
            return;
        };
        let mut periods = lock(shard);
        let keys = periods.entry(period).or_default();
        if let Some(n) = keys.get_mut(key) {
            *n = n.saturating_add(tokens);
        } else if keys.len() < self.max_keys_per_shard {
            keys.insert(key.to_string(), tokens);
        }
        while periods.len() > KEEP_PERIODS {
            periods.pop_first();
        }
    }

    /// Removes and returns everything counted so far, per period.
    pub fn take(&self) -> PeriodDemand {
        let mut out = PeriodDemand::new();
        for shard in &self.shards {
            for (p, keys) in std::mem::take(&mut *lock(shard)) {
                out.entry(p).or_default().extend(keys);
            }
        }
        out
    }
}

/// A poisoned shard holds plain counts, consistent whatever panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_up_per_key_per_period_and_hands_over_once() {
        let book = DemandBook::new(1_000);
        book.record("r|a", 3, 10);
        book.record("r|a", 4, 10);
        book.record("r|b", 1, 10);
        book.record("r|a", 9, 11);
        let taken = book.take();
        assert_eq!(taken.len(), 2);
        assert_eq!(taken[&10]["r|a"], 7);
        assert_eq!(taken[&10]["r|b"], 1);
        assert_eq!(taken[&11]["r|a"], 9);
        assert!(book.take().is_empty(), "taken once");
    }

    #[test]
    fn bounded_in_keys_and_periods() {
        let book = DemandBook::new(SHARDS);
        for i in 0..1_000 {
            book.record(&format!("r|{i}"), 1, 5);
        }
        let keys = book.take()[&5].len();
        assert!(keys <= SHARDS, "{keys}");
        for p in 0..10 {
            book.record("r|a", 1, p);
        }
        let kept: Vec<u64> = book.take().into_keys().collect();
        assert_eq!(kept, vec![7, 8, 9]);
    }
}
