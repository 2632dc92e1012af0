//! Chaos: Redis Cluster resharding under load. A hot key (250/s offered to a
//! 100/s `exact` rule, so every request is decided in the store) and three
//! cold keys (20/s each, under the limit) run through Envoy and one agent on a
//! 3-primary cluster, while the hash slot of each key's bucket moves to
//! another primary as `redis-cli --cluster reshard` moves slots: the target
//! imports it, the source migrates it, the key goes over with `MIGRATE` while
//! requests for it arrive (the source answers ASK: the agent follows it with
//! `ASKING`), then every primary gives the slot to the target (the source
//! answers MOVED: followed, and the agent's slot map is read again).
//!
//! The slots are moved by hand (`CLUSTER SETSLOT ... IMPORTING|MIGRATING`,
//! `MIGRATE ... KEYS`, `CLUSTER SETSLOT ... NODE`), not with `redis-cli
//! --cluster reshard`: that takes a slot count, not the slots of given keys,
//! and moves a whole slot at once, so the test could neither pick the hot
//! keys' slots nor hold a slot half-moved until the agent has met its ASK.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{
    assert_admitted_at_rate, sample, wait_for, AgentOptions, Load, Probe, RedisCluster, Sample,
    Stack,
};

const RULE: &str = "per-key";
const RULES: &str = "version: 1\nrules:\n  - {name: per-key, key: [{header: x-api-key}], limit: {requests: 100, per: 1s, burst: 100}, accuracy: exact, on_failure: local}\n";
/// The rule's rate, per second.
const RATE: f64 = 100.0;
const HOT_OFFERED: f64 = 250.0;
const COLD_OFFERED: f64 = 20.0;
/// ASK redirects the agent must meet while a slot is half-moved before it is
/// finished: half a second of a cold key's requests.
const ASKS_PER_SLOT: f64 = 10.0;
/// Any one wait on the cluster or the agent.
const WAIT: Duration = Duration::from_secs(5);

fn metric(stack: &Stack, name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(&stack.agent.metrics(), name, labels).unwrap_or(0.0)
}

fn redirects(stack: &Stack, kind: &str) -> f64 {
    metric(stack, "meshlimit_store_redirects_total", &[("kind", kind)])
}

fn map_changes(stack: &Stack) -> f64 {
    metric(
        stack,
        "meshlimit_store_topology_events_total",
        &[("event", "slot_map_changed")],
    )
}

/// Decisions of the rule by its failure policy, in every form, at the filter
/// (a lease call that failed or timed out) and at the agent (a store call
/// that failed: `meshlimit_lease_unavailable_total`, every reason).
fn by_failure_policy(stack: &Stack) -> f64 {
    let filter: u64 = ["failed_open", "failed_closed", "failed_local"]
        .iter()
        .map(|o| stack.decisions(RULE, o))
        .sum();
    let text = stack.agent.metrics();
    let agent: f64 = ["store_unavailable", "store_timeout", "store_error", "shed"]
        .iter()
        .map(|r| {
            sample(&text, "meshlimit_lease_unavailable_total", &[("reason", r)]).unwrap_or(0.0)
        })
        .sum();
    filter as f64 + agent
}

/// Waits until `probe` holds, or fails the test naming `what`.
fn until(what: &str, mut probe: impl FnMut() -> bool) {
    wait_for(WAIT, what, || {
        if probe() {
            Probe::Ready(())
        } else {
            Probe::Pending
        }
    })
    .unwrap();
}

/// The hash slot of `key`'s bucket, as the cluster computes it.
fn slot_of(cluster: &RedisCluster, key: &str) -> u16 {
    cluster.slot_of(&meshlimit_tests::redis_bucket_key(RULE, &[key]))
}

/// Moves `key`'s slot from its primary to the next one, meeting ASK while it
/// is half-moved and MOVED once it is given away; answers the new owner's port.
fn move_slot_of(cluster: &RedisCluster, stack: &Stack, key: &str) -> u16 {
    let slot = slot_of(cluster, key);
    let from = cluster
        .index_of(cluster.slot_owner(0, slot).unwrap())
        .unwrap();
    let to = (from + 1) % 3;
    cluster.start_slot_move(slot, from, to);
    let asks = redirects(stack, "ask");
    let bucket = meshlimit_tests::redis_bucket_key(RULE, &[key]);
    cluster.migrate_keys(from, to, &[bucket]);
    // (Or a request took its failure policy instead: the end of the test
    // reports it.)
    until(&format!("ASK redirects for {key}'s slot {slot}"), || {
        redirects(stack, "ask") >= asks + ASKS_PER_SLOT || by_failure_policy(stack) > 0.0
    });
    let (moved, maps) = (redirects(stack, "moved"), map_changes(stack));
    cluster.finish_slot_move(slot, from, to);
    until(
        &format!("the agent's slot map to give {slot} to its new owner"),
        || map_changes(stack) > maps,
    );
    println!(
        "{key}: slot {slot} moved from node {from} to node {to}; MOVED followed while the map was stale: {}",
        redirects(stack, "moved") - moved
    );
    cluster.ports()[to]
}

#[test]
fn resharding_under_load_is_followed_without_a_failure_policy_decision() {
    let cluster = RedisCluster::start(3);
    let stack = Stack::start_with(AgentOptions::new(RULES).store(cluster.url()), |c| c);
    let url = stack.envoy.url("/");
    let max = Duration::from_secs(20);
    let hot = Load::start(&url, &[("x-api-key", "hot")], HOT_OFFERED, 2, max);
    let cold_keys = ["cold-1", "cold-2", "cold-3"];
    let cold: Vec<Load> = cold_keys
        .iter()
        .map(|k| Load::start(&url, &[("x-api-key", k)], COLD_OFFERED, 1, max))
        .collect();
    // The hot key's bucket drained: from now on the store admits at its rate.
    let drained = wait_for(WAIT, "the hot key's first denial", || {
        if stack.decisions(RULE, "limited") > 0 {
            Probe::Ready(Instant::now())
        } else {
            Probe::Pending
        }
    })
    .unwrap();
    let keys = std::iter::once("hot").chain(cold_keys);
    let before: Vec<(u16, u16)> = keys
        .clone()
        .map(|k| {
            let slot = slot_of(&cluster, k);
            (slot, cluster.slot_owner(0, slot).unwrap())
        })
        .collect();
    let owners: Vec<u16> = keys.map(|k| move_slot_of(&cluster, &stack, k)).collect();
    // Two more seconds on the new owners, so that the hot key's count spans
    // about 4 s (400 tokens: 1 % is 4 of them).
    let until_end = Instant::now() + Duration::from_secs(2);
    std::thread::sleep(until_end.saturating_duration_since(Instant::now()));
    let hot = hot.stop();
    let cold: Vec<Vec<Sample>> = cold.into_iter().map(Load::stop).collect();

    for ((slot, was), now) in before.iter().zip(&owners) {
        assert_ne!(was, now, "slot {slot} still on 127.0.0.1:{was}");
        for node in 0..3 {
            assert_eq!(
                cluster.slot_owner(node, *slot),
                Some(*now),
                "slot {slot}, node {node}'s CLUSTER SLOTS"
            );
        }
    }
    let (asks, moved) = (redirects(&stack, "ask"), redirects(&stack, "moved"));
    let failed = by_failure_policy(&stack);
    println!("redirects followed: ask {asks}, moved {moved}; failure-policy decisions {failed}");
    assert_eq!(failed, 0.0, "decisions by the failure policy");
    assert!(
        asks >= 4.0 * ASKS_PER_SLOT,
        "ASK redirects followed: {asks}"
    );
    assert!(moved > 0.0, "MOVED redirects followed: {moved}");
    let unanswered = hot
        .iter()
        .chain(cold.iter().flatten())
        .filter(|s| s.status != 200 && s.status != 429)
        .count();
    assert_eq!(unanswered, 0, "requests answered neither 200 nor 429");
    for (k, samples) in cold_keys.iter().zip(&cold) {
        let denied = samples.iter().filter(|s| s.status == 429).count();
        assert_eq!(denied, 0, "{k}, under its limit, was denied");
    }
    // What the drained hot key admitted is its rate over that time.
    assert_admitted_at_rate(&hot, drained, RATE);
}
