//! What one call asks of the store: a lease between its `min` and `max`, a
//! region's share of the limit, a batch answered in order, and each key's bucket
//! apart from every other.

use std::time::Duration;

use meshlimit_core::Take;
use meshlimit_store::Acquire;

use super::{ask, assert_about, granted, limit, retry_after, slow, take, Store};

/// A lease is as large as asked (`max`) when the bucket holds it, else all the
/// bucket holds, never less than the cost (`min`).
pub(crate) async fn a_lease_is_between_its_min_and_max(store: &dyn Store) {
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
pub(crate) async fn a_share_scales_the_limit(store: &dyn Store) {
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
/// cluster) each key lives on. Items of one key apply one at a time but not
/// necessarily in the batch's order: the Redis store sends a call's items in
/// as many pipelines as its batcher makes of them, side by side, and a
/// pipeline that met a flushed script cache sends its items again. Nothing
/// relies on that order: the agent puts at most one pooled ask per key in a
/// call (the others wait on it), and exact asks for one key are alike.
pub(crate) async fn a_batch_is_answered_in_order(store: &dyn Store) {
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
    // Key a's two asks (at most 4, then at most 100) share its 10 tokens in
    // either order.
    match (&answers[0], &answers[2]) {
        (Take::Denied { .. }, second) => assert_eq!(granted(second), (10, 0)),
        (first, second) => {
            assert_eq!(granted(first).0, 4, "{answers:?}");
            assert_eq!(granted(second), (6, 0), "{answers:?}");
        }
    }
    assert!(matches!(answers[1], Take::Denied { .. }), "{answers:?}");
    for n in 1..=8u32 {
        assert_eq!(granted(&answers[2 + n as usize]), (n, 10 - n), "item k{n}");
    }
}

/// Draining one key leaves every other key alone: another key of the rule, the
/// same parts under another rule, and parts that would read alike if joined.
pub(crate) async fn keys_are_isolated(store: &dyn Store) {
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
