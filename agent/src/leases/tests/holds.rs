//! How long a key is held at the node after a drained grant or a denial: schedule edges, a node far over its share (the arithmetic: `meshlimit_core::policy`'s tests).

use super::*;

#[tokio::test(start_paused = true)]
async fn after_a_drained_grant_the_key_holds_at_the_node_until_a_lease_has_refilled() {
    let (svc, metrics, store) = service_and_store(Mode::Drained, 8);
    let calls = || store.calls.load(Ordering::SeqCst);
    // `slow` is 5 per minute: a lease of one token, which takes 12 s to refill.
    let req = request(&["slow"]);
    assert!(matches!(
        svc.lease(&req).await.items[0],
        LeaseAnswer::Grant { tokens: 1, .. }
    ));
    assert_eq!(calls(), 1);
    // The store kept nothing: the node denies without asking it...
    tokio::time::advance(Duration::from_secs(11)).await;
    match &svc.lease(&req).await.items[0] {
        LeaseAnswer::Deny {
            retry_after_ms,
            local: false,
            from: Some(AnsweredFrom::Pool),
        } => assert!((999..=1_000).contains(retry_after_ms), "{retry_after_ms}"),
        other => panic!("expected a node denial, got {other:?}"),
    }
    assert_eq!(calls(), 1, "held at the node");
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_pool_calls_total", &[("kind", "denied")]),
        Some(1.0)
    );
    // ...until a lease's worth has refilled.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(matches!(
        svc.lease(&req).await.items[0],
        LeaseAnswer::Grant { .. }
    ));
    assert_eq!(calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_denial_at_the_node_is_offered_to_the_false_limit_checker() {
    use crate::false_limits::{FalseLimitMetrics, FalseLimits};
    let rules = Arc::new(CurrentRules::empty());
    rules.install(Arc::new(parse_rules("t", RULES).unwrap()));
    let store = Arc::new(FakeStore::new(Mode::Drained));
    let checked = Registered::new(FalseLimitMetrics::new);
    let ids = meshlimit_core::secret::KeyIds::placeholder();
    let checker = FalseLimits::start(rules.clone(), store.clone(), checked.clone(), ids);
    let settings = LeaseSettings::default();
    let svc = LeaseService::new(
        rules,
        store,
        lease_metrics().clone(),
        settings,
        Some(checker),
    );
    let req = request(&["slow"]);
    svc.lease(&req).await;
    // Drained: the next ask is denied at the node, without a store call.
    assert!(matches!(
        svc.lease(&req).await.items[0],
        LeaseAnswer::Deny {
            from: Some(AnsweredFrom::Pool),
            ..
        }
    ));
    let offered = || {
        let text = checked.render().unwrap();
        let checks = sample(&text, "meshlimit_false_limit_checks_total", &[]);
        let skips = sample(&text, "meshlimit_false_limit_checks_skipped_total", &[]);
        checks.unwrap_or(0.0) + skips.unwrap_or(0.0)
    };
    crate::test_support::wait_until("the denial's check", || offered() == 1.0).await;
}

#[tokio::test]
async fn a_denial_is_held_and_answered_no_longer_than_the_next_schedule_edge() {
    // A pooled rule whose window opens 5 s from now (UTC, the agent's clock).
    let opens = crate::regions::clock::now_secs() + 5;
    let mm_ss = |t: u64| format!("{:02}m{:02}s", t % 3_600 / 60, t % 60);
    let rules = format!(
        "version: 1\nrules:\n  - name: sched\n    key: [method]\n    limit: {{ requests: 1000, per: 1s }}\n    schedule:\n      - {{ minutes: \"{}-{}\", burst: 5000 }}\n",
        mm_ss(opens),
        mm_ss(opens + 5)
    );
    let (svc, _, store) = service_with_rules(&rules, Mode::Denied, 8);
    // The store's half hour becomes the time to the edge, for the filter and
    // for the node's pool, which answers the next ask without the store.
    for _ in 0..2 {
        let before_ms = crate::regions::clock::now_ms();
        let resp = svc.lease(&request(&["sched"])).await;
        match &resp.items[..] {
            [LeaseAnswer::Deny { retry_after_ms, .. }] => assert!(
                before_ms + retry_after_ms <= opens * 1_000 + 1,
                "{retry_after_ms} ms from {before_ms}, the edge at {opens} s"
            ),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        store.calls.load(Ordering::SeqCst),
        1,
        "the pool held the denial"
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_far_over_its_share_calls_the_store_once_a_lease_period() {
    // One of ten nodes asks for `fast` (1,000 a second) 500 times a second,
    // five times its share of 100, on the memory store (a real bucket, on
    // the paused clock). The bucket starts drained, and the other nine take
    // up to two tokens every 3 ms, so this node's grants are what refilled
    // since the last taker: about a third of the rate. Its lease is about 50
    // tokens (100 ms of its demand), which the bucket refills in 50 ms: held
    // only for that, it would call the store twice a lease period. It is
    // held a whole lease period (100 ms) after each drained grant or denial
    // instead, and gets as much.
    let (svc, metrics, store) = on_memory_store(RULES, 10);
    let rule = svc.rules.get().unwrap();
    let limit = rule.rule("fast").unwrap().limit_in_force(None, 0).limit;
    let take = move |max| Acquire {
        key: DescriptorKey::new("fast", ["GET"]),
        limit,
        min: 1,
        max,
        share: 1.0,
    };
    store.acquire(&[take(limit.burst())]).await;
    let others = {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                store.acquire(&[take(2)]).await;
                tokio::time::sleep(3 * MS).await;
            }
        })
    };
    let calls = || store_calls(&metrics);
    let mut admitted = 0;
    for round in 0..2 {
        let before = calls();
        for _ in 0..500 {
            let answer = &svc.lease(&request(&["fast"])).await.items[0];
            admitted += u32::from(round == 1 && matches!(answer, LeaseAnswer::Grant { .. }));
            tokio::time::sleep(2 * MS).await;
        }
        if round == 1 {
            let per_second = calls() - before;
            assert!(
                (8.0..=12.0).contains(&per_second),
                "{per_second} store calls in a second, against one a lease period"
            );
        }
    }
    others.abort();
    // Held, not starved: the node still gets what the others leave.
    assert!(
        (280..=400).contains(&admitted),
        "{admitted} of 500 asks granted, against about 340 left by the others"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lone_node_far_over_a_short_burst_takes_it_whole_and_admits_the_limit() {
    // The only node asks 5,000 times a second for a key of 1,000 a second on
    // the memory store (a real bucket, on the paused clock). A tenth of a
    // burst of 100 is 10 ms of the limit: leases that small cost the store
    // 50 calls a second. Far over its share, the node leases a lease period
    // of the rate (here the whole burst), is held a lease period, and calls
    // ten times a second.
    // A burst of 50 is full after 50 ms: held a whole lease period, half of
    // the limit would refill into a full bucket and be lost, so the hold
    // ends when the bucket is full (twenty calls a second).
    for (burst, calls_per_second) in [(100, 8.0..=12.0), (50, 16.0..=24.0)] {
        let text = format!(
            "version: 1\nrules:\n  - {{name: short, key: [method], limit: {{requests: 1000, per: 1s, burst: {burst}}}}}\n"
        );
        let (svc, metrics, _) = on_memory_store(&text, 1);
        let calls = || store_calls(&metrics);
        let mut admitted = 0;
        for round in 0..2 {
            let before = calls();
            // Five asks a millisecond (the paused clock moves by whole ms).
            for ask in 0..5_000 {
                let answer = &svc.lease(&request(&["short"])).await.items[0];
                if let (1, LeaseAnswer::Grant { tokens, .. }) = (round, answer) {
                    admitted += tokens;
                }
                if ask % 5 == 4 {
                    tokio::time::sleep(MS).await;
                }
            }
            if round == 1 {
                let per_second = calls() - before;
                assert!(
                    calls_per_second.contains(&per_second),
                    "burst {burst}: {per_second} store calls in a second"
                );
            }
        }
        assert!(
            (950..=1_050).contains(&admitted),
            "burst {burst}: {admitted} tokens granted in a second, against 1,000"
        );
    }
}

/// A lease service for `rules` on the memory store (a real bucket, on the
/// test's clock), as one of `live` nodes.
fn on_memory_store(
    rules: &str,
    live: u32,
) -> (
    Arc<LeaseService>,
    Registered<LeaseMetrics>,
    Arc<meshlimit_store::memory::MemoryStore>,
) {
    let current = Arc::new(CurrentRules::empty());
    current.install(Arc::new(parse_rules("t", rules).unwrap()));
    let metrics = lease_metrics();
    let store = Arc::new(meshlimit_store::memory::MemoryStore::new());
    let svc = LeaseService::new(
        current,
        store.clone(),
        metrics.clone(),
        LeaseSettings::default(),
        None,
    );
    svc.live_nodes_handle().store(live, Ordering::Relaxed);
    (svc, metrics, store)
}

/// The store calls the service made that were answered.
fn store_calls(metrics: &Registered<LeaseMetrics>) -> f64 {
    let text = metrics.render().unwrap();
    sample(&text, "meshlimit_store_requests_total", &[("result", "ok")]).unwrap_or(0.0)
}
