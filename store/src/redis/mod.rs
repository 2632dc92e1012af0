//! The Redis stores: a single Redis (`redis://host:port`) or a Redis Cluster
//! (`redis+cluster://host:port,host:port,…`), each also over TLS (`rediss`). Both are one [`RedisStore`]: a hash slot
//! map (one node owning every hash slot for a single Redis), one connection and one
//! batcher per node, and the lease script run on the server's clock.

mod batcher;
pub mod client;
mod control;
mod give_back;
mod health;
pub mod keys;
mod nodes;
pub mod script;
mod tasks;
pub(crate) mod topology;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::{timeout, Instant};

pub use batcher::{BatchConfig, BatchObserver};
use health::Health;
use nodes::{connection_config, Shared};
use tasks::{cluster_slots, prewarm, probe, refresher};
use topology::{hash_slot, HashSlotMap};

use super::control::{Record, Refusal};
use super::{
    Acquire, Acquired, Audited, Backend, Buckets, FleetState, GiveBack, GivenBack, Peeked,
    StoreError,
};
use crate::fleet::Override;
use crate::trial::{StoredTrial, TrialAction};
use meshlimit_core::rules::trial::TrialPlan;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::{Bucket, Counter, Limit, Window};

/// How often the hash slot map is read again while every node is healthy (hash slot
/// migrations, a failover this agent has not noticed).
const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// Deadline of one `CLUSTER SLOTS`, one probe, one connection.
const CONTROL_TIMEOUT: Duration = Duration::from_millis(300);
/// Deadline of one readiness ping or heartbeat (background calls, off the
/// request path).
const PING_TIMEOUT: Duration = Duration::from_millis(500);
/// An agent not heard from for this long no longer counts as live.
const HEARTBEAT_WINDOW_MS: u64 = 5_000;

/// Where the store is and how it batches.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// `host:port` of the single Redis, or the cluster's seed nodes.
    pub nodes: Vec<String>,
    pub cluster: bool,
    /// Credentials and TLS (never logged: the password prints redacted).
    pub connect: client::Connect,
    pub batch: BatchConfig,
    /// Names buckets by the keyed hash of their key (from the deployment secret).
    pub key_ids: meshlimit_core::secret::KeyIds,
    /// Signs and checks control state (from the deployment secret).
    pub control: meshlimit_core::secret::ControlMac,
}

/// A change in the store's view of the cluster, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreEvent {
    /// `CLUSTER SLOTS` gave a different map (a promotion, a migration).
    HashSlotMapChanged,
    /// A node was marked down: its keys take the failure policy.
    NodeDown,
    /// A down node answers again, after this long.
    NodeUp(Duration),
    /// A down node left the hash slot map (a replica took its hash slots), after this long.
    NodeReplaced(Duration),
    /// A control record read back was ignored.
    ControlRefused(Record, Refusal),
}

/// Observes [`StoreEvent`]s.
pub type EventObserver = Arc<dyn Fn(StoreEvent) + Send + Sync>;

/// A Redis or Redis Cluster bucket store.
pub struct RedisStore {
    shared: Arc<Shared>,
    /// The control records refused at their last read, so that a refusal is
    /// logged when it starts, not at every poll.
    refusing: Mutex<std::collections::HashSet<&'static str>>,
}

impl RedisStore {
    /// Creates the store without connecting: connections open lazily and reopen
    /// on their own, so an agent starts (not ready) while Redis is down.
    pub fn new(cfg: RedisConfig, observe: BatchObserver) -> Self {
        let map = match cfg.nodes.first() {
            Some(first) if !cfg.cluster => HashSlotMap::single(first.clone()),
            _ => HashSlotMap::default(),
        };
        Self {
            shared: Arc::new(Shared {
                cfg,
                map: RwLock::new(Arc::new(map)),
                batchers: RwLock::default(),
                control: RwLock::default(),
                observe,
                events: Arc::new(|_| {}),
                health: Mutex::default(),
                wake: Notify::new(),
                refresher: AtomicBool::new(false),
            }),
            refusing: Mutex::default(),
        }
    }

    /// Reports hash-slot map changes and node failures to `events`.
    #[must_use]
    pub fn with_events(mut self, events: EventObserver) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.events = events;
        }
        self
    }

    /// Reads the cluster's hash slot map from the first node that answers.
    pub async fn refresh_topology(&self) -> Result<(), StoreError> {
        self.shared.refresh().await
    }

    /// Starts the background hash-slot map refresher once (cluster only).
    fn start_refresher(&self) {
        if !self.shared.cfg.cluster || self.shared.refresher.swap(true, Ordering::Relaxed) {
            return;
        }
        tokio::spawn(refresher(Arc::downgrade(&self.shared)));
    }
}

#[async_trait]
impl Backend for RedisStore {
    async fn ping(&self) -> Result<(), StoreError> {
        self.refresh_topology().await?;
        let nodes = self
            .shared
            .map
            .read()
            .map(|m| m.nodes.clone())
            .unwrap_or_default();
        for node in nodes {
            let ping = async {
                let mut c = self.shared.control_conn(&node).await?;
                redis::cmd("PING")
                    .query_async::<String>(&mut c)
                    .await
                    .map_err(|e| StoreError::Unavailable(format!("{node}: {e}")))
            };
            match timeout(PING_TIMEOUT, ping).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(StoreError::Timeout(PING_TIMEOUT)),
            }
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        if self.shared.cfg.cluster {
            "redis-cluster"
        } else {
            "redis"
        }
    }
}

#[async_trait]
impl Buckets for RedisStore {
    async fn acquire(&self, items: &[Acquire]) -> Vec<Acquired> {
        // An unknown map (the first call) must be read before anything can be
        // sent; afterwards the map is the refresher's business, off the request
        // path.
        let _ = self.ensure_topology().await;
        self.start_refresher();
        let s = &self.shared;
        let pending: Vec<_> = items.iter().map(|i| s.submit(i, None)).collect();
        let mut answers = Vec::with_capacity(items.len());
        for (item, rx) in items.iter().zip(pending) {
            let answer = rx
                .await
                .unwrap_or(Err(StoreError::Unavailable("batcher stopped".into())));
            answers.push(match moved_to(&answer) {
                // Follow a hash slot's move once, as the cluster protocol asks of
                // clients; the refresher learns the new map for the next calls.
                Some(node) => {
                    s.wake.notify_one();
                    s.submit(item, Some(node))
                        .await
                        .unwrap_or(Err(StoreError::Unavailable("batcher stopped".into())))
                }
                None => answer,
            });
        }
        answers
    }

    async fn give_back(&self, items: &[GiveBack]) -> Vec<GivenBack> {
        self.give_back_all(items).await
    }

    async fn heartbeat(&self, agent_id: &str) -> Result<Option<u32>, StoreError> {
        let beat = redis::cmd("EVAL")
            .arg(script::HEARTBEAT_SCRIPT)
            .arg(1)
            .arg(keys::AGENTS)
            .arg(agent_id)
            .arg(HEARTBEAT_WINDOW_MS)
            .clone();
        self.control::<u32>(keys::AGENTS, beat).await.map(Some)
    }

    async fn leave(&self, agent_id: &str) -> Result<(), StoreError> {
        let leave = redis::cmd("ZREM").arg(keys::AGENTS).arg(agent_id).clone();
        self.control::<u32>(keys::AGENTS, leave).await.map(|_| ())
    }

    async fn peek(
        &self,
        _ids: &KeyIds,
        rule: &str,
        key_id: &str,
        limit: &Limit,
    ) -> Result<Option<Peeked>, StoreError> {
        let key = keys::bucket_of_id(key_id, rule);
        let peek = redis::cmd("EVAL")
            .arg(script::PEEK_SCRIPT)
            .arg(1)
            .arg(&key)
            .clone();
        let reply: Vec<String> = self.control(&key, peek).await?;
        let bad = || StoreError::Failed(format!("{key}: the peek script answered {reply:?}"));
        let [tokens, updated, secs, micros, window, count, previous] = reply.as_slice() else {
            return Err(bad());
        };
        let num = |s: &String| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
        let (Some(secs), Some(micros)) = (num(secs), num(micros)) else {
            return Err(bad());
        };
        let now_ns = (secs * 1e9 + micros * 1e3) as u64;
        let counter = if limit.algorithm().is_window() {
            if window.is_empty() {
                return Ok(None);
            }
            let whole = |s: &String| s.parse::<u64>().ok();
            let (Some(w), Some(c), Some(p)) = (whole(window), whole(count), whole(previous)) else {
                return Err(bad());
            };
            Counter::Window(Window::from_parts(w, c, p))
        } else {
            if tokens.is_empty() {
                return Ok(None);
            }
            let (Some(tokens), Some(updated)) = (num(tokens), num(updated)) else {
                return Err(bad());
            };
            Counter::Bucket(Bucket::from_parts(tokens, (updated * 1e3) as u64))
        };
        Ok(Some(Peeked::of(&counter, limit, now_ns)))
    }
}

#[async_trait]
impl FleetState for RedisStore {
    async fn fleet_override(&self) -> Result<Option<Override>, StoreError> {
        self.read_override().await
    }

    async fn set_fleet_override(
        &self,
        state: Option<Override>,
        by: &str,
    ) -> Result<(), StoreError> {
        self.write_override(state, by).await
    }

    async fn trial(
        &self,
        version: &str,
        start: Option<(&TrialPlan, u64)>,
        with_plan: bool,
    ) -> Result<Option<StoredTrial>, StoreError> {
        self.read_trial(version, start, with_plan).await
    }

    async fn control_trial(
        &self,
        action: TrialAction,
        by: &str,
    ) -> Result<Option<String>, StoreError> {
        self.write_trial_control(action, by).await
    }

    async fn record_versions(&self, current: &str, previous: &str) -> Result<(), StoreError> {
        self.write_versions(current, previous).await
    }

    async fn previous_version(&self) -> Result<Option<String>, StoreError> {
        self.read_previous_version().await
    }

    async fn control_history(&self, n: usize) -> Result<Vec<Audited>, StoreError> {
        self.read_history(n).await
    }
}

impl RedisStore {
    /// Reads the cluster map if none is known yet (the first call).
    async fn ensure_topology(&self) -> Result<(), StoreError> {
        let unknown = self
            .shared
            .map
            .read()
            .map(|m| m.nodes.is_empty())
            .unwrap_or(true);
        if unknown {
            self.refresh_topology().await?;
        }
        Ok(())
    }

    /// A copy of the slot map as last read (empty before the first read).
    fn slot_map(&self) -> Arc<HashSlotMap> {
        self.shared
            .map
            .read()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Runs one command on the node owning `key`, on that node's control
    /// connection, with [`PING_TIMEOUT`] for the whole call (connecting
    /// included) and no retry: background and operator calls, off the request
    /// path.
    async fn control<T: redis::FromRedisValue>(
        &self,
        key: &str,
        cmd: redis::Cmd,
    ) -> Result<T, StoreError> {
        let call = async {
            self.ensure_topology().await?;
            let map = self.slot_map();
            let node = map
                .node_of(hash_slot(key))
                .and_then(|i| map.nodes.get(i).cloned())
                .ok_or_else(|| StoreError::Unavailable("topology unknown".into()))?;
            let mut c = self.shared.control_conn(&node).await?;
            cmd.query_async::<T>(&mut c)
                .await
                .map_err(|e| StoreError::Unavailable(format!("{node}: {e}")))
        };
        match timeout(PING_TIMEOUT, call).await {
            Ok(answer) => answer,
            Err(_) => Err(StoreError::Timeout(PING_TIMEOUT)),
        }
    }
}

/// The node a MOVED answer points to. (An ASK, a hash slot in mid-migration, is
/// not followed: its items take the failure policy for that moment.)
fn moved_to(answer: &Acquired) -> Option<String> {
    match answer {
        Err(StoreError::Moved { node }) => Some(node.clone()),
        _ => None,
    }
}

/// A client for `node` with the configured credentials and TLS (kept out of
/// every log line: errors name the node only).
fn client(node: &str, cfg: &RedisConfig) -> Result<redis::Client, StoreError> {
    client::client(node, &cfg.connect).map_err(|e| StoreError::Failed(e.to_string()))
}
