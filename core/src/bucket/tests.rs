use proptest::prelude::*;

use super::*;
use crate::limit::limit;
use crate::NANOS_PER_SEC;

#[test]
fn starts_full_and_denies_when_empty() {
    let l = limit(10, NANOS_PER_SEC, 10);
    let mut b = Bucket::full(&l, 0);
    for _ in 0..10 {
        assert!(matches!(
            b.take(&l, 0, 1, 1),
            Take::Granted { tokens: 1, .. }
        ));
    }
    match b.take(&l, 0, 1, 1) {
        Take::Denied { retry_after_ns } => assert_eq!(retry_after_ns, 100_000_000),
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn grants_a_lease_up_to_what_is_held() {
    let l = limit(100, NANOS_PER_SEC, 100);
    let mut b = Bucket::full(&l, 0);
    // 100 per second: the 30 taken refill in 300 ms, all 100 in a second.
    assert_eq!(
        b.take(&l, 0, 1, 30),
        Take::Granted {
            tokens: 30,
            remaining: 70,
            reset_ns: 300_000_000,
        }
    );
    assert_eq!(
        b.take(&l, 0, 1, 500),
        Take::Granted {
            tokens: 70,
            remaining: 0,
            reset_ns: NANOS_PER_SEC,
        }
    );
}

#[test]
fn a_bucket_is_full_only_once_it_has_refilled_to_its_burst() {
    // 10 per second: one token every 100 ms.
    let l = limit(10, NANOS_PER_SEC, 10);
    let mut b = Bucket::full(&l, 0);
    assert!(b.is_full(&l, 0));
    assert!(matches!(b.take(&l, 0, 1, 1), Take::Granted { .. }));
    assert!(!b.is_full(&l, 0));
    assert!(!b.is_full(&l, 99_999_999));
    assert!(b.is_full(&l, 100_000_000));
    assert!(b.is_full(&l, 10 * NANOS_PER_SEC));
}

#[test]
fn a_denial_waits_only_for_the_missing_part_of_a_token() {
    let l = limit(10, NANOS_PER_SEC, 10);
    let mut b = Bucket::full(&l, 0);
    assert!(matches!(
        b.take(&l, 0, 10, 10),
        Take::Granted { tokens: 10, .. }
    ));
    // Half a token has refilled after 50 ms: the other half takes 50 ms more.
    assert_eq!(
        b.take(&l, 50_000_000, 1, 1),
        Take::Denied {
            retry_after_ns: 50_000_000
        }
    );
}

#[test]
fn refills_at_the_rate() {
    let l = limit(10, NANOS_PER_SEC, 10);
    let mut b = Bucket::full(&l, 0);
    assert!(matches!(
        b.take(&l, 0, 10, 10),
        Take::Granted { tokens: 10, .. }
    ));
    // Half a second later five tokens are back.
    assert!(matches!(
        b.take(&l, NANOS_PER_SEC / 2, 1, 100),
        Take::Granted { tokens: 5, .. }
    ));
}

#[test]
fn cost_above_burst_is_denied_not_looped() {
    let l = limit(1, NANOS_PER_SEC, 2);
    let mut b = Bucket::full(&l, 0);
    assert!(matches!(b.take(&l, 0, 5, 5), Take::Denied { .. }));
}

#[test]
fn a_clock_stepping_back_refills_nothing() {
    let l = limit(10, NANOS_PER_SEC, 10);
    let mut b = Bucket::full(&l, 5 * NANOS_PER_SEC);
    assert!(matches!(
        b.take(&l, 5 * NANOS_PER_SEC, 10, 10),
        Take::Granted { .. }
    ));
    assert!(matches!(b.take(&l, 0, 1, 1), Take::Denied { .. }));
}

proptest! {
    // Over any sequence of takes, the tokens granted never exceed the burst plus
    // what the rate refilled over the elapsed time, the bucket never goes negative
    // and never holds more than the burst.
    #[test]
    fn never_grants_more_than_burst_plus_refill(
        requests in 1u32..1_000,
        per_ms in 1u64..10_000,
        burst in 1u32..2_000,
        steps in proptest::collection::vec((0u64..50_000_000, 1u32..5, 1u32..50), 1..200),
    ) {
        let l = limit(requests, per_ms * 1_000_000, burst);
        let mut b = Bucket::full(&l, 0);
        let mut now = 0u64;
        let mut granted = 0u64;
        for (dt, min, extra) in steps {
            now += dt;
            if let Take::Granted { tokens, .. } = b.take(&l, now, min, min + extra) {
                prop_assert!(tokens >= min && tokens <= min + extra);
                granted += u64::from(tokens);
            }
            let held = b.tokens_at(&l, now);
            prop_assert!(held >= 0.0);
            prop_assert!(held <= f64::from(l.burst()));
        }
        let ceiling = f64::from(burst) + now as f64 * l.rate_per_ns();
        prop_assert!(granted as f64 <= ceiling + 1e-6, "granted {granted} > {ceiling}");
    }

    // A denial's retry time is honest: after waiting it, the same take succeeds.
    #[test]
    fn retry_after_is_enough(requests in 1u32..1_000, per_ms in 1u64..10_000, burst in 1u32..100, cost in 1u32..100) {
        let l = limit(requests, per_ms * 1_000_000, burst);
        prop_assume!(cost <= burst);
        let mut b = Bucket::full(&l, 0);
        let _ = b.take(&l, 0, burst, burst);
        if let Take::Denied { retry_after_ns } = b.take(&l, 0, cost, cost) {
            let granted = matches!(b.take(&l, retry_after_ns, cost, cost), Take::Granted { .. });
            prop_assert!(granted);
        }
    }
}
