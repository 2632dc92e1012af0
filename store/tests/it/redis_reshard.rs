//! A Redis Cluster hash slot moving under the store: a key already migrated
//! (ASK) and a slot already given away (MOVED) are each followed once, counted,
//! on the lease path and the control path; a second redirect is not followed;
//! after a redirect the slot map is read often, so a slot moved next is learned.

use std::num::{NonZeroU32, NonZeroU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshlimit_core::{DescriptorKey, Limit, Take};
use meshlimit_store::redis::{keys, RedirectKind, RedisStore, StoreEvent};
use meshlimit_store::{Acquire, Buckets, StoreError};
use meshlimit_tests::RedisCluster;

use crate::common;

/// A burst of 10, one token per 10 s: nothing refills between two calls.
fn slow() -> Limit {
    let ten = NonZeroU32::new(10).unwrap();
    Limit::new(ten, NonZeroU64::new(100_000_000_000).unwrap(), ten)
}

fn item() -> Acquire {
    item_of("hot")
}

fn item_of(key: &str) -> Acquire {
    Acquire {
        key: DescriptorKey::new("r", [key]),
        limit: slow(),
        min: 1,
        max: 2,
        share: 1.0,
    }
}

/// A cluster, a store on it with its redirects recorded, and the item's
/// bucket: its Redis key, its hash slot, the primary owning it and another.
struct Moving {
    cluster: RedisCluster,
    store: RedisStore,
    redirects: Arc<Mutex<Vec<RedirectKind>>>,
    /// How many times the store found the slot map changed.
    map_changes: Arc<Mutex<usize>>,
    bucket: String,
    slot: u16,
    from: usize,
    to: usize,
}

async fn moving() -> Moving {
    let cluster = RedisCluster::start(3);
    let redirects = Arc::new(Mutex::new(Vec::new()));
    let map_changes = Arc::new(Mutex::new(0));
    let (seen, changes) = (redirects.clone(), map_changes.clone());
    let config = common::redis_store_config(cluster.addrs(), true);
    let bucket = keys::bucket(&config.key_ids, &item().key);
    let store =
        RedisStore::new(config, Arc::new(|_, _, _| {})).with_events(Arc::new(move |e| match e {
            StoreEvent::Redirected(kind) => seen.lock().unwrap().push(kind),
            StoreEvent::HashSlotMapChanged => *changes.lock().unwrap() += 1,
            _ => {}
        }));
    store.refresh_topology().await.unwrap();
    let slot = cluster.slot_of(&bucket);
    let from = cluster
        .index_of(cluster.primary_of_slot(0, slot).unwrap())
        .unwrap();
    Moving {
        cluster,
        store,
        redirects,
        map_changes,
        bucket,
        slot,
        from,
        to: (from + 1) % 3,
    }
}

async fn take(store: &RedisStore) -> Result<u32, StoreError> {
    take_of(store, "hot").await
}

async fn take_of(store: &RedisStore, key: &str) -> Result<u32, StoreError> {
    let mut answers = store.acquire(&[item_of(key)]).await;
    assert_eq!(answers.len(), 1);
    match answers.pop().unwrap()? {
        Take::Granted { remaining, .. } => Ok(remaining),
        denied => panic!("denied: {denied:?}"),
    }
}

#[tokio::test]
async fn a_key_already_migrated_is_followed_by_ask_on_both_paths() {
    let m = moving().await;
    assert_eq!(take(&m.store).await, Ok(8));
    m.cluster.start_slot_move(m.slot, m.from, m.to);
    // Still on the source: served there, no redirect.
    assert_eq!(take(&m.store).await, Ok(6));
    assert!(m.redirects.lock().unwrap().is_empty());
    m.cluster
        .migrate_keys(m.from, m.to, std::slice::from_ref(&m.bucket));
    // On the target while the slot is migrating: ASK, followed with ASKING.
    assert_eq!(take(&m.store).await, Ok(4));
    assert_eq!(*m.redirects.lock().unwrap(), [RedirectKind::Ask]);
    // The control path (a peek) follows it too.
    let ids = meshlimit_core::secret::KeyIds::placeholder();
    let id = ids.id(&item().key).to_string();
    let peeked = m.store.peek(&ids, "r", &id, &slow()).await.unwrap();
    assert_eq!(peeked.map(|p| p.tokens.floor()), Some(4.0));
    assert_eq!(
        *m.redirects.lock().unwrap(),
        [RedirectKind::Ask, RedirectKind::Ask]
    );
}

#[tokio::test]
async fn a_slot_moved_whole_is_followed_by_moved_once() {
    let m = moving().await;
    assert_eq!(take(&m.store).await, Ok(8));
    move_whole(&m.cluster, m.slot, m.from, m.to, &m.bucket);
    // The slot map the store holds still names the source: MOVED, followed.
    assert_eq!(take(&m.store).await, Ok(6));
    assert_eq!(*m.redirects.lock().unwrap(), [RedirectKind::Moved]);
}

/// Moves `slot` from `from` to `to` with its key `bucket`, no call between.
fn move_whole(cluster: &RedisCluster, slot: u16, from: usize, to: usize, bucket: &str) {
    cluster.start_slot_move(slot, from, to);
    cluster.migrate_keys(from, to, &[bucket.to_string()]);
    cluster.finish_slot_move(slot, from, to);
}

/// After a redirect the store reads the slot map every 100 ms for 2 s: a
/// slot moved meanwhile that no call touched is learned then, not at the
/// next 5 s read, so its keys do not go to an old owner that a scale-in
/// shuts down next.
#[tokio::test]
async fn after_a_redirect_a_slot_moved_without_calls_is_learned_within_the_watch() {
    let m = moving().await;
    let config = common::redis_store_config(m.cluster.addrs(), true);
    let other_key = (0..)
        .map(|i| format!("other-{i}"))
        .find(|k| {
            let b = keys::bucket(&config.key_ids, &item_of(k).key);
            m.cluster.slot_of(&b) != m.slot
        })
        .unwrap();
    let other_bucket = keys::bucket(&config.key_ids, &item_of(&other_key).key);
    let other_slot = m.cluster.slot_of(&other_bucket);
    let other_from = m
        .cluster
        .index_of(m.cluster.primary_of_slot(0, other_slot).unwrap())
        .unwrap();
    assert_eq!(take_of(&m.store, &other_key).await, Ok(8));
    assert_eq!(take(&m.store).await, Ok(8));
    move_whole(&m.cluster, m.slot, m.from, m.to, &m.bucket);
    assert_eq!(take(&m.store).await, Ok(6));
    // The MOVED woke the refresher: wait for the read it made.
    let changes = || *m.map_changes.lock().unwrap();
    common::eventually(Duration::from_secs(1), "the MOVED's slot map read", || {
        changes() >= 1
    })
    .await;
    let before = changes();
    let other_to = (other_from + 1) % 3;
    move_whole(&m.cluster, other_slot, other_from, other_to, &other_bucket);
    // 1 s is ten of the watch's reads; without the watch the next read is
    // 5 s after the last.
    common::eventually(Duration::from_secs(1), "the moved slot learned", || {
        changes() > before
    })
    .await;
    assert_eq!(take_of(&m.store, &other_key).await, Ok(6));
    assert_eq!(
        *m.redirects.lock().unwrap(),
        [RedirectKind::Moved],
        "the second slot's keys went to its new owner at once"
    );
}

#[tokio::test]
async fn a_second_redirect_is_not_followed() {
    let m = moving().await;
    assert_eq!(take(&m.store).await, Ok(8));
    // Migrating at the source, but the target is not importing: the source
    // answers ASK for a key it does not hold, the target MOVED back to the
    // source.
    let to_id = m.cluster.node_id(m.to);
    let slot = m.slot.to_string();
    m.cluster
        .cmd(m.from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    m.cluster.cmd(m.from, &["DEL", &m.bucket]);
    let answer = take(&m.store).await;
    assert!(
        matches!(answer, Err(StoreError::Moved { .. })),
        "{answer:?}"
    );
    assert_eq!(*m.redirects.lock().unwrap(), [RedirectKind::Ask]);
}
