//! The pool's refills: in the background, after a failed refill, after a burst, and under a plan's limit.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_busy_key_is_refilled_in_the_background_before_its_pool_runs_dry() {
    let (svc, metrics, store) = service_and_store(Mode::Delayed(MS), 8);
    // 1,000 asks a second: once the key's demand shows, it is thick at the
    // node and every store call is a refill started by an ask that was served.
    ask_every_ms(&svc, 100).await;
    let (calls, refills, waits, ok, _) = counted(&metrics, &store);
    let answers = ask_every_ms(&svc, 300).await;
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, LeaseAnswer::Grant { tokens: 1, .. })),
        "{answers:?}"
    );
    let (calls_after, refills_after, waits_after, ok_after, _) = counted(&metrics, &store);
    let new_calls = calls_after - calls;
    assert!(
        new_calls >= 2,
        "about 150 asks a refill (two leases of 100 ms at 1,000/s, as the node spends in half a lease's life): {new_calls} calls"
    );
    assert_eq!(
        refills_after - refills,
        new_calls as f64,
        "every store call was a background refill"
    );
    assert_eq!(waits_after, waits, "no ask waited for a store call");
    assert_eq!(
        ok_after - ok,
        new_calls as f64,
        "each refill's answer was counted and filled the pool"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_refill_ends_its_call_so_the_next_ask_calls_the_store_itself() {
    let (svc, metrics, store) = service_and_store(Mode::Delayed(MS), 8);
    ask_every_ms(&svc, 100).await;
    let (_, refills, waits, _, errors) = counted(&metrics, &store);
    assert_eq!(errors, 0.0);
    store.failing.store(true, Ordering::SeqCst);
    // The pool serves what it holds while its refills fail, each ending its
    // call; the ask that finds it empty then asks the store itself, at once.
    let answers = ask_every_ms(&svc, 300).await;
    let (_, refills_after, waits_after, _, errors_after) = counted(&metrics, &store);
    let failed_refills = refills_after - refills;
    assert!(failed_refills >= 1.0, "the pool's refills failed");
    assert_eq!(waits_after, waits, "no ask waited on the failed call");
    let unavailable = answers
        .iter()
        .filter(|a| matches!(a, LeaseAnswer::Unavailable { .. }))
        .count();
    assert!(unavailable > 0, "the asks past the pool reached the store");
    assert_eq!(
        errors_after - errors,
        failed_refills + unavailable as f64,
        "the refills' failures are counted with the asks'"
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_burst_the_pool_takes_what_the_node_spends_not_what_it_asked() {
    // One of ten nodes asks for `fast` (1,000 a second) at 1,000 a second:
    // far over its share, every grant drains the store's bucket, and the key
    // is held and refilled by the clock.
    let (svc, _, store) = service_and_store(Mode::Drained, 8);
    svc.live_nodes_handle().store(10, Ordering::Relaxed);
    for _ in 0..300 {
        svc.lease(&request(&["fast"])).await;
        tokio::time::sleep(MS).await;
    }
    let before = store.maxes.lock().unwrap().len();
    // The burst ends: 100 asks a second for half a second. The demand
    // estimate still reads the burst for a while; the pool must not keep
    // fetching it, by the clock or ahead of need, while it holds tokens
    // nobody spends (they would expire here while other nodes find the
    // bucket empty).
    let mut served = 0;
    for _ in 0..50 {
        let answer = &svc.lease(&request(&["fast"])).await.items[0];
        served += u32::from(matches!(answer, LeaseAnswer::Grant { .. }));
        tokio::time::sleep(10 * MS).await;
    }
    let taken: u32 = store.maxes.lock().unwrap()[before..].iter().sum();
    assert!(served >= 45, "the node served its asks: {served} of 50");
    // What the node served, and at most one pool's worth beyond it
    // (`store_max` at the burst's demand: two leases of 100).
    assert!(
        taken <= served + 200,
        "the store handed out {taken} tokens for {served} served"
    );
}

#[tokio::test(start_paused = true)]
async fn a_plan_key_held_after_a_drained_grant_refills_under_its_plans_limit() {
    let rules = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/per-ip-and-api-plans.yaml"
    ));
    let (svc, metrics, store) = service_with_rules(rules, Mode::Drained, 8);
    let mut req = request(&["api"]);
    req.items[0].key = DescriptorKey::new("api", ["k"]);
    req.items[0].plan = Some("gold".into());
    // 1,000 asks a second make the key thick at the node, and after 300 of
    // them its demand (a count decaying over a second: about 260 a second)
    // is far over twice gold's 100 a second; each grant then drains the
    // store and holds the key. Then no asks: the last hold ends in a refill
    // by the clock.
    for _ in 0..300 {
        svc.lease(&req).await;
        tokio::time::sleep(MS).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = metrics.render().unwrap();
    assert!(
        sample(&text, "meshlimit_pool_calls_total", &[("kind", "refill")]).unwrap_or(0.0) > 0.0,
        "{text}"
    );
    let gold = parse_rules("t", rules)
        .unwrap()
        .rule("api")
        .unwrap()
        .limit_in_force(Some("gold"), 0)
        .limit;
    let limits = store.limits.lock().unwrap();
    assert!(limits.iter().all(|l| *l == gold), "{limits:?}");
}
