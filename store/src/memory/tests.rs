use std::num::{NonZeroU32, NonZeroU64};
use std::sync::Arc;

use meshlimit_core::{Take, NANOS_PER_SEC};
use tokio::sync::Barrier;

use super::*;

fn limit(requests: u32, per_secs: u64, burst: u32) -> Limit {
    Limit::new(
        NonZeroU32::new(requests).unwrap(),
        NonZeroU64::new(per_secs * NANOS_PER_SEC).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

fn item(key: &str, limit: Limit, min: u32, max: u32) -> Acquire {
    Acquire {
        key: DescriptorKey::new("r", [key]),
        limit,
        min,
        max,
        share: 1.0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_token_raced_by_a_thousand_acquires_is_granted_once() {
    let store = Arc::new(MemoryStore::new());
    let one = item("hot", limit(1, 3600, 1), 1, 1);
    let barrier = Arc::new(Barrier::new(1000));
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let (store, one, barrier) = (store.clone(), one.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.acquire(std::slice::from_ref(&one)).await
            })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        for answer in task.await.unwrap() {
            if let Ok(Take::Granted { tokens, .. }) = answer {
                assert_eq!(tokens, 1);
                granted += 1;
            }
        }
    }
    assert_eq!(granted, 1);
}

#[tokio::test(start_paused = true)]
async fn the_sweep_forgets_only_full_buckets() {
    let store = MemoryStore::new();
    let l = limit(10, 1, 10);
    store.acquire(&[item("a", l, 10, 10)]).await;
    assert_eq!(store.sweep(), 0, "an empty bucket must be kept");
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(store.sweep(), 0, "a half-full bucket must be kept");
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(store.sweep(), 1);
    assert!(store.is_empty());
    // Forgotten and full give the same answer.
    let again = store.acquire(&[item("a", l, 1, 100)]).await;
    assert!(matches!(again[0], Ok(Take::Granted { tokens: 10, .. })));
}

#[tokio::test(start_paused = true)]
async fn refill_follows_tokio_time() {
    let store = MemoryStore::new();
    let l = limit(10, 1, 10);
    store.acquire(&[item("a", l, 10, 10)]).await;
    match store.acquire(&[item("a", l, 1, 1)]).await[0] {
        Ok(Take::Denied { retry_after_ns }) => assert_eq!(retry_after_ns, 100_000_000),
        ref other => panic!("expected a denial, got {other:?}"),
    }
    tokio::time::advance(Duration::from_millis(100)).await;
    let answers = store.acquire(&[item("a", l, 1, 1)]).await;
    assert!(matches!(answers[0], Ok(Take::Granted { tokens: 1, .. })));
}

/// A key of shard `shard` (the store shards by fingerprint), the `n`th such.
fn key_in_shard(shard: u64, n: usize) -> String {
    (0..)
        .map(|i| format!("k{i}"))
        .filter(|k| DescriptorKey::new("r", [k.as_str()]).fingerprint() % SHARDS as u64 == shard)
        .nth(n)
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_a_new_key_gets_an_error_and_no_live_bucket_is_evicted() {
    // 32 keys over 16 shards: two buckets per shard.
    let store = MemoryStore::with_max_keys(32);
    let l = limit(10, 10, 10);
    let (a, b, c) = (key_in_shard(3, 0), key_in_shard(3, 1), key_in_shard(3, 2));
    // Both of shard 3's buckets drained.
    for k in [&a, &b] {
        let got = store.acquire(&[item(k, l, 10, 10)]).await;
        assert!(matches!(got[0], Ok(Take::Granted { tokens: 10, .. })));
    }
    // A third key of that shard: refused with a store error, not given a bucket.
    let got = store.acquire(&[item(&c, l, 1, 1)]).await;
    assert!(
        matches!(&got[0], Err(StoreError::Unavailable(m)) if m.contains("memory store full")),
        "{got:?}"
    );
    assert_eq!(store.len(), 2);
    // The drained keys were kept: they are still denied, never fresh and full.
    for k in [&a, &b] {
        let got = store.acquire(&[item(k, l, 1, 1)]).await;
        assert!(matches!(got[0], Ok(Take::Denied { .. })), "{got:?}");
    }
    // Other shards are not affected.
    let got = store.acquire(&[item(&key_in_shard(4, 0), l, 1, 1)]).await;
    assert!(matches!(got[0], Ok(Take::Granted { .. })));
    // Once a bucket has refilled to full it may go, and the new key gets its place.
    tokio::time::advance(Duration::from_secs(10)).await;
    let got = store.acquire(&[item(&c, l, 1, 1)]).await;
    assert!(matches!(got[0], Ok(Take::Granted { .. })), "{got:?}");
    assert!(store.len() <= 3);
}

#[tokio::test(start_paused = true)]
async fn the_sweeper_runs_on_its_schedule() {
    let store = Arc::new(MemoryStore::new());
    let (trigger, stop) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(store.clone().run_sweeper(SWEEP_EVERY, async {
        let _ = stop.await;
    }));
    let l = limit(10, 1, 10);
    store.acquire(&[item("a", l, 1, 1)]).await;
    assert_eq!(store.len(), 1);
    tokio::time::sleep(SWEEP_EVERY * 2 + Duration::from_millis(10)).await;
    assert!(
        store.is_empty(),
        "a refilled bucket is swept without any call"
    );
    trigger.send(()).unwrap();
    task.await.unwrap();
}
