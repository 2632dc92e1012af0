//! meshlimit-store: where the authoritative token buckets and the region's
//! shared control state live. Three traits, one per concern: [`Backend`]
//! (what every store is), [`Buckets`] (the lease path) and [`FleetState`]
//! (the control state); three backends implement all of them: the embedded
//! in-memory store (the default, one node, no setup), single Redis and Redis
//! Cluster. [`Buckets::acquire`] is batch-shaped because the Redis backends
//! answer a whole lease request with one pipeline: asking per item would cost
//! a round trip per rule. Every Lua script is in [`redis::script`], every
//! Redis key name in [`redis::keys`].

#![forbid(unsafe_code)]

pub mod control;
pub mod fleet;
pub mod memory;
pub mod redis;
pub mod spec;
pub mod trial;

use std::time::Duration;

use async_trait::async_trait;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::{Bucket, Counter, DescriptorKey, Limit, Take, NANOS_PER_MS};
use serde::Serialize;

use meshlimit_core::rules::trial::TrialPlan;

pub use control::{AuditEntry, Refusal};
use fleet::Override;
use trial::{StoredTrial, TrialAction};

pub use memory::MemoryStore;

/// One bucket operation: take between `min` and `max` tokens from `key`'s bucket
/// under `limit` (rate and burst travel with every call, so a rules change needs no
/// migration and no counter reset).
#[derive(Debug, Clone, PartialEq)]
pub struct Acquire {
    pub key: DescriptorKey,
    pub limit: Limit,
    /// The request's cost: fewer tokens than this is a denial.
    pub min: u32,
    /// The lease size wanted.
    pub max: u32,
    /// The share of `limit` this region enforces: 1 for the whole limit, less for
    /// a `global` rule split between regions (rate and burst scaled by it).
    pub share: f64,
}

impl Acquire {
    /// The limit the store enforces: `limit` scaled by `share`, never below one token.
    pub fn enforced_limit(&self) -> Limit {
        enforced(&self.limit, self.share)
    }
}

/// Unspent tokens handed back to `key`'s bucket: what an agent's node pool
/// still holds when the agent stops ([`Buckets::give_back`]). The limit and
/// share are those of the grant the tokens came from, so the bucket is
/// capped at the same burst the lease script keeps it under.
#[derive(Debug, Clone, PartialEq)]
pub struct GiveBack {
    pub key: DescriptorKey,
    pub limit: Limit,
    pub share: f64,
    pub tokens: u32,
}

impl GiveBack {
    /// The limit the store enforces (see [`Acquire::enforced_limit`]).
    pub fn enforced_limit(&self) -> Limit {
        enforced(&self.limit, self.share)
    }
}

/// `limit` scaled by `share`, never below one token.
fn enforced(limit: &Limit, share: f64) -> Limit {
    if share >= 1.0 {
        *limit
    } else {
        limit.scaled(share)
    }
}

/// One hand-back's answer: the whole tokens the bucket took.
pub type GivenBack = Result<u32, StoreError>;

/// A bucket as the store holds it now, read without changing it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Peeked {
    /// Tokens in the bucket now (refilled up to now).
    pub tokens: f64,
    /// How long until it is full again, in milliseconds.
    pub full_in_ms: u64,
    /// The bucket as stored, for judging an earlier moment (the false-limit
    /// check): not shown to operators. `None` for a window rule's counts.
    #[serde(skip)]
    pub stored: Option<Stored>,
}

/// A stored bucket and the store's clock when it was read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stored {
    pub bucket: Bucket,
    /// The store's clock at the read (Redis `TIME`, or the memory store's).
    pub now_ns: u64,
}

impl Peeked {
    /// A key's state under `limit` at `now_ns`: for a bucket its tokens and the
    /// time to refill; for a window the room left under `requests` and the time
    /// until nothing counted weighs on the limit any more.
    pub(crate) fn of(counter: &Counter, limit: &Limit, now_ns: u64) -> Peeked {
        let stored = match counter {
            Counter::Bucket(bucket) => Some(Stored {
                bucket: *bucket,
                now_ns,
            }),
            Counter::Window(_) => None,
        };
        let (tokens, full_in_ns) = match counter {
            Counter::Bucket(bucket) => {
                let tokens = bucket.tokens_at(limit, now_ns);
                let missing = f64::from(limit.burst()) - tokens;
                let rate = limit.rate_per_ns();
                let full_in_ns = if missing > 0.0 && rate > 0.0 {
                    (missing / rate).ceil() as u64
                } else {
                    0
                };
                (tokens, full_in_ns)
            }
            Counter::Window(window) => {
                let room = (f64::from(limit.requests()) - window.used_at(limit, now_ns)).max(0.0);
                let per = limit.per_ns();
                let index = now_ns / per;
                let (stored, count, _) = window.parts();
                let windows_left = if window.is_idle(limit, now_ns) {
                    0
                } else if stored == index
                    && count > 0
                    && limit.algorithm() == meshlimit_core::Algorithm::SlidingWindow
                {
                    // This window's count weighs on the next one too.
                    2
                } else {
                    1
                };
                let full_in_ns = if windows_left == 0 {
                    0
                } else {
                    (index + windows_left)
                        .saturating_mul(per)
                        .saturating_sub(now_ns)
                };
                (room, full_in_ns)
            }
        };
        Peeked {
            tokens: (tokens * 1000.0).floor() / 1000.0,
            full_in_ms: full_in_ns.div_ceil(NANOS_PER_MS),
            stored,
        }
    }
}

/// One item's answer: tokens granted or a denial with its wait (core's [`Take`]),
/// or the store could not say.
pub type Acquired = Result<Take, StoreError>;

/// Why the store could not answer. Each variant's doc says whether trying again
/// later may help; callers map them to a metric label and a filter-facing reason
/// ([`StoreError::metric_result`], [`StoreError::reason`]) without parsing text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The call missed its deadline; its effect is unknown.
    #[error("store timed out after {0:?}")]
    Timeout(Duration),
    /// The store could not be reached or is cooling down (connection refused,
    /// cluster failing over): transient.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A Redis Cluster node answered MOVED: the key's hash slot now lives on `node`
    /// (`host:port`). Followed once by the caller; transient.
    #[error("hash slot moved to {node}")]
    Moved { node: String },
    /// A Redis Cluster node answered ASK: the key's hash slot is migrating to
    /// `node` (`host:port`) and the key is already there. Followed once by the
    /// caller (`ASKING`, then the call); the hash slot map does not change yet.
    #[error("hash slot migrating to {node}")]
    Ask { node: String },
    /// Too much work in flight: the call was never made.
    #[error("shed: too many store calls in flight")]
    Shed,
    /// The store answered with something unusable (script error, bad reply): not
    /// transient, a bug or a misconfiguration.
    #[error("store failed: {0}")]
    Failed(String),
}

/// What every backend is: a name and a check that it answers. Implementations
/// enforce their own deadline (returning [`StoreError::Timeout`]) on every call
/// of every trait and never retry: a late answer is worth less than the rule's
/// failure policy applied now.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The backend's name, for logs.
    fn name(&self) -> &'static str;

    /// Checks that the store answers (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError>;
}

/// The lease path's store: the buckets, and the count of the region's agents
/// that share them (which sizes the filters' fail-local buckets).
#[async_trait]
pub trait Buckets: Backend {
    /// Performs every item atomically per key and answers in the same order, one
    /// answer per item.
    async fn acquire(&self, items: &[Acquire]) -> Vec<Acquired>;

    /// The bucket of the key `key_id` (its id under `ids`) of `rule`, read
    /// without changing it, refilled under `limit` up to the store's now;
    /// `None` when the store holds none (a full bucket). For operators
    /// (`GET /v1/explain`) and the false-limit check: one call, its
    /// deadline, never retried.
    async fn peek(
        &self,
        _ids: &KeyIds,
        _rule: &str,
        _key_id: &str,
        _limit: &Limit,
    ) -> Result<Option<Peeked>, StoreError> {
        Err(StoreError::Failed(format!(
            "the {} store cannot show a bucket",
            self.name()
        )))
    }

    /// Adds each item's tokens back to its key's bucket, atomically per key,
    /// in whole tokens and never past the bucket's burst, and answers in the
    /// same order how many each bucket took. A key the store holds no bucket
    /// for is full and takes none; a window's count takes none either (its
    /// tokens belong to a window that ends on its own). For an agent that
    /// stops with tokens pooled: one call, its deadline, never retried.
    async fn give_back(&self, items: &[GiveBack]) -> Vec<GivenBack> {
        let refused = StoreError::Failed(format!("the {} store takes no tokens back", self.name()));
        vec![Err(refused); items.len()]
    }

    /// Announces this agent (`agent_id`) as alive and answers how many agents of
    /// the region are; `None` when the store cannot tell (the embedded store is
    /// one node's alone).
    async fn heartbeat(&self, _agent_id: &str) -> Result<Option<u32>, StoreError> {
        Ok(None)
    }

    /// Takes this agent (`agent_id`) out of the region's live agents at once,
    /// as it stops, rather than when its last heartbeat ages out: the agents
    /// left size their share of each limit by the count.
    async fn leave(&self, _agent_id: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

/// The control state the region's agents share ([`control`]): the fleet
/// override, rules trials, the versions served and the audit history of
/// their changes. Each call is one call with the store's deadline.
#[async_trait]
pub trait FleetState: Backend {
    /// The fleet override (`None`: the rules file's modes apply).
    async fn fleet_override(&self) -> Result<Option<Override>, StoreError>;

    /// Sets (`Some`) or clears (`None`) the fleet override, `by` an operator
    /// (their declared name), with its entry in the audit history.
    async fn set_fleet_override(&self, state: Option<Override>, by: &str)
        -> Result<(), StoreError>;

    /// The trial of rules `version` (`None`: none recorded). With `start` (the
    /// plan and its period in ms), one is recorded first unless there is one,
    /// its start being the store's time now: the first agent's plan and start
    /// are every agent's. The plan is answered when `with_plan`.
    async fn trial(
        &self,
        version: &str,
        start: Option<(&TrialPlan, u64)>,
        with_plan: bool,
    ) -> Result<Option<StoredTrial>, StoreError>;

    /// Ends or holds the trial started last, `by` an operator, with its entry
    /// in the audit history; answers its version (`None`: no trial recorded).
    async fn control_trial(
        &self,
        action: TrialAction,
        by: &str,
    ) -> Result<Option<String>, StoreError>;

    /// Records that the region's agents serve rules `current`, having served
    /// `previous` before it (what `override pin` goes back to).
    async fn record_versions(&self, current: &str, previous: &str) -> Result<(), StoreError>;

    /// The version served before the current one, as last recorded.
    async fn previous_version(&self) -> Result<Option<String>, StoreError>;

    /// The newest `n` changes to control state, newest first; an entry the
    /// store holds but that does not verify is its [`Refusal`].
    async fn control_history(&self, _n: usize) -> Result<Vec<Audited>, StoreError> {
        Err(StoreError::Failed(format!(
            "the {} store keeps no history",
            self.name()
        )))
    }
}

/// An audit entry read back, or why it was refused.
pub type Audited = Result<AuditEntry, Refusal>;

impl StoreError {
    /// The `result` label of `meshlimit_store_requests_total`.
    pub fn metric_result(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::Shed => "shed",
            StoreError::Unavailable(_)
            | StoreError::Moved { .. }
            | StoreError::Ask { .. }
            | StoreError::Failed(_) => "error",
        }
    }

    /// The `reason` a filter sees in an `unavailable` lease answer.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "store_timeout",
            StoreError::Shed => "shed",
            StoreError::Unavailable(_) | StoreError::Moved { .. } | StoreError::Ask { .. } => {
                "store_unavailable"
            }
            StoreError::Failed(_) => "store_error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_their_metric_result_and_reason() {
        let timeout = StoreError::Timeout(Duration::from_millis(5));
        assert_eq!(
            (timeout.metric_result(), timeout.reason()),
            ("timeout", "store_timeout")
        );
        assert_eq!(
            (StoreError::Shed.metric_result(), StoreError::Shed.reason()),
            ("shed", "shed")
        );
        for redirect in [
            StoreError::Moved { node: "a:1".into() },
            StoreError::Ask { node: "a:1".into() },
        ] {
            assert_eq!(
                (redirect.metric_result(), redirect.reason()),
                ("error", "store_unavailable")
            );
        }
        let failed = StoreError::Failed("NOSCRIPT".into());
        assert_eq!(
            (failed.metric_result(), failed.reason()),
            ("error", "store_error")
        );
    }

    #[test]
    fn a_peek_reads_a_window_as_the_room_left_and_when_it_stops_weighing() {
        use meshlimit_core::{Algorithm, Window};
        let sec = 1_000_000_000;
        let ten = std::num::NonZeroU32::new(10).unwrap();
        let fixed = Limit::new(ten, std::num::NonZeroU64::new(10 * sec).unwrap(), ten)
            .with_algorithm(Algorithm::FixedWindow);
        let sliding = fixed.with_algorithm(Algorithm::SlidingWindow);
        // 4 counted in window 3 ([30 s, 40 s)), peeked at 32 s.
        let counted = Counter::Window(Window::from_parts(3, 4, 0));
        let p = Peeked::of(&counted, &fixed, 32 * sec);
        assert_eq!((p.tokens, p.full_in_ms), (6.0, 8_000));
        // A sliding window's count also weighs on the next window.
        let p = Peeked::of(&counted, &sliding, 32 * sec);
        assert_eq!((p.tokens, p.full_in_ms), (6.0, 18_000));
        // At 45 s the previous 4 weigh by the half of window 3 still in reach.
        let p = Peeked::of(&counted, &sliding, 45 * sec);
        assert_eq!((p.tokens, p.full_in_ms), (8.0, 5_000));
        // A fixed window forgets it.
        let p = Peeked::of(&counted, &fixed, 45 * sec);
        assert_eq!((p.tokens, p.full_in_ms), (10.0, 0));
    }
}
