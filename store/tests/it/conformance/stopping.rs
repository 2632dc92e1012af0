//! What an agent leaves the store as it stops: its node pool's unspent
//! tokens, handed back to their buckets (`Buckets::give_back`), and its place
//! among the live agents (`Buckets::leave`).

use std::time::Duration;

use meshlimit_core::{Algorithm, DescriptorKey, Limit, Take};
use meshlimit_store::GiveBack;

use super::{ask, granted, limit, slow, take, Store};

fn back(parts: &[&str], limit: Limit, tokens: u32) -> GiveBack {
    GiveBack {
        key: DescriptorKey::new("r", parts),
        limit,
        share: 1.0,
        tokens,
    }
}

/// The tokens each bucket took, in the order asked; a store error fails.
async fn give_back(store: &dyn Store, items: &[GiveBack]) -> Vec<u32> {
    let answers = store.give_back(items).await;
    assert_eq!(answers.len(), items.len(), "one answer per item");
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|e| panic!("{}: give-back failed: {e}", store.name())))
        .collect()
}

/// Tokens given back are there for the next take; a bucket takes whole tokens
/// up to its burst and no further (what it took is answered, per item in
/// order); a key the store holds no bucket for is full and takes none; a
/// region's share caps the bucket at its share of the burst; a window's count
/// takes none.
pub(crate) async fn given_back_tokens_refill_the_bucket_up_to_its_burst(store: &dyn Store) {
    assert_eq!(
        granted(&take(store, ask("r", &["a"], slow(), 8, 8)).await),
        (8, 2)
    );
    let took = give_back(store, &[back(&["a"], slow(), 5), back(&["new"], slow(), 3)]).await;
    assert_eq!(took, [5, 0]);
    // 2 + 5 (and a sliver of refill): seven whole tokens, then none.
    assert_eq!(
        granted(&take(store, ask("r", &["a"], slow(), 1, 10)).await),
        (7, 0)
    );
    // Just under a token's sliver from empty: nine whole tokens of room, ten
    // had no refill shown at all; the bucket never holds more than its burst.
    let took = give_back(store, &[back(&["a"], slow(), 20)]).await[0];
    assert!((9..=10).contains(&took), "took {took}");
    assert_eq!(
        granted(&take(store, ask("r", &["a"], slow(), 1, 20)).await),
        (took, 0)
    );
    // An untouched key stays a full bucket of 10, not 13.
    assert_eq!(
        granted(&take(store, ask("r", &["new"], slow(), 1, 20)).await),
        (10, 0)
    );

    // Half the region's share: the bucket is capped at 5.
    let mut shared = ask("r", &["s"], slow(), 5, 5);
    shared.share = 0.5;
    assert_eq!(granted(&take(store, shared.clone()).await), (5, 0));
    let mut half = back(&["s"], slow(), 20);
    half.share = 0.5;
    let took = give_back(store, &[half]).await[0];
    assert!((4..=5).contains(&took), "took {took}");
    shared.min = 1;
    shared.max = 20;
    assert_eq!(granted(&take(store, shared).await), (took, 0));

    let fixed = limit(10, Duration::from_secs(3_600), 1).with_algorithm(Algorithm::FixedWindow);
    assert_eq!(
        granted(&take(store, ask("r", &["w"], fixed, 3, 3)).await).0,
        3
    );
    assert_eq!(give_back(store, &[back(&["w"], fixed, 3)]).await, [0]);
    let rest = take(store, ask("r", &["w"], fixed, 1, 20)).await;
    assert!(matches!(rest, Take::Granted { tokens: 7, .. }), "{rest:?}");
}

/// An agent that leaves is no longer counted among the live agents, at once
/// (a store that counts none, the embedded one, only accepts the call).
pub(crate) async fn a_leaving_agent_is_no_longer_counted(store: &dyn Store) {
    let Some(alone) = store.heartbeat("a").await.unwrap() else {
        store.leave("a").await.unwrap();
        return;
    };
    assert_eq!(alone, 1);
    assert_eq!(store.heartbeat("b").await.unwrap(), Some(2));
    store.leave("a").await.unwrap();
    assert_eq!(store.heartbeat("b").await.unwrap(), Some(1));
}
