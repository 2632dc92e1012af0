use std::num::{NonZeroU32, NonZeroU64};

use meshlimit_core::bucket::Bucket;
use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::{DecisionRecord, DecisionSource};
use meshlimit_core::{DescriptorKey, Limit, Outcome};

use super::*;
use crate::test_support::wait_until;
use crate::test_support::Registered;
use meshlimit_core::secret::KeyIds;
use meshlimit_store::{Acquire, MemoryStore};
use meshlimit_tests::sample;

const MS: u64 = 1_000_000;

/// `requests` per second, burst `burst`.
fn limit(requests: u32, burst: u32) -> Limit {
    Limit::new(
        NonZeroU32::new(requests).unwrap(),
        NonZeroU64::new(1_000 * MS).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

fn stored(tokens: f64, updated_ms: u64, now_ms: u64) -> Stored {
    Stored {
        bucket: Bucket::from_parts(tokens, updated_ms * MS),
        now_ns: now_ms * MS,
    }
}

#[test]
fn a_bucket_untouched_since_the_rejection_is_judged_exactly() {
    // Emptied at 0 ms, 10 tokens a second (burst 20), read untouched at 2 s.
    let l = limit(10, 20);
    let s = stored(0.0, 0, 2_000);
    // Rejected at 1,150 ms (850 ms before the reading, a period after the
    // drain): 11.5 tokens held. A cost of 11: false.
    assert!((tokens_at_rejection(Some(&s), &l, 850 * MS) - 11.5).abs() < 1e-6);
    assert!(is_false(Some(&s), &[l], 11, 850 * MS));
    // A cost of 12 then: true.
    assert!(!is_false(Some(&s), &[l], 12, 850 * MS));
    // A rejection exactly at the refill of the cost is false (no rounding miss).
    assert!(is_false(Some(&s), &[l], 12, 800 * MS));
}

#[test]
fn a_bucket_touched_since_the_rejection_counts_only_what_it_proves() {
    let l = limit(10, 10);
    // 5 tokens left after a spend at 900 ms; the rejection at 500 ms.
    // At most 4 tokens refilled from 500 to 900 ms, so at least 1 was held.
    assert!((tokens_at_rejection(Some(&stored(5.0, 900, 1_000)), &l, 500 * MS) - 1.0).abs() < 1e-6);
    assert!(is_false(Some(&stored(5.0, 900, 1_000)), &[l], 1, 500 * MS));
    // 4 tokens left: the bucket may have been empty at 500 ms. Not counted.
    assert!(!is_false(Some(&stored(4.0, 900, 1_000)), &[l], 1, 500 * MS));
    // Never below zero.
    assert_eq!(
        tokens_at_rejection(Some(&stored(0.0, 900, 1_000)), &l, 500 * MS),
        0.0
    );
}

#[test]
fn no_bucket_in_the_store_is_a_full_one_less_the_refill_over_the_delay() {
    let l = limit(10, 3);
    // Full (3) now, 100 ms after the rejection: at least 2 then. False.
    assert!(is_false(None, &[l], 1, 100 * MS));
    assert!(is_false(None, &[l], 2, 100 * MS));
    assert!(!is_false(None, &[l], 3, 100 * MS));
    // 300 ms after: the bucket may have been empty. Not counted.
    assert!(!is_false(None, &[l], 1, 300 * MS));
}

#[test]
fn a_plan_rule_is_false_only_under_every_plan() {
    let slow = limit(1, 1);
    let fast = limit(100, 100);
    // Emptied at 0, rejected at 1,500 ms, a cost of 2: the fast plan held
    // 100 tokens, the slow one its burst of 1.
    let s = stored(0.0, 0, 2_000);
    assert!(is_false(Some(&s), &[fast], 2, 500 * MS));
    assert!(!is_false(Some(&s), &[fast, slow], 2, 500 * MS));
    assert!(!is_false(Some(&s), &[], 2, 500 * MS));
}

const RULES: &str = "version: 1
rules:
  - {name: slow, key: [{header: x-k}], limit: {requests: 2, per: 1h}}
  - {name: world, key: [{header: x-k}], limit: {requests: 1, per: 1h}, scope: global}
";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn record(rule: &str, key_id: &str, source: DecisionSource, decision: Outcome) -> DecisionRecord {
    DecisionRecord {
        at_ms: now_ms(),
        rule: rule.into(),
        rules_version: "v".into(),
        decision,
        key_id: key_id.into(),
        key: None,
        source,
        tokens: Some(0),
        retry_after_ms: Some(1_000),
        sample_rate: 1.0,
        request_id: None,
    }
}

/// A sample of the metrics, their gauges brought up to date.
fn read(m: &Registered<FalseLimitMetrics>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m.refresh();
    sample(&m.render().unwrap(), name, labels)
}

/// `slow`'s checked 429s and the suspects skipped for the budget.
fn checked_and_skipped(m: &Registered<FalseLimitMetrics>) -> (f64, f64) {
    let checked = read(m, "meshlimit_false_limit_checks_total", &[("rule", "slow")]);
    let skipped = read(
        m,
        "meshlimit_false_limit_checks_skipped_total",
        &[("reason", "budget")],
    );
    (checked.unwrap_or(0.0), skipped.unwrap_or(0.0))
}

#[tokio::test]
async fn suspects_are_peeked_in_the_store_and_the_stores_own_denials_are_true() {
    let rules = Arc::new(CurrentRules::empty());
    let set = Arc::new(parse_rules("t", RULES).unwrap());
    rules.install(set.clone());
    let metrics = Registered::new(FalseLimitMetrics::new);
    let store = Arc::new(MemoryStore::new());
    let key = |k: &str| DescriptorKey::new("slow", [k]);
    let id = |k: &str| KeyIds::placeholder().id(&key(k)).to_string();
    // `drained` spent its two tokens an hour: any 429 of it now is true.
    let l = set.rule("slow").unwrap().limit_in_force(None, 0).limit;
    let took = store
        .acquire(&[Acquire {
            key: key("drained"),
            limit: l,
            min: 2,
            max: 2,
            share: 1.0,
        }])
        .await;
    assert!(matches!(took[0], Ok(meshlimit_core::Take::Granted { .. })));
    let checker = FalseLimits::start(rules, store, metrics.clone(), KeyIds::placeholder());
    checker.observe(&[
        // Held a denial for a key whose bucket is full: false.
        record(
            "slow",
            &id("fresh"),
            DecisionSource::DenialCache,
            Outcome::Limited,
        ),
        // A filter's record of the node pool's denial: offered by the agent
        // when it answered (below), not again.
        record(
            "slow",
            &id("drained"),
            DecisionSource::AgentPool,
            Outcome::Limited,
        ),
        // The store said no: true, without a peek.
        record(
            "slow",
            &id("fresh"),
            DecisionSource::Store,
            Outcome::Limited,
        ),
        // Not 429s of the store's bucket: not counted.
        record(
            "slow",
            &id("fresh"),
            DecisionSource::FailurePolicy,
            Outcome::Limited,
        ),
        record(
            "slow",
            &id("fresh"),
            DecisionSource::DenialCache,
            Outcome::Allowed,
        ),
        record(
            "gone",
            &id("fresh"),
            DecisionSource::DenialCache,
            Outcome::Limited,
        ),
        // A global rule's share is not known by key id: skipped, said why.
        record(
            "world",
            &id("fresh"),
            DecisionSource::DenialCache,
            Outcome::Limited,
        ),
    ]);
    // The node pool held the drained key: checked at once, true.
    checker.pool_denied(set.rule("slow").unwrap(), &key("drained"));
    let get = |name: &str, labels: &[(&str, &str)]| read(&metrics, name, labels);
    wait_until("three checks of `slow`", || {
        get("meshlimit_false_limit_checks_total", &[("rule", "slow")]) == Some(3.0)
            && get(
                "meshlimit_false_limit_checks_skipped_total",
                &[("reason", "global_rule")],
            ) == Some(1.0)
    })
    .await;
    assert_eq!(
        get("meshlimit_false_limits_total", &[("rule", "slow")]),
        Some(1.0)
    );
    let ratio = get("meshlimit_false_limit_ratio", &[("rule", "slow")]).unwrap();
    assert!((ratio - 1.0 / 3.0).abs() < 1e-9, "{ratio}");
    assert_eq!(
        get("meshlimit_false_limit_checks_total", &[("rule", "world")]),
        None
    );
}

// Tokio's clock paused: the budget's second ends when the test says.
#[tokio::test(start_paused = true)]
async fn checks_past_the_budget_are_skipped_and_weigh_in_the_ratio() {
    let rules = Arc::new(CurrentRules::empty());
    rules.install(Arc::new(parse_rules("t", RULES).unwrap()));
    let metrics = Registered::new(FalseLimitMetrics::new);
    let checker = FalseLimits::start(
        rules,
        Arc::new(MemoryStore::new()),
        metrics.clone(),
        KeyIds::placeholder(),
    );
    let id = KeyIds::placeholder()
        .id(&DescriptorKey::new("slow", ["fresh"]))
        .to_string();
    // One store-confirmed 429, then twice a second's budget of false suspects.
    let n = 2 * CHECKS_PER_SECOND as usize;
    let mut batch = vec![record("slow", &id, DecisionSource::Store, Outcome::Limited)];
    batch
        .extend((0..n).map(|_| record("slow", &id, DecisionSource::DenialCache, Outcome::Limited)));
    checker.observe(&batch);
    let get = |name: &str, labels: &[(&str, &str)]| read(&metrics, name, labels);
    wait_until("every suspect checked or skipped", || {
        let (checked, skipped) = checked_and_skipped(&metrics);
        checked + skipped == (n + 1) as f64
    })
    .await;
    let (checked, skipped) = checked_and_skipped(&metrics);
    // The budget holds (the test may straddle two seconds: two budgets at most).
    assert!(skipped > 0.0, "nothing skipped");
    assert!(
        checked - 1.0 <= f64::from(2 * CHECKS_PER_SECOND),
        "{checked}"
    );
    // The skipped suspects weigh with the next check of the rule: once it is
    // done, the ratio is that of every 429 (all false but the store's). (Two
    // seconds on: the sampler takes it for sure after a quiet second.)
    tokio::time::advance(Duration::from_secs(2)).await;
    checker.observe(&[record(
        "slow",
        &id,
        DecisionSource::DenialCache,
        Outcome::Limited,
    )]);
    let want = (n as f64 + 1.0) / (n as f64 + 2.0);
    wait_until("the ratio over every 429", || {
        get("meshlimit_false_limit_ratio", &[("rule", "slow")])
            .is_some_and(|r| (r - want).abs() < 1e-9)
    })
    .await;
    assert_eq!(
        get("meshlimit_false_limits_total", &[("rule", "slow")]),
        Some(checked)
    );
    // The weighed counters, summable over nodes, carry the same ratio.
    assert_eq!(
        get("meshlimit_false_limit_weighed_total", &[("rule", "slow")]),
        Some(n as f64 + 2.0)
    );
    assert_eq!(
        get(
            "meshlimit_false_limit_weighed_false_total",
            &[("rule", "slow")]
        ),
        Some(n as f64 + 1.0)
    );
}

#[test]
fn a_bucket_drained_within_the_period_before_the_rejection_proves_no_false_limit() {
    // 10 a second, burst 10: a period of one second.
    let l = limit(10, 10);
    // Drained by a lease at 0 ms, untouched since; rejected at 500 ms: 5
    // tokens refilled, but the key spent its limit within the period before
    // (a node's hold after a drained grant): true.
    let s = stored(0.0, 0, 1_000);
    assert!((tokens_at_rejection(Some(&s), &l, 500 * MS) - 5.0).abs() < 1e-6);
    assert!(drained_within_period(Some(&s), &l, 1, 500 * MS));
    assert!(!is_false(Some(&s), &[l], 1, 500 * MS));
    // Rejected 1.5 s after the drain: a whole period without a drain, the
    // bucket full again: false.
    let s = stored(0.0, 0, 2_000);
    assert!(!drained_within_period(Some(&s), &l, 1, 500 * MS));
    assert!(is_false(Some(&s), &[l], 1, 500 * MS));
    // The same on a store clock far from zero (Redis's is Unix time): the
    // period counts from the drain, not from the clock's start.
    let unix_ms = 1_700_000_000_000;
    let s = stored(0.0, unix_ms, unix_ms + 1_000);
    assert!(drained_within_period(Some(&s), &l, 1, 500 * MS));
    let s = stored(0.0, unix_ms, unix_ms + 2_000);
    assert!(!drained_within_period(Some(&s), &l, 1, 500 * MS));
    // A last update that left less than a lease (a tenth of the burst, 1
    // token here) or the cost drained it; one that left both did not: false.
    let s = stored(3.0, 0, 1_000);
    assert!(drained_within_period(Some(&s), &l, 4, 500 * MS));
    assert!(!drained_within_period(Some(&s), &l, 1, 500 * MS));
    assert!(is_false(Some(&s), &[l], 1, 500 * MS));
    let wide = limit(10, 100);
    assert!(drained_within_period(Some(&s), &wide, 1, 500 * MS));
    assert!(!drained_within_period(
        Some(&stored(10.0, 0, 1_000)),
        &wide,
        1,
        500 * MS
    ));
    // No bucket in the store: a full one, never drained.
    assert!(!drained_within_period(None, &l, 1, 0));
}

#[test]
fn the_sampler_takes_suspects_across_the_whole_second_within_the_budget() {
    let base = Instant::now();
    let mut sampler = Sampler::new(base, 7);
    let at = |ms: u64| base + Duration::from_millis(ms);
    // A second of 1,000 suspects, then another: in the second one each is
    // taken with probability 10 in 1,000.
    for i in 0..1_000 {
        sampler.take(at(i), CHECKS_PER_SECOND);
    }
    let taken: Vec<u64> = (0..1_000)
        .filter(|i| sampler.take(at(1_000 + i), CHECKS_PER_SECOND))
        .collect();
    assert!(
        (3..=CHECKS_PER_SECOND as usize).contains(&taken.len()),
        "{taken:?}"
    );
    // Spread over the second, not the first ones to come.
    assert!(taken.iter().any(|&i| i >= 500), "{taken:?}");
    assert!(taken.iter().any(|&i| i < 500), "{taken:?}");
    // A budget of 0 takes none.
    assert!((0..100).all(|i| !sampler.take(at(3_000 + i), 0)));
}

#[test]
fn after_a_silent_second_the_sampler_starts_afresh() {
    let base = Instant::now();
    let mut sampler = Sampler::new(base, 7);
    let at = |ms: u64| base + Duration::from_millis(ms);
    for i in 0..1_000 {
        sampler.take(at(i), CHECKS_PER_SECOND);
    }
    // Nothing from 1 s to 2 s: at 2 s the second before held no suspect, so
    // the few now are all checked (not each at 10 in 1,000).
    let taken = (0..5)
        .filter(|_| sampler.take(at(2_000), CHECKS_PER_SECOND))
        .count();
    assert_eq!(taken, 5);
}
