//! Store failures and short answers as `unavailable` answers, shedding past the inflight cap, and fail-local rules.

use super::*;

fn reasons(resp: &LeaseResponse) -> Vec<String> {
    resp.items
        .iter()
        .map(|a| match a {
            LeaseAnswer::Unavailable { reason } => reason.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn store_errors_become_unavailable_answers_and_are_counted() {
    let (svc, metrics) = service(Mode::Fail(StoreError::Timeout(Duration::from_millis(5))), 8);
    let resp = svc.lease(&request(&["fast", "exact"])).await;
    assert_eq!(reasons(&resp), ["store_timeout", "store_timeout"]);
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(
            &text,
            "meshlimit_store_requests_total",
            &[("result", "timeout")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_store_batch_size_count", &[]),
        Some(1.0),
        "one call for the batch"
    );

    let (svc, _) = service(Mode::Fail(StoreError::Unavailable("refused".into())), 8);
    assert_eq!(
        reasons(&svc.lease(&request(&["fast"])).await),
        ["store_unavailable"]
    );
}

#[tokio::test]
async fn a_short_store_answer_never_shifts_answers() {
    let (svc, _) = service(Mode::Short, 8);
    let resp = svc.lease(&request(&["fast", "nope", "slow"])).await;
    assert_eq!(
        reasons(&resp),
        ["store_error", "unknown_rule", "store_error"]
    );
}

#[tokio::test(start_paused = true)]
async fn work_past_the_inflight_cap_is_shed_not_queued() {
    let (svc, metrics) = service(Mode::Slow, 1);
    let first = {
        let svc = svc.clone();
        tokio::spawn(async move { svc.lease(&request(&["fast"])).await })
    };
    // Let the first request take the only permit and wait in the store.
    tokio::task::yield_now().await;
    let second = svc.lease(&request(&["fast", "slow"])).await;
    assert_eq!(reasons(&second), ["shed", "shed"]);
    assert!(matches!(
        first.await.unwrap().items[0],
        LeaseAnswer::Deny { .. }
    ));
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(
            &text,
            "meshlimit_store_requests_total",
            &[("result", "shed")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "meshlimit_lease_unavailable_total",
            &[("reason", "shed")]
        ),
        Some(2.0)
    );
}

#[tokio::test]
async fn with_the_store_down_a_fail_local_rule_gets_the_nodes_ceiling() {
    let (svc, metrics) = service(Mode::Fail(StoreError::Unavailable("refused".into())), 8);
    // 2 per hour, one live node, safety factor 2: the node admits 4.
    let mut granted = 0;
    for _ in 0..10 {
        match &svc.lease(&request(&["local"])).await.items[0] {
            LeaseAnswer::Grant {
                tokens: 1,
                local: true,
                ..
            } => granted += 1,
            LeaseAnswer::Deny { local: true, .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(granted, 4);
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(
            &text,
            "meshlimit_lease_unavailable_total",
            &[("reason", "store_unavailable")]
        ),
        Some(10.0)
    );
    // With four live nodes in the region, a fresh key's slice is 2 × 2 / 4 = 1.
    svc.live_nodes_handle()
        .store(4, std::sync::atomic::Ordering::Relaxed);
    let mut req = request(&["local"]);
    req.items[0].key = DescriptorKey::new("local", ["POST"]);
    let grants = futures_count(&svc, &req, 5).await;
    assert_eq!(grants, 1);
}

async fn futures_count(svc: &Arc<LeaseService>, req: &LeaseRequest, n: usize) -> usize {
    let mut grants = 0;
    for _ in 0..n {
        grants += usize::from(matches!(
            svc.lease(req).await.items[0],
            LeaseAnswer::Grant { .. }
        ));
    }
    grants
}
