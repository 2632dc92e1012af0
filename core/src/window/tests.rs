use proptest::prelude::*;

use super::*;
use crate::limit::limit;
use crate::NANOS_PER_SEC;

const SEC: u64 = NANOS_PER_SEC;

fn fixed(requests: u32, per_ns: u64) -> Limit {
    limit(requests, per_ns, 1).with_algorithm(Algorithm::FixedWindow)
}

fn sliding(requests: u32, per_ns: u64) -> Limit {
    limit(requests, per_ns, 1).with_algorithm(Algorithm::SlidingWindow)
}

fn granted(t: Take) -> u32 {
    match t {
        Take::Granted { tokens, .. } => tokens,
        Take::Denied { .. } => 0,
    }
}

fn retry(t: Take) -> u64 {
    match t {
        Take::Denied { retry_after_ns } => retry_after_ns,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn a_window_has_no_burst_of_its_own() {
    let l = limit(10, SEC, 50).with_algorithm(Algorithm::FixedWindow);
    assert_eq!(l.burst(), 10);
    assert_eq!(l.with_algorithm(Algorithm::TokenBucket).burst(), 10);
    assert_eq!(limit(10, SEC, 50).burst(), 50);
}

#[test]
fn a_fixed_window_admits_its_requests_then_denies_until_the_window_ends() {
    // 5 per minute; windows are aligned to the clock's epoch: 60 s, 120 s, ...
    let l = fixed(5, 60 * SEC);
    let mut w = Window::empty();
    let now = 60 * SEC + 15 * SEC;
    for left in (0..5).rev() {
        assert_eq!(
            w.take(&l, now, 1, 1),
            Take::Granted {
                tokens: 1,
                remaining: left,
                reset_ns: 45 * SEC,
            }
        );
    }
    assert_eq!(retry(w.take(&l, now, 1, 1)), 45 * SEC);
    assert_eq!(retry(w.take(&l, 119 * SEC, 1, 1)), SEC);
    // The next window starts from nothing: the whole limit at once.
    assert_eq!(
        w.take(&l, 120 * SEC, 1, 100),
        Take::Granted {
            tokens: 5,
            remaining: 0,
            reset_ns: 60 * SEC,
        }
    );
}

#[test]
fn a_fixed_window_grants_a_lease_between_the_cost_and_what_is_left() {
    let l = fixed(10, SEC);
    let mut w = Window::empty();
    assert_eq!(granted(w.take(&l, 0, 2, 7)), 7);
    assert_eq!(granted(w.take(&l, 0, 2, 7)), 3);
    // The cost does not fit in what is left: nothing is taken.
    assert_eq!(retry(w.take(&l, 0, 1, 1)), SEC);
    assert_eq!(w.parts(), (0, 10, 0));
}

#[test]
fn a_sliding_window_weighs_the_previous_window_by_what_still_overlaps() {
    // 10 per second; the previous window (0-1 s) counted 10.
    let l = sliding(10, SEC);
    let mut w = Window::empty();
    assert_eq!(granted(w.take(&l, 0, 10, 10)), 10);
    // 1.25 s: three quarters of the previous window still within a second: 7.5.
    assert!((w.used_at(&l, SEC + SEC / 4) - 7.5).abs() < 1e-9);
    assert_eq!(
        w.take(&l, SEC + SEC / 4, 1, 100),
        Take::Granted {
            tokens: 2,
            remaining: 0,
            // The current count weighs until the end of the next window.
            reset_ns: SEC * 3 / 4 + SEC,
        }
    );
    // 9.5 used: one more fits once the previous window weighs 8 (1.2 s)...
    assert!((w.used_at(&l, SEC + SEC / 4) - 9.5).abs() < 1e-9);
    // ...which at 1.25 s it already does not: 7.5 + 2 = 9.5, room for none whole.
    let t = retry(w.take(&l, SEC + SEC / 4, 1, 1));
    // previous × (1 − e) + 2 + 1 ≤ 10 → e ≥ 0.3: at 1.3 s, 50 ms from now.
    assert_eq!(t, 50_000_000);
    assert_eq!(granted(w.take(&l, SEC + SEC / 4 + t, 1, 1)), 1);
    assert_eq!(
        granted(w.take(&l, SEC + SEC / 4 + t, 1, 1)),
        0,
        "the weighted count is at the limit"
    );
}

#[test]
fn a_full_sliding_window_waits_into_the_next_one() {
    // 10 per second; 10 counted in the window now running, nothing before.
    let l = sliding(10, SEC);
    let mut w = Window::empty();
    assert_eq!(granted(w.take(&l, 5 * SEC + SEC / 2, 10, 10)), 10);
    // Denied at 5.5 s: the next window starts at 6 s with these 10 weighing in
    // full; a cost of 4 fits once they weigh 6, 0.4 s in: 0.9 s from now.
    assert_eq!(retry(w.take(&l, 5 * SEC + SEC / 2, 4, 4)), 900_000_000);
    assert_eq!(granted(w.take(&l, 6 * SEC + 399_000_000, 4, 4)), 0);
    assert_eq!(granted(w.take(&l, 6 * SEC + 400_000_000, 4, 4)), 4);
    // A cost above the limit never fits: told to wait for the whole limit.
    let mut w = Window::empty();
    assert_eq!(granted(w.take(&l, 0, 10, 10)), 10);
    assert_eq!(retry(w.take(&l, 0, 50, 50)), 2 * SEC);
}

#[test]
fn two_windows_back_nothing_weighs_and_the_state_is_idle() {
    let l = sliding(3, SEC);
    let mut w = Window::empty();
    assert_eq!(granted(w.take(&l, 0, 3, 3)), 3);
    assert!(!w.is_idle(&l, SEC + 1));
    assert!(w.is_idle(&l, 2 * SEC));
    assert_eq!(w.used_at(&l, 2 * SEC), 0.0);
    let f = fixed(3, SEC);
    let mut w = Window::empty();
    assert_eq!(granted(w.take(&f, 0, 3, 3)), 3);
    assert!(!w.is_idle(&f, SEC - 1));
    assert!(w.is_idle(&f, SEC));
}

#[test]
fn a_clock_stepping_back_keeps_the_latest_counts() {
    let l = fixed(3, SEC);
    let mut w = Window::empty();
    assert_eq!(granted(w.take(&l, 5 * SEC, 3, 3)), 3);
    // Back into an earlier window: still the count of the latest, not a fresh start.
    assert_eq!(granted(w.take(&l, 4 * SEC, 1, 1)), 0);
    assert_eq!(w.parts(), (5, 3, 0));
}

fn window_limits() -> impl Strategy<Value = Limit> {
    (
        1u32..=50,
        prop::sample::select(vec![1_000_000u64, 250_000_000, SEC, 60 * SEC]),
        any::<bool>(),
    )
        .prop_map(|(r, per, slide)| {
            if slide {
                sliding(r, per)
            } else {
                fixed(r, per)
            }
        })
}

proptest! {
    /// Whatever the traffic: every grant is between the cost and the lease size
    /// asked; after it the count held to the limit is at most `requests`; a
    /// fixed window never counts more than `requests` in one window; and a
    /// denied cost (at most `requests`) fits after exactly the wait announced.
    #[test]
    fn windows_hold_their_limit_and_their_retry_is_enough(
        l in window_limits(),
        steps in prop::collection::vec((0u64..=2_000, 1u32..=60, 0u32..=60), 1..80),
    ) {
        let per = l.per_ns();
        let mut w = Window::empty();
        let mut now = 7 * per;
        let mut per_window = std::collections::HashMap::<u64, u64>::new();
        for (advance, cost, extra) in steps {
            now += advance * per / 1_000;
            let (min, max) = (cost, cost.saturating_add(extra));
            let before = w;
            match w.take(&l, now, min, max) {
                Take::Granted { tokens, remaining, reset_ns } => {
                    prop_assert!(tokens >= min && tokens <= max.max(min));
                    let used = w.used_at(&l, now);
                    prop_assert!(used <= f64::from(l.requests()) + 1e-6, "{used} after {tokens}");
                    prop_assert!(f64::from(remaining) <= f64::from(l.requests()) - used + 1e-6);
                    prop_assert!(reset_ns > 0 && reset_ns <= 2 * per);
                    *per_window.entry(now / per).or_default() += u64::from(tokens);
                    prop_assert!(per_window[&(now / per)] <= u64::from(l.requests()));
                }
                Take::Denied { retry_after_ns } => {
                    prop_assert_eq!(w, before, "a denial counts nothing");
                    prop_assert!(retry_after_ns >= 1 && retry_after_ns <= l.max_wait_ns(1.0));
                    if min <= l.requests() {
                        let mut then = w;
                        let later = now + retry_after_ns;
                        prop_assert!(
                            granted(then.take(&l, later, min, min)) == min,
                            "{:?} denied {} at {}, still denied {} ns later", w, min, now, retry_after_ns
                        );
                        if retry_after_ns > 1 {
                            let mut sooner = w;
                            prop_assert_eq!(
                                granted(sooner.take(&l, later - 1 - retry_after_ns / 1_000, min, min)), 0,
                                "the wait announced is not much longer than needed"
                            );
                        }
                    }
                }
            }
        }
    }
}
