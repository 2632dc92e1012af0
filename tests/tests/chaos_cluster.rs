//! Chaos: a Redis Cluster primary dies under traffic. Its keys take the rule's
//! failure policy; the other primaries' keys keep being limited exactly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use meshlimit_tests::{count, AgentOptions, RedisCluster, Resp, Stack};

const RULES: &str = "version: 1\nrules:\n  - {name: per-key, key: [{header: x-api-key}], limit: {requests: 5, per: 1h}, accuracy: exact, on_failure: local}\n";

/// The master holding the bucket of API key `key`.
fn master_of(cluster: &RedisCluster, key: &str) -> usize {
    let pattern = meshlimit_tests::redis_bucket_key("per-key", &[key]);
    (0..3)
        .find(|n| matches!(cluster.cmd(*n, &["KEYS", &pattern]), Resp::Array(Some(k)) if !k.is_empty()))
        .unwrap_or_else(|| panic!("no bucket for {key}"))
}

#[test]
fn a_dead_primary_fails_its_keys_over_to_the_policy_and_spares_the_others() {
    let mut cluster = RedisCluster::start(3);
    let stack = Stack::start_with(AgentOptions::new(RULES).store(cluster.url()), |c| c);
    let keys: Vec<String> = (0..30).map(|i| format!("k{i}")).collect();
    for k in &keys {
        assert_eq!(stack.statuses(2, "/", &[("x-api-key", k)]), [200, 200]);
    }
    let owners: Vec<usize> = keys.iter().map(|k| master_of(&cluster, k)).collect();
    assert!(
        (0..3).all(|m| owners.contains(&m)),
        "keys on every master: {owners:?}"
    );

    cluster.kill_node(0);
    let (mut dead_admitted, mut dead_keys) = (0, 0);
    for (k, owner) in keys.iter().zip(&owners) {
        let statuses = stack.statuses(10, "/", &[("x-api-key", k)]);
        if *owner == 0 {
            // The filter's fail-local bucket: 5 × 2 (safety) / 1 node.
            dead_keys += 1;
            dead_admitted += count(&statuses, 200);
            assert!(count(&statuses, 200) <= 10, "{k}: {statuses:?}");
        } else {
            assert_eq!(
                count(&statuses, 200),
                3,
                "{k} on a live master keeps its exact limit: {statuses:?}"
            );
            assert_eq!(count(&statuses, 429), 7, "{k}: {statuses:?}");
        }
    }
    let over = (dead_admitted + 2 * dead_keys) as f64 / (5 * dead_keys) as f64;
    println!("{dead_keys} keys on the dead primary admitted {dead_admitted} more ({over:.2}× their limit in all, fail-local); the rest limited exactly");
    assert!(stack.decisions("per-key", "failed_local") > 0);
}
