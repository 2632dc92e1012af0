//! How big a store lease is, and how many tokens a store call takes for the pool (`store_max`).

use super::*;

/// The store lease for one ask of `cost`, when the node spends 1,000 tokens/s.
fn size(settings: &LeaseSettings, rule: &str, cost: u32) -> u32 {
    let set = parse_rules("t", RULES).unwrap();
    let rule = set.rule(rule).unwrap();
    let limit = rule.limit_in_force(None, 0).limit;
    settings.lease_size(rule, &limit, cost, 1_000.0, None, 0.0)
}

#[test]
fn a_node_far_over_its_share_leases_its_part_of_a_lease_period_of_the_rate() {
    let s = LeaseSettings {
        turns: false,
        ..LeaseSettings::default()
    };
    let set = parse_rules("t", RULES).unwrap();
    let rule = set.rule("tiny-burst").unwrap();
    let limit = rule.limit_in_force(None, 0).limit;
    // 1,000 a second, burst 50: a tenth of the burst is 5; far over its share,
    // the only node may take 100 ms of the rate, held to the burst (50); one
    // of four nodes its part, 12; one of twenty never below the tenth.
    let lease = |of| s.lease_size(rule, &limit, 1, 10_000.0, of, 0.0);
    assert_eq!(lease(None), 5);
    assert_eq!(lease(Some(1)), 50);
    assert_eq!(lease(Some(4)), 12);
    assert_eq!(lease(Some(20)), 5);
    // A region's third of the limit (333 a second, burst 333): a lease
    // period of its rate (33), not its whole burst, which would hold the
    // node for a second at a time.
    let n = |v: u32| std::num::NonZeroU32::new(v).unwrap();
    let third = meshlimit_core::Limit::new(
        n(333),
        std::num::NonZeroU64::new(1_000_000_000).unwrap(),
        n(333),
    );
    assert_eq!(s.lease_size(rule, &third, 1, 10_000.0, Some(1), 0.0), 33);
}

#[test]
fn a_paced_node_leases_its_part_of_a_lease_period_or_what_it_got_if_more() {
    let s = LeaseSettings {
        turns: true,
        ..LeaseSettings::default()
    };
    let set = parse_rules("t", RULES).unwrap();
    let fast = set.rule("fast").unwrap();
    let limit = fast.limit_in_force(None, 0).limit;
    let lease = |of| s.lease_size(fast, &limit, 1, 10_000.0, of, 0.0);
    // 1,000 a second: a lease period is 100 tokens; one of four nodes far
    // over its share takes 25, one of eight 13 (rounded up, so the parts
    // cover the period), one of twenty 5 (not the tenth of the burst, 100).
    assert_eq!(lease(Some(4)), 25);
    assert_eq!(lease(Some(8)), 13);
    assert_eq!(lease(Some(20)), 5);
    // Not far over its share: sized as without turns.
    assert_eq!(lease(None), 100);
    // A lease period of what the store gave it lately, if more than its
    // part, up to the lease without turns (a tenth of the burst, 100).
    let got = |intake| s.lease_size(fast, &limit, 1, 10_000.0, Some(4), intake);
    assert_eq!(got(200.0), 25);
    assert_eq!(got(333.0), 34);
    assert_eq!(got(5_000.0), 100);
    assert!(s.paced(Some(4)));
    assert!(!s.paced(None));
    let off = LeaseSettings { turns: false, ..s };
    assert!(!off.paced(Some(4)), "no turns, no pacing");
    // A paced store call takes one lease (the filter's ask, if more).
    assert_eq!(s.store_max(25, 10, 1_000.0, true), 25);
    assert_eq!(s.store_max(25, 30, 1_000.0, true), 30);
    assert_eq!(
        s.store_max(25, 0, 1_000.0, false),
        50,
        "unpaced: two leases"
    );
}

#[test]
fn sizing() {
    let s = LeaseSettings::default();
    assert_eq!(size(&s, "exact", 1), 1);
    assert_eq!(size(&s, "exact", 3), 3);
    assert_eq!(size(&s, "fast", 1), 100, "100 ms of 1000/s");
    assert_eq!(size(&s, "tiny-burst", 1), 5, "a tenth of the burst");
    assert_eq!(
        size(&s, "slow", 1),
        1,
        "a tenth of a burst of 5 rounds to one"
    );
    assert_eq!(size(&s, "heavy", 200), 200, "never below the cost");
    let exact_below = LeaseSettings {
        exact_below_rps: 1001.0,
        ..s
    };
    assert_eq!(size(&exact_below, "fast", 2), 2);
    // A rule at exactly the rate is not slower than it: pooled.
    let at_the_rate = LeaseSettings {
        exact_below_rps: 1000.0,
        ..s
    };
    assert_eq!(size(&at_the_rate, "fast", 2), 100);
}

#[test]
fn a_pool_takes_no_more_than_its_node_spends_before_the_tokens_expire() {
    // Leases live 300 ms: with n asks expected in 300 ms, (n - 1) / 2 spare.
    // (lease, the filter's tokens, the node's demand per second, the most taken)
    let s = LeaseSettings::default();
    for (lease, filter, demand, max, why) in [
        (1, 1, 0.0, 1, "a cold key takes its cost only"),
        (
            1,
            1,
            7.0,
            1,
            "2.1 asks in a lease's life: a spare would expire unspent one time in eight",
        ),
        (1, 1, 14.0, 2, "4.2 asks: one spare"),
        (4, 1, 24.0, 4, "7.2 asks: the cost and 3 spare"),
        (10, 1, 100.0, 15, "30 asks: the cost and 14 spare"),
        (100, 1, 1_000.0, 150, "the cost and 149 spare"),
        (100, 100, 1_000.0, 200, "two leases at most"),
        (100, 0, 1_000.0, 149, "a refill: no filter's share"),
        (8, 1, 0.0, 8, "never below the lease"),
    ] {
        assert_eq!(s.store_max(lease, filter, demand, false), max, "{why}");
    }
}

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
