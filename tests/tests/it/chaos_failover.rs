//! Chaos: a Redis Cluster primary (3 primaries, one replica each,
//! `cluster-node-timeout 1000`) fails under load: killed, stalled (SIGSTOP until
//! the cluster fails it over, then SIGCONT), or restarted empty. 24 keys of a
//! 20/s fail-local rule are each offered ~78/s through Envoy and one agent.
//! Per second: the healthy primaries' keys stay exact; the failed primary's keys
//! stay under the node's fail-local ceiling (2 × 20 / 1 agent = 40/s) plus the
//! stated first-second bound; exact again within a second of the promotion.
//! The kill and the stall offer half the keys to a second rule, the same but
//! `accuracy: exact`, where every request is a store call: a healthy key's
//! calls share the agent's lease requests with the failed primary's, and must
//! not take their failure policy with them. Both rules are held to the leased
//! rule's bounds (an exact key's per second count moves with the requests'
//! latency across a second's edge). One run per fault holds both rules: the
//! load through Envoy is the same 24 keys either way, and a test that runs
//! alone on the machine is not run twice for it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{
    sample, signal, wait_for, AgentOptions, Load, Probe, RedisCluster, Sample, Stack,
};

const LIMIT: usize = 20;
const KEYS: usize = 24;
const OFFERED: f64 = 78.0;
/// The node's fail-local ceiling per second: 20 × 2 (safety) / 1 agent.
const LOCAL: usize = 2 * LIMIT;
/// Exact limiting, per key and second: the limit, plus the tokens out at a
/// second's edge and spent after it: those of the 2 worker VMs and of the
/// agent's pool, each at most 2 leases of burst/10 = 2 (12). The limit plus
/// one holder's 4 tokens is too tight a bound: more than one holder's tokens
/// can cross an edge, with and without the node's spaced turn-aways.
const EXACT_MAX: usize = LIMIT + 3 * 4;
/// What a key on the failed primary may admit in any second on top of the
/// ceiling's rate: the leases already out when the store went (2 worker VMs and
/// the agent's pool, each at most 2 leases of burst/10 = 2), and one request: a
/// key in use starts its fail-local buckets (the agent's, and the filter's when a
/// lease call times out) at one request, not a burst.
const FIRST_SECOND: usize = 1 + 3 * 4;
/// What a key on the failed primary may admit on top of that in the second
/// the agent reaches its replica: the replica's bucket refilled to its burst
/// (the limit) during the outage and knows nothing of what the fail-local
/// buckets admitted, so local admissions early in the second and the burst
/// after the switch add up. The burst is spent within a quarter of a second at
/// the offered rate, and what spills into the next second (at most the burst,
/// the rate and the leases: 52) is inside `LOCAL + FIRST_SECOND`.
const BACK_SECOND: usize = LIMIT;
/// The leased rule, keyed on `x-api-key`, and its exact twin on
/// `x-exact-key`, where every request is checked in the store. A request
/// carries one of the two headers, so it is counted by one rule.
const RULES: &str = "version: 1\nrules:\n  - {name: per-key, key: [{header: x-api-key}], limit: {requests: 20, per: 1s}, on_failure: local}\n  - {name: per-key-exact, key: [{header: x-exact-key}], limit: {requests: 20, per: 1s}, accuracy: exact, on_failure: local}\n";

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    Kill,
    Stall,
    RestartEmpty,
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A key offered through Envoy: the rule that counts it, and its header.
struct Key {
    rule: &'static str,
    header: &'static str,
    value: String,
}

impl Key {
    /// The hash slot of the key's bucket, as the cluster itself computes it.
    fn slot(&self, cluster: &RedisCluster) -> u16 {
        cluster.slot_of(&meshlimit_tests::redis_bucket_key(
            self.rule,
            &[&self.value],
        ))
    }
}

/// 24 keys: all of the leased rule's, or half of them the exact rule's.
fn keys(with_exact: bool) -> Vec<Key> {
    (0..KEYS)
        .map(|i| {
            let (rule, header) = if with_exact && i % 2 == 1 {
                ("per-key-exact", "x-exact-key")
            } else {
                ("per-key", "x-api-key")
            };
            Key {
                rule,
                header,
                value: format!("key-{i}"),
            }
        })
        .collect()
}

fn topology_events(stack: &Stack, event: &str) -> f64 {
    sample(
        &stack.agent.metrics(),
        "meshlimit_store_topology_events_total",
        &[("event", event)],
    )
    .unwrap_or(0.0)
}

fn run(fault: Fault) {
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut cluster = RedisCluster::start_with(3, 1, 1_000);
    // The filter's lease deadline well above the agent's store deadline (3 ms):
    // this test is about a Redis node failing, not about lease calls timing out
    // on a busy machine (those take the filter's own fail-local bucket).
    let stack = Stack::start_with(
        AgentOptions::new(RULES)
            .shipped_store_deadline()
            .store(cluster.url()),
        |c| c.plugin("timeout_ms", 50),
    );
    // A restarted primary loses its buckets whatever the rule: the leased
    // rule stands for both there.
    let keys = keys(fault != Fault::RestartEmpty);
    let slots: Vec<u16> = keys.iter().map(|k| k.slot(&cluster)).collect();
    let owners: Vec<u16> = slots
        .iter()
        .map(|s| cluster.primary_of_slot(0, *s).unwrap())
        .collect();
    // The primary with the most of the keys fails.
    let victim_port = *owners
        .iter()
        .max_by_key(|p| owners.iter().filter(|o| o == p).count())
        .unwrap();
    let victim = cluster.index_of(victim_port).unwrap();
    let witness = (0..3).find(|n| *n != victim).unwrap();
    let dead: Vec<bool> = owners.iter().map(|o| *o == victim_port).collect();
    for rule in ["per-key", "per-key-exact"] {
        let of_rule = |d: bool| {
            keys.iter()
                .zip(&dead)
                .filter(|(k, dd)| k.rule == rule && **dd == d)
                .count()
        };
        // The key names are fixed, and so are their slots and the cluster's
        // slot ranges: each rule has keys on the victim and on the others.
        let used = keys.iter().any(|k| k.rule == rule);
        assert!(
            !used || (of_rule(true) > 0 && of_rule(false) > 0),
            "{rule}: {} keys on the victim, {} elsewhere",
            of_rule(true),
            of_rule(false)
        );
    }
    let victim_slot = slots[dead.iter().position(|d| *d).unwrap()];

    let max = Duration::from_secs(25);
    let loads: Vec<Load> = keys
        .iter()
        .map(|k| {
            let header = [(k.header, k.value.as_str())];
            Load::start(&stack.envoy.url("/"), &header, OFFERED, 1, max)
        })
        .collect();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(5)); // the healthy phase being measured
    let fault_at = Instant::now();
    let pid = cluster.pid(victim);
    match fault {
        Fault::Kill => cluster.kill_node(victim),
        Fault::Stall => signal(pid, "-STOP"),
        Fault::RestartEmpty => cluster.restart_node(victim),
    }
    let maps_before = topology_events(&stack, "slot_map_changed");
    // The timeline: the others mark it failed, a replica is promoted, the
    // agent's map follows.
    let (mut failed_at, mut promoted_at, mut refreshed_at) = (None, None, None);
    let done = wait_for(Duration::from_secs(15), "the failover", || {
        let now = Instant::now();
        if failed_at.is_none() && cluster.flags_of(witness, victim).contains("fail") {
            failed_at = Some(now);
        }
        if promoted_at.is_none()
            && cluster
                .primary_of_slot(witness, victim_slot)
                .is_some_and(|p| p != victim_port)
        {
            promoted_at = Some(now);
        }
        if refreshed_at.is_none() && topology_events(&stack, "slot_map_changed") > maps_before {
            refreshed_at = Some(now);
        }
        match fault {
            // Restarted at once: no failover expected; the node is back.
            Fault::RestartEmpty => {
                if now.duration_since(fault_at) > Duration::from_secs(3) {
                    Probe::Ready(())
                } else {
                    Probe::Pending
                }
            }
            _ if promoted_at.is_some() && refreshed_at.is_some() => Probe::Ready(()),
            _ => Probe::Pending,
        }
    });
    done.unwrap();
    if fault == Fault::Stall {
        signal(pid, "-CONT");
        // The old primary rejoins as a replica of the promoted one.
        let rejoined = wait_for(
            Duration::from_secs(10),
            "the old primary to rejoin as a replica",
            || {
                if cluster.flags_of(witness, victim).contains("slave") {
                    Probe::Ready(Instant::now())
                } else {
                    Probe::Pending
                }
            },
        );
        println!(
            "SIGCONT → rejoined as a replica after {:?}",
            rejoined.unwrap().duration_since(fault_at)
        );
    }
    let settled = Instant::now().max(fault_at + Duration::from_secs(3));
    let end = settled + Duration::from_secs(3);
    std::thread::sleep(end.saturating_duration_since(Instant::now())); // the recovered phase
    let samples: Vec<Vec<Sample>> = loads.into_iter().map(Load::stop).collect();

    let secs = end.duration_since(t0).as_secs() as usize;
    let at = |i: Option<Instant>| i.map(|t| t.duration_since(t0).as_secs_f64());
    println!(
        "{} of {KEYS} keys on the failed primary 127.0.0.1:{victim_port}; fault at {:.2} s, marked fail by the others at {:?} s, replica promoted at {:?} s, agent's slot map changed at {:?} s",
        dead.iter().filter(|d| **d).count(),
        fault_at.duration_since(t0).as_secs_f64(),
        at(failed_at),
        at(promoted_at),
        at(refreshed_at),
    );
    println!("second | admitted | healthy keys min–max | failed primary's keys min–max");
    let mut failures = Vec::new();
    let fault_sec = fault_at.duration_since(t0).as_secs() as usize;
    let exact_from = match fault {
        Fault::RestartEmpty => fault_at + Duration::from_secs(2),
        _ => promoted_at.unwrap() + Duration::from_secs(1),
    };
    // The second the agent is back on the store: the later of the promotion
    // and its reading the new slot map.
    let back_sec = promoted_at
        .max(refreshed_at)
        .map(|t| t.duration_since(t0).as_secs() as usize);
    let mut over_grant = 0usize;
    for s in 0..secs {
        let from = t0 + Duration::from_secs(s as u64);
        let to = from + Duration::from_secs(1);
        let per_key: Vec<usize> = samples
            .iter()
            .map(|v| {
                v.iter()
                    .filter(|x| x.at >= from && x.at < to && x.status == 200)
                    .count()
            })
            .collect();
        let range = |want: bool| {
            let v: Vec<usize> = per_key
                .iter()
                .zip(&dead)
                .filter(|(_, d)| **d == want)
                .map(|(n, _)| *n)
                .collect();
            (*v.iter().min().unwrap(), *v.iter().max().unwrap())
        };
        let (hmin, hmax) = range(false);
        let (dmin, dmax) = range(true);
        println!(
            "{s:>6} | {:>8} | {hmin:>3}–{hmax:<3} | {dmin:>3}–{dmax:<3}",
            per_key.iter().sum::<usize>()
        );
        // Second 0 is the warm-up (each key's first burst, and the agent's
        // first slot-map read): not measured.
        if s >= 1 && hmax > EXACT_MAX {
            failures.push(format!("second {s}: a healthy key admitted {hmax}"));
        }
        // Too few admitted is judged against what was sent: a loaded machine
        // can keep the load's own threads from offering the limit, and a
        // key offered 8 requests in a second cannot be admitted 10.
        let sent: Vec<usize> = samples
            .iter()
            .map(|v| v.iter().filter(|x| x.at >= from && x.at < to).count())
            .collect();
        let short = per_key
            .iter()
            .zip(&sent)
            .zip(&dead)
            .filter(|((n, sent), d)| !**d && **n < LIMIT.min(**sent) / 2)
            .map(|((n, sent), _)| (*n, *sent))
            .next();
        if let (true, Some((n, sent))) = (s >= 1, short) {
            failures.push(format!(
                "second {s}: a healthy key admitted only {n} of {sent} sent"
            ));
        }
        if fault == Fault::RestartEmpty {
            // An empty primary: each key's bucket starts full once.
            if s >= fault_sec {
                over_grant = over_grant.max(dmax.saturating_sub(LIMIT));
            }
            if s >= 1 && dmax > EXACT_MAX + LIMIT + FIRST_SECOND {
                failures.push(format!(
                    "second {s}: a key of the restarted primary admitted {dmax}"
                ));
            }
        } else if s >= fault_sec
            && dmax > LOCAL + FIRST_SECOND + if back_sec == Some(s) { BACK_SECOND } else { 0 }
        {
            failures.push(format!(
                "second {s}: a key of the failed primary admitted {dmax}"
            ));
        }
        if from >= exact_from && dmax > EXACT_MAX {
            failures.push(format!(
                "second {s}: not exact again after the failover ({dmax})"
            ));
        }
        if s >= 1 && s < fault_sec && dmax > EXACT_MAX {
            failures.push(format!(
                "second {s}: before the fault, a key admitted {dmax}"
            ));
        }
    }
    if fault == Fault::RestartEmpty {
        println!("restarted empty: at most {over_grant} over the limit in a second per key (one burst = {LIMIT})");
    }
    let text = stack.agent.metrics();
    for event in ["slot_map_changed", "node_down", "node_up", "node_replaced"] {
        println!(
            "meshlimit_store_topology_events_total{{event={event}}} {}",
            sample(
                &text,
                "meshlimit_store_topology_events_total",
                &[("event", event)]
            )
            .unwrap_or(0.0)
        );
    }
    println!(
        "failure-policy answers (store_unavailable) {}, node down ms {}",
        sample(
            &text,
            "meshlimit_lease_unavailable_total",
            &[("reason", "store_unavailable")]
        )
        .unwrap_or(0.0),
        sample(&text, "meshlimit_store_node_down_milliseconds_total", &[]).unwrap_or(0.0),
    );
    if fault != Fault::RestartEmpty {
        assert!(
            (stack.agent.stderr() + &stack.agent.stdout())
                .contains(&format!("127.0.0.1:{victim_port}")),
            "the agent's log names the failed node"
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_killed_primary_fails_only_its_keys_and_its_replica_takes_over() {
    run(Fault::Kill);
}

#[test]
fn a_stalled_primary_is_failed_over_and_rejoins_as_a_replica() {
    run(Fault::Stall);
}

#[test]
fn a_primary_restarted_empty_over_grants_at_most_one_burst() {
    run(Fault::RestartEmpty);
}
