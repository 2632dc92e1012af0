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
use meshlimit_agent::trial::TrialAction;
use meshlimit_core::rules::trial::TrialPlan;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::{Algorithm, DescriptorKey, Limit, Take};
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
        d <= full && d > full.saturating_sub(slack),
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

/// A limit that changes under a key (a schedule window opening or closing)
/// keeps its bucket: a larger burst is not handed out at once (the tokens
/// held stay, refilling at the rate in force), a smaller one cuts what the
/// key holds to it.
async fn a_changed_limit_keeps_the_bucket_within_its_burst(store: &dyn Store) {
    let wide = limit(10, Duration::from_secs(100), 100);
    assert_eq!(
        granted(&take(store, ask("r", &["a"], slow(), 4, 4)).await),
        (4, 6)
    );
    // The burst grows to 100: the 6 tokens held, not 100.
    assert_eq!(
        granted(&take(store, ask("r", &["a"], wide, 1, 100)).await),
        (6, 0)
    );
    // A key holding 90 under the wide limit holds 10 under the slow one.
    assert_eq!(
        granted(&take(store, ask("r", &["b"], wide, 10, 10)).await),
        (10, 90)
    );
    assert_eq!(
        granted(&take(store, ask("r", &["b"], slow(), 1, 100)).await),
        (10, 0)
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

/// `requests` per `per` in a window of the given algorithm.
fn window(algorithm: Algorithm, requests: u32, per: Duration) -> Limit {
    limit(requests, per, 1).with_algorithm(algorithm)
}

/// The store's windows are aligned to the Unix epoch: the time left in the
/// current `per` window by this machine's clock (the store's, for the memory
/// store; the redis-server's, which runs here).
fn to_window_end(per: Duration) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Duration::from_nanos(u64::try_from(per.as_nanos() - now % per.as_nanos()).unwrap())
}

/// A fixed window admits `requests` (a lease of several, or one at a time) and
/// then denies until the window ends, a window aligned to the Unix epoch: an
/// hour's window ends on the hour. The next window starts from nothing.
async fn a_fixed_window_admits_its_requests_then_denies_until_it_ends(store: &dyn Store) {
    let hour = Duration::from_secs(3_600);
    let hourly = window(Algorithm::FixedWindow, 5, hour);
    let expected_end = to_window_end(hour);
    assert_eq!(
        granted(&take(store, ask("w", &["a"], hourly, 2, 2)).await),
        (2, 3)
    );
    for left in (0..3).rev() {
        let t = take(store, ask("w", &["a"], hourly, 1, 1)).await;
        assert_eq!(granted(&t), (1, left), "{t:?}");
        if let Take::Granted { reset_ns, .. } = t {
            assert_about(Duration::from_nanos(reset_ns), expected_end, "reset");
        }
    }
    let denied = retry_after(&take(store, ask("w", &["a"], hourly, 1, 1)).await);
    // Within a second of the hour's end (unless the hour turned meanwhile).
    let end = to_window_end(hour);
    assert!(
        denied.abs_diff(end) < Duration::from_secs(1) || end > expected_end,
        "retry {denied:?}, the window ends in {end:?}"
    );
    // A region's share of a window: half of 10.
    let half = Acquire {
        share: 0.5,
        ..ask(
            "w",
            &["b"],
            window(Algorithm::FixedWindow, 10, hour),
            1,
            100,
        )
    };
    assert_eq!(granted(&take(store, half).await), (5, 0));
    // A one-second window: drained, then whole again once it ends.
    let second = window(Algorithm::FixedWindow, 3, Duration::from_secs(1));
    assert_eq!(
        granted(&take(store, ask("w", &["c"], second, 3, 3)).await),
        (3, 0)
    );
    let wait = match take(store, ask("w", &["c"], second, 1, 1)).await {
        Take::Denied { retry_after_ns } => Duration::from_nanos(retry_after_ns),
        // The second turned between the two calls: the next one starts afresh.
        Take::Granted { .. } => Duration::ZERO,
    };
    assert!(wait <= Duration::from_secs(1), "{wait:?}");
    tokio::time::sleep(wait).await;
    let (tokens, _) = granted(&take(store, ask("w", &["c"], second, 1, 10)).await);
    assert!(tokens >= 2, "a new window admitted only {tokens}");
}

/// A sliding window weighs the previous window's count by the share of it still
/// within `per`: 10 per 2 s, all 10 counted in the current window, so one more
/// fits a fifth of a second into the next window (10 × 0.9 + 1 = 10), and just
/// after that wait little more than one fits, where a fixed window would admit
/// all 10 again.
async fn a_sliding_window_weighs_the_previous_window(store: &dyn Store) {
    let per = Duration::from_secs(2);
    let sliding = window(Algorithm::SlidingWindow, 10, per);
    let first = take(store, ask("s", &["a"], sliding, 10, 10)).await;
    assert_eq!(granted(&first), (10, 0));
    let Take::Granted { reset_ns, .. } = first else {
        unreachable!()
    };
    // The count weighs until the end of the next window.
    let reset = Duration::from_nanos(reset_ns);
    assert!(reset > per && reset <= 2 * per, "reset {reset:?}");
    let retry = retry_after(&take(store, ask("s", &["a"], sliding, 1, 1)).await);
    // The end of this window (reset − per), then a tenth of the next.
    assert_about(retry, reset - per + per / 10, "retry");
    tokio::time::sleep(retry).await;
    let (tokens, _) = granted(&take(store, ask("s", &["a"], sliding, 1, 10)).await);
    assert!(
        (1..=4).contains(&tokens),
        "{tokens} admitted {retry:?} after the limit was reached: the previous window must still weigh"
    );
}

/// The fleet override reads back as set, replaced, then cleared; off at first.
async fn the_fleet_override_reads_back_as_set(store: &dyn Store) {
    assert_eq!(store.fleet_override().await.unwrap(), None);
    let on = |by: &str| Override {
        mode: OverrideMode::Shadow,
        set_by: by.into(),
        at: 1_700_000_000,
        version: None,
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

fn plan(version: &str, shadowed: &str) -> TrialPlan {
    TrialPlan {
        version: version.into(),
        against: "0000000000000000".into(),
        shadowed: vec![shadowed.into()],
        kept: Vec::new(),
    }
}

/// The first start of a version's trial stays: a second start (another agent)
/// gets the first plan and start, by the store's clock; a read alone starts
/// nothing; the plan is answered only when asked for.
async fn the_first_trial_start_of_a_version_stays(store: &dyn Store) {
    assert_eq!(store.trial("v1", None, true).await.unwrap(), None);
    assert_eq!(store.control_trial(TrialAction::End).await.unwrap(), None);
    let first = store
        .trial("v1", Some((&plan("v1", "a"), 60_000)), true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.plan, Some(plan("v1", "a")));
    assert_eq!(first.clock.period_ms, 60_000);
    assert!(first.clock.start_ms <= first.now_ms && first.now_ms - first.clock.start_ms < 1_000);
    let left = first.left_ms().unwrap();
    assert!((59_000..=60_000).contains(&left), "{left}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = store
        .trial("v1", Some((&plan("v1", "b"), 1_000)), true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.plan, Some(plan("v1", "a")), "the first plan stays");
    assert_eq!(second.clock, first.clock, "the first start stays");
    assert!(second.now_ms >= first.now_ms + 20);
    let read = store.trial("v1", None, false).await.unwrap().unwrap();
    assert_eq!((read.plan, read.clock), (None, first.clock));
    // Another version is a trial of its own.
    assert_eq!(store.trial("v2", None, true).await.unwrap(), None);
}

/// `hold` keeps the last trial started on past its period; `end` ends it now.
async fn a_trial_is_held_then_ended(store: &dyn Store) {
    store
        .trial("v1", Some((&plan("v1", "a"), 1)), false)
        .await
        .unwrap();
    store
        .trial("v2", Some((&plan("v2", "a"), 60_000)), false)
        .await
        .unwrap();
    assert_eq!(
        store
            .control_trial(TrialAction::Hold)
            .await
            .unwrap()
            .as_deref(),
        Some("v2")
    );
    let held = store.trial("v2", None, false).await.unwrap().unwrap();
    assert!(held.clock.held);
    assert_eq!(held.left_ms(), Some(u64::MAX));
    assert_eq!(
        store
            .control_trial(TrialAction::End)
            .await
            .unwrap()
            .as_deref(),
        Some("v2")
    );
    let ended = store.trial("v2", None, false).await.unwrap().unwrap();
    assert!(!ended.clock.held);
    assert_eq!(ended.left_ms(), None);
    assert!(ended.clock.ended_ms.unwrap() <= ended.now_ms);
    // v1's own period (1 ms) is over.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        store
            .trial("v1", None, false)
            .await
            .unwrap()
            .unwrap()
            .left_ms(),
        None
    );
}

/// The versions served now and before read back (what `override pin` pins).
async fn the_previous_rules_version_reads_back(store: &dyn Store) {
    assert_eq!(store.previous_version().await.unwrap(), None);
    store.record_versions("v2", "v1").await.unwrap();
    store.record_versions("v2", "v1").await.unwrap();
    assert_eq!(
        store.previous_version().await.unwrap().as_deref(),
        Some("v1")
    );
    store.record_versions("v3", "v2").await.unwrap();
    assert_eq!(
        store.previous_version().await.unwrap().as_deref(),
        Some("v2")
    );
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
            !is_false(drained.stored.as_ref(), &[slow()], 1, 0),
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
    assert!(is_false(half.stored.as_ref(), &[slow()], 5, 0), "{half:?}");
    assert!(!is_false(half.stored.as_ref(), &[slow()], 6, 0), "{half:?}");
    assert!(
        !is_false(half.stored.as_ref(), &[slow()], 1, hour),
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
                a_changed_limit_keeps_the_bucket_within_its_burst,
                a_lease_is_between_its_min_and_max,
                a_share_scales_the_limit,
                a_batch_is_answered_in_order,
                keys_are_isolated,
                a_fixed_window_admits_its_requests_then_denies_until_it_ends,
                a_sliding_window_weighs_the_previous_window,
                the_fleet_override_reads_back_as_set,
                the_first_trial_start_of_a_version_stays,
                a_trial_is_held_then_ended,
                the_previous_rules_version_reads_back,
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
