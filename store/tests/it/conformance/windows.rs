//! The window algorithms: a fixed window aligned to the Unix epoch, and a
//! sliding window weighing the previous window's count.

use std::time::Duration;

use meshlimit_core::{Algorithm, Limit, Take};
use meshlimit_store::Acquire;

use super::{ask, assert_about, granted, limit, retry_after, take, Store};

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
pub(crate) async fn a_fixed_window_admits_its_requests_then_denies_until_it_ends(
    store: &dyn Store,
) {
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
pub(crate) async fn a_sliding_window_weighs_the_previous_window(store: &dyn Store) {
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
