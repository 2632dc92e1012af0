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
    // Generous deadlines, as in e2e_redis: on this 2-core machine a lease call to
    // a live master that misses a 5 ms budget while the client reconnects would
    // hand that request to the failure policy, which is not what is tested here.
    let agent = AgentOptions::new(RULES)
        .store(cluster.url())
        .arg("--store-deadline-ms")
        .arg("40");
    let stack = Stack::start_with(agent, |c| c.plugin("timeout_ms", 50));
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
    // More requests to a dead master's key than the node's fail-local bucket
    // holds, so that a bucket handing out too much shows.
    const SENT: usize = 15;
    // The node's fail-local bucket: 5 × 2 (safety) / 1 node. It knows nothing of
    // the 2 the key spent at the store before the kill.
    const NODE_CEILING: usize = 10;
    let (mut dead_admitted, mut dead_keys) = (0, 0);
    for (k, owner) in keys.iter().zip(&owners) {
        let sent = if *owner == 0 { SENT } else { 10 };
        let statuses = stack.statuses(sent, "/", &[("x-api-key", k)]);
        if *owner == 0 {
            dead_keys += 1;
            let admitted = count(&statuses, 200);
            dead_admitted += admitted;
            assert!((1..=NODE_CEILING).contains(&admitted), "{k}: {statuses:?}");
            assert_eq!(admitted + count(&statuses, 429), SENT, "{k}: {statuses:?}");
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
    // Twice the limit from the fail-local bucket, on top of the 2 spent before.
    assert!(over <= 2.4, "{over:.2}× the limit");
    assert!(stack.decisions("per-key", "failed_local") > 0);
}
