//! Asks for one key sharing the one store call in flight, and how long they wait on it.

use super::*;

#[tokio::test(start_paused = true)]
async fn asks_for_one_key_share_the_one_store_call_in_flight() {
    // A store answering in a millisecond, then one taking the whole deadline
    // (3 ms): an ask waits on the call in flight as long as the call may take.
    for took in [MS, LeaseSettings::default().store_deadline] {
        let (svc, metrics, store) = service_and_store(Mode::Delayed(took), 8);
        let asks: Vec<_> = (0..8)
            .map(|_| {
                let svc = Arc::clone(&svc);
                tokio::spawn(async move { svc.lease(&request(&["fast"])).await })
            })
            .collect();
        for ask in asks {
            let resp = ask.await.unwrap();
            assert!(
                matches!(resp.items[0], LeaseAnswer::Grant { local: false, .. }),
                "{took:?}: {resp:?}"
            );
        }
        // The first ask's call went to the store, its lease sized for a cold
        // key (one token, none to pool); the seven others waited on it, and
        // the one call that followed was sized for the six it had left waiting.
        assert_eq!(store.calls.load(Ordering::SeqCst), 2, "{took:?}");
        let text = metrics.render().unwrap();
        assert_eq!(
            sample(&text, "meshlimit_pool_calls_total", &[("kind", "wait")]),
            Some(7.0 + 6.0),
            "{took:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_never_waits_on_a_call_it_has_yet_to_make() {
    // Two items for one key in one request: the first finds the pool empty
    // and asks the store, the second finds that call in flight. The call
    // must be made before anyone waits on it, or the second item waits the
    // whole store deadline (twice: one wait a round) for nothing.
    let settings = LeaseSettings {
        store_deadline: Duration::from_secs(2),
        ..LeaseSettings::default()
    };
    let (svc, _, store) = service_with_settings(RULES, Mode::Delayed(MS), settings);
    let started = tokio::time::Instant::now();
    let resp = svc.lease(&request(&["fast", "fast"])).await;
    let took = started.elapsed();
    assert!(
        resp.items
            .iter()
            .all(|a| matches!(a, LeaseAnswer::Grant { local: false, .. })),
        "{resp:?}"
    );
    assert!(took < Duration::from_millis(100), "answered after {took:?}");
    assert!(store.calls.load(Ordering::SeqCst) <= 2);
}
