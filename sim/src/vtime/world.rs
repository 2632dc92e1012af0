//! What the virtual fleet's parts share: the event queue (virtual time, in
//! nanoseconds since the run's start, ordered by time then by when an event
//! was queued, so one seed gives one order) and the store (one bucket table
//! for every agent, as one Redis serves a region).
//!
//! The store runs core's [`Counter`], the maths of the agent's embedded store
//! and of its Redis scripts (the agent's conformance suite holds them equal),
//! at the store's own clock: the Unix time the seed sets for the run's start
//! plus virtual time. An agent's call reaches it after a network delay, takes
//! every item at one instant (one pipeline of EVALSHA, one per item), and its
//! answer travels back; the agent gives up at its store deadline as the Redis
//! store does (the take may still happen: its effect is then unknown).

use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use meshlimit_core::wire::LeaseResponse;
use meshlimit_core::{Counter, DescriptorKey, Take};
use meshlimit_store::{Acquire, Backend, Buckets, StoreError};
use rand::rngs::SmallRng;
use tokio::sync::oneshot;

use crate::record::CallFailure;
use crate::scenario::virtual_model::Delay;

/// One item's answer from the store.
pub type Acquired = Result<Take, StoreError>;

/// Something due at a virtual instant.
#[derive(Debug)]
pub enum Event {
    /// A gateway's next planned arrival.
    Arrive { gateway: usize },
    /// A gateway's root context runs (its event loop turned).
    Wake { gateway: usize },
    /// A lease call reaches its agent.
    AtAgent { call: u64 },
    /// A lease call's answer (or failure) reaches its gateway.
    Answer {
        call: u64,
        result: Result<LeaseResponse, CallFailure>,
    },
    /// The gateway's deadline for a call.
    Expire { call: u64 },
    /// A store call reaches the store.
    StoreTake { job: u64 },
    /// The store's answer reaches the agent.
    StoreReply { job: u64 },
    /// Once a second: decision records flushed, agents' pools swept.
    Tick,
    /// A fault of the plan starts or ends (its index).
    Fault { index: usize, start: bool },
}

/// The shared state; one thread uses it (the runtime is current-thread), the
/// lock only satisfies `Store: Send + Sync`.
pub struct World {
    /// Virtual time now (ns since the run's start): the driver's clock,
    /// which tokio's is brought level with before any task runs.
    pub now: u64,
    queue: BinaryHeap<Due>,
    /// The gateways' call deadlines, in the order they fall (every call has
    /// the filter's one timeout): kept apart from the heap, since nearly every
    /// one finds its call already answered.
    deadlines: VecDeque<(u64, u64, u64)>,
    seq: u64,
    pub store: StoreState,
}

/// An event and when it is due; the heap's first is the earliest, then the
/// first queued.
struct Due {
    at: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The store's buckets, its calls in flight, and what it counted.
pub struct StoreState {
    buckets: HashMap<DescriptorKey, Counter>,
    jobs: BTreeMap<u64, Job>,
    next_job: u64,
    /// Unix time (ns) at virtual time zero.
    pub unix_at_zero: u64,
    /// Script calls per second of the run, per store node.
    pub scripts: Vec<Vec<u64>>,
    pub nodes: usize,
    pub rng: SmallRng,
    pub delay: Delay,
    /// While true the store refuses connections (an outage).
    pub down: bool,
}

struct Job {
    items: Vec<Acquire>,
    reply: Option<oneshot::Sender<Vec<Acquired>>>,
    results: Vec<Acquired>,
    back_ns: u64,
}

/// Locks the world; a poisoned lock still holds a consistent queue.
pub fn lock(world: &Mutex<World>) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(PoisonError::into_inner)
}

impl World {
    pub fn new(store: StoreState) -> World {
        World {
            now: 0,
            queue: BinaryHeap::new(),
            deadlines: VecDeque::new(),
            seq: 0,
            store,
        }
    }

    /// Queues `event` at `at_ns`.
    pub fn at(&mut self, at_ns: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Due {
            at: at_ns,
            seq: self.seq,
            event,
        });
    }

    /// Queues `event` `after_ns` from now.
    pub fn after(&mut self, after_ns: u64, event: Event) {
        self.at(self.now.saturating_add(after_ns), event);
    }

    /// Queues a call's deadline `after_ns` from now (the same for every call).
    pub fn deadline(&mut self, after_ns: u64, call: u64) {
        self.seq += 1;
        let at = self.now.saturating_add(after_ns);
        self.deadlines.push_back((at, self.seq, call));
    }

    /// When the next event is due.
    pub fn next_at(&self) -> Option<u64> {
        let heap = self.queue.peek().map(|d| d.at);
        let deadline = self.deadlines.front().map(|d| d.0);
        heap.into_iter().chain(deadline).min()
    }

    /// The next event, if due by `now_ns`.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Event> {
        let heap = self.queue.peek().map(|d| (d.at, d.seq));
        let deadline = self.deadlines.front().map(|d| (d.0, d.1));
        match (heap, deadline) {
            (_, Some(d)) if d.0 <= now_ns && heap.is_none_or(|h| d < h) => {
                let (_, _, call) = self.deadlines.pop_front()?;
                Some(Event::Expire { call })
            }
            (Some(h), _) if h.0 <= now_ns => self.queue.pop().map(|d| d.event),
            _ => None,
        }
    }

    /// A store call from an agent: its answer comes on the returned channel.
    fn store_call(&mut self, items: Vec<Acquire>) -> oneshot::Receiver<Vec<Acquired>> {
        let (tx, rx) = oneshot::channel();
        let s = &mut self.store;
        let (out, back) = (s.delay.draw(&mut s.rng), s.delay.draw(&mut s.rng));
        s.next_job += 1;
        let job = s.next_job;
        s.jobs.insert(
            job,
            Job {
                items,
                reply: Some(tx),
                results: Vec::new(),
                back_ns: back,
            },
        );
        self.after(out, Event::StoreTake { job });
        rx
    }

    /// A store call reaches the store: every item taken at one instant.
    pub fn store_take(&mut self, job: u64) {
        let now = self.now;
        let s = &mut self.store;
        let Some(j) = s.jobs.get_mut(&job) else {
            return;
        };
        let back = j.back_ns;
        if s.down {
            let refused = StoreError::Unavailable("connection refused".into());
            j.results = vec![Err(refused); j.items.len()];
        } else {
            let unix = s.unix_at_zero.saturating_add(now);
            let second = usize::try_from(now / 1_000_000_000).unwrap_or(usize::MAX);
            for item in &j.items {
                let node = (item.key.fingerprint() % s.nodes.max(1) as u64) as usize;
                count_script(&mut s.scripts, second, node, s.nodes);
                let limit = if item.share >= 1.0 {
                    item.limit
                } else {
                    item.limit.scaled(item.share)
                };
                let counter = s
                    .buckets
                    .entry(item.key.clone())
                    .or_insert_with(|| Counter::fresh(&limit, unix));
                j.results
                    .push(Ok(counter.take(&limit, unix, item.min, item.max)));
            }
        }
        self.after(back, Event::StoreReply { job });
    }

    /// The store's answer reaches the agent (which may have given up).
    pub fn store_reply(&mut self, job: u64) {
        if let Some(mut j) = self.store.jobs.remove(&job) {
            if let Some(tx) = j.reply.take() {
                let _ = tx.send(j.results);
            }
        }
    }
}

fn count_script(scripts: &mut Vec<Vec<u64>>, second: usize, node: usize, nodes: usize) {
    if second >= 100_000 {
        return;
    }
    if scripts.len() <= second {
        scripts.resize(second + 1, vec![0; nodes.max(1)]);
    }
    if let Some(n) = scripts.get_mut(second).and_then(|s| s.get_mut(node)) {
        *n += 1;
    }
}

impl StoreState {
    pub fn new(unix_at_zero: u64, nodes: usize, rng: SmallRng, delay: Delay) -> StoreState {
        StoreState {
            buckets: HashMap::new(),
            jobs: BTreeMap::new(),
            next_job: 0,
            unix_at_zero,
            scripts: Vec::new(),
            nodes: nodes.max(1),
            rng,
            delay,
            down: false,
        }
    }
}

/// The agents' view of the store: the agent's [`Store`] trait over the world.
pub struct SimStore {
    world: Arc<Mutex<World>>,
    deadline: Duration,
}

impl SimStore {
    pub fn new(world: Arc<Mutex<World>>, deadline: Duration) -> SimStore {
        SimStore { world, deadline }
    }
}

#[async_trait]
impl Backend for SimStore {
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "virtual"
    }
}

/// The lease path's store: fleet state (overrides, trials, versions) is not
/// modelled, so the virtual agents have none.
#[async_trait]
impl Buckets for SimStore {
    async fn acquire(&self, items: &[Acquire]) -> Vec<Acquired> {
        let rx = lock(&self.world).store_call(items.to_vec());
        match tokio::time::timeout(self.deadline, rx).await {
            Ok(Ok(results)) => results,
            Ok(Err(_)) => vec![Err(StoreError::Unavailable("store gone".into())); items.len()],
            Err(_) => vec![Err(StoreError::Timeout(self.deadline)); items.len()],
        }
    }
}
