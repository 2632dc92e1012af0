use std::num::{NonZeroU32, NonZeroU64};

use super::*;

const MS: u64 = 1_000_000;

fn limit(requests: u32, per_ms: u64, burst: u32) -> Limit {
    Limit::new(
        NonZeroU32::new(requests).unwrap(),
        NonZeroU64::new(per_ms * MS).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

#[test]
fn rejecting_a_key_under_its_limit_is_wrong() {
    // 10 per second, burst 10, offered 5 per second.
    let mut j = Judge::new(limit(10, 1_000, 10), 1);
    for i in 0..50 {
        let t = i * 200 * MS;
        assert!(j.arrive(t));
        assert!(j.rejected(t, true));
    }
}

#[test]
fn an_overloaded_key_is_not_judged_until_a_quiet_period() {
    // Burst 2, 2 per second: three arrivals at once overflow it.
    let mut j = Judge::new(limit(2, 1_000, 2), 1);
    assert!(j.arrive(0));
    assert!(j.arrive(0));
    assert!(!j.arrive(0));
    // Admitted by the ideal bucket half a second later, but the key was over its
    // limit within the period before: a rejection is not judged.
    assert!(j.arrive(500 * MS));
    assert!(!j.rejected(500 * MS, true));
    // A whole period after the last overflow it is judged again.
    assert!(j.arrive(1_600 * MS));
    assert!(j.rejected(1_600 * MS, true));
}

#[test]
fn a_rejection_decided_after_the_key_reached_its_limit_is_not_wrong() {
    // The race: one token, two asks at once. The first arrival is admitted by the
    // ideal bucket, but the store served the second first.
    let mut j = Judge::new(limit(1, 3_600_000, 1), 1);
    assert!(j.arrive(0));
    assert!(!j.arrive(0));
    assert!(!j.admitted(0, 2 * MS));
    assert!(!j.rejected(0, true));
}

#[test]
fn admissions_beyond_burst_plus_rate_are_wrongly_allowed_once_each() {
    let mut j = Judge::new(limit(1, 1_000, 2), 1);
    j.arrive(0);
    assert!(!j.admitted(0, 0));
    assert!(!j.admitted(0, 0));
    // A third at once: over burst 2.
    assert!(j.admitted(0, 0));
    // It did not spend the replay's tokens: one second later one token is back.
    assert!(!j.admitted(1_000 * MS, 1_000 * MS));
    assert!(j.admitted(1_000 * MS, 1_000 * MS));
}

#[test]
fn an_exact_limiter_at_three_times_the_limit_is_never_wrong() {
    // The store's own bucket decides; the judge replays the same decisions.
    let l = limit(100, 1_000, 100);
    let mut store = Bucket::full(&l, 0);
    let mut j = Judge::new(l, 1);
    let (mut wrong, mut admitted) = (0, 0);
    for i in 0..3_000u64 {
        let t = i * 1_000 * MS / 300; // 300/s for 10 s
        let ideal = j.arrive(t);
        match store.take(&l, t, 1, 1) {
            Take::Granted { .. } => {
                admitted += 1;
                wrong += u32::from(j.admitted(t, t));
            }
            Take::Denied { .. } => {
                wrong += u32::from(j.rejected(t, ideal));
                assert!(!j.held_back(t));
            }
        }
    }
    assert_eq!(wrong, 0);
    // Burst, then the rate: 100 + 100/s × 10 s.
    assert!((1_099..=1_101).contains(&admitted), "{admitted}");
}

#[test]
fn tokens_left_unspent_show_as_held_back() {
    let mut j = Judge::new(limit(10, 1_000, 10), 1);
    j.arrive(0);
    // Nothing admitted yet: the replay still holds the burst.
    assert!(j.held_back(0));
    for _ in 0..10 {
        assert!(!j.admitted(0, 0));
    }
    assert!(!j.held_back(0));
    assert!(j.held_back(100 * MS));
}

#[test]
fn a_late_decision_on_a_full_bucket_is_not_wrongly_allowed() {
    // 500/s, burst 2. The store admits two at once at t = 0 and a third 2 ms
    // later (one token refilled); the first decisions reach the gateways 5 ms
    // after their arrival, when the replay starts. The replay's cap stretches by
    // the refill of each request's wait, so the store's answer stands.
    let mut j = Judge::new(limit(500, 1_000, 2), 1);
    j.arrive(0);
    assert!(!j.admitted(0, 5 * MS));
    assert!(!j.admitted(0, 5 * MS));
    assert!(!j.admitted(2 * MS, 6 * MS));
    // By 6 ms the bucket allowed 2 + 3 tokens: two more, not three.
    assert!(!j.admitted(6 * MS, 6 * MS));
    assert!(!j.admitted(6 * MS, 6 * MS));
    assert!(j.admitted(6 * MS, 6 * MS));
}

fn window(requests: u32, per_ms: u64, algorithm: meshlimit_core::Algorithm) -> Limit {
    limit(requests, per_ms, 1).with_algorithm(algorithm)
}

#[test]
fn a_sliding_window_is_judged_against_the_exact_sliding_log() {
    use meshlimit_core::Algorithm;
    // 4 per second: the log admits 4 in any second, whatever the window edges.
    let l = window(4, 1_000, Algorithm::SlidingWindow);
    let mut j = Judge::new(l, 1).aligned(7 * 1_000 * MS);
    // Four arrivals late in one window: all fit the log.
    for t in [900, 910, 920, 930] {
        assert!(j.arrive(t * MS));
        assert!(!j.admitted(t * MS, t * MS));
    }
    // Just after the edge the log still holds 4: the ideal refuses, and an
    // admission there (what a fixed window would do) is wrongly allowed.
    assert!(!j.arrive(1_100 * MS));
    assert!(j.admitted(1_100 * MS, 1_100 * MS));
    assert!(!j.held_back(1_100 * MS));
    // A second after the first, it has slid out: room for one.
    assert!(j.held_back(1_900 * MS));
    assert!(!j.admitted(1_900 * MS, 1_900 * MS));
    assert!(!j.held_back(1_905 * MS));
}

#[test]
fn a_fixed_window_is_judged_in_windows_aligned_to_the_unix_epoch() {
    use meshlimit_core::Algorithm;
    let l = window(2, 1_000, Algorithm::FixedWindow);
    // The judge's clock starts 400 ms into a Unix second: its windows end at
    // 600 ms, 1,600 ms, ... of its own clock.
    let mut j = Judge::new(l, 1).aligned(1_000_000 * 1_000 * MS + 400 * MS);
    assert!(j.arrive(0));
    assert!(j.arrive(100 * MS));
    assert!(!j.arrive(500 * MS));
    assert!(j.arrive(600 * MS), "a new window at the Unix second");
    assert!(!j.admitted(0, 0));
    assert!(!j.admitted(100 * MS, 100 * MS));
    assert!(j.admitted(500 * MS, 500 * MS), "a third in one window");
    // Arrived in a full window, decided in the next: counted in the new one.
    assert!(!j.admitted(590 * MS, 610 * MS));
    assert!(!j.admitted(620 * MS, 620 * MS));
    assert!(j.admitted(630 * MS, 630 * MS));
    assert!(!j.held_back(700 * MS));
    assert!(j.held_back(1_600 * MS));
}
