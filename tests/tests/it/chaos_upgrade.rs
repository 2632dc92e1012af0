//! Chaos at the agent: its upgrade on a node under load, as a DaemonSet rolls
//! it (`maxSurge: 1`). Envoy, one redis-server and two real agent processes:
//! the new agent binds the old one's port beside it (SO_REUSEPORT), then the
//! old one gets SIGTERM, hands its connections over and its node pool's
//! unspent tokens back to Redis, and exits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{
    assert_admitted_at_rate, assert_limit_kept, eventually, key_id, redis_bucket_key, signal,
    wait_for, Agent, AgentOptions, Load, Probe, RedisServer, Resp, Sample, Stack,
};

/// The hot key's limit, a second (its burst too).
const HOT: f64 = 200.0;
/// The warm key's rate, a second, and its burst: offered four times its rate, it
/// stays far from empty and from full for the test's seconds, so the pool
/// leases ahead of its asks, no hold ends in a refill, and the bucket has
/// room for what comes back.
const WARM_RATE: f64 = 10.0;
const WARM_BURST: f64 = 600.0;
const RULES: &str = r#"
version: 1
rules:
  - name: hot
    match: { path_prefix: /hot }
    key: [{ header: x-api-key }]
    limit: { requests: 200, per: 1s }
    on_failure: closed
  - name: warm
    match: { path_prefix: /warm }
    key: [{ header: x-api-key }]
    limit: { requests: 600, per: 1m }
    on_failure: closed
"#;
/// The old agent logs each key it hands back (by its id) at debug level.
const LOG: &str = "info,meshlimit_agent::leases::hand_back=debug";

/// The warm key's bucket as Redis holds it: tokens, and when (µs of `TIME`).
fn warm_bucket(redis: &RedisServer) -> (f64, f64) {
    let key = redis_bucket_key("warm", &["w"]);
    let Resp::Array(Some(fields)) = redis.cmd(&["HMGET", &key, "t", "u"]) else {
        panic!("HMGET {key}");
    };
    let num = |r: &Resp| {
        r.text()
            .and_then(|t| t.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{key}: {fields:?}, {:?}", redis.cmd(&["KEYS", "*"])))
    };
    (num(&fields[0]), num(&fields[1]))
}

/// `field=<number>` on the first line of `log` that holds every one of `with`.
fn logged(log: &str, with: &[&str], field: &str) -> Option<u64> {
    let line = log.lines().find(|l| with.iter().all(|w| l.contains(w)))?;
    let (_, rest) = line.split_once(&format!(" {field}="))?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// What an upgrade under load left to check.
struct Upgrade {
    hot: Vec<Sample>,
    warm: Vec<Sample>,
    /// When the old agent got SIGTERM, and how long it took to exit.
    term: Instant,
    exited: Duration,
    /// The warm key's bucket just before SIGTERM, and once the old agent exited.
    before: (f64, f64),
    after: (f64, f64),
}

/// Offers the hot key twice its limit and the warm key four times its rate
/// through `stack`; starts a new agent beside the old one; stops the warm
/// load, then the old agent (SIGTERM), the hot load going on for 2 s more.
fn upgrade_under_load(stack: &mut Stack, redis: &RedisServer, options: AgentOptions) -> Upgrade {
    let max = Duration::from_secs(30);
    let hot_key = [("x-api-key", "hot")];
    let hot = Load::start(&stack.envoy.url("/hot"), &hot_key, 2.0 * HOT, 8, max);
    let warm_key = [("x-api-key", "w")];
    let warm_url = stack.envoy.url("/warm");
    let warm = Load::start(&warm_url, &warm_key, 4.0 * WARM_RATE, 2, max);
    // The old agent alone, measured.
    std::thread::sleep(Duration::from_secs(2));
    // The new agent, on the same port, serving beside the old one.
    let new = Agent::start_with(options.port(stack.agent.port()));
    eventually(Duration::from_secs(10), "the new agent to serve", || {
        new.stderr().contains("meshlimit-agent serving")
    });
    std::thread::sleep(Duration::from_millis(500)); // both agents serving, measured
    let warm = warm.stop();
    // The last ask's store call, if it started one, has ended.
    std::thread::sleep(Duration::from_millis(30));
    let before = warm_bucket(redis);
    let term = Instant::now();
    signal(stack.agent.pid().unwrap(), "-TERM");
    eventually(Duration::from_secs(10), "the old agent to exit", || {
        !stack.agent.is_running()
    });
    let exited = term.elapsed();
    let after = warm_bucket(redis);
    std::thread::sleep(Duration::from_secs(2)); // the new agent alone, measured
    Upgrade {
        hot: hot.stop(),
        warm,
        term,
        exited,
        before,
        after,
    }
}

#[test]
fn an_agent_upgrade_under_load_loses_no_request_and_hands_its_pool_back() {
    let redis = RedisServer::start();
    let options = AgentOptions::new(RULES)
        .store(redis.url())
        .arg("--log")
        .arg(LOG);
    let mut stack = Stack::start_with(options.clone(), |c| c);
    let up = upgrade_under_load(&mut stack, &redis, options);
    println!("old agent exited {:?} after SIGTERM", up.exited);

    // Nothing was decided by a failure policy, and every answer was a 200 or
    // a 429 (0: no answer at all).
    for rule in ["hot", "warm"] {
        assert_eq!(stack.by_failure_policy(rule), 0, "{rule}");
    }
    let other: Vec<&Sample> = (up.hot.iter().chain(&up.warm))
        .filter(|s| s.status != 200 && s.status != 429)
        .collect();
    assert!(
        other.is_empty(),
        "{} neither 200 nor 429: {other:?}",
        other.len()
    );

    assert_pool_handed_back(&stack.agent.stderr(), up.before, up.after);
    // No hot key's token made or lost by the upgrade: from SIGTERM, its
    // second admits the limit within what its two ends can hold back.
    let term = up.term;
    assert_limit_kept(
        &up.hot,
        HOT,
        term,
        term + Duration::from_secs(1),
        UPGRADE_SECOND_TOLERANCE,
    );
}

/// The warm key's pool was handed back: its bucket shows it, and agrees with
/// the old agent's log (the figures of meshlimit_pool_handed_back_tokens_total).
fn assert_pool_handed_back(old_log: &str, before: (f64, f64), after: (f64, f64)) {
    let warm_id = key_id("warm", &["w"]);
    let logged_warm = logged(old_log, &["pooled tokens handed back", &warm_id], "taken");
    let logged_all = logged(old_log, &["node pool handed back to the store"], "tokens");
    // What the bucket took between the two readings beyond its refill: the
    // hand-back's is the only write (no ask for the key after the first
    // reading, and no hold to end in a refill while it stays far from empty).
    let refilled = (before.0 + (after.1 - before.1) * WARM_RATE / 1e6).min(WARM_BURST);
    let in_bucket = after.0 - refilled;
    println!(
        "warm bucket {before:?} -> {after:?}: {in_bucket:.3} tokens back \
         (logged {logged_warm:?}, {logged_all:?} for every key)"
    );
    assert!(
        in_bucket >= 1.0,
        "the warm bucket took {in_bucket} tokens back"
    );
    let logged_warm = logged_warm.expect("the old agent logs the warm key's hand-back");
    assert!(
        (in_bucket - logged_warm as f64).abs() < 0.01,
        "bucket {in_bucket}, logged {logged_warm}"
    );
    assert!(logged_all.unwrap() >= logged_warm);
}

/// A hot key offered twice its limit has its bucket drained: over a second,
/// it admits what refills (the limit), plus the tokens held unspent at the
/// second's start, less those held at its end. Held unspent: in the filters'
/// leases, spent within a lease period (`--lease-target-ms`, 100 ms) at twice
/// the limit; and in the bucket while a node holds a denial (at most its wait
/// plus a lease's refill plus a lease period, and the filters' own wait on
/// top: about three lease periods), admitted together once it ends. So at
/// most three lease periods of the limit either way: 0.3 of it.
const UPGRADE_SECOND_TOLERANCE: f64 = 0.3;

/// An exact rule's limit, a second (its burst too): every request is a store
/// call, so what the key admits is the bucket's refill, exactly.
const EXACT: f64 = 100.0;
const EXACT_RULES: &str = "version: 1\nrules:\n  - {name: exact, key: [{header: x-api-key}], limit: {requests: 100, per: 1s}, accuracy: exact, on_failure: closed}\n";

#[test]
fn an_agent_upgrade_under_load_keeps_an_exact_key_at_its_rate() {
    let redis = RedisServer::start();
    let options = AgentOptions::new(EXACT_RULES).store(redis.url());
    let mut stack = Stack::start_with(options.clone(), |c| c);
    let max = Duration::from_secs(30);
    let hot = Load::start(
        &stack.envoy.url("/"),
        &[("x-api-key", "hot")],
        2.5 * EXACT,
        2,
        max,
    );
    // The key's bucket drained: from now on the store admits at its rate.
    let drained = wait_for(Duration::from_secs(5), "the key's first denial", || {
        if stack.decisions("exact", "limited") > 0 {
            Probe::Ready(Instant::now())
        } else {
            Probe::Pending
        }
    })
    .unwrap();
    let new = Agent::start_with(options.port(stack.agent.port()));
    eventually(Duration::from_secs(10), "the new agent to serve", || {
        new.stderr().contains("meshlimit-agent serving")
    });
    signal(stack.agent.pid().unwrap(), "-TERM");
    eventually(Duration::from_secs(10), "the old agent to exit", || {
        !stack.agent.is_running()
    });
    // A second on the new agent alone.
    std::thread::sleep(Duration::from_secs(1));
    let hot = hot.stop();

    assert_eq!(stack.by_failure_policy("exact"), 0);
    let other = hot
        .iter()
        .filter(|s| s.status != 200 && s.status != 429)
        .count();
    assert_eq!(other, 0, "requests answered neither 200 nor 429");
    // Across the whole upgrade, the key admitted its rate within 1%.
    assert_admitted_at_rate(&hot, drained, EXACT);
}
