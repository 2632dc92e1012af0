//! The token bucket under one key: grants up to the burst then a denial, a
//! denial's retry-after, refill on the store's clock, a cost taken whole or not
//! at all, and a limit that changes under the key.

use std::time::Duration;

use super::{ask, assert_about, granted, limit, retry_after, slow, take, Store};
use meshlimit_core::Take;

/// An unseen key holds a full burst; each grant takes what it says and reports
/// what is left; past the burst the key is denied.
pub(crate) async fn grants_up_to_the_limit_then_denies(store: &dyn Store) {
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
pub(crate) async fn a_denial_says_when_to_retry(store: &dyn Store) {
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
pub(crate) async fn tokens_refill_over_time(store: &dyn Store) {
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
pub(crate) async fn a_changed_limit_keeps_the_bucket_within_its_burst(store: &dyn Store) {
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
pub(crate) async fn a_cost_takes_that_many_or_nothing(store: &dyn Store) {
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
