use super::*;
use crate::rules::RulesConfig;
use crate::RuleSet;
use core::num::{NonZeroU32, NonZeroU64};

/// One rule per way of sizing a lease (as the agent's lease tests'
/// `one-rule-per-lease-behaviour.yaml`), in JSON: core's tests build without
/// the YAML parser.
const RULES: &str = r#"{"version": 1, "rules": [
    {"name": "exact", "key": ["method"], "limit": {"requests": 10, "per": "1s"}, "accuracy": "exact"},
    {"name": "fast", "key": ["method"], "limit": {"requests": 1000, "per": "1s"}},
    {"name": "slow", "key": ["method"], "limit": {"requests": 5, "per": "1m"}},
    {"name": "tiny-burst", "key": ["method"], "limit": {"requests": 1000, "per": "1s", "burst": 50}},
    {"name": "heavy", "key": ["method"], "limit": {"requests": 1000, "per": "1s"}, "cost": 200}
]}"#;

fn rule_set() -> RuleSet {
    let config: RulesConfig = serde_json::from_str(RULES).unwrap();
    RuleSet::compile(&config).unwrap()
}

const MS: u64 = 1_000_000;

/// `requests` per `per_ns`, a burst of `burst`, a token bucket.
fn limit(requests: u32, per_ns: u64, burst: u32) -> Limit {
    Limit::new(
        NonZeroU32::new(requests).unwrap(),
        NonZeroU64::new(per_ns).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

/// The store lease for one ask of `cost`, when the node spends 1,000 tokens/s.
fn size(policy: &LeasePolicy, rule: &str, cost: u32) -> u32 {
    let set = rule_set();
    let rule = set.rule(rule).unwrap();
    let limit = rule.limit_in_force(None, 0).limit;
    policy.lease_size(rule, &limit, cost, 1_000.0, None, 0.0)
}

#[test]
fn the_defaults_are_the_flags_defaults() {
    let p = LeasePolicy::default();
    assert_eq!(p.ttl_ns, 300 * MS);
    assert_eq!(p.period_ns, 100 * MS);
    assert_eq!(p.ask_period_ns(), 150 * MS, "half a lease's life");
}

#[test]
fn a_node_far_over_its_share_leases_its_part_of_a_lease_period_of_the_rate() {
    let p = LeasePolicy::default();
    let set = rule_set();
    let rule = set.rule("tiny-burst").unwrap();
    let limit = rule.limit_in_force(None, 0).limit;
    // 1,000 a second, burst 50: a tenth of the burst is 5; far over its share,
    // the only node may take 100 ms of the rate, held to the burst (50); one
    // of four nodes its part, 13 (rounded up, so the parts cover the
    // period); one of twenty its part, 3, below the tenth.
    let lease = |of| p.lease_size(rule, &limit, 1, 10_000.0, of, 0.0);
    assert_eq!(lease(None), 5);
    assert_eq!(lease(Some(1)), 50);
    assert_eq!(lease(Some(4)), 13);
    assert_eq!(lease(Some(20)), 3);
    // A region's third of the limit (333 a second, burst 333): a lease
    // period of its rate (33), not its whole burst, which would hold the
    // node for a second at a time.
    let third = limit_333();
    assert_eq!(p.lease_size(rule, &third, 1, 10_000.0, Some(1), 0.0), 33);
}

fn limit_333() -> Limit {
    limit(333, 1_000_000_000, 333)
}

#[test]
fn a_paced_node_leases_its_part_of_a_lease_period_or_what_it_got_if_more() {
    let p = LeasePolicy::default();
    let set = rule_set();
    let fast = set.rule("fast").unwrap();
    let limit = fast.limit_in_force(None, 0).limit;
    let lease = |of| p.lease_size(fast, &limit, 1, 10_000.0, of, 0.0);
    // 1,000 a second: a lease period is 100 tokens; one of four nodes far
    // over its share takes 25, one of eight 13 (rounded up, so the parts
    // cover the period), one of twenty 5 (not the tenth of the burst, 100).
    assert_eq!(lease(Some(4)), 25);
    assert_eq!(lease(Some(8)), 13);
    assert_eq!(lease(Some(20)), 5);
    // Not far over its share: sized by its demand, at most a tenth of the
    // burst.
    assert_eq!(lease(None), 100);
    // A lease period of what the store gave it lately, if more than its
    // part, up to a tenth of the burst (100) or its part if more.
    let got = |intake| p.lease_size(fast, &limit, 1, 10_000.0, Some(4), intake);
    assert_eq!(got(200.0), 25);
    assert_eq!(got(333.0), 34);
    assert_eq!(got(5_000.0), 100);
    assert!(p.paced(Some(4)));
    assert!(!p.paced(None));
    // A paced store call takes one lease (the filter's ask, if more).
    assert_eq!(p.store_max(25, 10, 1_000.0, true), 25);
    assert_eq!(p.store_max(25, 30, 1_000.0, true), 30);
    assert_eq!(
        p.store_max(25, 0, 1_000.0, false),
        50,
        "unpaced: two leases"
    );
}

#[test]
fn sizing() {
    let p = LeasePolicy::default();
    assert_eq!(size(&p, "exact", 1), 1);
    assert_eq!(size(&p, "exact", 3), 3);
    assert_eq!(size(&p, "fast", 1), 100, "100 ms of 1000/s");
    assert_eq!(size(&p, "tiny-burst", 1), 5, "a tenth of the burst");
    assert_eq!(
        size(&p, "slow", 1),
        1,
        "a tenth of a burst of 5 rounds to one"
    );
    assert_eq!(size(&p, "heavy", 200), 200, "never below the cost");
}

#[test]
fn a_pool_takes_no_more_than_its_node_spends_before_the_tokens_expire() {
    // Leases live 300 ms: with n asks expected in 300 ms, (n - 1) / 2 spare.
    // (lease, the filter's tokens, the node's demand per second, the most taken)
    let p = LeasePolicy::default();
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
        assert_eq!(p.store_max(lease, filter, demand, false), max, "{why}");
    }
}

#[test]
fn asks_that_waited_are_covered_up_to_a_tenth_of_the_burst() {
    // Burst 100: a tenth is 10.
    let l = limit(100, 1_000_000_000, 100);
    assert_eq!(cover_waiting(2, 1, 0, &l), 2, "no one waited: the lease");
    assert_eq!(
        cover_waiting(2, 1, 4, &l),
        5,
        "the ask and the four that waited"
    );
    assert_eq!(
        cover_waiting(2, 1, 40, &l),
        10,
        "a tenth of the burst at most"
    );
    assert_eq!(cover_waiting(2, 30, 1, &l), 30, "the ask's cost, if more");
}

#[test]
fn a_fixed_window_lease_lives_to_its_window_end_at_most() {
    let p = LeasePolicy::default();
    assert_eq!(p.lease_life_ns(Algorithm::FixedWindow, 40 * MS), 40 * MS);
    assert_eq!(p.lease_life_ns(Algorithm::FixedWindow, 900 * MS), 300 * MS);
    for algorithm in [Algorithm::TokenBucket, Algorithm::SlidingWindow] {
        assert_eq!(p.lease_life_ns(algorithm, 40 * MS), 300 * MS);
    }
}

#[test]
fn a_node_is_far_over_at_twice_its_share_of_the_rate() {
    // 1,000 a second over four nodes: a share of 250.
    let l = limit(1_000, 1_000_000_000, 1_000);
    assert!(!far_over_share(&l, 499.0, 4));
    assert!(far_over_share(&l, 500.0, 4));
    assert_eq!(far_over_of(&l, 499.0, 4), None);
    assert_eq!(far_over_of(&l, 500.0, 4), Some(4));
    assert!(far_over_share(&l, 2_000.0, 1));
    assert!(!far_over_share(&l, 1_999.0, 1));
}

#[test]
fn spares_are_taken_while_the_bucket_holds_two_leases_a_node_or_the_node_is_far_over() {
    // 1,000 a second over four nodes, leases of 10: two leases a node is 80.
    let l = limit(1_000, 1_000_000_000, 1_000);
    assert!(may_prefetch(&l, 100.0, 10, 4, 80));
    assert!(!may_prefetch(&l, 100.0, 10, 4, 79));
    assert!(may_prefetch(&l, 500.0, 10, 4, 0), "far over its share");
}

#[test]
fn a_refill_takes_its_tokens_at_the_rate_and_a_full_bucket_its_burst() {
    // 10 a second, burst 100.
    let l = limit(100, 10_000_000_000, 100);
    assert_eq!(refill_ns(1, &l), 100 * MS);
    assert_eq!(refill_ns(8, &l), 800 * MS);
    assert_eq!(full_ns(&l), 10_000 * MS);
}

#[test]
fn only_a_far_over_bucket_gives_turns_a_lease_period_apart() {
    let p = LeasePolicy::default();
    assert_eq!(p.turn_period_ns(Algorithm::TokenBucket, true), 100 * MS);
    assert_eq!(p.turn_period_ns(Algorithm::SlidingWindow, true), 100 * MS);
    assert_eq!(p.turn_period_ns(Algorithm::FixedWindow, true), 0);
    assert_eq!(p.turn_period_ns(Algorithm::TokenBucket, false), 0);
}

#[test]
fn a_fixed_window_holds_a_drained_key_until_the_window_ends_and_no_longer() {
    let p = LeasePolicy::default();
    // 10 a second, burst 100.
    let l = |algorithm| limit(100, 10_000_000_000, 100).with_algorithm(algorithm);
    let (fixed, bucket) = (l(Algorithm::FixedWindow), l(Algorithm::TokenBucket));
    // A grant leaving 2 of a lease of 10, the window ending in 4 s: nothing
    // comes back before it ends, and everything then.
    for far_over in [true, false] {
        assert_eq!(p.hold_ns(10, 2, 4_000 * MS, &fixed, far_over), 4_000 * MS);
        assert_eq!(p.hold_ns(10, 10, 4_000 * MS, &fixed, far_over), 0);
        // A denial: the window's end, with no refill added after it.
        assert_eq!(
            p.denial_hold_ns(10, 1, 4_000 * MS, &fixed, far_over),
            4_000 * MS
        );
    }
    // A bucket (and a sliding window) of a node far over its share holds
    // until 8 have refilled at 10/s (800 ms), less the 200 ms the bucket
    // took to gather the 2 left (see below); a denial of an ask of one adds
    // a lease's refill (9 tokens).
    assert_eq!(p.hold_ns(10, 2, 4_000 * MS, &bucket, true), 600 * MS);
    assert_eq!(
        p.denial_hold_ns(10, 1, 4_000 * MS, &bucket, true),
        4_900 * MS
    );
    // Nearer its share, the store's word alone: no hold after a grant, and a
    // denial held for its own wait.
    assert_eq!(p.hold_ns(10, 2, 4_000 * MS, &bucket, false), 0);
    assert_eq!(
        p.denial_hold_ns(10, 1, 4_000 * MS, &bucket, false),
        4_000 * MS
    );
}

#[test]
fn a_far_over_hold_lasts_a_lease_period_at_least_and_the_burst_s_refill_at_most() {
    let p = LeasePolicy::default();
    // 1,000 a second, burst 50: full again in 50 ms.
    let short = limit(1_000, 1_000_000_000, 50);
    assert_eq!(
        p.hold_ns(10, 0, 0, &short, true),
        50 * MS,
        "full after 50 ms"
    );
    assert_eq!(p.denial_hold_ns(10, 1, MS, &short, true), 50 * MS);
    // 1,000 a second, burst 1,000: a lease of 10 is back in 10 ms, held 100.
    let long = limit(1_000, 1_000_000_000, 1_000);
    assert_eq!(p.hold_ns(10, 0, 0, &long, true), 100 * MS, "a lease period");
    assert_eq!(p.denial_hold_ns(10, 1, MS, &long, true), 100 * MS);
}

#[test]
fn a_node_that_found_the_bucket_fuller_than_its_lease_calls_sooner() {
    let p = LeasePolicy::default();
    // 10 a second, burst 100; a lease period is 100 ms.
    let bucket = limit(100, 10_000_000_000, 100);
    // A grant that drained the bucket: held until a lease (10) has
    // refilled.
    assert_eq!(p.hold_ns(10, 0, 0, &bucket, true), 1_000 * MS);
    // One that left 2: held until the 8 missing refill (800 ms), less the
    // 200 ms the bucket took to gather the 2 it left.
    assert_eq!(p.hold_ns(10, 2, 0, &bucket, true), 600 * MS);
    // One that left 9: the period (100 ms), less 900 ms: no hold.
    assert_eq!(p.hold_ns(10, 9, 0, &bucket, true), 0);
    // Nearer its share: no hold.
    assert_eq!(p.hold_ns(10, 2, 0, &bucket, false), 0);
}

#[test]
fn a_worker_slices_only_a_hot_key_and_holds_under_a_hundredth_of_the_burst() {
    let l = limit(1_000_000, 1_000 * MS, 1_000_000);
    // 10 ms of 10,000 tokens a second: 100 tokens, well within every cap.
    assert_eq!(worker_slice(&l, 1, 10_000.0, 5_000), 100);
    // Capped at a hundredth of the burst, and at half of the lease.
    assert_eq!(worker_slice(&l, 1, 1e9, u32::MAX), 10_000);
    assert_eq!(worker_slice(&l, 1, 10_000.0, 60), 30);
    // A warm key (10 ms of its demand under two requests) takes its cost
    // alone, as an empty or thin lease does.
    assert_eq!(worker_slice(&l, 1, 199.0, 5_000), 1);
    assert_eq!(worker_slice(&l, 1, 10_000.0, 3), 1);
    assert_eq!(worker_slice(&l, 5, 999.0, 5_000), 5);
    assert_eq!(worker_slice(&l, 5, 1_000.0, 5_000), 10);
    // A small burst is never sliced: a hundredth of 150 is one token.
    let small = limit(1_000, 1_000 * MS, 150);
    assert_eq!(worker_slice(&small, 1, 1e9, u32::MAX), 1);
    // What a worker holds unspent after the request is under burst / 100,
    // and a slice is a tenth of the lease the same demand sizes at most.
    let policy = LeasePolicy::default();
    let set = rule_set();
    let fast = set.rule("fast").unwrap();
    for demand in [0.0, 150.0, 1_000.0, 20_000.0, 1e7] {
        for (cost, l) in [(1, l), (3, l), (1, limit(1_000, 1_000 * MS, 1_000))] {
            let slice = worker_slice(&l, cost, demand, u32::MAX);
            assert!(slice >= cost);
            assert!(slice == cost || slice - cost < l.burst() / WORKER_SLICE_PARTS);
            let lease = policy.lease_size(fast, &l, cost, demand, None, 0.0);
            assert!(
                slice == cost || slice * 10 <= lease,
                "{demand} {slice} {lease}"
            );
        }
    }
    // Negative or broken demand takes the cost alone.
    assert_eq!(worker_slice(&l, 1, -5.0, 5_000), 1);
    assert_eq!(worker_slice(&l, 1, f64::NAN, 5_000), 1);
}
