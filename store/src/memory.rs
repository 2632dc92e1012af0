//! The embedded store: authoritative buckets (and windows, core's [`Counter`]) in
//! this process, for a single node with no Redis. Buckets are sharded by the key's
//! fingerprint so that concurrent lease requests for different keys rarely wait on
//! the same lock. Time comes from tokio's clock, so tests can pause and advance
//! it, counted from the Unix time read when the store starts: windows are aligned
//! to the Unix epoch, as in Redis (an `N per 1m` window is a minute of the clock).
//!
//! Memory bound. Buckets are swept every [`SWEEP_EVERY`]: a bucket that has
//! refilled to full (a window whose counts no longer weigh) is forgotten, which
//! changes nothing (an absent key starts full, or with nothing counted).
//! At most `max_keys` buckets are held (`--max-keys`, its default
//! [`DEFAULT_MAX_KEYS`]; enforced per lock shard, so at most `max_keys` + 15).
//! When a new key finds its shard at the cap, the shard's full buckets are
//! dropped; if none is full the key gets [`StoreError::Unavailable`] (its rule's
//! failure policy applies, counted in
//! `meshlimit_store_requests_total{result="error"}`): a live bucket is never
//! evicted, since an evicted key would come back as a fresh full bucket.
//!
//! Bytes per key, at worst: the key (at most `wire::MAX_KEY_BYTES` = 1 KiB, plus
//! ~16 B of allocator header) and its map slot (`DescriptorKey` 24 B, `Entry`
//! ~56 B and 1 control byte, up to twice over while the table has just grown).
//! The agent's `memory_bounds` test holds each of the three per-key tables
//! (this store, the node pool, the fail-local buckets) under 1,300 B a key for
//! keys of 1 KiB (`cargo test -p meshlimit-agent --test memory_bounds --
//! --nocapture` prints what each takes). So the three hold at most about
//! 3 × 1.3 KB × `max_keys`: under 95 MiB at the default 25,000 keys. With the
//! server's bound (the agent's `server` module) and what the agent holds at
//! rest, nothing callers send takes the agent past a fixed total (the
//! figures: docs/operations/capacity.md).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::{Bucket, Counter, DescriptorKey, Limit};
use tokio::time::Instant;

use super::control::{self, AuditEntry, AUDIT_KEEP};
use super::{
    Acquire, Acquired, Audited, Backend, Buckets, FleetState, GiveBack, GivenBack, Peeked,
    StoreError,
};
use crate::fleet::Override;
use crate::trial::{StoredTrial, TrialAction, TrialClock};
use meshlimit_core::rules::trial::TrialPlan;

/// Lock shards; a power of two comfortably above the core count.
const SHARDS: usize = 16;

/// The key cap of [`MemoryStore::new`]: the agent's `--max-keys` default,
/// which caps its other per-key tables too (see the module docs for the
/// memory it bounds).
pub const DEFAULT_MAX_KEYS: u32 = 25_000;

/// How often full buckets are forgotten.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The in-memory store.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Vec<Mutex<HashMap<DescriptorKey, Entry>>>,
    epoch: Instant,
    /// Unix time (ns) at `epoch`.
    unix_at_epoch: u64,
    /// Buckets each shard holds at most.
    max_per_shard: usize,
    /// The fleet override: this agent's alone, with no store shared.
    fleet_override: Mutex<Option<Override>>,
    /// Trials, the versions served and the audit history, likewise this
    /// agent's alone (lost with it: a restarted agent's first rules apply at
    /// once). Nothing outside this process writes them, so they carry no MAC.
    fleet: Mutex<Fleet>,
}

/// What the Redis store keeps under the `{fleet}` tag, for one agent.
#[derive(Debug, Default)]
struct Fleet {
    trials: HashMap<String, (TrialPlan, TrialClock)>,
    last_trial: Option<String>,
    versions: Option<(String, String)>,
    /// The audit history, newest first, at most `AUDIT_KEEP` entries.
    audit: std::collections::VecDeque<AuditEntry>,
}

impl Fleet {
    /// Keeps and logs one change.
    fn audit(&mut self, by: &str, what: String) {
        let entry = AuditEntry::now(by, what);
        entry.log("memory");
        self.audit.push_front(entry);
        self.audit.truncate(AUDIT_KEEP);
    }
}

#[derive(Debug)]
struct Entry {
    counter: Counter,
    /// The limit of the last take, to tell in a sweep whether the key is idle.
    limit: Limit,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::with_max_keys(usize::try_from(DEFAULT_MAX_KEYS).unwrap_or(usize::MAX))
    }

    /// A store of at most about `max_keys` buckets (see the module docs).
    pub fn with_max_keys(max_keys: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            epoch: Instant::now(),
            unix_at_epoch: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 2)),
            max_per_shard: max_keys.div_ceil(SHARDS).max(1),
            fleet_override: Mutex::new(None),
            fleet: Mutex::default(),
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
                map.retain(|_, e| !e.counter.is_idle(&e.limit, now));
                before - map.len()
            })
            .sum()
    }

    /// Sweeps every `every` until `stop` resolves (the agent's shutdown).
    pub async fn run_sweeper(
        self: std::sync::Arc<Self>,
        every: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let dropped = self.sweep();
                    tracing::debug!(dropped, "memory store sweep");
                }
                _ = &mut stop => return,
            }
        }
    }

    fn now_ns(&self) -> u64 {
        let elapsed = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.unix_at_epoch.saturating_add(elapsed)
    }

    fn shard(&self, key: &DescriptorKey) -> &Mutex<HashMap<DescriptorKey, Entry>> {
        let index = (key.fingerprint() % SHARDS as u64) as usize;
        &self.shards[index]
    }

    fn take(&self, item: &Acquire, now: u64) -> Acquired {
        let limit = item.enforced_limit();
        let mut map = lock(self.shard(&item.key));
        if map.len() >= self.max_per_shard && !map.contains_key(&item.key) {
            // Only full buckets may go: forgetting them changes nothing.
            map.retain(|_, e| !e.counter.is_idle(&e.limit, now));
            if map.len() >= self.max_per_shard {
                return Err(StoreError::Unavailable(format!(
                    "memory store full: {} buckets per shard, none full",
                    self.max_per_shard
                )));
            }
        }
        let entry = map.entry(item.key.clone()).or_insert_with(|| Entry {
            counter: Counter::fresh(&limit, now),
            limit,
        });
        entry.limit = limit;
        Ok(entry.counter.take(&limit, now, item.min, item.max))
    }

    /// Adds `item`'s tokens back to its bucket, as the Redis give-back script
    /// does: refilled up to `now` first, then whole tokens up to the burst. An
    /// absent key is a full bucket and a window takes none: nothing changes.
    fn give_back_one(&self, item: &GiveBack, now: u64) -> u32 {
        let limit = item.enforced_limit();
        let mut map = lock(self.shard(&item.key));
        let Some(Entry {
            counter: Counter::Bucket(bucket),
            limit: held,
        }) = map.get_mut(&item.key)
        else {
            return 0;
        };
        let tokens = bucket.tokens_at(&limit, now);
        let room = (f64::from(limit.burst()) - tokens + 1e-9).floor().max(0.0);
        let taken = f64::from(item.tokens).min(room);
        let (_, updated) = bucket.parts();
        *bucket = Bucket::from_parts(tokens + taken, updated.max(now));
        *held = limit;
        taken as u32
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Backend for MemoryStore {
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}

#[async_trait]
impl Buckets for MemoryStore {
    async fn acquire(&self, items: &[Acquire]) -> Vec<Acquired> {
        // One clock reading for the batch, as one Redis TIME serves one script call.
        let now = self.now_ns();
        items.iter().map(|item| self.take(item, now)).collect()
    }

    async fn give_back(&self, items: &[GiveBack]) -> Vec<GivenBack> {
        let now = self.now_ns();
        items
            .iter()
            .map(|item| Ok(self.give_back_one(item, now)))
            .collect()
    }

    async fn peek(
        &self,
        ids: &KeyIds,
        rule: &str,
        key_id: &str,
        _limit: &Limit,
    ) -> Result<Option<Peeked>, StoreError> {
        // Keys are held in clear here; an operator call may scan them. The
        // bucket's own limit (its region's share of a global rule) refills it.
        let now = self.now_ns();
        for shard in &self.shards {
            let map = lock(shard);
            let found = map
                .iter()
                .find(|(k, _)| k.rule() == rule && ids.id(k).to_string() == key_id);
            if let Some((_, e)) = found {
                return Ok(Some(Peeked::of(&e.counter, &e.limit, now)));
            }
        }
        Ok(None)
    }
}

#[async_trait]
impl FleetState for MemoryStore {
    async fn fleet_override(&self) -> Result<Option<Override>, StoreError> {
        Ok(lock(&self.fleet_override).clone())
    }

    async fn set_fleet_override(
        &self,
        state: Option<Override>,
        by: &str,
    ) -> Result<(), StoreError> {
        lock(&self.fleet).audit(by, control::override_change(state.as_ref()));
        *lock(&self.fleet_override) = state;
        Ok(())
    }

    async fn trial(
        &self,
        version: &str,
        start: Option<(&TrialPlan, u64)>,
        with_plan: bool,
    ) -> Result<Option<StoredTrial>, StoreError> {
        let now_ms = crate::control::now_ms();
        let mut fleet = lock(&self.fleet);
        if let Some((plan, period_ms)) = start {
            if !fleet.trials.contains_key(version) {
                let clock = TrialClock {
                    start_ms: now_ms,
                    period_ms,
                    ended_ms: None,
                    held: false,
                };
                fleet
                    .trials
                    .insert(version.to_string(), (plan.clone(), clock));
                fleet.last_trial = Some(version.to_string());
                fleet.audit("agent", control::trial_started(version, plan, period_ms));
            }
        }
        Ok(fleet.trials.get(version).map(|(plan, clock)| StoredTrial {
            plan: with_plan.then(|| plan.clone()),
            clock: *clock,
            now_ms,
        }))
    }

    async fn control_trial(
        &self,
        action: TrialAction,
        by: &str,
    ) -> Result<Option<String>, StoreError> {
        let mut fleet = lock(&self.fleet);
        let Some(version) = fleet.last_trial.clone() else {
            return Ok(None);
        };
        let Some((_, clock)) = fleet.trials.get_mut(&version) else {
            return Ok(None);
        };
        match action {
            TrialAction::End => {
                clock.ended_ms = Some(crate::control::now_ms());
                clock.held = false;
            }
            TrialAction::Hold => clock.held = true,
        }
        fleet.audit(by, control::trial_controlled(&version, action));
        Ok(Some(version))
    }

    async fn record_versions(&self, current: &str, previous: &str) -> Result<(), StoreError> {
        let versions = Some((current.to_string(), previous.to_string()));
        let mut fleet = lock(&self.fleet);
        if fleet.versions != versions {
            fleet.versions = versions;
            fleet.audit("agent", control::versions_recorded(current, previous));
        }
        Ok(())
    }

    async fn previous_version(&self) -> Result<Option<String>, StoreError> {
        Ok(lock(&self.fleet).versions.as_ref().map(|v| v.1.clone()))
    }

    async fn control_history(&self, n: usize) -> Result<Vec<Audited>, StoreError> {
        let fleet = lock(&self.fleet);
        Ok(fleet.audit.iter().take(n).cloned().map(Ok).collect())
    }
}

/// A poisoned shard is still consistent: `Counter::take` cannot panic half-way, so
/// the map is safe to keep using; refusing it would turn one bug into an outage.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
