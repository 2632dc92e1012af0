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
use tokio::time::{timeout, timeout_at, Instant};

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
/// After a MOVED or ASK the slot map is read every [`health::PROBE_EVERY`]
/// for this long: slots are moving (a reshard, a scale-out or scale-in), and a
/// slot moved after the last read sends its keys to its old owner, which a
/// scale-in then shuts down. Two seconds cover `redis-cli --cluster`'s gap
/// between one slot's move and the next.
const MOVING_WATCH: Duration = Duration::from_secs(2);
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
    /// A call was sent once more to the node a MOVED or ASK answer named.
    Redirected(RedirectKind),
}

/// The two Redis Cluster redirects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectKind {
    /// MOVED: the hash slot lives on another node now; the map is read again.
    Moved,
    /// ASK: the hash slot is migrating and this key is already on the target;
    /// the map stays as it is until the migration ends.
    Ask,
}

impl RedirectKind {
    /// The `kind` label of `meshlimit_store_redirects_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            RedirectKind::Moved => "moved",
            RedirectKind::Ask => "ask",
        }
    }
}

/// Where a redirect sends a call once more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    pub(crate) kind: RedirectKind,
    /// `host:port`
    pub(crate) node: String,
}

impl Redirect {
    /// The redirect an error is, if it is one.
    fn of(error: &StoreError) -> Option<Redirect> {
        let (kind, node) = match error {
            StoreError::Moved { node } => (RedirectKind::Moved, node),
            StoreError::Ask { node } => (RedirectKind::Ask, node),
            _ => return None,
        };
        Some(Redirect {
            kind,
            node: node.clone(),
        })
    }
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
                moving_until: Mutex::new(None),
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
        let budget = s.cfg.batch.deadline;
        let deadline = Instant::now() + budget;
        let pending: Vec<_> = items.iter().map(|i| s.submit(i, None)).collect();
        let mut firsts = Vec::with_capacity(items.len());
        for (item, rx) in items.iter().zip(pending) {
            firsts.push((item, rx.await.unwrap_or_else(|_| Err(stopped()))));
        }
        follow_redirects(firsts, |item, to| self.resend(item, to), deadline, budget).await
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

    /// Sends `item` once more, to the node a redirect named.
    fn resend(&self, item: &Acquire, to: Redirect) -> oneshot::Receiver<Acquired> {
        self.following(to.kind);
        self.shared.submit(item, Some(to))
    }

    /// Counts a redirect being followed, and has the refresher read the slot
    /// map often for [`MOVING_WATCH`]: slots are moving. A MOVED also wakes
    /// it at once (the map changed); an ASK does not, since the map changes
    /// only when the slot's move ends, and a migration answers ASK for every
    /// key already moved.
    fn following(&self, kind: RedirectKind) {
        (self.shared.events)(StoreEvent::Redirected(kind));
        if let Ok(mut until) = self.shared.moving_until.lock() {
            *until = Some(Instant::now() + MOVING_WATCH);
        }
        if kind == RedirectKind::Moved {
            self.shared.wake.notify_one();
        }
    }

    /// Runs one command on the node owning `key`, on that node's control
    /// connection, with [`PING_TIMEOUT`] for the whole call (connecting
    /// included) and no retry: background and operator calls, off the request
    /// path. A MOVED or ASK answer is followed once, as on the lease path.
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
            let first = self.query_on::<T>(&node, &cmd, false).await;
            let Some(to) = first.as_ref().err().and_then(Redirect::of) else {
                return first;
            };
            self.following(to.kind);
            let asking = to.kind == RedirectKind::Ask;
            self.query_on::<T>(&to.node, &cmd, asking).await
        };
        match timeout(PING_TIMEOUT, call).await {
            Ok(answer) => answer,
            Err(_) => Err(StoreError::Timeout(PING_TIMEOUT)),
        }
    }

    /// Runs `cmd` on `node`'s control connection, after `ASKING` when an ASK
    /// redirect sent it there; a redirect answer is its [`StoreError`].
    async fn query_on<T: redis::FromRedisValue>(
        &self,
        node: &str,
        cmd: &redis::Cmd,
        asking: bool,
    ) -> Result<T, StoreError> {
        let unavailable = |e: redis::RedisError| StoreError::Unavailable(format!("{node}: {e}"));
        let mut c = self.shared.control_conn(node).await?;
        let answer = if asking {
            let mut p = redis::pipe();
            p.cmd("ASKING").ignore().add_command(cmd.clone());
            p.query_async::<(T,)>(&mut c).await.map(|(t,)| t)
        } else {
            cmd.query_async::<T>(&mut c).await
        };
        answer.map_err(|e| {
            let to = e.redirect_node().map(|(to, _)| to.to_string());
            match (e.kind(), to) {
                (redis::ErrorKind::Server(redis::ServerErrorKind::Moved), Some(node)) => {
                    StoreError::Moved { node }
                }
                (redis::ErrorKind::Server(redis::ServerErrorKind::Ask), Some(node)) => {
                    StoreError::Ask { node }
                }
                _ => unavailable(e),
            }
        })
    }
}

/// A batcher that stopped before answering (the store is being dropped).
fn stopped() -> StoreError {
    StoreError::Unavailable("batcher stopped".into())
}

/// One answer per item, after at most one redirect each. Every item answered
/// MOVED or ASK is sent again at once (`resend`, which returns the channel its
/// answer comes on), and what that call answers is final, another redirect
/// included, so no item goes round between nodes. A resent item not answered
/// by `deadline`, the one its first call had, is a timeout of `budget`.
async fn follow_redirects<T>(
    firsts: Vec<(&T, Acquired)>,
    mut resend: impl FnMut(&T, Redirect) -> oneshot::Receiver<Acquired>,
    deadline: Instant,
    budget: Duration,
) -> Vec<Acquired> {
    enum Pending {
        Answered(Acquired),
        Resent(oneshot::Receiver<Acquired>),
    }
    let pending: Vec<Pending> = firsts
        .into_iter()
        .map(
            |(item, first)| match first.as_ref().err().and_then(Redirect::of) {
                Some(to) => Pending::Resent(resend(item, to)),
                None => Pending::Answered(first),
            },
        )
        .collect();
    let mut answers = Vec::with_capacity(pending.len());
    for answer in pending {
        answers.push(match answer {
            Pending::Answered(first) => first,
            Pending::Resent(again) => match timeout_at(deadline, again).await {
                Ok(answer) => answer.unwrap_or_else(|_| Err(stopped())),
                Err(_) => Err(StoreError::Timeout(budget)),
            },
        });
    }
    answers
}

/// A client for `node` with the configured credentials and TLS (kept out of
/// every log line: errors name the node only).
fn client(node: &str, cfg: &RedisConfig) -> Result<redis::Client, StoreError> {
    client::client(node, &cfg.connect).map_err(|e| StoreError::Failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(answer: Acquired) -> oneshot::Receiver<Acquired> {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(answer);
        rx
    }

    #[tokio::test]
    async fn a_redirect_is_followed_once_and_its_answer_is_final() {
        let moved = |node: &str| StoreError::Moved { node: node.into() };
        let ask = |node: &str| StoreError::Ask { node: node.into() };
        let firsts: Vec<(&u8, Acquired)> = vec![
            (&0, Err(StoreError::Shed)),
            (&1, Err(ask("b:2"))),
            (&2, Err(moved("c:3"))),
        ];
        let mut sent = Vec::new();
        let budget = Duration::from_secs(1);
        let answers = follow_redirects(
            firsts,
            |item, to| {
                sent.push((*item, to));
                // Item 1's target redirects again; item 2's answers.
                answered(if *item == 1 {
                    Err(moved("a:1"))
                } else {
                    Err(StoreError::Failed("answered".into()))
                })
            },
            Instant::now() + budget,
            budget,
        )
        .await;
        let to = |kind, node: &str| Redirect {
            kind,
            node: node.into(),
        };
        assert_eq!(
            sent,
            [
                (1, to(RedirectKind::Ask, "b:2")),
                (2, to(RedirectKind::Moved, "c:3"))
            ]
        );
        assert_eq!(
            answers,
            [
                Err(StoreError::Shed),
                Err(moved("a:1")),
                Err(StoreError::Failed("answered".into()))
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_redirected_item_keeps_its_first_deadline() {
        let budget = Duration::from_millis(3);
        let started = Instant::now();
        let mut unanswered = Vec::new();
        let answers = follow_redirects(
            vec![(&0u8, Err(StoreError::Ask { node: "b:2".into() }))],
            |_, _| {
                let (tx, rx) = oneshot::channel();
                unanswered.push(tx);
                rx
            },
            started + budget,
            budget,
        )
        .await;
        assert_eq!(answers, [Err(StoreError::Timeout(budget))]);
        assert_eq!(started.elapsed(), budget);
    }
}
