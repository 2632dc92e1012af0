//! The store conformance suite: what every [`Store`] backend must do, written
//! once and run against each of them, the embedded memory store, a real single
//! redis-server and a real three-master Redis Cluster. A new backend adds one
//! `conformance!` line.
//!
//! Each behaviour is a function over `&dyn Store`; the macro at the end makes a
//! test of it per backend (`memory::…`, `redis::…`, `redis_cluster::…`), each
//! with its own fresh store. Time passes on the store's own clock (tokio's for
//! the memory store, the Redis server's `TIME` for Redis), so bounds on waits
//! leave room for a loaded machine where they must, and are exact elsewhere:
//! limits slow enough (one token per 10 s) that no refill shows between two calls.
//!
//! What this suite leaves to others: the Lua bucket's arithmetic against core's
//! (`redis_script.rs`, differential), hostile bucket state (`redis_script.rs`),
//! races, failover and routing through the real agent (`tests/tests/redis_store.rs`,
//! the chaos tests), the memory store's key cap and sweeper (its unit tests).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::num::{NonZeroU32, NonZeroU64};
use std::sync::Arc;
use std::time::Duration;

use meshlimit_agent::false_limits::is_false;
use meshlimit_agent::fleet_override::{Override, OverrideMode};
use meshlimit_agent::store::redis::RedisStore;
use meshlimit_agent::store::{Acquire, MemoryStore, Store};
use meshlimit_core::secret::KeyIds;
use meshlimit_core::{DescriptorKey, Limit, Take};
use meshlimit_tests::{RedisCluster, RedisServer};

/// `requests` per `per`, with a burst of `burst`.
fn limit(requests: u32, per: Duration, burst: u32) -> Limit {
    Limit::new(
        NonZeroU32::new(requests).unwrap(),
        NonZeroU64::new(u64::try_from(per.as_nanos()).unwrap()).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

/// One token per 10 s, a burst of 10: nothing refills between two calls.
fn slow() -> Limit {
    limit(10, Duration::from_secs(100), 10)
}

fn ask(rule: &str, parts: &[&str], limit: Limit, min: u32, max: u32) -> Acquire {
    Acquire {
        key: DescriptorKey::new(rule, parts),
        limit,
        min,
        max,
        share: 1.0,
    }
}

/// One item's answer; a store error fails the test.
async fn take(store: &dyn Store, item: Acquire) -> Take {
    let mut answers = store.acquire(std::slice::from_ref(&item)).await;
    assert_eq!(answers.len(), 1, "one answer per item");
    match answers.pop() {
        Some(Ok(take)) => take,
        other => panic!("{}: {item:?}: the store failed: {other:?}", store.name()),
    }
}

fn granted(take: &Take) -> (u32, u32) {
    match take {
        Take::Granted {
            tokens, remaining, ..
        } => (*tokens, *remaining),
        Take::Denied { .. } => panic!("expected a grant, got {take:?}"),
    }
}

fn retry_after(take: &Take) -> Duration {
    match take {
        Take::Denied { retry_after_ns } => Duration::from_nanos(*retry_after_ns),
        Take::Granted { .. } => panic!("expected a denial, got {take:?}"),
    }
}

/// `d` lies in `(full - slack, full]`: a wait measured a moment after the
/// bucket changed (Redis stamps in µs; the moment is well under `slack`).
fn assert_about(d: Duration, full: Duration, what: &str) {
    let slack = Duration::from_secs(1);
    assert!(
        d <= full && d > full - slack,
        "{what}: {d:?}, expected just under {full:?}"
    );
}

/// An unseen key holds a full burst; each grant takes what it says and reports
/// what is left; past the burst the key is denied.
async fn grants_up_to_the_limit_then_denies(store: &dyn Store) {
    for left in (0..10).rev() {
        let t = take(store, ask("r", &["a"], slow(), 1, 1)).await;
        assert_eq!(granted(&t), (1, left), "{t:?}");
        if let Take::Granted { reset_ns, .. } = t {
            // Full again once the tokens taken so far have refilled.
            let full = Duration::from_secs(10 * u64::from(10 - left));
            assert_about(Duration::from_nanos(reset_ns), full, "reset");
        }
    }
    let t = take(store, ask("r", &["a"], slow(), 1, 1)).await;
    assert!(matches!(t, Take::Denied { .. }), "over the burst: {t:?}");
}

/// A denial says how long until the cost asked for has refilled (at most a
/// whole burst, for a cost above the burst), and takes nothing.
async fn a_denial_says_when_to_retry(store: &dyn Store) {
    assert_eq!(
        granted(&take(store, ask("r", &["a"], slow(), 10, 10)).await),
        (10, 0)
    );
    let one = take(store, ask("r", &["a"], slow(), 1, 1)).await;
    assert_about(retry_after(&one), Duration::from_secs(10), "one token");
    let three = take(store, ask("r", &["a"], slow(), 3, 3)).await;
    assert_about(retry_after(&three), Duration::from_secs(30), "three tokens");
    let over = take(store, ask("r", &["a"], slow(), 50, 50)).await;
    assert_about(
        retry_after(&over),
        Duration::from_secs(100),
        "a cost above the burst waits for a full burst",
    );
}

/// Tokens come back at the limit's rate as the store's clock passes, and no
/// faster than it: 100 a second, so at least 10 after 100 ms.
async fn tokens_refill_over_time(store: &dyn Store) {
    let fast = limit(100, Duration::from_secs(1), 1_000);
    assert_eq!(
        granted(&take(store, ask("r", &["a"], fast, 1_000, 1_000)).await),
        (1_000, 0)
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (tokens, _) = granted(&take(store, ask("r", &["a"], fast, 1, 1_000)).await);
    // The upper bound only says the bucket refilled at the rate, not at once
    // (5 s on a loaded machine would still pass).
    assert!(
        (10..=500).contains(&tokens),
        "{tokens} tokens refilled in about 100 ms at 100/s"
    );
}

/// A cost above one takes that many tokens at once or nothing.
async fn a_cost_takes_that_many_or_nothing(store: &dyn Store) {
    let five = limit(5, Duration::from_secs(3_600), 5);
    assert_eq!(
        granted(&take(store, ask("r", &["a"], five, 3, 3)).await),
        (3, 2)
    );
    let t = take(store, ask("r", &["a"], five, 3, 3)).await;
    assert!(matches!(t, Take::Denied { .. }), "2 left, cost 3: {t:?}");
    // The denial took nothing: both tokens are still there.
    assert_eq!(
        granted(&take(store, ask("r", &["a"], five, 2, 2)).await),
        (2, 0)
    );
}

/// A lease is as large as asked (`max`) when the bucket holds it, else all the
/// bucket holds, never less than the cost (`min`).
async fn a_lease_is_between_its_min_and_max(store: &dyn Store) {
    assert_eq!(
        granted(&take(store, ask("r", &["a"], slow(), 1, 4)).await),
        (4, 6)
    );
    assert_eq!(
        granted(&take(store, ask("r", &["a"], slow(), 2, 100)).await),
        (6, 0)
    );
    let t = take(store, ask("r", &["a"], slow(), 1, 1)).await;
    assert!(matches!(t, Take::Denied { .. }), "{t:?}");
    // A lease of one from a full bucket takes one.
    assert_eq!(
        granted(&take(store, ask("r", &["b"], slow(), 1, 1)).await),
        (1, 9)
    );
}

/// A region's share scales the limit: burst and rate both, never below one token.
async fn a_share_scales_the_limit(store: &dyn Store) {
    let half = Acquire {
        share: 0.5,
        ..ask("r", &["a"], slow(), 1, 100)
    };
    assert_eq!(granted(&take(store, half.clone()).await), (5, 0));
    let again = take(store, Acquire { max: 1, ..half }).await;
    assert_about(
        retry_after(&again),
        Duration::from_secs(20),
        "half the rate",
    );
    let whole = ask("r", &["b"], slow(), 1, 100);
    assert_eq!(granted(&take(store, whole).await), (10, 0));
    let sliver = Acquire {
        share: 0.01,
        ..ask("r", &["c"], slow(), 1, 100)
    };
    assert_eq!(granted(&take(store, sliver).await), (1, 0));
}

/// A batch gets one answer per item, in the items' order, whichever node (of a
/// cluster) each key lives on; items of one key apply in order.
async fn a_batch_is_answered_in_order(store: &dyn Store) {
    let mut items = vec![
        ask("r", &["a"], slow(), 1, 4),
        ask("r", &["b"], slow(), 11, 11),
        ask("r", &["a"], slow(), 1, 100),
    ];
    // Keys enough to land on every node of a cluster, each asking a different size.
    for n in 1..=8u32 {
        items.push(ask("r", &[format!("k{n}").as_str()], slow(), 1, n));
    }
    let answers = store.acquire(&items).await;
    assert_eq!(answers.len(), items.len());
    let answers: Vec<Take> = answers.into_iter().map(Result::unwrap).collect();
    assert_eq!(granted(&answers[0]), (4, 6));
    assert!(matches!(answers[1], Take::Denied { .. }), "{answers:?}");
    assert_eq!(granted(&answers[2]), (6, 0));
    for n in 1..=8u32 {
        assert_eq!(granted(&answers[2 + n as usize]), (n, 10 - n), "item k{n}");
    }
}

/// Draining one key leaves every other key alone: another key of the rule, the
/// same parts under another rule, and parts that would read alike if joined.
async fn keys_are_isolated(store: &dyn Store) {
    let one = limit(1, Duration::from_secs(3_600), 1);
    for (rule, parts) in [("r", vec!["a"]), ("r", vec!["a|b"])] {
        assert_eq!(
            granted(&take(store, ask(rule, &parts, one, 1, 1)).await),
            (1, 0)
        );
        let t = take(store, ask(rule, &parts, one, 1, 1)).await;
        assert!(matches!(t, Take::Denied { .. }), "{rule} {parts:?}: {t:?}");
    }
    for (rule, parts) in [
        ("r", vec!["b"]),
        ("s", vec!["a"]),
        ("r", vec!["a", "b"]),
        ("r", vec!["A"]),
    ] {
        let t = take(store, ask(rule, &parts, one, 1, 1)).await;
        assert_eq!(granted(&t), (1, 0), "{rule} {parts:?} shares a bucket");
    }
}

/// The fleet override reads back as set, replaced, then cleared; off at first.
async fn the_fleet_override_reads_back_as_set(store: &dyn Store) {
    assert_eq!(store.fleet_override().await.unwrap(), None);
    let on = |by: &str| Override {
        mode: OverrideMode::Shadow,
        set_by: by.into(),
        at: 1_700_000_000,
    };
    store.set_fleet_override(Some(on("ops"))).await.unwrap();
    assert_eq!(store.fleet_override().await.unwrap(), Some(on("ops")));
    store.set_fleet_override(Some(on("oncall"))).await.unwrap();
    assert_eq!(store.fleet_override().await.unwrap(), Some(on("oncall")));
    store.set_fleet_override(None).await.unwrap();
    assert_eq!(store.fleet_override().await.unwrap(), None);
    // Clearing what is off is no error.
    store.set_fleet_override(None).await.unwrap();
}

/// A store under test and whatever it runs on (killed on drop).
struct Backend {
    store: Box<dyn Store>,
    _redis: Option<RedisServer>,
    _cluster: Option<RedisCluster>,
}

async fn memory() -> Backend {
    Backend {
        store: Box::new(MemoryStore::new()),
        _redis: None,
        _cluster: None,
    }
}

async fn redis() -> Backend {
    let server = RedisServer::start();
    let store = RedisStore::new(
        common::redis_store_config(vec![server.addr()], false),
        Arc::new(|_, _, _| {}),
    );
    Backend {
        store: Box::new(store),
        _redis: Some(server),
        _cluster: None,
    }
}

async fn redis_cluster() -> Backend {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::new(
        common::redis_store_config(cluster.addrs(), true),
        Arc::new(|_, _, _| {}),
    );
    store.refresh_topology().await.unwrap();
    Backend {
        store: Box::new(store),
        _redis: None,
        _cluster: Some(cluster),
    }
}

/// The false-limit check's read: a peek spends nothing, and what it reads
/// judges a rejection at its moment on the store's own clock: a drained key's
/// 429 is true, a half-full key's is false for a cost it held, a key the store
/// holds no bucket for (a full one) is false, and a rejection long before the
/// bucket's last update proves nothing.
async fn a_peek_judges_a_rejection_at_its_moment_without_spending(store: &dyn Store) {
    let ids = KeyIds::placeholder();
    let id = |k: &str| ids.id(&DescriptorKey::new("r", [k])).to_string();
    let peek = |k: String| {
        let ids = &ids;
        async move { store.peek(ids, "r", &k, &slow()).await.unwrap() }
    };
    let hour = 3_600 * 1_000_000_000;
    assert_eq!(
        granted(&take(store, ask("r", &["a"], slow(), 10, 10)).await),
        (10, 0)
    );
    for _ in 0..3 {
        let drained = peek(id("a")).await.expect("a bucket");
        assert!(
            !is_false(Some(&drained.stored), &[slow()], 1, 0),
            "{drained:?}"
        );
    }
    assert!(matches!(
        take(store, ask("r", &["a"], slow(), 1, 1)).await,
        Take::Denied { .. }
    ));
    assert_eq!(
        granted(&take(store, ask("r", &["c"], slow(), 5, 5)).await),
        (5, 5)
    );
    let half = peek(id("c")).await.expect("a bucket");
    assert!(is_false(Some(&half.stored), &[slow()], 5, 0), "{half:?}");
    assert!(!is_false(Some(&half.stored), &[slow()], 6, 0), "{half:?}");
    assert!(
        !is_false(Some(&half.stored), &[slow()], 1, hour),
        "{half:?}"
    );
    assert!(peek(id("never")).await.is_none());
    assert!(is_false(None, &[slow()], 1, 1_000_000_000));
    // The peeks spent nothing: `c` still grants its five.
    assert_eq!(
        granted(&take(store, ask("r", &["c"], slow(), 5, 5)).await),
        (5, 0)
    );
}

/// Every behaviour, as a test against the backend `make` starts.
macro_rules! conformance {
    ($backend:ident, $make:expr) => {
        mod $backend {
            conformance!(@each $make;
                grants_up_to_the_limit_then_denies,
                a_denial_says_when_to_retry,
                tokens_refill_over_time,
                a_cost_takes_that_many_or_nothing,
                a_lease_is_between_its_min_and_max,
                a_share_scales_the_limit,
                a_batch_is_answered_in_order,
                keys_are_isolated,
                the_fleet_override_reads_back_as_set,
                a_peek_judges_a_rejection_at_its_moment_without_spending,
            );
        }
    };
    (@each $make:expr; $($behaviour:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $behaviour() {
                let backend = $make.await;
                super::$behaviour(backend.store.as_ref()).await;
            }
        )*
    };
}

conformance!(memory, super::memory());
conformance!(redis, super::redis());
conformance!(redis_cluster, super::redis_cluster());
