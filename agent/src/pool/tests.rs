use super::*;

const MS: u64 = 1_000_000;

fn grant(tokens: u32, remaining: u32, reset_ns: u64) -> StoreGrant {
    StoreGrant {
        tokens,
        remaining,
        reset_ns,
    }
}

fn key() -> DescriptorKey {
    DescriptorKey::new("r", ["k"])
}

#[test]
fn a_grant_is_split_between_the_filter_and_the_pool() {
    let p = Pools::default();
    assert!(matches!(p.take(&key(), 0, 1, None), PoolTake::Miss { .. }));
    assert_eq!(p.fill(&key(), 0, grant(10, 50, 0), 1, 100 * MS), 5);
    assert_eq!(
        p.take(&key(), MS, 1, None),
        PoolTake::Served {
            tokens: 5,
            remaining: 50,
            reset_ns: 0
        }
    );
    assert!(matches!(
        p.take(&key(), 2 * MS, 1, None),
        PoolTake::Miss { .. }
    ));
    // A second filter asking for more than is left gets what is left.
    assert_eq!(p.fill(&key(), 3 * MS, grant(7, 0, 0), 1, 100 * MS), 4);
    assert_eq!(
        p.take(&key(), 4 * MS, 1, None),
        PoolTake::Served {
            tokens: 3,
            remaining: 0,
            reset_ns: 0
        }
    );
}

#[test]
fn pooled_tokens_expire_unspent() {
    let p = Pools::default();
    p.fill(&key(), 0, grant(100, 0, 0), 1, 100 * MS);
    // Half went to the filter; the pooled half is dropped, and said to be.
    assert!(matches!(
        p.take(&key(), 100 * MS, 1, None),
        PoolTake::Miss { dropped: 50, .. }
    ));
    assert!(matches!(
        p.take(&key(), 101 * MS, 1, None),
        PoolTake::Miss { dropped: 0, .. }
    ));
}

#[test]
fn a_grant_smaller_than_the_cost_split_never_overdraws() {
    let p = Pools::default();
    assert_eq!(p.fill(&key(), 0, grant(3, 0, 0), 3, 100 * MS), 3);
    assert!(matches!(p.take(&key(), MS, 1, None), PoolTake::Miss { .. }));
}

#[test]
fn denials_are_cached_at_the_node() {
    let p = Pools::default();
    p.deny(&key(), 0, 1, 50 * MS);
    assert_eq!(
        p.take(&key(), 20 * MS, 1, None),
        PoolTake::Denied {
            retry_after_ns: 30 * MS
        }
    );
    assert!(matches!(
        p.take(&key(), 50 * MS, 1, None),
        PoolTake::Miss { .. }
    ));
}

#[test]
fn demand_settles_at_the_offered_rate() {
    let p = Pools::default();
    // 1,000 tokens per second, one per millisecond, for 5 s (5 time constants).
    let mut demand = 0.0;
    for ms in 0..5_000u64 {
        p.deny(&key(), ms * MS, 1, 0);
        if let PoolTake::Miss { demand_per_sec, .. } = p.take(&key(), ms * MS, 0, None) {
            demand = demand_per_sec;
        }
    }
    assert!((demand - 1_000.0).abs() < 20.0, "{demand}");
}

#[test]
fn memory_is_bounded() {
    let p = Pools::new(64);
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
    let p = Pools::new(1_000);
    let (pooled, denied) = (
        DescriptorKey::new("r", ["a"]),
        DescriptorKey::new("r", ["b"]),
    );
    p.fill(&pooled, 0, grant(10, 0, 0), 1, 300 * MS);
    p.deny(&denied, 0, 1, 5_000 * MS);
    // Within the lease TTL and the denial, both stay.
    p.sweep(200 * MS);
    assert_eq!(p.len(), 2);
    // Past the TTL, once demand has decayed: the pooled tokens were unspent and
    // expired, so dropping them changes nothing; the denial still holds.
    p.sweep(3_000 * MS);
    assert_eq!(p.len(), 1);
    assert!(matches!(
        p.take(&pooled, 3_000 * MS, 1, None),
        PoolTake::Miss { dropped: 0, .. }
    ));
    assert!(matches!(
        p.take(&denied, 3_000 * MS, 1, None),
        PoolTake::Denied { .. }
    ));
    p.sweep(10_000 * MS);
    assert!(matches!(
        p.take(&denied, 10_000 * MS, 1, None),
        PoolTake::Miss { .. }
    ));
}

#[test]
fn at_the_cap_a_new_key_is_served_unpooled_and_nothing_is_handed_out() {
    // One key per shard at most.
    let p = Pools::new(1);
    let shard = |k: &DescriptorKey| k.fingerprint() % SHARDS as u64;
    let first = DescriptorKey::new("r", ["0"]);
    let second = (1..)
        .map(|i| DescriptorKey::new("r", [i.to_string().as_str()]))
        .find(|k| shard(k) == shard(&first))
        .unwrap();
    assert_eq!(p.fill(&first, 0, grant(10, 0, 0), 1, 300 * MS), 5);
    // The shard is full of a live entry: the second key is never pooled, its
    // grant goes to its filter only (the pool's share is dropped, not kept).
    assert_eq!(p.fill(&second, 0, grant(10, 0, 0), 1, 300 * MS), 5);
    assert!(matches!(
        p.take(&second, MS, 1, None),
        PoolTake::Miss { dropped: 0, .. }
    ));
    assert!(matches!(
        p.take(&first, MS, 1, None),
        PoolTake::Served { .. }
    ));
    assert_eq!(p.len(), 1);
}

#[test]
fn a_denial_answering_a_concurrent_ask_keeps_the_pooled_tokens() {
    let p = Pools::default();
    // One ask's grant pools 5 tokens; a concurrent ask's denial arrives after.
    assert_eq!(p.fill(&key(), 0, grant(10, 0, 0), 1, 100 * MS), 5);
    p.deny(&key(), MS, 1, 500 * MS);
    // The pooled tokens are served first, then the denial answers.
    assert!(matches!(
        p.take(&key(), 2 * MS, 1, None),
        PoolTake::Served { tokens: 5, .. }
    ));
    assert_eq!(
        p.take(&key(), 3 * MS, 1, None),
        PoolTake::Denied {
            retry_after_ns: 498 * MS
        }
    );
    // Expired pooled tokens are dropped by a denial.
    let p = Pools::default();
    p.fill(&key(), 0, grant(10, 0, 0), 1, 100 * MS);
    p.deny(&key(), 200 * MS, 1, 500 * MS);
    assert!(matches!(
        p.take(&key(), 800 * MS, 1, None),
        PoolTake::Miss { dropped: 0, .. }
    ));
}
