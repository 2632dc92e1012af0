//! The Redis lease store against real redis-server processes: atomicity, cluster
//! routing, the volatile script cache, the server's clock, and rule changes.
//! Agents are driven over HTTP with the filter's wire protocol.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshlimit_tests::{post, Agent, AgentOptions, RedisCluster, RedisServer, Resp};
use serde_json::{json, Value};

/// One lease ask for `key` of `rule`; the answer item as JSON.
fn lease(agent: &Agent, rule: &str, key: &str, cost: u32) -> Value {
    let body =
        json!({"v": 1, "items": [{"rule": rule, "key": format!("{rule}|{key}"), "cost": cost}]});
    let auth = meshlimit_tests::agent_auth();
    let r = post(
        &agent.url("/v1/lease"),
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        &body.to_string(),
    );
    assert_eq!(r.status, 200, "{r:?}");
    r.json()["items"][0].clone()
}

fn granted(answer: &Value) -> u64 {
    if answer["result"] == "grant" {
        answer["tokens"].as_u64().unwrap()
    } else {
        0
    }
}

/// The harness's patient store deadline: these tests check correctness on a
/// loaded machine, not latency (that is `make bench`).
fn on(store: String, rules: &str) -> AgentOptions {
    AgentOptions::new(rules).store(store)
}

const ONE_TOKEN: &str = "version: 1\nrules:\n  - {name: one, key: [method], limit: {requests: 1, per: 1h}, accuracy: exact}\n";

#[test]
fn the_race_a_thousand_asks_for_one_token_admit_exactly_one() {
    let redis = RedisServer::start();
    let agents: Vec<Agent> = (0..2)
        .map(|_| Agent::start_with(on(redis.url(), ONE_TOKEN)))
        .collect();
    let wins = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for t in 0..40 {
            let (agent, wins, answered) = (&agents[t % 2], wins.clone(), answered.clone());
            s.spawn(move || {
                for _ in 0..25 {
                    let a = lease(agent, "one", "GET", 1);
                    assert!(a["result"] == "grant" || a["result"] == "deny", "{a}");
                    wins.fetch_add(granted(&a) as usize, Ordering::SeqCst);
                    answered.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(answered.load(Ordering::SeqCst), 1_000);
    assert_eq!(wins.load(Ordering::SeqCst), 1);
}

#[test]
fn after_script_flush_the_next_lease_still_succeeds() {
    let redis = RedisServer::start();
    let agent = Agent::start_with(on(redis.url(), "version: 1\nrules:\n  - {name: r, key: [method], limit: {requests: 100, per: 1h}, accuracy: exact}\n"));
    assert_eq!(granted(&lease(&agent, "r", "a", 1)), 1);
    assert_eq!(redis.cmd(&["SCRIPT", "FLUSH"]), Resp::Simple("OK".into()));
    assert_eq!(granted(&lease(&agent, "r", "b", 1)), 1);
    redis.cmd(&["SCRIPT", "FLUSH"]);
    redis.cmd(&["SCRIPT", "FLUSH"]);
    assert_eq!(granted(&lease(&agent, "r", "a", 1)), 1);
}

#[test]
fn a_rate_change_applies_at_the_next_lease_without_resetting_the_key() {
    let redis = RedisServer::start();
    let rules = |requests: u32| {
        format!("version: 1\nrules:\n  - {{name: r, key: [method], limit: {{requests: {requests}, per: 1h}}, accuracy: exact}}\n")
    };
    let mut agent = Agent::start_with(on(redis.url(), &rules(10)));
    for _ in 0..4 {
        assert_eq!(granted(&lease(&agent, "r", "k", 1)), 1);
    }
    agent.update_rules(&rules(20));
    // A fresh key shows which rules are in force: 9 tokens left of 10, or 19 of 20.
    let deadline = Instant::now() + Duration::from_secs(5);
    for probe in 0.. {
        let a = lease(&agent, "r", &format!("probe-{probe}"), 1);
        if a["remaining"] == 19 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new rules never applied: {a}"
        );
    }
    let answer = lease(&agent, "r", "k", 1);
    // 6 tokens were left of 10; one more spent: 5, not 19 (no reset). The bucket
    // now refills at 20 per hour towards a burst of 20: 15 tokens in 45 minutes.
    assert_eq!(answer["remaining"], 5, "{answer}");
    let reset = answer["reset_ms"].as_u64().unwrap();
    assert!((2_690_000..=2_710_000).contains(&reset), "reset {reset} ms");
}

#[test]
fn a_skewed_agent_clock_changes_nothing() {
    // 1 token per second, burst 5: an agent that decided on its own clock, 5 s
    // ahead, would see 5 extra tokens.
    let rules = "version: 1\nrules:\n  - {name: r, key: [method], limit: {requests: 1, per: 1s, burst: 5}, accuracy: exact}\n";
    let run = |shift: Option<&str>| {
        let redis = RedisServer::start();
        let plain = Agent::start_with(on(redis.url(), rules));
        let mut opts = on(redis.url(), rules);
        if let Some(offset) = shift {
            opts = opts
                .env("LD_PRELOAD", faketime_lib())
                .env("FAKETIME", offset)
                .env("DONT_FAKE_MONOTONIC", "1");
        }
        let other = Agent::start_with(opts);
        let mut admitted = 0;
        for i in 0..40 {
            let agent = if i % 2 == 0 { &plain } else { &other };
            admitted += granted(&lease(agent, "r", "k", 1));
        }
        admitted
    };
    // The shift itself works here: a process under the same environment is 5 s ahead.
    let date = |env: &[(&str, String)]| {
        let out = std::process::Command::new("date")
            .arg("+%s")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let ahead = date(&[("LD_PRELOAD", faketime_lib()), ("FAKETIME", "+5s".into())]) - date(&[]);
    assert!(
        (4..=6).contains(&ahead),
        "libfaketime shifted the clock by {ahead} s"
    );
    let (unshifted, shifted) = (run(None), run(Some("+5s")));
    assert!((5..=7).contains(&unshifted), "{unshifted}");
    assert!(
        shifted.abs_diff(unshifted) <= 1,
        "unshifted {unshifted}, shifted {shifted}"
    );
}

fn faketime_lib() -> String {
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ];
    let lib = candidates.iter().find(|p| std::path::Path::new(p).exists());
    lib.unwrap_or_else(|| {
        panic!("libfaketime is not installed (make tools installs it): looked in {candidates:?}")
    })
    .to_string()
}

#[test]
fn a_cluster_spreads_keys_over_every_master_and_follows_a_moved_slot() {
    let cluster = RedisCluster::start(3);
    let mut rules = String::from("version: 1\nrules:\n");
    for r in 0..20 {
        rules.push_str(&format!("  - {{name: r{r}, key: [method], limit: {{requests: 100, per: 1h}}, accuracy: exact}}\n"));
    }
    let agent = Agent::start_with(on(cluster.url(), &rules));
    for r in 0..20 {
        for k in 0..5 {
            assert_eq!(
                granted(&lease(&agent, &format!("r{r}"), &format!("k{k}"), 1)),
                1
            );
        }
    }
    for node in 0..3 {
        let Resp::Int(keys) = cluster.cmd(node, &["DBSIZE"]) else {
            panic!("DBSIZE")
        };
        assert!(keys > 0, "master {node} holds no key");
    }

    // Move the slot of one bucket to another master, the way redis-cli --cluster
    // reshard does, then lease it again: the agent follows the MOVED answer.
    let key = find_key(&cluster, "r0", "k0");
    let Resp::Int(slot) = cluster.cmd(0, &["CLUSTER", "KEYSLOT", &key]) else {
        panic!("KEYSLOT")
    };
    let slot = slot.to_string();
    let from = (0..3).find(|n| matches!(cluster.cmd(*n, &["CLUSTER", "COUNTKEYSINSLOT", &slot]), Resp::Int(c) if c > 0)).unwrap();
    let to = (from + 1) % 3;
    let id = |n: usize| cluster.cmd(n, &["CLUSTER", "MYID"]).text().unwrap();
    let (from_id, to_id) = (id(from), id(to));
    cluster.cmd(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    cluster.cmd(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    let to_port = cluster.ports()[to].to_string();
    assert_eq!(
        cluster.cmd(from, &["MIGRATE", "127.0.0.1", &to_port, &key, "0", "5000"]),
        Resp::Simple("OK".into())
    );
    for n in 0..3 {
        cluster.cmd(n, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
    let a = lease(&agent, "r0", "k0", 1);
    assert_eq!(granted(&a), 1, "{a}");
    // The bucket moved with its count: 100 − 1 (before) − 1 (now).
    assert_eq!(a["remaining"], 98, "{a}");
    assert!(matches!(cluster.cmd(to, &["EXISTS", &key]), Resp::Int(1)));
}

/// The Redis key holding a key's bucket (checked to exist on some master).
fn find_key(cluster: &RedisCluster, rule: &str, part: &str) -> String {
    let name = meshlimit_tests::redis_bucket_key(rule, &[part]);
    for node in 0..3 {
        if let Resp::Int(1) = cluster.cmd(node, &["EXISTS", &name]) {
            return name;
        }
    }
    panic!("no bucket {name} for {rule}|{part}");
}
