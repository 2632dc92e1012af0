//! A hold's turned-away asks, spaced by what a round serves, and the demand
//! they still count.

use super::*;

/// A pool that served two asks of 5 (the fill's and one from the pool) and is
/// held until 100 ms, its turned-away asks spaced by `spacing_ns`.
fn held(spacing_ns: u64) -> Pools {
    let p = Pools::default();
    assert!(matches!(
        p.take(&key(), 0, 1, Some(5), MS),
        PoolTake::Miss { .. }
    ));
    let filter = p.fill_then_hold(
        &key(),
        0,
        grant(10, 0, 0),
        1,
        Some(5),
        1_000 * MS,
        100 * MS,
        spacing_ns,
    );
    assert_eq!(filter, 5);
    assert!(matches!(
        p.take(&key(), MS, 1, Some(5), MS),
        PoolTake::Served { tokens: 5, .. }
    ));
    p
}

/// The retry each of seven asks of 5 at 10 ms is told, in ms.
fn retries(p: &Pools) -> Vec<u64> {
    (0..7)
        .map(|_| match p.take(&key(), 10 * MS, 1, Some(5), MS) {
            PoolTake::Denied { retry_after_ns } => retry_after_ns / MS,
            other => panic!("not denied: {other:?}"),
        })
        .collect()
}

#[test]
fn asks_a_hold_turns_away_come_back_a_round_s_worth_at_a_time() {
    // The round served 10 tokens: the first two asks of 5 come back at the
    // hold's end, the next two a spacing later, the rest two spacings later
    // (the most, `MAX_TURNS`).
    assert_eq!(MAX_TURNS, 2);
    let p = held(100 * MS);
    assert_eq!(retries(&p), [90, 90, 190, 190, 290, 290, 290]);
    // Without spacing (a node near its share) every ask comes back at the
    // hold's end.
    assert_eq!(retries(&held(0)), [90; 7]);
}

#[test]
fn a_store_answer_starts_a_new_round_of_turns() {
    let p = held(100 * MS);
    assert_eq!(retries(&p)[6], 290);
    // A denial answers the refill: its hold turns asks away from the first
    // again, a round's worth (the 10 tokens the last round served) at a time.
    p.deny(&key(), 20 * MS, 100 * MS, 100 * MS);
    let again: Vec<u64> = (0..3)
        .map(|_| match p.take(&key(), 20 * MS, 1, Some(5), MS) {
            PoolTake::Denied { retry_after_ns } => retry_after_ns / MS,
            other => panic!("not denied: {other:?}"),
        })
        .collect();
    assert_eq!(again, [100, 100, 200]);
}

#[test]
fn a_turned_away_ask_counts_the_asks_it_will_not_make() {
    // The seven asks above wait 0, 0, 1, 1, 2, 2 and 2 spacings: 8 rounds
    // they would have asked in, at 5 tokens each, count as demand now.
    let spaced = held(100 * MS);
    let plain = held(0);
    retries(&spaced);
    retries(&plain);
    let extra = spaced.demand(&key(), 10 * MS) - plain.demand(&key(), 10 * MS);
    let expected = 40.0 * per_token();
    // The demand is kept as an f32.
    assert!(
        (extra - expected).abs() < expected * 1e-4,
        "{extra} ≠ {expected}"
    );
}

/// What one token asked adds to the demand (tokens a second) read at once.
fn per_token() -> f64 {
    let one = Pools::default();
    let _ = one.take(&key(), 10 * MS, 1, None, MS);
    one.demand(&key(), 10 * MS)
}
