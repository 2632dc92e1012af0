//! What a grant says is left in the store and the pool.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_grant_says_what_the_store_and_the_pool_have_left() {
    // 1,000 a second; `want` 10: the store grants two leases' worth, 10 go to
    // the filter, the rest to the pool, and 900 are left in the store.
    let (svc, _, _) = service_and_store(Mode::Delayed(MS), 8);
    let mut req = request(&["fast"]);
    req.items[0].want = Some(10);
    match &svc.lease(&req).await.items[0] {
        LeaseAnswer::Grant {
            tokens, remaining, ..
        } => {
            let pooled = svc
                .pool_view(|_| true)
                .iter()
                .map(|v| v.tokens)
                .sum::<u32>();
            assert_eq!(*remaining, 900 + pooled, "tokens {tokens}, pooled {pooled}");
        }
        other => panic!("{other:?}"),
    }
    // Nothing pooled expired: nothing dropped is said.
    let text = svc.metrics.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_lease_tokens_dropped_total", &[]),
        None
    );
}
