//! The fleet override end to end: a real redis-server, two agents on it (one
//! behind a real Envoy with the filter), and the real `meshlimit override`
//! command. `override shadow` puts every rule in shadow on both agents within
//! 2 s (requests that were 429 pass, counted as shadow_limited); `override
//! clear` brings the 429s back within 2 s.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::time::{Duration, Instant};

use meshlimit_tests::{
    cli_bin, fleet_override_gauge, run_override, within, Agent, AgentOptions, RedisServer, Resp,
    Stack, STRICT_ONE_PER_HOUR,
};

const RULES: &str = STRICT_ONE_PER_HOUR;

fn override_gauge(agent: &Agent) -> Option<f64> {
    fleet_override_gauge(agent, "shadow")
}

#[test]
fn one_switch_puts_every_agent_in_shadow_and_clearing_it_restores_the_429s() {
    let redis = RedisServer::start();
    let stack = Stack::start_with(AgentOptions::new(RULES).store(redis.url()), |c| c);
    let mut other = Agent::start_with(AgentOptions::new(RULES).store(redis.url()));
    other.wait_ready(Duration::from_secs(10));
    let key = [("x-api-key", "k")];

    // The file's mode: the key's one request, then 429s.
    assert_eq!(stack.get("/", &key).status, 200);
    assert_eq!(stack.get("/", &key).status, 429);
    assert_eq!(override_gauge(&stack.agent), Some(0.0));
    assert_eq!(override_gauge(&other), Some(0.0));

    let set = Instant::now();
    let said = run_override(&["shadow", "--reason", "incident 42"], &redis.url());
    assert!(said.contains("every rule in shadow"), "{said}");
    let Resp::Bulk(Some(stored)) = redis.cmd(&["GET", "ml:{fleet}:override"]) else {
        panic!("no override stored");
    };
    // Sealed: `<MAC under the deployment secret> <record>`.
    let stored = String::from_utf8(stored).unwrap();
    let (mac, record) = stored.split_once(' ').unwrap();
    assert!(
        mac.len() >= 32 && mac.bytes().all(|b| b.is_ascii_hexdigit()),
        "{stored}"
    );
    let stored: serde_json::Value = serde_json::from_str(record).unwrap();
    assert_eq!(stored["mode"], "shadow");
    assert_eq!(stored["set_by"], "incident 42");
    assert!(stored["at"].as_u64().unwrap() > 1_700_000_000);
    let agents_on = within(set, "both agents to apply the override", || {
        override_gauge(&stack.agent) == Some(1.0) && override_gauge(&other) == Some(1.0)
    });
    let before = stack.decisions("strict", "shadow_limited");
    let passing = within(set, "the 429s to pass through Envoy", || {
        stack.get("/", &key).status == 200
    });
    // That request's worker runs the shadowed set; each other worker takes it at
    // its own sync (one more second at most) and reports it at the next.
    let every_vm = stack.wait_filters_on_served_rules(set, "every filter VM on the shadowed set");
    // Still over its limit, counted as shadow_limited, never refused.
    let statuses = stack.statuses(5, "/", &key);
    assert_eq!(statuses, [200; 5]);
    assert!(stack.decisions("strict", "shadow_limited") >= before + 5);
    assert!(stack.agent.stderr().contains("fleet override on"));
    assert!(other.stderr().contains("incident 42"));

    let cleared = Instant::now();
    run_override(&["clear"], &redis.url());
    let agents_off = within(cleared, "both agents to clear the override", || {
        override_gauge(&stack.agent) == Some(0.0) && override_gauge(&other) == Some(0.0)
    });
    let refusing = within(cleared, "the 429s to come back through Envoy", || {
        stack.get("/", &key).status == 429
    });
    let every_vm_off =
        stack.wait_filters_on_served_rules(cleared, "every filter VM on the file's set");
    assert_eq!(stack.statuses(5, "/", &key), [429; 5]);
    assert!(stack.agent.stderr().contains("fleet override cleared"));
    eprintln!(
        "override on: agents {agents_on:?}, Envoy passing {passing:?}, every VM on it \
         {every_vm:?}; cleared: agents {agents_off:?}, Envoy refusing {refusing:?}, every VM \
         off {every_vm_off:?}"
    );
}

#[test]
fn the_command_says_why_it_failed_when_the_store_cannot_be_reached() {
    let port = meshlimit_tests::free_port();
    let out = Command::new(cli_bin())
        .args(["override", "shadow", "--store"])
        .arg(format!("redis://127.0.0.1:{port}"))
        .env("MESHLIMIT_SECRET", meshlimit_tests::TEST_SECRET)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot set the fleet override on redis://127.0.0.1"),
        "{err}"
    );
    // The embedded store is each agent's own: a usage error, not a store one.
    let out = Command::new(cli_bin())
        .args(["override", "shadow", "--store", "memory"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("each agent's own"));
}
