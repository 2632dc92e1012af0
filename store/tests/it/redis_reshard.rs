//! A Redis Cluster hash slot moving under the store: a key already migrated
//! (ASK) and a slot already given away (MOVED) are each followed once, counted,
//! on the lease path and the control path; a second redirect is not followed.

use std::num::{NonZeroU32, NonZeroU64};
use std::sync::{Arc, Mutex};

use meshlimit_core::{DescriptorKey, Limit, Take};
use meshlimit_store::redis::{keys, RedirectKind, RedisStore, StoreEvent};
use meshlimit_store::{Acquire, Buckets, StoreError};
use meshlimit_tests::{RedisCluster, Resp};

use crate::common;

/// A burst of 10, one token per 10 s: nothing refills between two calls.
fn slow() -> Limit {
    let ten = NonZeroU32::new(10).unwrap();
    Limit::new(ten, NonZeroU64::new(100_000_000_000).unwrap(), ten)
}

fn item() -> Acquire {
    Acquire {
        key: DescriptorKey::new("r", ["hot"]),
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
    bucket: String,
    slot: u16,
    from: usize,
    to: usize,
}

async fn moving() -> Moving {
    let cluster = RedisCluster::start(3);
    let redirects = Arc::new(Mutex::new(Vec::new()));
    let seen = redirects.clone();
    let config = common::redis_store_config(cluster.addrs(), true);
    let bucket = keys::bucket(&config.key_ids, &item().key);
    let store = RedisStore::new(config, Arc::new(|_, _, _| {})).with_events(Arc::new(move |e| {
        if let StoreEvent::Redirected(kind) = e {
            seen.lock().unwrap().push(kind);
        }
    }));
    store.refresh_topology().await.unwrap();
    let slot = match cluster.cmd(0, &["CLUSTER", "KEYSLOT", &bucket]) {
        Resp::Int(slot) => u16::try_from(slot).unwrap(),
        other => panic!("CLUSTER KEYSLOT: {other:?}"),
    };
    let from = cluster
        .index_of(cluster.primary_of_slot(0, slot).unwrap())
        .unwrap();
    Moving {
        cluster,
        store,
        redirects,
        bucket,
        slot,
        from,
        to: (from + 1) % 3,
    }
}

async fn take(store: &RedisStore) -> Result<u32, StoreError> {
    let mut answers = store.acquire(&[item()]).await;
    assert_eq!(answers.len(), 1);
    match answers.pop().unwrap()? {
        Take::Granted { remaining, .. } => Ok(remaining),
        denied => panic!("denied: {denied:?}"),
    }
}

#[tokio::test]
async fn a_moving_slot_is_followed_by_ask_then_by_moved_once_each() {
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
    m.cluster.finish_slot_move(m.slot, m.from, m.to);
    // The slot map the store holds still names the source: MOVED, followed.
    assert_eq!(take(&m.store).await, Ok(2));
    let seen = m.redirects.lock().unwrap().clone();
    assert_eq!(
        seen[..3],
        [RedirectKind::Ask, RedirectKind::Ask, RedirectKind::Moved]
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
