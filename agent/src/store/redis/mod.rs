//! The Redis stores: a single Redis (`redis://host:port`) or a Redis Cluster
//! (`redis+cluster://host:port,host:port,…`), each also over TLS (`rediss`). Both are one [`RedisStore`]: a slot
//! map (one node owning every slot for a single Redis), one connection and one
//! batcher per node, and the lease script run on the server's clock.

mod batcher;
pub mod client;
mod health;
pub mod script;
pub mod topology;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout, Instant};

pub use batcher::{BatchConfig, BatchObserver};
use health::Health;
use topology::{redis_key, slot, SlotMap};

use super::{Acquire, Acquired, Store, StoreError};

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
}

/// A Redis or Redis Cluster bucket store.
pub struct RedisStore {
    cfg: RedisConfig,
    map: Arc<RwLock<Arc<SlotMap>>>,
    batchers: RwLock<HashMap<String, mpsc::Sender<batcher::Job>>>,
    observe: BatchObserver,
    health: Arc<Mutex<Health>>,
    /// Set when a node starts a cool-down: the slot map may be stale (a failover).
    stale_map: Arc<AtomicBool>,
}

impl RedisStore {
    /// Creates the store without connecting: connections open lazily and reopen
    /// on their own, so an agent starts (not ready) while Redis is down.
    pub fn new(cfg: RedisConfig, observe: BatchObserver) -> Self {
        let map = match cfg.nodes.first() {
            Some(first) if !cfg.cluster => SlotMap::single(first.clone()),
            _ => SlotMap::default(),
        };
        Self {
            cfg,
            map: Arc::new(RwLock::new(Arc::new(map))),
            batchers: RwLock::default(),
            observe,
            health: Arc::default(),
            stale_map: Arc::default(),
        }
    }

    /// Reads the cluster's slot map from the first seed that answers.
    pub async fn refresh_topology(&self) -> Result<(), StoreError> {
        refresh(&self.map, &self.cfg).await
    }

    fn client(&self, node: &str) -> Result<redis::Client, StoreError> {
        client(node, &self.cfg)
    }

    fn batcher(&self, node: &str) -> Result<mpsc::Sender<batcher::Job>, StoreError> {
        if let Some(tx) = self.batchers.read().ok().and_then(|b| b.get(node).cloned()) {
            return Ok(tx);
        }
        let client = self.client(node)?;
        // Reconnection is the connection's own business, in the background, and
        // quick (a restarted Redis is used again within about a second); commands
        // meanwhile fail at once and their items take the failure policy.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(200)))
            .set_response_timeout(None)
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| StoreError::Failed(e.to_string()))?;
        let (tx, rx) = mpsc::channel(4_096);
        tokio::spawn(batcher::run(
            conn,
            rx,
            self.cfg.batch,
            self.node_observer(node),
        ));
        if let Ok(mut b) = self.batchers.write() {
            b.insert(node.to_string(), tx.clone());
        }
        Ok(tx)
    }

    /// The batch observer of `node`'s batcher: metrics, plus the node's health.
    fn node_observer(&self, node: &str) -> BatchObserver {
        let (observe, health, stale) = (
            self.observe.clone(),
            self.health.clone(),
            self.stale_map.clone(),
        );
        let node = node.to_string();
        let cluster = self.cfg.cluster;
        Arc::new(move |size, latency, result| {
            observe(size, latency, result);
            let Ok(mut h) = health.lock() else { return };
            match result {
                Ok(()) => h.succeeded(&node),
                // A script error is not the node's sickness.
                Err(StoreError::Failed(_)) => {}
                Err(_) => {
                    if h.failed(&node, Instant::now()) {
                        tracing::warn!(
                            node,
                            "Redis node failing: skipped for {:?}",
                            health::COOL_DOWN
                        );
                        stale.store(cluster, Ordering::Relaxed);
                    }
                }
            }
        })
    }

    /// Sends one item to the node owning its slot (or to `node` when a MOVED
    /// redirect named it); the answer arrives on the returned channel.
    fn submit(&self, item: &Acquire, node: Option<String>) -> oneshot::Receiver<Acquired> {
        let (reply, rx) = oneshot::channel();
        let key = redis_key(&self.cfg.key_ids, &item.key);
        let node = node.or_else(|| {
            let map = self.map.read().ok()?.clone();
            map.node_of(slot(&key))
                .and_then(|i| map.nodes.get(i).cloned())
        });
        let Some(node) = node else {
            let _ = reply.send(Err(StoreError::Unavailable(
                "no node owns this slot (topology unknown)".into(),
            )));
            return rx;
        };
        if self
            .health
            .lock()
            .is_ok_and(|h| h.is_cooling(&node, Instant::now()))
        {
            let _ = reply.send(Err(StoreError::Unavailable(format!(
                "{node} cooling down after failures"
            ))));
            return rx;
        }
        let job = batcher::Job {
            redis_key: key,
            item: item.clone(),
            share: item.share,
            reply,
        };
        match self.batcher(&node) {
            // A full queue is shed at once, never waited on.
            Ok(tx) => {
                if let Err(e) = tx.try_send(job) {
                    let job = match e {
                        mpsc::error::TrySendError::Full(j)
                        | mpsc::error::TrySendError::Closed(j) => j,
                    };
                    let _ = job.reply.send(Err(StoreError::Shed));
                }
            }
            Err(e) => {
                let _ = job.reply.send(Err(e));
            }
        }
        rx
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn acquire(&self, items: &[Acquire]) -> Vec<Acquired> {
        // An unknown map (the first call) must be read before anything can be
        // sent; a possibly stale one (a node started cooling down) is re-read in
        // the background, off the request path.
        let unknown = self.map.read().map(|m| m.nodes.is_empty()).unwrap_or(true);
        if unknown {
            let _ = self.refresh_topology().await;
        } else if self.stale_map.swap(false, Ordering::Relaxed) {
            let (map, cfg) = (self.map.clone(), self.cfg.clone());
            tokio::spawn(async move { refresh(&map, &cfg).await });
        }
        let pending: Vec<_> = items.iter().map(|i| self.submit(i, None)).collect();
        let mut answers = Vec::with_capacity(items.len());
        for (item, rx) in items.iter().zip(pending) {
            let answer = rx
                .await
                .unwrap_or(Err(StoreError::Unavailable("batcher stopped".into())));
            answers.push(match moved_to(&answer) {
                // Follow a slot's move once, as the cluster protocol asks of
                // clients, and learn the new map for the next calls.
                Some(node) => {
                    let _ = self.refresh_topology().await;
                    self.submit(item, Some(node))
                        .await
                        .unwrap_or(Err(StoreError::Unavailable("batcher stopped".into())))
                }
                None => answer,
            });
        }
        answers
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.refresh_topology().await?;
        let nodes = self.map.read().map(|m| m.nodes.clone()).unwrap_or_default();
        for node in nodes {
            let client = self.client(&node)?;
            let ping = async {
                let mut c = client.get_multiplexed_async_connection().await?;
                redis::cmd("PING").query_async::<String>(&mut c).await
            };
            match timeout(Duration::from_millis(500), ping).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(StoreError::Unavailable(format!("{node}: {e}"))),
                Err(_) => return Err(StoreError::Timeout(Duration::from_millis(500))),
            }
        }
        Ok(())
    }

    async fn heartbeat(&self, agent_id: &str) -> Result<Option<u32>, StoreError> {
        let map = self.map.read().map(|m| m.clone()).unwrap_or_default();
        let node = map
            .node_of(slot(script::AGENTS_KEY))
            .and_then(|i| map.nodes.get(i).cloned())
            .ok_or_else(|| StoreError::Unavailable("topology unknown".into()))?;
        let client = self.client(&node)?;
        let beat = async {
            let mut c = client.get_multiplexed_async_connection().await?;
            redis::cmd("EVAL")
                .arg(script::HEARTBEAT_SCRIPT)
                .arg(1)
                .arg(script::AGENTS_KEY)
                .arg(agent_id)
                .arg(script::HEARTBEAT_WINDOW_MS)
                .query_async::<u32>(&mut c)
                .await
        };
        match timeout(Duration::from_millis(500), beat).await {
            Ok(Ok(n)) => Ok(Some(n)),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!("{node}: {e}"))),
            Err(_) => Err(StoreError::Timeout(Duration::from_millis(500))),
        }
    }

    fn name(&self) -> &'static str {
        if self.cfg.cluster {
            "redis-cluster"
        } else {
            "redis"
        }
    }
}

/// The node a MOVED/ASK answer points to.
fn moved_to(answer: &Acquired) -> Option<String> {
    match answer {
        Err(StoreError::Unavailable(text))
            if text.starts_with("MOVED ") || text.starts_with("ASK ") =>
        {
            text.split_whitespace().nth(2).map(str::to_string)
        }
        _ => None,
    }
}

/// Reads a cluster's slot map into `map` from the first node that answers (the
/// known nodes, then the seeds); a single Redis has nothing to read.
async fn refresh(map: &RwLock<Arc<SlotMap>>, cfg: &RedisConfig) -> Result<(), StoreError> {
    if !cfg.cluster {
        return Ok(());
    }
    let mut last = StoreError::Unavailable("no seed node".into());
    let known = map.read().map(|m| m.nodes.clone()).unwrap_or_default();
    for node in known.iter().chain(&cfg.nodes) {
        match timeout(Duration::from_millis(500), cluster_slots(node, cfg)).await {
            Ok(Ok(fresh)) => {
                if let Ok(mut m) = map.write() {
                    *m = Arc::new(fresh);
                }
                return Ok(());
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = StoreError::Timeout(Duration::from_millis(500)),
        }
    }
    Err(last)
}

/// A client for `node` with the configured credentials and TLS (kept out of
/// every log line: errors name the node only).
fn client(node: &str, cfg: &RedisConfig) -> Result<redis::Client, StoreError> {
    client::client(node, &cfg.connect).map_err(StoreError::Failed)
}

async fn cluster_slots(node: &str, cfg: &RedisConfig) -> Result<SlotMap, StoreError> {
    let client = client(node, cfg).map_err(|e| StoreError::Failed(e.to_string()))?;
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    let rows: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut c)
        .await
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    let mut out = Vec::new();
    for row in rows {
        let redis::Value::Array(parts) = row else {
            continue;
        };
        let (
            Some(redis::Value::Int(first)),
            Some(redis::Value::Int(last)),
            Some(redis::Value::Array(master)),
        ) = (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_string(),
            _ => continue,
        };
        let Some(redis::Value::Int(port)) = master.get(1) else {
            continue;
        };
        let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
            continue;
        };
        out.push((first, last, format!("{host}:{port}")));
    }
    if out.is_empty() {
        return Err(StoreError::Unavailable(format!(
            "{node}: CLUSTER SLOTS is empty"
        )));
    }
    Ok(SlotMap::from_rows(out))
}
