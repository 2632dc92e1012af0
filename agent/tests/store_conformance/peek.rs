//! The false-limit check's read of a key's bucket (`Store::peek`).

use meshlimit_agent::false_limits::is_false;
use meshlimit_agent::store::Store;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::{DescriptorKey, Take};

use super::{ask, granted, slow, take};

/// The false-limit check's read: a peek spends nothing, and what it reads
/// judges a rejection at its moment on the store's own clock: a drained key's
/// 429 is true, a half-full key's is false for a cost it held, a key the store
/// holds no bucket for (a full one) is false, and a rejection long before the
/// bucket's last update proves nothing.
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
