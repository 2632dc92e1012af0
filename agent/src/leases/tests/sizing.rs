//! How many tokens a store call takes for the pool at the service (the arithmetic of lease sizing: `meshlimit_core::policy`'s tests).

use super::*;

#[tokio::test(start_paused = true)]
async fn a_nearly_empty_bucket_is_taken_an_ask_at_a_time_unless_the_node_is_far_over() {
    // 500 asks a second of `fast` (1,000 a second) at the only node: under
    // twice its share. Every grant leaves the store's bucket empty, so the
    // pool never takes a token beyond the ask: a spare would sit here while
    // other nodes found the bucket empty.
    let drained = maxes_asked(Mode::Drained, 1).await;
    assert_eq!(drained.len(), 400, "no ask was served from the pool");
    assert!(drained.iter().all(|m| *m == 1), "{drained:?}");
    // The same demand with 900 left after every grant: the pool takes spares.
    let plenty = maxes_asked(Mode::Delayed(MS), 1).await;
    assert!(plenty.iter().any(|m| *m > 1), "{plenty:?}");
    assert!(plenty.len() < 400, "the pool served asks: {}", plenty.len());
    // One of ten nodes: its share is 100 a second, and 500 is far over it,
    // so even a drained bucket's grant takes a spare (the node's 429s are the
    // limit working; the spare saves a store call).
    let over = maxes_asked(Mode::Drained, 10).await;
    assert!(over.iter().any(|m| *m > 1), "{over:?}");
}
