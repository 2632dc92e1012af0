//! Chaos at the agent: floods of malformed requests, and of distinct keys.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::time::Duration;

use meshlimit_tests::{get, post, Agent, AgentOptions, Stack};

const RULES: &str = "version: 1\nrules:\n  - {name: per-key, key: [{header: x-api-key}], limit: {requests: 3, per: 1h}, accuracy: exact}\n";

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Raw bytes to the agent; returns the status line's code (0: no answer).
fn raw(port: u16, bytes: &[u8]) -> u16 {
    meshlimit_tests::raw_status(port, bytes)
}

fn lease_body(key: &str) -> String {
    format!(r#"{{"v":1,"items":[{{"rule":"per-key","key":"per-key|{key}","cost":1}}]}}"#)
}

#[test]
fn malformed_and_oversized_lease_floods_are_refused_and_change_nothing() {
    let mut agent = Agent::start(RULES);
    let url = agent.url("/v1/lease");
    let auth = meshlimit_tests::agent_auth();
    let pid = agent.pid().unwrap();
    let before = rss_kib(pid);
    let big_items: String = (0..100)
        .map(|i| format!(r#"{{"rule":"per-key","key":"per-key|{i}","cost":1}}"#))
        .collect::<Vec<_>>()
        .join(",");
    let bad: Vec<(String, u16)> = vec![
        ("{".into(), 400),
        ("not json at all".into(), 400),
        (r#"{"v":2,"items":[]}"#.into(), 400),
        // A bad item is refused on its own: answered `unavailable`, the
        // call 200, nothing taken.
        (
            r#"{"v":1,"items":[{"rule":"per-key","key":"per-key|k","cost":0}]}"#.into(),
            200,
        ),
        (
            r#"{"v":1,"items":[{"rule":"per-key","key":"other|k","cost":1}]}"#.into(),
            200,
        ),
        (format!(r#"{{"v":1,"items":[{big_items}]}}"#), 400),
    ];
    let mut served = 0;
    for round in 0..300 {
        for (body, status) in &bad {
            let r = post(
                &url,
                &[
                    ("content-type", "application/json"),
                    ("authorization", &auth),
                ],
                body,
            );
            assert_eq!(r.status, *status, "{}", &body[..body.len().min(80)]);
        }
        // Bodies that lie about their length, and bytes that are not HTTP.
        let port = agent.port();
        let lying = raw(
            port,
            format!("POST /v1/lease HTTP/1.1\r\nhost: a\r\nauthorization: {auth}\r\ncontent-length: 999999999\r\n\r\n{{}}").as_bytes(),
        );
        assert!(
            (400..500).contains(&lying),
            "a lying content-length got {lying}"
        );
        assert!(raw(port, b"\x16\x03\x01\x00\xa5garbage\r\n\r\n") != 200);
        let mut oversized = format!(
            "POST /v1/lease HTTP/1.1\r\nhost: a\r\nauthorization: {auth}\r\ncontent-length: 200000\r\n\r\n"
        )
        .into_bytes();
        oversized.extend(std::iter::repeat_n(b'x', 200_000));
        assert_eq!(raw(port, &oversized), 413);
        // Well-formed requests keep being served meanwhile.
        let r = post(
            &url,
            &[("authorization", &auth)],
            &lease_body(&format!("good-{round}")),
        );
        assert_eq!(r.status, 200);
        served += 1;
    }
    let after = rss_kib(pid);
    println!("agent RSS {before} KiB before, {after} KiB after {} bad requests ({served} good ones served)", 300 * (bad.len() + 2));
    assert!(agent.is_running());
    // 4 MiB leaves room for the allocator, not for a buffer kept per bad
    // request (2,400 of up to 64 KiB).
    assert!(
        after < before + 4 * 1024,
        "RSS grew from {before} to {after} KiB"
    );
    assert_eq!(get(&agent.url("/healthz"), &[]).status, 200);
}

/// The agent's per-key tables' cap in the flood (`--max-keys`; 25,000 by
/// default): the bound is the same code at any size, and a smaller table
/// fills in a shorter flood.
const AGENT_KEYS: u64 = 10_000;
/// Distinct keys the flood sends at least.
const FLOOD: u64 = 24_000;

#[test]
fn a_flood_of_distinct_keys_stays_bounded_and_frees_no_limited_key() {
    // Fail closed: a request the agent could not answer in time during the flood
    // is a 503, so a 200 for the victim could only come from a fresh bucket. The
    // harness's patient lease deadline (`TEST_TIMEOUT_MS`) keeps that about
    // buckets: on a loaded CI machine envoy.yaml's 5 ms can fail the victim's
    // second request before the flood begins (503 where 200 is due).
    let rules = RULES.replace("accuracy: exact}", "accuracy: exact, on_failure: closed}");
    let stack = Stack::start_with(
        AgentOptions::new(&rules).arg(format!("--max-keys={AGENT_KEYS}")),
        |c| c,
    );
    let victim = [("x-api-key", "victim")];
    let statuses = stack.statuses(5, "/", &victim);
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let envoy_mem = || {
        get(&stack.envoy.admin_url("/memory"), &[]).json()["allocated"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let (envoy_before, agent_before) = (envoy_mem(), rss_kib(stack.agent.pid().unwrap()));

    // FLOOD distinct API keys through Envoy, from wrk with a Lua script, in
    // rounds of 3 s (each with its own key prefix) until that many were sent:
    // more than twice the keys the agent's tables hold (`--max-keys`, set to
    // AGENT_KEYS here to keep the flood short) and half again the filter's
    // shared-data slots (16,384), so every table is full and turning keys over
    // for much of the flood.
    let dir = tempfile::tempdir().unwrap();
    let mut requests = 0u64;
    for round in 0..12 {
        if requests >= FLOOD {
            break;
        }
        let script = dir.path().join(format!("keys-{round}.lua"));
        std::fs::write(
            &script,
            format!(
                "local id, n = 0, 0\nsetup = function(thread) id = id + 1; thread:set('id', id) end\n\
                 request = function() n = n + 1; return wrk.format('GET', '/', {{['x-api-key'] = 'flood-{round}-' .. id .. '-' .. n}}) end\n"
            ),
        )
        .unwrap();
        let out = Command::new("wrk")
            .args(["-t2", "-c4", "-d3s", "--timeout", "3s", "-s"])
            .arg(&script)
            .arg(stack.envoy.url("/"))
            .output()
            .expect("wrk (make tools installs it)");
        let text = String::from_utf8_lossy(&out.stdout);
        let sent = text.lines().find_map(|l| {
            l.trim()
                .split(" requests in")
                .next()?
                .trim()
                .parse::<u64>()
                .ok()
        });
        requests += sent.unwrap_or_else(|| panic!("no request count from wrk:\n{text}"));
    }
    let (envoy_after, agent_after) = (envoy_mem(), rss_kib(stack.agent.pid().unwrap()));
    let metrics = stack.agent.metrics();
    let at_agent =
        meshlimit_tests::sample(&metrics, "meshlimit_leases_granted_total", &[]).unwrap_or(0.0);
    println!(
        "{requests} requests with distinct keys ({at_agent} answered by the agent, {} failed closed): \
         Envoy allocated {} → {} MiB, agent RSS {} → {} MiB",
        stack.decisions("per-key", "failed_closed"),
        envoy_before >> 20,
        envoy_after >> 20,
        agent_before >> 10,
        agent_after >> 10
    );
    assert!(requests >= FLOOD, "wrk sent {requests}");
    // The filter's per-key state lives in a fixed number of shared-data slots
    // whatever the number of keys (16,384 slots of 90 bytes, under 1.5 MiB,
    // plus each VM's allocator slack); the bound leaves room for that, not for
    // state kept per key of the flood.
    assert!(
        envoy_after < envoy_before + 16 * 1024 * 1024,
        "Envoy grew by {} MiB",
        (envoy_after - envoy_before) >> 20
    );
    assert!(
        agent_after < 256 * 1024,
        "agent RSS {} MiB",
        agent_after >> 10
    );
    // No eviction anywhere handed the exhausted key a fresh bucket.
    let statuses = stack.statuses(20, "/", &victim);
    assert!(
        statuses.iter().all(|s| *s == 429 || *s == 503),
        "{statuses:?}"
    );
    meshlimit_tests::eventually(
        Duration::from_secs(3),
        "the victim to be limited by the agent",
        || stack.get("/", &victim).status == 429,
    );
}
