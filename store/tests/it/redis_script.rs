//! The lease script against a real redis-server: hostile or damaged bucket state
//! (a timestamp in the future, corrupt fields), limits at the edge of what the
//! script can carry, and differential tests of the Lua bucket and windows
//! against core's.

use crate::common;

use meshlimit_core::secret::KeyIds;
use std::num::{NonZeroU32, NonZeroU64};
use std::sync::Arc;
use std::time::Duration;

use meshlimit_core::{DescriptorKey, Limit, Take};
use meshlimit_store::redis::keys;
use meshlimit_store::redis::RedisStore;
use meshlimit_store::{Acquire, Buckets};
use meshlimit_tests::{RedisServer, Resp};

const NS_PER_MS: u64 = 1_000_000;
const DAY_MS: u64 = 86_400_000;

fn limit(requests: u32, per_ms: u64, burst: u32) -> Limit {
    Limit::new(
        NonZeroU32::new(requests).unwrap(),
        NonZeroU64::new(per_ms * NS_PER_MS).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

fn store(redis: &RedisServer) -> RedisStore {
    RedisStore::new(
        common::redis_store_config(vec![redis.addr()], false),
        Arc::new(|_, _, _| {}),
    )
}

async fn take(store: &RedisStore, key: &DescriptorKey, limit: Limit, min: u32, max: u32) -> Take {
    let item = Acquire {
        key: key.clone(),
        limit,
        min,
        max,
        share: 1.0,
    };
    let mut answers = store.acquire(&[item]).await;
    match answers.pop() {
        Some(Ok(take)) => take,
        other => panic!("lease failed: {other:?}"),
    }
}

/// The server's clock in µs, as the script reads it.
fn server_now_us(redis: &RedisServer) -> u64 {
    let Resp::Array(Some(parts)) = redis.cmd(&["TIME"]) else {
        panic!("TIME")
    };
    let part = |i: usize| parts[i].text().unwrap().parse::<u64>().unwrap();
    part(0) * 1_000_000 + part(1)
}

/// The stored bucket: tokens and last update (µs), as text.
fn stored(redis: &RedisServer, key: &str) -> (String, String) {
    let Resp::Array(Some(parts)) = redis.cmd(&["HMGET", key, "t", "u"]) else {
        panic!("HMGET")
    };
    (
        parts[0].text().unwrap_or_default(),
        parts[1].text().unwrap_or_default(),
    )
}

fn granted(take: &Take) -> u32 {
    match take {
        Take::Granted { tokens, .. } => *tokens,
        Take::Denied { .. } => 0,
    }
}

#[tokio::test]
async fn a_bucket_stamped_in_the_future_refills_from_the_server_clock() {
    let redis = RedisServer::start();
    let store = store(&redis);
    let key = DescriptorKey::new("r", ["future"]);
    let rk = keys::bucket(&KeyIds::placeholder(), &key);
    // 1 token per ms, burst 10; empty, and stamped an hour ahead (a promoted
    // replica with a fast clock, or a clock stepped back).
    let l = limit(1_000, 1_000, 10);
    let future = server_now_us(&redis) + 3_600_000_000;
    redis.cmd(&["HSET", &rk, "t", "0", "u", &future.to_string()]);
    let first = take(&store, &key, l, 1, 1).await;
    // At most the time to refill one token from now, never an hour.
    if let Take::Denied { retry_after_ns } = first {
        assert!(retry_after_ns <= 2 * NS_PER_MS, "{first:?}");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = take(&store, &key, l, 1, 1).await;
    assert_eq!(
        granted(&second),
        1,
        "locked out by a future timestamp: {second:?}"
    );
    let (_, u) = stored(&redis, &rk);
    let u: u64 = u.parse().unwrap();
    assert!(
        u <= server_now_us(&redis),
        "stored stamp {u} is still in the future"
    );
}

#[tokio::test]
async fn corrupt_state_grants_at_most_one_burst_and_is_repaired() {
    let redis = RedisServer::start();
    let store = store(&redis);
    // 1 per hour, burst 5: after the first answer nothing more can refill.
    let l = limit(1, 3_600_000, 5);
    let now = server_now_us(&redis).to_string();
    let cases: Vec<(&str, &str)> = vec![
        ("nan", &now),
        ("-nan", &now),
        ("inf", &now),
        ("-inf", &now),
        ("abc", &now),
        ("", &now),
        ("-5", &now),
        ("1e300", &now),
        ("4", "nan"),
        ("4", "inf"),
        ("4", "-inf"),
        ("4", "xyz"),
        ("4", "-1"),
        ("6", &now),
    ];
    for (i, (t, u)) in cases.into_iter().enumerate() {
        let key = DescriptorKey::new("r", [format!("corrupt-{i}").as_str()]);
        let rk = keys::bucket(&KeyIds::placeholder(), &key);
        redis.cmd(&["HSET", &rk, "t", t, "u", u]);
        let mut total = 0;
        for call in 0..3 {
            let answer = take(&store, &key, l, 1, 100).await;
            if call == 0 {
                assert!(
                    matches!(answer, Take::Granted { .. }),
                    "t={t:?} u={u:?}: corrupt state locked the key out: {answer:?}"
                );
            }
            total += granted(&answer);
        }
        assert!(total <= 5, "t={t:?} u={u:?}: {total} granted, burst 5");
        let (st, su) = stored(&redis, &rk);
        let st: f64 = st.parse().unwrap();
        let su: f64 = su.parse().unwrap();
        assert!(
            st.is_finite() && (0.0..=5.0).contains(&st),
            "t={t:?} u={u:?}: stored tokens {st}"
        );
        let server = server_now_us(&redis) as f64;
        assert!(
            su.is_finite() && (server - su).abs() < 5e6,
            "t={t:?} u={u:?}: stored stamp {su}, server {server}"
        );
    }
}

#[tokio::test]
async fn a_limit_refilling_over_centuries_still_gets_an_expiry() {
    let redis = RedisServer::start();
    let store = store(&redis);
    // Legal for `Limit`: 1 per day with a burst of 4e9, a full refill in 11
    // million years. PEXPIRE must still get a valid TTL.
    let key = DescriptorKey::new("r", ["huge"]);
    let rk = keys::bucket(&KeyIds::placeholder(), &key);
    let answer = take(
        &store,
        &key,
        limit(1, DAY_MS, 4_000_000_000),
        1,
        4_000_000_000,
    )
    .await;
    assert_eq!(granted(&answer), 4_000_000_000, "{answer:?}");
    let Resp::Int(ttl) = redis.cmd(&["PTTL", &rk]) else {
        panic!("PTTL")
    };
    assert!(
        ttl > 0 && ttl as u64 <= 400 * DAY_MS,
        "the bucket has no sane expiry: PTTL {ttl}"
    );
    // And a bucket that would refill within seconds expires within seconds.
    let key = DescriptorKey::new("r", ["fast"]);
    take(&store, &key, limit(10, 1_000, 10), 1, 1).await;
    let Resp::Int(ttl) = redis.cmd(&["PTTL", &keys::bucket(&KeyIds::placeholder(), &key)]) else {
        panic!("PTTL")
    };
    assert!((1..=2_000).contains(&ttl), "PTTL {ttl}");
}

/// Runs the test variant of the lease script (`now` from ARGV) once.
fn eval_at(redis: &RedisServer, key: &str, l: Limit, min: u32, max: u32, now_us: u64) -> [i64; 4] {
    use meshlimit_store::redis::script::LEASE_SCRIPT_AT;
    let args = [
        l.requests().to_string(),
        (l.per_ns() / NS_PER_MS).to_string(),
        l.burst().to_string(),
        min.to_string(),
        max.to_string(),
        "1".to_string(),
        l.algorithm().name().to_string(),
        now_us.to_string(),
    ];
    let mut cmd = vec!["EVAL", LEASE_SCRIPT_AT, "1", key];
    cmd.extend(args.iter().map(String::as_str));
    match redis.cmd(&cmd) {
        Resp::Array(Some(items)) => {
            let int = |i: usize| match items[i] {
                Resp::Int(n) => n,
                ref other => panic!("{other:?}"),
            };
            [int(0), int(1), int(2), int(3)]
        }
        other => panic!("lease script: {other:?}"),
    }
}

/// The periods (ms) the differential tests draw from: from a millisecond to a minute.
fn periods_ms() -> impl proptest::strategy::Strategy<Value = u64> {
    proptest::sample::select(vec![1u64, 7, 250, 1_000, 60_000])
}

/// A property runner of `cases` cases that writes no regression file.
fn runner(cases: u32) -> proptest::test_runner::TestRunner {
    use proptest::test_runner::{Config, TestRunner};
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Differential test: random sequences of (advance the clock, take between a
/// cost and a lease size) run through the Lua bucket on a real redis-server and
/// through core's `Bucket::take`, from the same state (the one Redis stored) at
/// the same instant. Tolerance: the script stores tokens with 6 decimals, so
/// tokens agree within 1e-6; decisions agree exactly unless the tokens held are
/// within 1e-5 of a whole number (where that rounding may tip a floor); reset and
/// retry agree within the script's µs rounding (1 µs).
#[test]
fn the_lua_bucket_matches_core_bucket() {
    use meshlimit_core::Bucket;
    use proptest::prelude::*;

    let redis = RedisServer::start();
    let limits = (1u32..=1_000, periods_ms(), 1u32..=200).prop_map(|(r, p, b)| limit(r, p, b));
    let step = (0u64..=3_000_000, 1u32..=210, 0u32..=300);
    let strategy = (limits, prop::collection::vec(step, 1..40));
    let mut runner = runner(64);
    let case = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&strategy, |(l, steps)| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = keys::bucket(
            &KeyIds::placeholder(),
            &DescriptorKey::new("diff", [n.to_string().as_str()]),
        );
        let burst = f64::from(l.burst());
        let mut now_us = 1_700_000_000_000_000u64;
        for (advance_us, cost, extra) in steps {
            // Advances from 0 to 3 s, scaled down for fast limits so that the
            // bucket is not simply always full.
            now_us += advance_us * (l.per_ns() / NS_PER_MS).min(1_000) / 1_000;
            let (min, max) = (cost, cost.saturating_add(extra));
            let (t, u) = stored(&redis, &key);
            let mut core = match (t.parse::<f64>(), u.parse::<u64>()) {
                (Ok(t), Ok(u)) => Bucket::from_parts(t, u * 1_000),
                _ => Bucket::full(&l, now_us * 1_000),
            };
            let held = core.tokens_at(&l, now_us * 1_000);
            let want = core.take(&l, now_us * 1_000, min, max);
            let [granted, retry_us, remaining, reset_us] =
                eval_at(&redis, &key, l, min, max, now_us);
            let near_whole = (held - held.round()).abs() < 1e-5;
            let ctx = format!(
                "{l:?} held {held} min {min} max {max}: core {want:?}, lua {:?}",
                [granted, retry_us, remaining, reset_us]
            );
            match want {
                Take::Granted {
                    tokens,
                    remaining: r,
                    reset_ns,
                } => {
                    if near_whole && granted as i128 != i128::from(tokens) {
                        continue;
                    }
                    prop_assert_eq!(granted, i64::from(tokens), "{}", ctx);
                    prop_assert_eq!(remaining, i64::from(r), "{}", ctx);
                    prop_assert!(
                        (reset_us as f64 * 1_000.0 - reset_ns as f64).abs()
                            <= 1_000.0 + 1e-9 * reset_ns as f64,
                        "{}",
                        ctx
                    );
                    let (t, _) = stored(&redis, &key);
                    let (core_t, _) = core.parts();
                    prop_assert!(
                        (t.parse::<f64>().unwrap() - core_t).abs() <= 1e-6,
                        "{} stored {}",
                        ctx,
                        t
                    );
                }
                Take::Denied { retry_after_ns } => {
                    if near_whole && granted != 0 {
                        continue;
                    }
                    prop_assert_eq!(granted, 0, "{}", ctx);
                    prop_assert!(
                        (retry_us as f64 * 1_000.0 - retry_after_ns as f64).abs()
                            <= 1_000.0 + 1e-9 * retry_after_ns as f64,
                        "{}",
                        ctx
                    );
                    prop_assert!(held <= burst);
                }
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The stored window: index, count, previous count (absent: nothing counted).
fn stored_window(redis: &RedisServer, key: &str) -> Option<(u64, u64, u64)> {
    let Resp::Array(Some(parts)) = redis.cmd(&["HMGET", key, "w", "c", "p"]) else {
        panic!("HMGET")
    };
    let field = |i: usize| parts[i].text().and_then(|t| t.parse::<u64>().ok());
    Some((field(0)?, field(1)?, field(2)?))
}

/// Differential test of the windows: random sequences of (advance the clock,
/// take between a cost and a lease size) through the Lua fixed and sliding
/// windows on a real redis-server and through core's `Window::take`, from the
/// state Redis stored, at the same instant (core in ns, the script in µs of the
/// same clock). Counts are whole numbers and a sliding window's weight is the
/// same quotient in µs as in ns (both exact integers, one correctly rounded
/// division), so grants, denials, what is left and the stored counts agree
/// exactly; waits agree within the script's µs rounding.
#[test]
fn the_lua_windows_match_core_windows() {
    use meshlimit_core::{Algorithm, Window};
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    let redis = RedisServer::start();
    let limits = (1u32..=60, periods_ms(), any::<bool>()).prop_map(|(r, p, slide)| {
        limit(r, p, 1).with_algorithm(if slide {
            Algorithm::SlidingWindow
        } else {
            Algorithm::FixedWindow
        })
    });
    let step = (0u64..=1_500, 1u32..=70, 0u32..=70);
    let strategy = (limits, prop::collection::vec(step, 1..60));
    let mut runner = runner(96);
    let case = std::sync::atomic::AtomicU32::new(0);
    let compared = [AtomicU32::new(0), AtomicU32::new(0)];
    let result = runner.run(&strategy, |(l, steps)| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = keys::bucket(
            &KeyIds::placeholder(),
            &DescriptorKey::new("windiff", [n.to_string().as_str()]),
        );
        let per_us = l.per_ns() / 1_000;
        let mut now_us = 1_700_000_000_123_457u64;
        for (advance, cost, extra) in steps {
            // Up to 1.5 windows at a time, in thousandths of the window.
            now_us += advance * per_us / 1_000;
            let (min, max) = (cost, cost.saturating_add(extra));
            let mut core = stored_window(&redis, &key)
                .map_or_else(Window::empty, |(w, c, p)| Window::from_parts(w, c, p));
            let used = core.used_at(&l, now_us * 1_000);
            let want = core.take(&l, now_us * 1_000, min, max);
            let lua = eval_at(&redis, &key, l, min, max, now_us);
            let [granted, retry_us, remaining, reset_us] = lua;
            let ctx = format!("{l:?} used {used} min {min} max {max}: core {want:?}, lua {lua:?}");
            let sliding = l.algorithm() == Algorithm::SlidingWindow;
            match want {
                Take::Granted {
                    tokens,
                    remaining: r,
                    reset_ns,
                } => {
                    prop_assert_eq!(granted, i64::from(tokens), "{}", ctx);
                    prop_assert_eq!(remaining, i64::from(r), "{}", ctx);
                    prop_assert!(
                        (reset_us as f64 * 1_000.0 - reset_ns as f64).abs() <= 1_000.0,
                        "{}",
                        ctx
                    );
                    prop_assert_eq!(stored_window(&redis, &key), Some(core.parts()), "{}", ctx);
                    let Resp::Int(ttl) = redis.cmd(&["PTTL", &key]) else {
                        panic!("PTTL")
                    };
                    prop_assert!(
                        ttl > 0 && (ttl as u64) <= reset_ns / 1_000_000 + 1_001,
                        "{} PTTL {}",
                        ctx,
                        ttl
                    );
                }
                Take::Denied { retry_after_ns } => {
                    prop_assert_eq!(granted, 0, "{}", ctx);
                    prop_assert!(
                        (retry_us as f64 * 1_000.0 - retry_after_ns as f64).abs() <= 1_000.0,
                        "{}",
                        ctx
                    );
                }
            }
            compared[usize::from(sliding)].fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let compared = compared.map(AtomicU32::into_inner);
    eprintln!("compared: {} fixed, {} sliding", compared[0], compared[1]);
    assert!(compared[0] > 500 && compared[1] > 500, "{compared:?}");
}

/// Damaged window state: counts that are not whole numbers (text, `nan`,
/// negative, fractions) are nothing counted, so at most one window's limit is
/// granted for them and the script repairs the hash; a window stamped ahead of
/// the server (a clock stepped back) keeps its counts, so a clock step lets no
/// key off, and the key is free again once the server's clock passes it.
#[tokio::test]
async fn damaged_window_state_grants_at_most_one_window_and_is_repaired() {
    use meshlimit_core::Algorithm;
    let redis = RedisServer::start();
    let store = store(&redis);
    // 5 per hour, fixed: no window turns during the test (but on the hour).
    let l = limit(5, 3_600_000, 1).with_algorithm(Algorithm::FixedWindow);
    let index = (server_now_us(&redis) / 3_600_000_000).to_string();
    for (i, (c, p)) in [
        ("nan", "0"),
        ("abc", "0"),
        ("-3", "0"),
        ("2.5", "0"),
        ("1", "inf"),
    ]
    .into_iter()
    .enumerate()
    {
        let key = DescriptorKey::new("w", [format!("corrupt-{i}").as_str()]);
        let rk = keys::bucket(&KeyIds::placeholder(), &key);
        redis.cmd(&["HSET", &rk, "w", &index, "c", c, "p", p]);
        let mut total = 0;
        for _ in 0..3 {
            total += granted(&take(&store, &key, l, 1, 100).await);
        }
        assert_eq!(total, 5, "c={c:?} p={p:?}: one window's limit, no more");
        let Resp::Array(Some(parts)) = redis.cmd(&["HMGET", &rk, "c", "p"]) else {
            panic!("HMGET")
        };
        assert_eq!(parts[0].text().as_deref(), Some("5"), "c={c:?} repaired");
        assert_eq!(parts[1].text().as_deref(), Some("0"), "p={p:?} repaired");
    }
    // Stamped a window ahead, full: still full now (the counts stay in force).
    let key = DescriptorKey::new("w", ["ahead"]);
    let rk = keys::bucket(&KeyIds::placeholder(), &key);
    let ahead = (server_now_us(&redis) / 3_600_000_000 + 1).to_string();
    redis.cmd(&["HSET", &rk, "w", &ahead, "c", "5", "p", "0"]);
    let answer = take(&store, &key, l, 1, 1).await;
    match answer {
        // Never longer than this window: the server's clock reaches the stamped one.
        Take::Denied { retry_after_ns } => assert!(retry_after_ns <= 3_600 * 1_000_000_000),
        other => panic!("a clock step let the key off: {other:?}"),
    }
}
