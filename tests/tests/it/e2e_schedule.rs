//! Schedules through real Envoy, the real filter and the real agent: a window
//! a few seconds long, computed from the UTC clock when the rules file is
//! written, raises a limit and drops it again. Each phase waits on what a
//! client sees (the `ratelimit-policy` a response advertises), never on a
//! sleep, and checks it is still inside the phase it measures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use meshlimit_tests::{count, eventually, Stack};

/// Unix time in seconds, as a float (the filter and agent read this clock).
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `MMmSSs` of Unix second `t` within its hour (a schedule span to the second).
fn mm_ss(t: u64) -> String {
    format!("{:02}m{:02}s", t % 3_600 / 60, t % 60)
}

/// How long from now until Unix second `t`.
fn until(t: u64) -> Duration {
    Duration::from_secs_f64((t as f64 - unix_now()).max(0.0))
}

#[test]
fn a_schedule_window_raises_a_limit_and_drops_it_again() {
    // The window opens OPEN_IN seconds after the file is written and lasts
    // LENGTH seconds: enough for the stack to start before it, and for each
    // phase to run inside its part of the clock.
    const OPEN_IN: u64 = 10;
    const LENGTH: u64 = 8;
    // How soon after an edge responses must advertise the limit then in force,
    // in seconds.
    const EDGE_SEEN_WITHIN: f64 = 0.5;
    let opens = unix_now().ceil() as u64 + OPEN_IN;
    let closes = opens + LENGTH;
    let rules = format!(
        r#"
version: 1
rules:
  - name: rush
    key: [{{ header: x-api-key }}]
    limit: {{ requests: 2, per: 1h }}
    accuracy: exact
    schedule:
      - name: top
        minutes: "{}-{}"
        requests: 100
        per: 1s
"#,
        mm_ss(opens),
        mm_ss(closes)
    );
    let stack = Stack::start(&rules);
    let outside = "\"rush\";q=2;w=3600";
    let inside = "\"rush\";q=100;w=1";
    let policy = |key: &str| {
        stack
            .get("/anything", &[("x-api-key", key)])
            .header("ratelimit-policy")
            .map(str::to_string)
    };
    let alice = [("x-api-key", "alice")];

    // Before the window: the rule's own limit, 2 an hour.
    assert!(
        unix_now() < opens as f64 - 1.0,
        "the stack took too long to start: the window opens at {opens}"
    );
    // Each response with the Unix time just before it was asked for.
    let responses: Vec<_> = (0..6)
        .map(|_| (unix_now(), stack.get("/anything", &alice)))
        .collect();
    let statuses: Vec<u16> = responses.iter().map(|(_, r)| r.status).collect();
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
    // Each denial, the agent's answer (the third) and the filter's cached
    // ones after it, lasts until the window opens, not the half hour a token
    // of 2 an hour takes: at the edge the key is asked again.
    // Retry-After is whole seconds rounded up, so at most the time from the
    // request to the opening, rounded up.
    for (asked_at, r) in &responses[2..] {
        assert_eq!(r.header("ratelimit-policy"), Some(outside));
        let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
        let to_open = (opens as f64 - asked_at).ceil() as u64;
        assert!(
            (1..=to_open).contains(&retry),
            "retry-after {retry}, the window opens {to_open} s after the request"
        );
    }
    assert!(
        unix_now() < opens as f64,
        "the first phase ran into the window"
    );

    // In the window: 100 a second, burst 100. Alice's emptied bucket refills
    // at the new rate (her earlier denial no longer holds).
    eventually(
        until(closes),
        "responses to advertise the window's limit",
        || policy("probe").as_deref() == Some(inside),
    );
    let opened_seen = unix_now() - opens as f64;
    let statuses = stack.statuses(20, "/anything", &alice);
    let in_window = unix_now();
    assert_eq!(count(&statuses, 200), 20, "{statuses:?}");
    assert!(
        in_window < closes as f64,
        "the second phase ran past the window's close"
    );

    // After the window: 2 an hour again, and the tokens she held (about 80)
    // are cut to the burst of 2.
    let started = Instant::now();
    eventually(
        until(closes) + Duration::from_secs(5),
        "responses to advertise the rule's own limit again",
        || policy("probe").as_deref() == Some(outside),
    );
    let closed_seen = unix_now() - closes as f64;
    assert!(closed_seen >= 0.0);
    eprintln!(
        "the window's limit advertised {:.0} ms after it opened, the rule's own {:.0} ms after it closed",
        opened_seen * 1e3,
        closed_seen * 1e3
    );
    // Each edge is seen by the filter's own clock, no sync involved: what the
    // print shows is mostly this test's polling (every 10-100 ms). A filter
    // waiting for its next rules sync (every second) would take up to 1 s.
    for (edge, seen) in [("opened", opened_seen), ("closed", closed_seen)] {
        assert!(
            seen <= EDGE_SEEN_WITHIN,
            "the window {edge} {:.0} ms before responses said so (at most {:.0} ms)",
            seen * 1e3,
            EDGE_SEEN_WITHIN * 1e3
        );
    }
    let statuses = stack.statuses(5, "/anything", &alice);
    assert_eq!(
        statuses,
        [200, 200, 429, 429, 429],
        "{:?} after the close",
        started.elapsed()
    );
    assert_eq!(
        stack.get("/anything", &alice).header("ratelimit-policy"),
        Some(outside)
    );
}
