//! The false-limit check's read of a key's bucket (`Buckets::peek`).

use meshlimit_core::secret::KeyIds;
use meshlimit_core::{DescriptorKey, Take};
use meshlimit_store::{Peeked, Stored};

use super::{ask, granted, slow, take, Store};

/// The bucket a peek read, refilled up to the store's reading.
fn tokens_at_reading(peeked: &Peeked) -> (Stored, f64) {
    let stored = peeked.stored.expect("a bucket as stored");
    (stored, stored.bucket.tokens_at(&slow(), stored.now_ns))
}

/// The reading the false-limit check judges a rejection by (the agent's
/// `false_limits`): a peek spends nothing; a drained key reads under a token
/// and a half-full key its half, on the store's own clock; the bucket's last
/// update is stamped on that clock too (at or before the reading, within the
/// last hour), so a rejection long before it proves nothing; a key the store
/// holds no bucket for (a full one) reads as none.
pub(crate) async fn a_peek_judges_a_rejection_at_its_moment_without_spending(store: &dyn Store) {
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
        let (_, tokens) = tokens_at_reading(&drained);
        assert!(tokens < 1.0, "{drained:?}");
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
    let (stored, tokens) = tokens_at_reading(&half);
    assert!(tokens + 1e-9 >= 5.0 && tokens < 6.0, "{half:?}");
    let (_, updated) = stored.bucket.parts();
    assert!(
        updated <= stored.now_ns && stored.now_ns - updated < hour,
        "{half:?}"
    );
    assert!(peek(id("never")).await.is_none());
    // The peeks spent nothing: `c` still grants its five.
    assert_eq!(
        granted(&take(store, ask("r", &["c"], slow(), 5, 5)).await),
        (5, 0)
    );
}
