//! What a grant says is left in the store and the pool.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_grant_says_what_the_store_and_the_pool_have_left() {
    // 1,000 a second; `want` 10: the store grants two leases' worth, 10 go to
    // the filter, the rest to the pool, and 900 are left in the store.
    let (svc, metrics, _) = service_and_store(Mode::Delayed(MS), 8);
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
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_lease_tokens_dropped_total", &[]),
        None
    );
}

/// A fixed window's counts are spent in their window only: a grant's life at
/// the filter, from the store or from the node's pool, and its spares' life
/// in the pool end where the store says the window does; a token bucket's
/// keep the lease's whole life.
#[tokio::test(start_paused = true)]
async fn a_fixed_window_s_grants_and_pooled_spares_end_with_the_window() {
    const TWO: &str = "version: 1\nrules:\n  - {name: win, key: [method], algorithm: fixed_window, limit: {requests: 1000, per: 1s}}\n  - {name: fast, key: [method], limit: {requests: 1000, per: 1s}}\n";
    // (rule, the longest life a grant may say, whether spares outlive 45 ms)
    for (rule, longest_ms, outlive) in [("fast", 300, true), ("win", 40, false)] {
        // The store's window ends 40 ms after each of its answers.
        let (svc, _, store) = service_with_rules(TWO, Mode::EndsIn(40 * MS), 8);
        // 1,000 asks a second until the key is thick at the node and pooled.
        let mut lives = Vec::new();
        for _ in 0..150 {
            for answer in svc.lease(&request(&[rule])).await.items {
                match answer {
                    LeaseAnswer::Grant { ttl_ms, from, .. } => lives.push((ttl_ms, from)),
                    other => panic!("{rule}: {other:?}"),
                }
            }
            tokio::time::sleep(MS).await;
        }
        let longest = lives.iter().map(|(ms, _)| *ms).max();
        assert!(longest <= Some(longest_ms), "{rule}: {longest:?}");
        let served_by_pool = lives
            .iter()
            .filter(|(_, from)| *from == Some(AnsweredFrom::Pool))
            .count();
        assert!(
            served_by_pool > 50,
            "{rule}: {served_by_pool} from the pool"
        );
        if outlive {
            assert!(lives.iter().all(|(ms, _)| *ms == longest_ms), "{rule}");
        } else {
            // From the pool, what is left of the window: less than its 40 ms.
            assert!(lives.iter().any(|(ms, _)| *ms < longest_ms), "{rule}");
        }
        let pooled = || {
            svc.pool_view(|_| true)
                .iter()
                .map(|v| v.tokens)
                .sum::<u32>()
        };
        assert!(pooled() > 0, "{rule}: spares pooled");
        // 45 ms without asks: past the window's end, not the lease's life.
        tokio::time::advance(45 * MS).await;
        let calls = store.calls.load(Ordering::SeqCst);
        let answer = svc.lease(&request(&[rule])).await.items;
        let called = store.calls.load(Ordering::SeqCst) > calls;
        assert_eq!(called, !outlive, "{rule}: {answer:?}");
    }
}
