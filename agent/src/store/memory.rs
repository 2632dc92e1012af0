//! The embedded store: authoritative buckets in this process, for a single node with
//! no Redis. Buckets are sharded by the key's fingerprint so that concurrent lease
//! requests for different keys rarely wait on the same lock. Time comes from tokio's
//! clock, so tests can pause and advance it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use meshlimit_core::{Bucket, DescriptorKey, Limit, Take};
use tokio::time::Instant;

use super::{Acquire, Acquired, Store, StoreError};
use crate::shutdown::Shutdown;

/// Lock shards; a power of two comfortably above the core count.
const SHARDS: usize = 16;

/// How often full buckets are forgotten.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The in-memory store.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Vec<Mutex<HashMap<DescriptorKey, Entry>>>,
    epoch: Instant,
}

#[derive(Debug)]
struct Entry {
    bucket: Bucket,
    /// The limit of the last take, to tell in a sweep whether the bucket is full.
    limit: Limit,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            epoch: Instant::now(),
        }
    }

    /// Buckets held (full ones included until the next sweep).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every bucket that is full now and returns how many. A full bucket is
    /// exactly what an absent key starts as (`Bucket::full`), so forgetting one can
    /// never grant a token that would not have been granted anyway: memory stays
    /// bounded by the keys active in the last refill period, at no cost in accuracy.
    pub fn sweep(&self) -> usize {
        let now = self.now_ns();
        self.shards
            .iter()
            .map(|shard| {
                let mut map = lock(shard);
                let before = map.len();
                map.retain(|_, e| !e.bucket.is_full(&e.limit, now));
                before - map.len()
            })
            .sum()
    }

    /// Sweeps every `every` until shutdown.
    pub async fn run_sweeper(self: std::sync::Arc<Self>, every: Duration, mut shutdown: Shutdown) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let dropped = self.sweep();
                    tracing::debug!(dropped, "memory store sweep");
                }
                _ = shutdown.wait() => return,
            }
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn shard(&self, key: &DescriptorKey) -> &Mutex<HashMap<DescriptorKey, Entry>> {
        let index = (key.fingerprint() % SHARDS as u64) as usize;
        &self.shards[index]
    }

    fn take(&self, item: &Acquire, now: u64) -> Take {
        let limit = item.enforced_limit();
        let mut map = lock(self.shard(&item.key));
        let entry = map.entry(item.key.clone()).or_insert_with(|| Entry {
            bucket: Bucket::full(&limit, now),
            limit,
        });
        entry.limit = limit;
        entry.bucket.take(&limit, now, item.min, item.max)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn acquire(&self, items: &[Acquire]) -> Vec<Acquired> {
        // One clock reading for the batch, as one Redis TIME serves one script call.
        let now = self.now_ns();
        items.iter().map(|item| Ok(self.take(item, now))).collect()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}

/// A poisoned shard is still consistent: `Bucket::take` cannot panic half-way, so
/// the map is safe to keep using; refusing it would turn one bug into an outage.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
