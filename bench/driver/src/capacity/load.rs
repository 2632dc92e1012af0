//! The lease load on a real redis-server, through the store crate's own Redis
//! client (`RedisStore`: the agent's batcher, pipelines and lease script), from
//! many tasks at once so that pipelines form as they do under an agent's load.

use std::num::{NonZeroU32, NonZeroU64};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshlimit_core::secret::{Secret, SecretError};
use meshlimit_core::{Algorithm, DescriptorKey, Limit};
use meshlimit_store::redis::{BatchConfig, RedisConfig, RedisStore};
use meshlimit_store::{Acquire, Buckets, StoreError};

/// The rule every item is under: a name of a typical length, since it is part
/// of every bucket's Redis key.
pub const RULE: &str = "per-user";
/// Distinct keys the cold shapes cycle through.
pub const COLD_KEYS: u64 = 100_000;

/// What one call of `Buckets::acquire` carries, and on which keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub name: &'static str,
    pub items_per_call: usize,
    /// Every item on one key, else each on the next of [`COLD_KEYS`].
    pub hot: bool,
    /// Tasks calling at once.
    pub tasks: usize,
}

pub const SHAPES: [Shape; 3] = [
    Shape {
        name: "single",
        items_per_call: 1,
        hot: false,
        tasks: 64,
    },
    Shape {
        name: "batch16",
        items_per_call: 16,
        hot: false,
        tasks: 16,
    },
    Shape {
        name: "hot",
        items_per_call: 1,
        hot: true,
        tasks: 64,
    },
];

/// The client side of a run: items asked and failed, pipelines sent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sent {
    pub items: u64,
    pub failed: u64,
    pub pipelines: u64,
    pub wall_s: f64,
}

/// A store on `addr` as the agent configures it (no batch window, its
/// `--max-batch`), with a deadline long enough that a busy machine fails no
/// call, and the count of the pipelines it sends.
pub fn store(addr: &str) -> Result<(Arc<RedisStore>, Arc<AtomicU64>), SecretError> {
    let secret = Secret::new(&[7; 32])?;
    let cfg = RedisConfig {
        nodes: vec![addr.to_string()],
        cluster: false,
        connect: Default::default(),
        batch: BatchConfig {
            max_batch: 256,
            deadline: Duration::from_secs(2),
        },
        key_ids: secret.key_ids(),
        control: secret.control_mac(),
    };
    let pipelines = Arc::new(AtomicU64::new(0));
    let counted = pipelines.clone();
    let observe = Arc::new(move |_: usize, _: Duration, _: Result<(), &StoreError>| {
        counted.fetch_add(1, Ordering::Relaxed);
    });
    Ok((Arc::new(RedisStore::new(cfg, observe)), pipelines))
}

/// A limit far above any rate here: every item is granted, as a key under
/// its limit is.
pub fn roomy() -> Limit {
    Limit::new(
        NonZeroU32::new(1_000_000).unwrap_or(NonZeroU32::MIN),
        NonZeroU64::new(1_000_000_000).unwrap_or(NonZeroU64::MIN),
        NonZeroU32::new(1_000_000).unwrap_or(NonZeroU32::MIN),
    )
}

/// One request an hour under `algorithm`: a bucket taken once lives an hour
/// (the TTL the lease script sets), far longer than its measurement.
pub fn hourly(algorithm: Algorithm) -> Limit {
    Limit::new(
        NonZeroU32::MIN,
        NonZeroU64::new(3_600_000_000_000).unwrap_or(NonZeroU64::MIN),
        NonZeroU32::MIN,
    )
    .with_algorithm(algorithm)
}

/// The item of key number `n` of `round` (a key text no round shares).
fn item(round: usize, n: u64, limit: Limit) -> Acquire {
    Acquire {
        key: DescriptorKey::new(RULE, [format!("user-{round}-{n}")]),
        limit,
        min: 1,
        max: 10,
        share: 1.0,
    }
}

/// Runs `shape` for `seconds` from its tasks; what the client sent.
pub async fn drive(
    store: &Arc<RedisStore>,
    pipelines: &AtomicU64,
    shape: Shape,
    round: usize,
    seconds: f64,
) -> Sent {
    let next = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let pipes_before = pipelines.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..shape.tasks {
        let (store, next) = (store.clone(), next.clone());
        tasks.spawn(async move {
            let (mut items, mut failed) = (0, 0);
            while Instant::now() < until {
                let first = next.fetch_add(shape.items_per_call as u64, Ordering::Relaxed);
                let call: Vec<Acquire> = (first..first + shape.items_per_call as u64)
                    .map(|n| item(round, if shape.hot { 0 } else { n % COLD_KEYS }, roomy()))
                    .collect();
                let answers = store.acquire(&call).await;
                items += call.len() as u64;
                failed += answers.iter().filter(|a| a.is_err()).count() as u64;
            }
            (items, failed)
        });
    }
    let mut sent = Sent::default();
    while let Some(Ok((items, failed))) = tasks.join_next().await {
        sent.items += items;
        sent.failed += failed;
    }
    sent.wall_s = started.elapsed().as_secs_f64();
    sent.pipelines = pipelines.load(Ordering::Relaxed) - pipes_before;
    sent
}

/// Creates `n` buckets under `limit`, one acquire each on distinct keys, 16
/// items a call from 16 tasks; what the client sent.
pub async fn create(store: &Arc<RedisStore>, limit: Limit, round: usize, n: u64) -> Sent {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (store, next) = (store.clone(), next.clone());
        tasks.spawn(async move {
            let (mut items, mut failed) = (0, 0);
            loop {
                let first = next.fetch_add(16, Ordering::Relaxed);
                if first >= n {
                    return (items, failed);
                }
                let call: Vec<Acquire> = (first..(first + 16).min(n))
                    .map(|k| Acquire {
                        max: 1,
                        ..item(round, k, limit)
                    })
                    .collect();
                let answers = store.acquire(&call).await;
                items += call.len() as u64;
                failed += answers.iter().filter(|a| a.is_err()).count() as u64;
            }
        });
    }
    let mut sent = Sent::default();
    while let Some(Ok((items, failed))) = tasks.join_next().await {
        sent.items += items;
        sent.failed += failed;
    }
    sent.wall_s = started.elapsed().as_secs_f64();
    sent
}
