//! What the Redis store and its background tasks (`tasks`) share: the
//! configuration, the hash slot map, one batcher per node and the nodes'
//! health; and how one item finds the batcher of the node owning its key.

use super::*;

/// What the store's background tasks (the hash-slot map refresher, the probes of
/// down nodes) share with it; they hold it weakly and stop with the store.
pub(super) struct Shared {
    pub(super) cfg: RedisConfig,
    pub(super) map: RwLock<Arc<HashSlotMap>>,
    pub(super) batchers: RwLock<HashMap<String, mpsc::Sender<batcher::Job>>>,
    /// Each node's connection for calls off the lease path ([`Shared::control_conn`]).
    pub(super) control: RwLock<HashMap<String, ConnectionManager>>,
    pub(super) observe: BatchObserver,
    pub(super) events: EventObserver,
    pub(super) health: Mutex<Health>,
    /// Wakes the refresher at once (a node went down, a MOVED answer).
    pub(super) wake: Notify,
    /// Until when the refresher reads the map often: slots are moving.
    pub(super) moving_until: Mutex<Option<Instant>>,
    pub(super) refresher: AtomicBool,
}

impl Shared {
    pub(super) fn batcher(
        self: &Arc<Self>,
        node: &str,
    ) -> Result<mpsc::Sender<batcher::Job>, StoreError> {
        if let Some(tx) = self.batchers.read().ok().and_then(|b| b.get(node).cloned()) {
            return Ok(tx);
        }
        let client = client(node, &self.cfg)?;
        // Reconnection is the connection's own business, in the background;
        // commands meanwhile fail at once and their items take the failure policy.
        let conn = ConnectionManager::new_lazy_with_config(client, connection_config())
            .map_err(|e| StoreError::Failed(e.to_string()))?;
        Ok(self.install(node, conn))
    }

    /// The connection that calls off the lease path share to `node`: the
    /// heartbeat, the fleet override's and a trial's reads, peeks, hand-backs
    /// and readiness pings. Made on first use and kept, reconnecting on its
    /// own like a batcher's, so that an agent's once-a-second calls open no
    /// TCP connection (and no TLS handshake) each; at most one a node. The
    /// first call connects: callers bound it with their deadline.
    pub(super) async fn control_conn(&self, node: &str) -> Result<ConnectionManager, StoreError> {
        if let Some(conn) = self.control.read().ok().and_then(|c| c.get(node).cloned()) {
            return Ok(conn);
        }
        let conn =
            ConnectionManager::new_with_config(client(node, &self.cfg)?, connection_config())
                .await
                .map_err(|e| StoreError::Unavailable(format!("{node}: {e}")))?;
        if let Ok(mut c) = self.control.write() {
            return Ok(c.entry(node.to_string()).or_insert(conn).clone());
        }
        Ok(conn)
    }

    /// Starts `node`'s batcher on `conn`, replacing any other.
    pub(super) fn install(
        self: &Arc<Self>,
        node: &str,
        conn: ConnectionManager,
    ) -> mpsc::Sender<batcher::Job> {
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
        tx
    }

    /// The batch observer of `node`'s batcher: metrics, plus the node's health.
    pub(super) fn node_observer(self: &Arc<Self>, node: &str) -> batcher::NodeObserver {
        let shared = Arc::downgrade(self);
        let node = node.to_string();
        Arc::new(move |size, latency, result, lost| {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            (shared.observe)(size, latency, result);
            let went_down = {
                let Ok(mut h) = shared.health.lock() else {
                    return;
                };
                match result {
                    Ok(()) => {
                        h.succeeded(&node, Instant::now());
                        false
                    }
                    // A script error is not the node's sickness.
                    Err(StoreError::Failed(_)) => false,
                    Err(_) => h.failed(&node, Instant::now(), lost),
                }
            };
            if went_down {
                shared.node_down(&node, lost);
            }
        })
    }

    /// `node` is down: no batch goes to it (its keys take the failure policy
    /// at once), the hash slot map is read again, and a probe watches for its return.
    pub(super) fn node_down(self: &Arc<Self>, node: &str, lost: bool) {
        tracing::warn!(
            node,
            cause = if lost { "connection lost" } else { "timeouts" },
            "Redis node failed: its hash slots take the failure policy until it answers or a replica takes them; other nodes are unaffected"
        );
        (self.events)(StoreEvent::NodeDown);
        if let Ok(mut b) = self.batchers.write() {
            b.remove(node);
        }
        if let Ok(mut c) = self.control.write() {
            c.remove(node);
        }
        self.wake.notify_one();
        tokio::spawn(probe(Arc::downgrade(self), node.to_string()));
    }

    pub(super) fn is_down(&self, node: &str) -> bool {
        self.health.lock().is_ok_and(|h| h.is_down(node))
    }

    /// Reads a cluster's hash slot map from the first node that answers: the known
    /// nodes that are up, then the seeds that are up; a single Redis has nothing
    /// to read.
    pub(super) async fn refresh(self: &Arc<Self>) -> Result<(), StoreError> {
        if !self.cfg.cluster {
            return Ok(());
        }
        let mut last = StoreError::Unavailable("no seed node".into());
        let known = self.map.read().map(|m| m.nodes.clone()).unwrap_or_default();
        let mut tried = Vec::new();
        for node in known.iter().chain(&self.cfg.nodes) {
            if tried.contains(node) || self.is_down(node) {
                continue;
            }
            tried.push(node.clone());
            match timeout(CONTROL_TIMEOUT, cluster_slots(self, node)).await {
                Ok(Ok(fresh)) => {
                    let old = self.map.read().map(|m| m.clone()).unwrap_or_default();
                    if *old != fresh {
                        if !old.nodes.is_empty() {
                            tracing::info!(
                                from = ?old.nodes,
                                to = ?fresh.nodes,
                                "Redis Cluster hash slot map changed"
                            );
                            (self.events)(StoreEvent::HashSlotMapChanged);
                        }
                        // Connect to new owners now, not on their first lease.
                        for new in fresh.nodes.iter().filter(|n| !old.nodes.contains(n)) {
                            tokio::spawn(prewarm(Arc::downgrade(self), new.clone()));
                        }
                        if let Ok(mut m) = self.map.write() {
                            *m = Arc::new(fresh);
                        }
                    }
                    return Ok(());
                }
                Ok(Err(e)) => last = e,
                Err(_) => last = StoreError::Timeout(CONTROL_TIMEOUT),
            }
        }
        Err(last)
    }

    /// Sends one item to the node owning its hash slot (or to the node a MOVED or
    /// ASK redirect named); the answer arrives on the returned channel.
    pub(super) fn submit(
        self: &Arc<Self>,
        item: &Acquire,
        redirect: Option<Redirect>,
    ) -> oneshot::Receiver<Acquired> {
        let (reply, rx) = oneshot::channel();
        let key = keys::bucket(&self.cfg.key_ids, &item.key);
        let asking = redirect
            .as_ref()
            .is_some_and(|r| r.kind == RedirectKind::Ask);
        let node = redirect.map(|r| r.node).or_else(|| {
            let map = self.map.read().ok()?.clone();
            map.node_of(hash_slot(&key))
                .and_then(|i| map.nodes.get(i).cloned())
        });
        let Some(node) = node else {
            let _ = reply.send(Err(StoreError::Unavailable(
                "no node owns this hash slot (topology unknown)".into(),
            )));
            return rx;
        };
        if self.is_down(&node) {
            let _ = reply.send(Err(StoreError::Unavailable(format!("{node} is down"))));
            return rx;
        }
        let job = batcher::Job {
            redis_key: key,
            item: item.clone(),
            share: item.share,
            asking,
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

pub(super) fn connection_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(200)))
        .set_response_timeout(None)
        .set_number_of_retries(3)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(200))
}
