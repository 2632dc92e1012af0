use super::*;
use meshlimit_core::Limit;
use tokio::sync::broadcast::error::TryRecvError;

const MS: u64 = 1_000_000;
/// Filters ask every 150 ms while served (half the default lease's life).
const ASK_PERIOD_NS: u64 = 150 * MS;

fn grant(tokens: u32, remaining: u32, reset_ns: u64) -> StoreGrant {
    StoreGrant {
        tokens,
        remaining,
        reset_ns,
        bucket: None,
    }
}

fn times(ttl_ns: u64, hold_ns: u64, turn_period_ns: u64) -> GrantTimes {
    GrantTimes {
        ttl_ns,
        hold_ns,
        turn_period_ns,
    }
}

fn key() -> DescriptorKey {
    DescriptorKey::new("r", ["k"])
}

#[test]
fn a_grant_is_split_by_what_the_filter_will_spend() {
    let p = Pools::default();
    assert!(matches!(
        p.take(&key(), 0, 1, None, MS),
        PoolTake::Miss { .. }
    ));
    // A filter that does not know its spend rate yet gets its cost...
    assert_eq!(p.fill(&key(), 0, grant(10, 50, 0), 1, 100 * MS), 1);
    // ...one that does gets what it wants, from the pool while it lasts.
    assert_eq!(
        p.take(&key(), MS, 1, Some(4), MS),
        PoolTake::Served {
            tokens: 4,
            remaining: 55,
            reset_ns: 0,
            refill: false,
            next_ask_ns: None,
        }
    );
    assert_eq!(
        p.take(&key(), MS, 1, Some(6), MS),
        PoolTake::Served {
            tokens: 5,
            remaining: 50,
            reset_ns: 0,
            refill: false,
            next_ask_ns: None,
        }
    );
    assert!(matches!(
        p.take(&key(), 2 * MS, 1, None, MS),
        PoolTake::Miss { .. }
    ));
    // A grant smaller than the want goes whole to the filter.
    assert_eq!(
        p.fill_then_hold(
            &key(),
            3 * MS,
            grant(7, 0, 0),
            (1, Some(9)),
            times(100 * MS, 0, 0)
        ),
        (7, None)
    );
}

#[test]
fn pooled_tokens_expire_unspent() {
    let p = Pools::default();
    p.fill(&key(), 0, grant(100, 0, 0), 1, 100 * MS);
    // One went to the filter; the 99 pooled are dropped, and said to be.
    assert!(matches!(
        p.take(&key(), 100 * MS, 1, None, MS),
        PoolTake::Miss { dropped: 99, .. }
    ));
    assert!(matches!(
        p.take(&key(), 101 * MS, 1, None, MS),
        PoolTake::Miss { dropped: 0, .. }
    ));
}

#[test]
fn a_grant_smaller_than_the_cost_split_never_overdraws() {
    let p = Pools::default();
    assert_eq!(p.fill(&key(), 0, grant(3, 0, 0), 3, 100 * MS), 3);
    assert!(matches!(
        p.take(&key(), MS, 1, None, MS),
        PoolTake::Miss { .. }
    ));
}

#[test]
fn denials_are_cached_at_the_node() {
    let p = Pools::default();
    p.deny(&key(), 0, 50 * MS, 0);
    assert_eq!(
        p.take(&key(), 20 * MS, 1, None, MS),
        PoolTake::Denied {
            retry_after_ns: 30 * MS
        }
    );
    assert!(matches!(
        p.take(&key(), 50 * MS, 1, None, MS),
        PoolTake::Miss { .. }
    ));
}

#[test]
fn demand_settles_at_the_offered_rate() {
    let p = Pools::default();
    // 1,000 tokens per second, one per millisecond, for 5 s (5 time constants),
    // all denied at the node: demand counts what was asked for, not served.
    p.deny(&key(), 0, 10_000 * MS, 0);
    for ms in 0..5_000u64 {
        assert!(matches!(
            p.take(&key(), ms * MS, 1, None, MS),
            PoolTake::Denied { .. }
        ));
    }
    let demand = p.demand(&key(), 5_000 * MS);
    assert!((demand - 1_000.0).abs() < 20.0, "{demand}");
}

#[test]
fn memory_is_bounded() {
    let p = Pools::new(64, ASK_PERIOD_NS);
    for i in 0..10_000 {
        let k = DescriptorKey::new("r", [i.to_string().as_str()]);
        p.fill(&k, 0, grant(2, 0, 0), 1, 100 * MS);
    }
    assert!(p.len() <= 64, "{}", p.len());
    p.sweep(200 * MS);
    assert!(p.len() <= 64);
}

#[test]
fn a_sweep_drops_only_idle_entries_and_a_swept_key_asks_the_store() {
    let p = Pools::new(1_000, ASK_PERIOD_NS);
    let (pooled, denied) = (
        DescriptorKey::new("r", ["a"]),
        DescriptorKey::new("r", ["b"]),
    );
    p.fill(&pooled, 0, grant(10, 0, 0), 1, 300 * MS);
    p.deny(&denied, 0, 5_000 * MS, 0);
    // Within the lease TTL and the denial, both stay.
    p.sweep(200 * MS);
    assert_eq!(p.len(), 2);
    // Past the TTL, once demand has decayed: the pooled tokens were unspent and
    // expired, so dropping them changes nothing; the denial still holds.
    p.sweep(3_000 * MS);
    assert_eq!(p.len(), 1);
    assert!(matches!(
        p.take(&pooled, 3_000 * MS, 1, None, MS),
        PoolTake::Miss { dropped: 0, .. }
    ));
    assert!(matches!(
        p.take(&denied, 3_000 * MS, 1, None, MS),
        PoolTake::Denied { .. }
    ));
    p.sweep(10_000 * MS);
    assert!(matches!(
        p.take(&denied, 10_000 * MS, 1, None, MS),
        PoolTake::Miss { .. }
    ));
}

#[test]
fn at_the_cap_a_new_key_is_served_unpooled_and_nothing_is_handed_out() {
    // One key per shard at most.
    let p = Pools::new(1, ASK_PERIOD_NS);
    let shard = |k: &DescriptorKey| k.fingerprint() % SHARDS as u64;
    let first = DescriptorKey::new("r", ["0"]);
    let second = (1..)
        .map(|i| DescriptorKey::new("r", [i.to_string().as_str()]))
        .find(|k| shard(k) == shard(&first))
        .unwrap();
    assert_eq!(p.fill(&first, 0, grant(10, 0, 0), 1, 300 * MS), 1);
    // The shard is full of a live entry: the second key is never pooled, its
    // grant goes to its filter only (the pool's share is dropped, not kept).
    assert_eq!(p.fill(&second, 0, grant(10, 0, 0), 1, 300 * MS), 1);
    assert!(matches!(
        p.take(&second, MS, 1, None, MS),
        PoolTake::Miss { dropped: 0, .. }
    ));
    assert!(matches!(
        p.take(&first, MS, 1, None, MS),
        PoolTake::Served { .. }
    ));
    assert_eq!(p.len(), 1);
    // A key held by a denial, with nothing pooled, keeps its place too.
    let p = Pools::new(1, ASK_PERIOD_NS);
    p.deny(&first, 0, 5_000 * MS, 0);
    assert_eq!(p.fill(&second, 0, grant(10, 0, 0), 1, 300 * MS), 1);
    assert!(matches!(
        p.take(&first, MS, 1, None, MS),
        PoolTake::Denied { .. }
    ));
}

#[test]
fn a_denial_answering_a_concurrent_ask_keeps_the_pooled_tokens() {
    let p = Pools::default();
    // One ask's grant pools 9 tokens; a concurrent ask's denial arrives after.
    assert_eq!(p.fill(&key(), 0, grant(10, 0, 0), 1, 100 * MS), 1);
    p.deny(&key(), MS, 500 * MS, 0);
    // The pooled tokens are served first, then the denial answers.
    assert!(matches!(
        p.take(&key(), 2 * MS, 1, Some(9), MS),
        PoolTake::Served { tokens: 9, .. }
    ));
    assert_eq!(
        p.take(&key(), 3 * MS, 1, None, MS),
        PoolTake::Denied {
            retry_after_ns: 498 * MS
        }
    );
    // Expired pooled tokens are dropped by a denial.
    let p = Pools::default();
    p.fill(&key(), 0, grant(10, 0, 0), 1, 100 * MS);
    p.deny(&key(), 200 * MS, 500 * MS, 0);
    assert!(matches!(
        p.take(&key(), 800 * MS, 1, None, MS),
        PoolTake::Miss { dropped: 0, .. }
    ));
}

#[test]
fn an_ask_for_a_key_whose_store_call_is_out_waits_for_it() {
    let p = Pools::default();
    assert!(matches!(
        p.take(&key(), 0, 1, None, 10 * MS),
        PoolTake::Miss { .. }
    ));
    // Single flight: the second ask waits on the first one's call...
    let PoolTake::Wait(mut rx) = p.take(&key(), MS, 1, None, 10 * MS) else {
        panic!("the second ask should wait");
    };
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    // ...which, answered, tells it, and the pool serves it.
    p.fill(&key(), 2 * MS, grant(10, 50, 0), 1, 100 * MS);
    assert!(!matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    assert!(matches!(
        p.take(&key(), 3 * MS, 1, None, 10 * MS),
        PoolTake::Served { .. }
    ));
}

#[test]
fn a_failed_or_lost_call_frees_the_key() {
    let p = Pools::default();
    p.take(&key(), 0, 1, None, 10 * MS);
    let PoolTake::Wait(mut rx) = p.take(&key(), MS, 1, None, 10 * MS) else {
        panic!("the second ask should wait");
    };
    p.call_failed(&key(), 2 * MS);
    assert!(!matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    assert!(matches!(
        p.take(&key(), 3 * MS, 1, None, 10 * MS),
        PoolTake::Miss { .. }
    ));
    // A call never answered is forgotten at its deadline.
    assert!(matches!(
        p.take(&key(), 13 * MS, 1, None, 10 * MS),
        PoolTake::Miss { .. }
    ));
}

#[test]
fn the_ask_that_crosses_the_refill_mark_is_served_and_starts_one_refill() {
    let p = Pools::default();
    let ask = |t: u64| p.take(&key(), t * MS, 1, Some(1), 10 * MS);
    let mut refills = Vec::new();
    let mut t = 0;
    // Asks of one token each millisecond; every miss is answered at once
    // with 40 tokens: the pool learns the rate, then refills ahead.
    while t < 400 {
        match ask(t) {
            PoolTake::Miss { .. } => {
                p.fill(&key(), t * MS, grant(41, 1_000, 0), 1, 300 * MS);
            }
            PoolTake::Served { refill: true, .. } => refills.push(t),
            PoolTake::Served { .. } => {}
            other => panic!("{other:?} at {t} ms"),
        }
        if let Some(&at) = refills.last() {
            if at == t {
                // The refill's answer comes 2 ms later; asks meanwhile are served.
                assert!(matches!(ask(t + 1), PoolTake::Served { refill: false, .. }));
                p.fill_then_hold(
                    &key(),
                    (t + 2) * MS,
                    grant(40, 1_000, 0),
                    (0, None),
                    times(300 * MS, 0, 0),
                );
                t += 2;
            }
        }
        t += 1;
    }
    assert!(!refills.is_empty(), "the pool never refilled ahead");
    // Once refilling ahead, it never runs dry: no miss after the first refill.
    let first = refills[0];
    for t in (t..t + 100).step_by(1) {
        match ask(t) {
            PoolTake::Served { refill: true, .. } => {
                p.fill_then_hold(
                    &key(),
                    t * MS,
                    grant(40, 1_000, 0),
                    (0, None),
                    times(300 * MS, 0, 0),
                );
            }
            PoolTake::Served { .. } => {}
            other => panic!("{other:?} at {t} ms (first refill at {first} ms)"),
        }
    }
}

#[test]
fn one_background_refill_at_a_time_and_none_while_a_denial_holds() {
    let p = Pools::default();
    let (k, timeout) = (key(), 50 * MS);
    p.fill(&k, 0, grant(10, 0, 0), 1, 300 * MS);
    assert!(p.begin_refill(&k, MS, timeout));
    // Its call is in flight: no second one.
    assert!(!p.begin_refill(&k, 2 * MS, timeout));
    // The call failed: the next may start.
    p.call_failed(&k, 3 * MS);
    assert!(p.begin_refill(&k, 3 * MS, timeout));
    p.call_failed(&k, 4 * MS);
    // A denial holds: nothing to fetch until it ends.
    p.deny(&k, 4 * MS, 100 * MS, 0);
    assert!(!p.begin_refill(&k, 5 * MS, timeout));
    // From the moment it ends (when the timer waiting it out fires).
    assert!(p.begin_refill(&k, 104 * MS, timeout));
}

#[test]
fn a_sweep_keeps_a_key_whose_call_is_in_flight() {
    let p = Pools::new(1_000, ASK_PERIOD_NS);
    let k = key();
    // A refill in flight, long after the key's tokens and demand are gone.
    p.fill(&k, 0, grant(2, 0, 0), 1, 300 * MS);
    assert!(p.begin_refill(&k, 10_000 * MS, 60_000 * MS));
    p.sweep(20_000 * MS);
    assert_eq!(p.len(), 1);
    // Its call over and nothing left: swept.
    assert!(!p.is_empty());
    p.call_failed(&k, 20_000 * MS);
    p.sweep(20_000 * MS);
    assert_eq!(p.len(), 0);
    assert!(p.is_empty());
}

#[test]
fn a_key_is_thick_once_its_demand_fills_a_lease() {
    let p = Pools::default();
    let k = key();
    let life = 300 * MS;
    assert!(!p.is_thick(&k, 0, life), "an unknown key");
    // One ask: thin.
    p.take(&k, 0, 1, None, MS);
    assert!(!p.is_thick(&k, 0, life));
    // A thousand a second: thick.
    for i in 1..=1_000 {
        p.take(&k, i * MS, 1, None, MS);
    }
    assert!(p.is_thick(&k, 1_000 * MS, life));
}

/// `requests` a second, a burst of as many.
fn per_second(requests: u32) -> Limit {
    let n = std::num::NonZeroU32::new(requests).unwrap();
    Limit::new(n, std::num::NonZeroU64::new(1_000_000_000).unwrap(), n)
}

#[test]
fn the_hand_back_takes_the_pools_unspent_bucket_tokens_and_only_those() {
    let p = Pools::default();
    let (bucket, window) = (key(), DescriptorKey::new("w", ["k"]));
    let limit = per_second(100);
    // 10 granted, 1 to the asking filter: 9 pooled, then 2 served.
    let granted = |tokens, remaining| StoreGrant::under(limit, tokens, remaining, 0);
    assert_eq!(p.fill(&bucket, 0, granted(10, 50), 1, 100 * MS), 1);
    assert!(matches!(
        p.take(&bucket, MS, 2, None, MS),
        PoolTake::Served { tokens: 2, .. }
    ));
    // A window's count is not handed back.
    let fixed = limit.with_algorithm(meshlimit_core::Algorithm::FixedWindow);
    p.fill(&window, 0, StoreGrant::under(fixed, 10, 50, 0), 1, 100 * MS);
    let half = |_: &DescriptorKey| Some(0.5);
    let back = p.hand_back(2 * MS, half);
    let expected = GiveBack {
        key: bucket.clone(),
        limit,
        share: 0.5,
        tokens: 7,
    };
    assert_eq!(back, [expected]);
    // Taken out: not served again, not handed back twice.
    assert_eq!(p.pooled(&bucket, 2 * MS), 0);
    assert!(p.hand_back(2 * MS, half).is_empty());
    // Nothing is fetched ahead after: an ask that finds the pool empty asks
    // the store, and what its grant pools goes back at the next hand-back.
    assert!(!p.begin_refill(&bucket, 3 * MS, MS));
    assert!(matches!(
        p.take(&bucket, 3 * MS, 1, None, MS),
        PoolTake::Miss { .. }
    ));
    p.fill(&bucket, 4 * MS, granted(6, 40), 1, 100 * MS);
    assert!(matches!(
        p.take(&bucket, 5 * MS, 4, None, MS),
        PoolTake::Served { refill: false, .. }
    ));
    assert_eq!(p.hand_back(6 * MS, half)[0].tokens, 1);
    // Tokens expired in the pool are gone, and so are those of a rule gone
    // from the rules in force: neither is handed back.
    let late = Pools::default();
    late.fill(&bucket, 0, granted(10, 50), 1, 100 * MS);
    assert!(late.hand_back(100 * MS, half).is_empty());
    let gone = Pools::default();
    gone.fill(&bucket, 0, granted(10, 50), 1, 100 * MS);
    assert!(gone.hand_back(MS, |_| None).is_empty());
    assert_eq!(gone.pooled(&bucket, MS), 0);
}
