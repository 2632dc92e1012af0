use super::*;
use crate::limit::limit;

#[test]
fn round_trips_and_ignores_other_keys() {
    let mut s = SlotState::empty(42);
    s.grant(10, 5, 1, 100, 7, 1_000);
    let _ = s.fallback_take(&limit(3, 1_000, 3), 10, 1);
    let bytes = s.encode();
    assert_eq!(bytes.len(), ENCODED_LEN);
    assert_eq!(SlotState::claim(Some(&bytes), 42, 10), Some(s));
    // Another key's refilling fail-local bucket keeps the slot; once full
    // again, the slot is free.
    assert_eq!(SlotState::claim(Some(&bytes), 43, 10), None);
    assert_eq!(
        SlotState::claim(Some(&bytes), 43, s.fallback_full_ns),
        Some(SlotState::empty(43))
    );
    assert_eq!(
        SlotState::claim(Some(b"junk"), 42, 0),
        Some(SlotState::empty(42))
    );
    assert_eq!(SlotState::claim(None, 42, 0), Some(SlotState::empty(42)));
    // A lease alone does not hold a slot against another key.
    let mut leased = SlotState::empty(42);
    leased.grant(10, 5, 1, 100, 7, 1_000);
    assert_eq!(
        SlotState::claim(Some(&leased.encode()), 43, 11),
        Some(SlotState::empty(43))
    );
}

#[test]
fn lease_tokens_are_spent_then_expire() {
    let mut s = SlotState::empty(1);
    s.grant(0, 3, 1, 100, 10, 50);
    assert!(matches!(
        s.check(1, 1, u64::MAX, None, false),
        LocalCheck::Taken { remaining: 11, .. }
    ));
    assert!(matches!(
        s.check(2, 1, u64::MAX, None, false),
        LocalCheck::Taken { remaining: 10, .. }
    ));
    assert_eq!(
        s.check(3, 1, u64::MAX, None, false),
        LocalCheck::Miss { in_flight: false }
    );
    s.grant(10, 5, 1, 100, 0, 0);
    // Past its expiry the lease is worth nothing.
    assert_eq!(
        s.check(200, 1, u64::MAX, None, false),
        LocalCheck::Miss { in_flight: false }
    );
}

#[test]
fn denial_cache_rejects_until_its_time() {
    let mut s = SlotState::empty(1);
    s.deny(100, 50);
    assert_eq!(
        s.check(120, 1, u64::MAX, None, false),
        LocalCheck::Denied { retry_after_ns: 30 }
    );
    assert_eq!(
        s.check(150, 1, u64::MAX, None, false),
        LocalCheck::Miss { in_flight: false }
    );
}

#[test]
fn a_lease_is_good_until_its_expiry_and_no_later() {
    let mut s = SlotState::empty(1);
    s.grant(0, 5, 1, 100, 0, 0);
    assert!(matches!(
        s.check(99, 1, u64::MAX, None, false),
        LocalCheck::Taken { .. }
    ));
    assert_eq!(
        s.check(100, 1, u64::MAX, None, false),
        LocalCheck::Miss { in_flight: false }
    );
    // A lease of the longest TTL is kept in full.
    let mut s = SlotState::empty(1);
    s.grant(0, 5, 1, MAX_LEASE_TTL_NS, 0, 0);
    assert!(matches!(
        s.check(0, 1, u64::MAX, None, false),
        LocalCheck::Taken { .. }
    ));
}

#[test]
fn granted_tokens_are_spent_before_a_cached_denial() {
    // A grant, then a denial answering a concurrent ask: the tokens the
    // store already handed to this node are spent first...
    let mut s = SlotState::empty(1);
    s.grant(0, 3, 1, 1_000, 10, 50);
    s.deny(5, 500);
    assert!(matches!(
        s.check(10, 1, u64::MAX, None, false),
        LocalCheck::Taken { .. }
    ));
    assert!(matches!(
        s.check(11, 1, u64::MAX, None, false),
        LocalCheck::Taken { .. }
    ));
    // ...and only then does the cached denial answer.
    assert_eq!(
        s.check(12, 1, u64::MAX, None, false),
        LocalCheck::Denied {
            retry_after_ns: 493
        }
    );
}

#[test]
fn a_colliding_key_never_evicts_a_refilling_fail_local_bucket() {
    let l = limit(2, 1_000_000_000, 2);
    let mut victim = SlotState::empty(1);
    for _ in 0..2 {
        assert!(matches!(
            victim.fallback_take(&l, 0, 1),
            Take::Granted { .. }
        ));
    }
    let bytes = victim.encode();
    // The attacker's key cannot have the slot while the bucket refills...
    assert_eq!(SlotState::claim(Some(&bytes), 2, 1), None);
    // ...so the first key still finds its bucket empty.
    let mut again = SlotState::claim(Some(&bytes), 1, 2).unwrap();
    assert!(matches!(again.fallback_take(&l, 2, 1), Take::Denied { .. }));
    // A second later it is full again, and the slot may change hands.
    assert!(SlotState::claim(Some(&again.encode()), 2, 1_000_000_002).is_some());
}

#[test]
fn a_clock_stepped_back_extends_neither_a_denial_nor_a_lease() {
    let hour = 3_600_000_000_000u64;
    let mut s = SlotState::empty(1);
    s.deny(10 * hour, 1_000);
    // The clock steps back an hour: the denial lasts at most max_wait.
    assert_eq!(
        s.check(9 * hour, 1, 5_000, None, false),
        LocalCheck::Denied {
            retry_after_ns: 5_000
        }
    );
    let mut s = SlotState::empty(1);
    s.grant(10 * hour, 10, 1, 300_000_000, 0, 0);
    assert_eq!(
        s.check(9 * hour, 1, u64::MAX, None, false),
        LocalCheck::Miss { in_flight: false }
    );
    // A lease asked to live a day lives MAX_LEASE_TTL_NS.
    let mut s = SlotState::empty(1);
    s.grant(0, 10, 1, 24 * hour, 0, 0);
    assert_eq!(s.lease.expires_ns, MAX_LEASE_TTL_NS);
}

#[test]
fn a_key_in_use_starts_its_fail_local_bucket_without_a_full_head_start() {
    let l = limit(40, 1_000_000_000, 40);
    let mut cold = SlotState::empty(1);
    let mut hot = SlotState::empty(2);
    hot.lease.demand = 30.0;
    let granted = |s: &mut SlotState| {
        (0..50)
            .filter(|_| matches!(s.fallback_take(&l, 0, 1), Take::Granted { .. }))
            .count()
    };
    assert_eq!(granted(&mut cold), 40);
    assert_eq!(granted(&mut hot), 1, "its leases were its head start");
    let mut leased = SlotState::empty(3);
    leased.grant(0, 5, 1, 300_000_000, 0, 0);
    assert_eq!(granted(&mut leased), 1, "a key with a lease is in use");
}

#[test]
fn one_call_per_key_is_in_flight_until_it_fails_or_its_deadline_passes() {
    let mut s = SlotState::empty(7);
    assert!(s.begin_call(0, 1_000));
    // Another worker's miss finds the call in flight and waits on it.
    assert!(!s.begin_call(10, 1_000));
    assert_eq!(
        s.check(10, 1, u64::MAX, None, false),
        LocalCheck::Miss { in_flight: true }
    );
    // The call failed: the next miss may call again at once.
    s.call_failed();
    assert_eq!(
        s.check(20, 1, u64::MAX, None, false),
        LocalCheck::Miss { in_flight: false }
    );
    assert!(s.begin_call(20, 1_000));
    // A lost answer never wedges the key: past its deadline a new call goes.
    assert!(!s.begin_call(500, 1_000));
    assert!(s.begin_call(1_020, 1_000));
}

#[test]
fn only_a_key_the_slot_knows_nothing_of_starts_cold() {
    let mut s = SlotState::empty(42);
    assert!(s.cold_start(1_000, 50));
    assert!(s.lease.in_flight(1_000), "its call is marked in flight");
    assert!(!s.cold_start(1_001, 50), "one cold start per key");
    let mut granted = SlotState::empty(42);
    granted.grant(1_000, 5, 1, 100, 7, 1_000);
    let mut denied = SlotState::empty(42);
    denied.deny(1_000, 100);
    let mut failed_local = SlotState::empty(42);
    let _ = failed_local.fallback_take(&limit(3, 1_000, 3), 1_000, 1);
    for (known, what) in [
        (granted, "granted"),
        (denied, "denied"),
        (failed_local, "fail-local"),
    ] {
        let mut k = known;
        assert!(!k.cold_start(1_000_000, 50), "{what}");
        assert_eq!(k, known, "{what}: unchanged");
    }
}

#[test]
fn a_call_with_a_timeout_over_two_seconds_stays_in_flight_until_its_answer() {
    // timeout_ms of 5,000 (the end-to-end tests'): the next request, 1 ms
    // later, finds the call out; it neither calls nor starts cold again.
    let five_s = 5_000_000_000;
    let mut s = SlotState::empty(42);
    assert!(s.cold_start(1_000, five_s));
    assert_eq!(
        s.check(1_001_000, 1, u64::MAX, Some(five_s), true),
        LocalCheck::Miss { in_flight: true }
    );
    assert!(!s.cold_start(1_002_000, five_s), "one cold start per key");
    assert!(!s.begin_call(1_002_000, five_s));
    // The mark ends 2 s on, whatever the timeout.
    assert!(s.begin_call(1_000 + MAX_LEASE_TTL_NS, five_s));
}

#[test]
fn a_key_denied_a_moment_ago_is_held_until_its_next_answer_not_made_to_wait() {
    const MS: u64 = 1_000_000;
    let call = Some(5 * MS);
    let denied = || {
        let mut s = SlotState::empty(1);
        s.deny(0, 100 * MS);
        s
    };
    // The first request at the denial's end starts the key's call and is
    // denied for as long as the call may take; the next one, the call out,
    // is denied too and starts nothing.
    let mut s = denied();
    assert_eq!(
        s.check(100 * MS, 1, u64::MAX, call, true),
        LocalCheck::Held {
            retry_after_ns: 5 * MS,
            refill: true
        }
    );
    assert!(s.lease.in_flight(100 * MS));
    assert_eq!(
        s.check(102 * MS, 1, u64::MAX, call, true),
        LocalCheck::Held {
            retry_after_ns: 3 * MS,
            refill: false
        }
    );
    // The rule's own wait bounds the hold's retry.
    assert_eq!(
        s.check(102 * MS, 1, MS, call, true),
        LocalCheck::Held {
            retry_after_ns: MS,
            refill: false
        }
    );
    // Its answer decides: a grant is spent at once.
    s.grant(103 * MS, 5, 0, 100 * MS, 4, 0);
    assert!(matches!(
        s.check(103 * MS, 1, u64::MAX, call, true),
        LocalCheck::Taken { .. }
    ));

    // A lost answer holds nobody past its deadline: the key is asked again,
    // and its requests wait on that call as any miss's.
    let mut s = denied();
    let _ = s.check(100 * MS, 1, u64::MAX, call, true);
    assert_eq!(
        s.check(106 * MS, 1, u64::MAX, call, true),
        LocalCheck::Miss { in_flight: false }
    );

    // Not held: a denial that ended over a round trip ago (1 ms before one
    // is measured), where the caller says no (a schedule edge), on a holder
    // that never refills ahead (an exact rule), or where nobody may wait.
    for (now, hold, call, max_wait) in [
        (101 * MS + 1, true, call, u64::MAX),
        (100 * MS, false, call, u64::MAX),
        (100 * MS, true, None, u64::MAX),
        (100 * MS, true, call, 0),
    ] {
        let mut s = denied();
        assert_eq!(
            s.check(now, 1, max_wait, call, hold),
            LocalCheck::Miss { in_flight: false },
            "{now} {hold} {call:?} {max_wait}"
        );
    }
    // Nor a key whose last answer was a grant.
    let mut s = SlotState::empty(1);
    s.grant(0, 1, 1, 100 * MS, 0, 0);
    assert_eq!(
        s.check(0, 1, u64::MAX, call, true),
        LocalCheck::Miss { in_flight: false }
    );
}
