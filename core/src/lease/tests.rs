use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

#[test]
fn the_take_that_crosses_the_mark_is_served_and_starts_one_refill() {
    let mut l = Lease {
        demand: 1_000.0,
        rtt_us: 1_000,
        ..Lease::default()
    };
    l.grant(0, 10, 0, 300 * MS);
    // 1,000/s over two 1 ms round trips: a reserve of 2 tokens (+ the cost).
    let mut left = 10;
    let refilled_at = loop {
        match l.take(MS, 1, Some(50 * MS)) {
            Spend::Taken { left: n, refill } => {
                assert_eq!(n, left - 1);
                left = n;
                if refill {
                    break n;
                }
            }
            other => panic!("{other:?}"),
        }
    };
    assert!(
        (2..=3).contains(&refilled_at),
        "refilled with {refilled_at} left"
    );
    // Single flight: the next takes are served and start nothing more.
    for n in (0..refilled_at).rev() {
        assert_eq!(
            l.take(MS, 1, Some(50 * MS)),
            Spend::Taken {
                left: n,
                refill: false
            }
        );
    }
    assert_eq!(
        l.take(MS, 1, Some(50 * MS)),
        Spend::Empty { in_flight: true }
    );
    // The refill's answer, 2 ms later, measures the round trip.
    l.grant(3 * MS, 10, 0, 300 * MS);
    assert!(!l.in_flight(3 * MS));
    assert_eq!(l.rtt_us, 1_200, "a fifth of the way from 1 ms to 2 ms");
}

#[test]
fn no_refill_starts_while_a_denial_holds() {
    let mut l = Lease {
        demand: 1_000.0,
        rtt_us: 1_000,
        ..Lease::default()
    };
    l.grant(0, 4, 0, 300 * MS);
    l.deny(0, 10 * MS);
    // Granted tokens are spent first, and the mark starts nothing...
    assert_eq!(
        l.take(MS, 1, Some(MS)),
        Spend::Taken {
            left: 3,
            refill: false
        }
    );
    // ...until the hold is over.
    assert_eq!(
        l.take(10 * MS, 1, Some(MS)),
        Spend::Taken {
            left: 2,
            refill: true
        }
    );
}

#[test]
fn a_grant_carrying_a_turn_is_spent_then_denied_until_the_turn() {
    let mut l = Lease {
        demand: 1_000.0,
        rtt_us: 1_000,
        ..Lease::default()
    };
    assert!(l.begin_call(0, MS));
    l.grant(0, 3, 0, 300 * MS);
    l.deny_after_tokens(0, 50 * MS);
    // The tokens first, with no refill ahead (the turn says when to ask)...
    for left in (0..3).rev() {
        assert_eq!(
            l.take(MS, 1, Some(MS)),
            Spend::Taken {
                left,
                refill: false
            }
        );
    }
    // ...then rejected until the turn, without a call...
    assert_eq!(
        l.take(2 * MS, 1, Some(MS)),
        Spend::Denied {
            retry_after_ns: 48 * MS
        }
    );
    // ...and at the turn, a call.
    assert_eq!(
        l.take(50 * MS, 1, Some(MS)),
        Spend::Empty { in_flight: false }
    );
}

#[test]
fn a_thin_holder_asks_for_its_cost_and_never_refills_ahead() {
    // 10/s over a 300 ms lease: 3 tokens a life, below the mark of 4.
    let mut l = Lease {
        demand: 10.0,
        rtt_us: 100_000,
        ..Lease::default()
    };
    l.grant(0, 2, 0, 300 * MS);
    assert!(!l.is_thick());
    assert_eq!(l.want(200 * MS, 1), None);
    assert_eq!(
        l.take(MS, 1, Some(MS)),
        Spend::Taken {
            left: 1,
            refill: false
        }
    );
    // 13/s is 3.9 tokens a life, still thin; 20/s is thick: it asks ahead
    // and refills.
    l.demand = 13.0;
    assert_eq!(l.want(200 * MS, 1), None);
    l.demand = 20.0;
    assert_eq!(l.want(200 * MS, 1), Some(4));
    assert_eq!(
        l.take(MS, 1, Some(MS)),
        Spend::Taken {
            left: 0,
            refill: true
        }
    );
}

#[test]
fn a_lost_answer_never_wedges_the_key() {
    let mut l = Lease::default();
    assert!(l.begin_call(10, 50));
    assert!(!l.begin_call(20, 50), "single flight");
    assert_eq!(l.take(59, 1, Some(50)), Spend::Empty { in_flight: true });
    // Past the deadline another call may start.
    assert_eq!(l.take(60, 1, Some(50)), Spend::Empty { in_flight: false });
    assert!(l.begin_call(60, 50));
    l.failed();
    assert!(l.begin_call(61, 50));
}

#[test]
fn a_lease_about_to_expire_refills_ahead() {
    let mut l = Lease {
        demand: 1_000.0,
        rtt_us: 1_000,
        ..Lease::default()
    };
    l.grant(0, 100, 0, 10 * MS);
    assert!(matches!(
        l.take(7 * MS, 1, Some(MS)),
        Spend::Taken { refill: false, .. }
    ));
    // Within two round trips of its expiry.
    assert!(matches!(
        l.take(9 * MS, 1, Some(MS)),
        Spend::Taken { refill: true, .. }
    ));
}

#[test]
fn the_next_ask_is_sized_by_the_demand_over_wall_clock_time() {
    let mut l = Lease::default();
    assert_eq!(l.want(100 * MS, 1), None, "nothing asked yet");
    l.grant(0, 1_000, 0, 10_000 * MS);
    // 100 tokens a second, asked a token every 10 ms for 3 s.
    for i in 1..=300 {
        assert!(matches!(l.take(i * 10 * MS, 1, None), Spend::Taken { .. }));
    }
    // The decaying count settles near the rate (a discrete sum of
    // e^-0.01k: 1 / (1 - e^-0.01) ≈ 100.5, 95% of the way after 3 s).
    assert!((94.0..=101.0).contains(&l.demand), "{}", l.demand);
    // 100 ms of it.
    assert_eq!(l.want(100 * MS, 1), Some(10));
    assert_eq!(l.want(100 * MS, 20), Some(20), "never below the cost");
    // Requests that find nothing count too: demand is what was asked for.
    let mut dry = Lease::default();
    for i in 1..=300 {
        assert!(matches!(
            dry.take(i * 10 * MS, 1, None),
            Spend::Empty { .. }
        ));
    }
    assert!(dry.demand > 90.0);
}

#[test]
fn a_lease_that_expired_unspent_lowers_the_demand_to_what_was_spent() {
    let mut l = Lease::default();
    // A burst: 1,000 tokens a second for a second.
    for i in 1..=1_000 {
        l.take(i * MS, 1, None);
    }
    assert!(l.demand > 600.0, "{}", l.demand);
    // Then a lease of 150 tokens for 300 ms, of which 15 are spent.
    let start = 1_001 * MS;
    l.grant(start, 150, 0, 300 * MS);
    for i in 0..15 {
        l.take(start + i * 20 * MS, 1, None);
    }
    // Expired with 135 unspent: the holder asked for 50 a second, not the
    // hundreds the decaying count still says.
    l.take(start + 301 * MS, 1, None);
    // 15 spent over the lease's 300 ms (50 a second), plus this take's token.
    assert!((l.demand - 51.0).abs() < 0.01, "{}", l.demand);
    assert_eq!(
        l.next_ask(1),
        Some(8),
        "half a life of 51/s, not of the burst"
    );
    // A lease spent to the last token says nothing about the demand.
    let mut busy = Lease::default();
    for i in 1..=1_000 {
        busy.take(i * MS, 1, None);
    }
    busy.grant(1_001 * MS, 10, 0, 300 * MS);
    for i in 0..10 {
        busy.take(1_001 * MS + i * MS, 1, None);
    }
    busy.take(1_400 * MS, 1, None);
    assert!(busy.demand > 400.0, "{}", busy.demand);
}

#[test]
fn the_demand_decays_with_a_time_constant_of_a_second() {
    let mut l = Lease::default();
    l.add_demand(10 * MS, 10);
    assert!((l.demand_per_sec(10 * MS) - 10.0).abs() < 1e-9);
    let later = l.demand_per_sec(1_010 * MS);
    assert!((later - 10.0 / std::f64::consts::E).abs() < 1e-9, "{later}");
}

#[test]
fn tokens_are_usable_until_the_lease_expires_not_at_its_expiry() {
    let mut l = Lease::default();
    l.grant(0, 7, 0, 300 * MS);
    assert_eq!(l.usable(0), 7);
    assert_eq!(l.usable(300 * MS - 1), 7);
    assert_eq!(l.usable(300 * MS), 0);
    assert_eq!(l.usable(301 * MS), 0);
}

#[test]
fn before_a_round_trip_is_measured_the_mark_assumes_a_millisecond() {
    let mut l = Lease {
        demand: 1_000.0,
        rtt_us: 0,
        ..Lease::default()
    };
    l.grant(0, 10, 0, 300 * MS);
    let refilled_at = (0..10).find_map(|_| match l.take(MS, 1, Some(50 * MS)) {
        Spend::Taken { left, refill: true } => Some(left),
        _ => None,
    });
    // 1,000/s over two assumed 1 ms round trips: 2 tokens and the cost.
    assert!(
        refilled_at.is_some_and(|n| (2..=3).contains(&n)),
        "{refilled_at:?}"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Take(u32),
    Grant(u32, u64),
    Deny(u64),
    Fail,
    Wait(u64),
    /// A grant that carries the holder's turn.
    GrantTurn(u32, u64, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u32..4).prop_map(Op::Take),
        2 => (0u32..20, 1u64..400).prop_map(|(t, ttl)| Op::Grant(t, ttl * MS)),
        1 => (1u64..200).prop_map(|w| Op::Deny(w * MS)),
        1 => Just(Op::Fail),
        2 => (0u64..100).prop_map(|w| Op::Wait(w * MS)),
        1 => (0u32..20, 1u64..400, 1u64..400)
            .prop_map(|(t, ttl, turn)| Op::GrantTurn(t, ttl * MS, turn * MS)),
    ]
}

proptest! {
    /// Whatever happens: never more spent than granted, expired tokens are
    /// never spent, a denial never strands unexpired tokens, at most one call
    /// is in flight and every one ends by its deadline.
    #[test]
    fn the_lease_keeps_its_promises(ops in proptest::collection::vec(op(), 1..200)) {
        let mut l = Lease { demand: 50.0, ..Lease::default() };
        let (mut now, mut granted, mut spent) = (1u64, 0u64, 0u64);
        let mut in_flight_until: Option<u64> = None;
        for op in ops {
            match op {
                Op::Take(cost) => {
                    let before = l;
                    match l.take(now, cost, Some(20 * MS)) {
                        Spend::Taken { left, refill } => {
                            prop_assert!(before.expires_ns > now, "an expired token was spent");
                            prop_assert_eq!(left + cost, before.tokens);
                            spent += u64::from(cost);
                            if refill {
                                prop_assert!(in_flight_until.is_none_or(|d| d <= now), "two calls in flight");
                                in_flight_until = Some(now + 20 * MS);
                            }
                        }
                        Spend::Denied { .. } => {
                            prop_assert!(before.usable(now) < cost, "a denial stranded tokens");
                        }
                        Spend::Empty { in_flight } => {
                            prop_assert!(before.usable(now) < cost);
                            prop_assert_eq!(in_flight, in_flight_until.is_some_and(|d| d > now));
                            if !in_flight && l.begin_call(now, 20 * MS) {
                                in_flight_until = Some(now + 20 * MS);
                            }
                        }
                    }
                }
                Op::Grant(tokens, ttl) => {
                    l.grant(now, tokens, 0, ttl);
                    granted += u64::from(tokens);
                    in_flight_until = None;
                }
                Op::GrantTurn(tokens, ttl, turn) => {
                    l.grant(now, tokens, 0, ttl);
                    l.deny_after_tokens(now, turn);
                    granted += u64::from(tokens);
                    in_flight_until = None;
                }
                Op::Deny(wait) => {
                    l.deny(now, wait);
                    in_flight_until = None;
                }
                Op::Fail => {
                    l.failed();
                    in_flight_until = None;
                }
                Op::Wait(d) => now += d,
            }
            prop_assert!(spent <= granted, "spent {} of {} granted", spent, granted);
            if let Some(d) = in_flight_until {
                prop_assert_eq!(l.in_flight(now), d > now);
            }
        }
    }
}
