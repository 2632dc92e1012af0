//! A far-over node's turns: the queue its grants and denials book, the asks
//! too large for it, and the demand the skipped asks still count. One key's
//! entry, driven as the agent's pool drives it.

use super::*;

const MS: u64 = 1_000_000;

/// Filters ask every 500 ms while served (half the 1 s lease below).
const PERIOD: u64 = 500 * MS;

/// One key at a node: its entry, and whether a store call is out (the
/// agent's pool keeps a channel for it).
struct Node {
    e: PoolEntry,
    call: bool,
}

impl Node {
    fn new() -> Node {
        Node {
            e: PoolEntry::default(),
            call: false,
        }
    }

    /// An ask of `cost` that says it will spend `want`, its store call
    /// given 1 ms.
    fn take(&mut self, now_ns: u64, cost: u32, want: Option<u32>) -> Take {
        let ask = Ask {
            now_ns,
            cost,
            asked: want.unwrap_or(cost).max(cost),
            call_timeout_ns: MS,
            count: true,
            period_ns: PERIOD,
            refills: true,
        };
        let take = self.e.take(&ask, self.call);
        self.call |= take.starts_call();
        take
    }

    /// The store's grant of `granted` (nothing left in its bucket) for an
    /// ask of `(cost, want)`: the filter's tokens and its turn.
    fn fill(
        &mut self,
        now_ns: u64,
        granted: u32,
        ask: (u32, Option<u32>),
        times: GrantTimes,
    ) -> (u32, Option<u64>) {
        let grant = StoreGrant {
            tokens: granted,
            remaining: 0,
            reset_ns: 0,
            bucket: None,
        };
        self.call = false;
        let turn = self.e.fill(now_ns, grant, ask, times, PERIOD);
        (StoreGrant::filter_tokens(granted, ask), turn)
    }

    fn demand(&self, now_ns: u64) -> f64 {
        self.e.demand(now_ns)
    }
}

fn times(ttl_ns: u64, hold_ns: u64, turn_period_ns: u64) -> GrantTimes {
    GrantTimes {
        ttl_ns,
        hold_ns,
        turn_period_ns,
    }
}

// The pace of [`held`]'s queue: its first answer brought 10 tokens for a
// hold of 100 ms (100 a second), and turns are booked 1.05 times as fast,
// 9.5 ms a token: an ask of 5 books 48 ms.

/// A node that served two asks of 5 (the fill's and one from the pool) and
/// is held until 100 ms, giving turns every `turn_period_ns` (0: a node near
/// its share, which keeps no queue). Returns the node and the two asks' turns.
fn held(turn_period_ns: u64) -> (Node, [Option<u64>; 2]) {
    let mut p = Node::new();
    let first = filled(&mut p, 10, turn_period_ns);
    let Take::Served {
        tokens: 5,
        next_ask_ns: second,
        ..
    } = p.take(MS, 1, Some(5))
    else {
        panic!("not served");
    };
    (p, [first, second])
}

/// An ask of 5 at 0 ms that misses, and the store's grant of `granted`
/// for it, held until 100 ms; returns the filter's turn.
fn filled(p: &mut Node, granted: u32, turn_period_ns: u64) -> Option<u64> {
    assert!(matches!(p.take(0, 1, Some(5)), Take::Miss { .. }));
    let (filter, turn) = p.fill(
        0,
        granted,
        (1, Some(5)),
        times(1_000 * MS, 100 * MS, turn_period_ns),
    );
    assert_eq!(filter, 5);
    turn
}

/// The retry each of `n` asks of `want` at 10 ms is told, in ns.
fn retries(p: &mut Node, n: usize, want: u32) -> Vec<u64> {
    (0..n)
        .map(|_| match p.take(10 * MS, 1, Some(want)) {
            Take::Denied { retry_after_ns } => retry_after_ns,
            other => panic!("not denied: {other:?}"),
        })
        .collect()
}

#[test]
fn a_far_over_node_s_grants_carry_each_filter_s_turn() {
    // The first grant's filter comes back at the hold's end; the second
    // behind it (its 5 tokens come at the store's pace, 48 ms), at the start
    // of the round they fall in: the next period.
    let (_, turns) = held(100 * MS);
    assert_eq!(turns, [Some(100 * MS), Some(199 * MS)]);
}

#[test]
fn asks_turned_away_are_booked_one_behind_the_other_at_the_store_s_pace() {
    let (mut p, _) = held(100 * MS);
    let ms: Vec<u64> = retries(&mut p, 12, 5).iter().map(|r| r / MS).collect();
    // Behind the two grants' 10 tokens, 5 tokens' time (48 ms) apart, each
    // at the start of its round (the hold's end and every 100 ms after): two
    // a round, as 100 ms holds 2.1 asks' tokens.
    assert_eq!(
        ms,
        [190, 290, 290, 390, 390, 490, 490, 590, 590, 690, 690, 790]
    );
}

#[test]
fn tokens_still_pooled_after_the_hold_carry_turns() {
    // A grant of 20 at 0 ms, 5 to its filter, held until 100 ms; asks at
    // 150 ms (the hold over, 15 tokens pooled) are still booked: the first
    // is the queue's next (now), the second one 5 tokens' time (48 ms)
    // behind it, at its round's start, 100 ms on.
    let mut p = Node::new();
    assert_eq!(filled(&mut p, 20, 100 * MS), Some(100 * MS));
    let turns: Vec<Option<u64>> = (0..2)
        .map(|_| match p.take(150 * MS, 1, Some(5)) {
            Take::Served { next_ask_ns, .. } => next_ask_ns,
            other => panic!("not served: {other:?}"),
        })
        .collect();
    assert_eq!(turns, [Some(0), Some(100 * MS)]);
}

#[test]
fn no_turn_is_booked_further_than_max_queue() {
    let (mut p, _) = held(100 * MS);
    let r = retries(&mut p, 40, 5);
    assert_eq!(*r.iter().max().unwrap(), MAX_QUEUE_NS);
    assert!(r.ends_with(&[MAX_QUEUE_NS, MAX_QUEUE_NS]));
}

#[test]
fn turns_are_booked_a_little_faster_than_the_store_s_tokens_come() {
    // The store brings this node 10 tokens a 100 ms round (its intake, 100
    // a second); asks of one token are booked 5% faster (`PACE_AHEAD`),
    // 10.5 a round: behind the first turn (190 ms), the five rounds up to
    // 690 ms take 53 asks, where booking at the store's pace would take 50.
    let (mut p, _) = held(100 * MS);
    let r = retries(&mut p, 60, 1);
    assert_eq!(r.iter().filter(|&&w| w <= 690 * MS).count(), 54);
}

#[test]
fn an_ask_wanting_more_than_a_period_s_tokens_comes_back_at_the_hold_s_end() {
    // 20 tokens take 174 ms at the queue's pace, more than the 100 ms
    // period: such asks are not booked (each would push every turn behind
    // it back by more than a period) and come back when the hold ends.
    let (mut p, _) = held(100 * MS);
    let ms: Vec<u64> = retries(&mut p, 3, 20).iter().map(|r| r / MS).collect();
    assert_eq!(ms, [90, 90, 90]);
}

#[test]
fn a_node_near_its_share_keeps_no_queue() {
    // No turn period: grants carry no turn, and every ask turned away comes
    // back at the hold's end.
    let (mut p, turns) = held(0);
    assert_eq!(turns, [None, None]);
    assert_eq!(retries(&mut p, 7, 5), [90 * MS; 7]);
    // A node that was far over drops its queue at its first answer as one
    // near its share.
    let (mut p, _) = held(100 * MS);
    let (_, turn) = p.fill(20 * MS, 10, (1, Some(5)), times(1_000 * MS, 100 * MS, 0));
    assert_eq!(turn, None);
    assert!(matches!(
        p.take(21 * MS, 1, Some(5)),
        Take::Served {
            next_ask_ns: None,
            ..
        }
    ));
}

#[test]
fn a_booked_ask_counts_the_asks_it_will_not_make() {
    // A filter asks for half a lease's life of its demand (500 ms here):
    // each ask sent to its turn counts, in the node's demand, the asks of 5
    // it would have made until then.
    let (mut spaced, _) = held(100 * MS);
    let (mut plain, _) = held(0);
    let waits = retries(&mut spaced, 7, 5);
    retries(&mut plain, 7, 5);
    let extra = spaced.demand(10 * MS) - plain.demand(10 * MS);
    let skipped = |w: u64| (5 * w / (500 * MS)) as f64;
    // The held pools' own grants differ too: their turns were booked at 0
    // and 1 ms, and the demand decays with a time constant of a second.
    let [first, second] = [100 * MS, 199 * MS];
    let expected = per_token()
        * (waits.iter().map(|&w| skipped(w)).sum::<f64>()
            + skipped(first) * (-0.010f64).exp()
            + skipped(second) * (-0.009f64).exp());
    assert!(
        (extra - expected).abs() < expected * 1e-4,
        "{extra} ≠ {expected}"
    );
}

/// What one token asked adds to the demand (tokens a second) read at once.
fn per_token() -> f64 {
    let mut one = Node::new();
    let _ = one.take(10 * MS, 1, None);
    one.demand(10 * MS)
}

#[test]
fn a_store_answer_that_finds_tokens_unclaimed_starts_the_queue_afresh() {
    // Twelve asks turned away at 10 ms book turns up to 790 ms (above). A
    // refill at 200 ms pools 10 tokens, held until 300 ms; an ask at 210 ms
    // served from them is booked behind the twelve (800 ms).
    let (mut p, _) = held(100 * MS);
    let _ = retries(&mut p, 12, 5);
    let refill = |p: &mut Node, at_ns: u64| {
        let (filter, turn) = p.fill(at_ns, 10, (0, None), times(1_000 * MS, 100 * MS, 100 * MS));
        assert_eq!((filter, turn), (0, None));
    };
    let served_turn = |p: &mut Node, at_ns: u64| match p.take(at_ns, 1, Some(5)) {
        Take::Served { next_ask_ns, .. } => next_ask_ns,
        other => panic!("not served: {other:?}"),
    };
    refill(&mut p, 200 * MS);
    let behind = served_turn(&mut p, 210 * MS);
    // The next refill, at 400 ms, finds 5 of its tokens still pooled: the
    // filters no longer come for what the node takes. The next ask's turn
    // is the new hold's end (500 ms), not the old queue's.
    refill(&mut p, 400 * MS);
    let afresh = served_turn(&mut p, 410 * MS);
    assert_eq!((behind, afresh), (Some(590 * MS), Some(90 * MS)));
}
